"""``[jit]``: which FlashInfer modules are pre-built, by which builder, for which serving routes.  The modules
are derived from the model selections (:mod:`.jitmodules`); ``[[jit.modules]]`` may add some, never leave one out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import RecipeError
from .jitmodules import DEFAULT_ROUTES, DeriveError, JitModule, derive_modules
from .models import ModelSelection


@dataclass(frozen=True)
class JitConfig:
    modules: tuple[JitModule, ...] = ()
    builder: str | None = None      # run as `python -m` in the stack env; None: the FlashInfer builder
    routes: tuple[str, ...] = DEFAULT_ROUTES


def parse_jit(top: Mapping[str, Any]) -> JitConfig | None:
    if "jit" not in top:
        return None
    jt = top["jit"]
    return JitConfig(modules=tuple(JitModule(**m) for m in jt.get("modules", ())), builder=jt.get("builder"),
                     routes=tuple(jt.get("routes") or DEFAULT_ROUTES))


def derive_jit(path: Path, listed: tuple[JitModule, ...], models: Mapping[str, ModelSelection],
               routes: tuple[str, ...]) -> tuple[tuple[JitModule, ...], dict[str, ModelSelection]]:
    """Derived modules first, then hand-listed extras; a hand-list that misses a derived module is an error.
    Each selection gets the URIs of its modules (``ModelSelection.jit_modules``)."""
    out: dict[str, JitModule] = {}
    by_sel: dict[str, ModelSelection] = {}
    for fmt, sel in models.items():
        assert sel.compute_dtype is not None and sel.shape is not None
        try:
            derived = derive_modules(sel.shape, sel.compute_dtype, sel.v_format, routes)
        except DeriveError as exc:
            raise RecipeError(path, f"models.{fmt}", expected="a selection FlashInfer can serve",
                              found=str(exc)) from None
        for m in derived:
            out.setdefault(m.uri, m)
        by_sel[fmt] = replace(sel, jit_modules=tuple(m.uri for m in derived))
    listed_uris = {m.uri for m in listed}
    missing = [u for u in out if listed and u not in listed_uris]
    if missing:
        raise RecipeError(path, "jit.modules", expected="every module derived from the model selections "
                          "(the list may add modules, never leave one out)",
                          found=f"{len(missing)} derived module(s) not listed: {', '.join(missing)}",
                          fix=f"add them to [[jit.modules]] in {path}, or remove the hand-written list")
    for m in listed:
        out.setdefault(m.uri, m)
    return tuple(out.values()), by_sel
