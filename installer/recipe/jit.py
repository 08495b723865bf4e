"""``[jit]``: which FlashInfer modules are pre-built, by which builder, for which serving routes.

The modules are derived from the model selections (:mod:`october.installer.recipe.jitmodules`); ``[[jit.modules]]``
may add modules by hand, never leave a derived one out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import RecipeError
from .jitmodules import (
    DEFAULT_ROUTES,
    DTYPES,
    HEAD_DIMS,
    KINDS,
    ROUTES,
    DeriveError,
    JitModule,
    derive_modules,
)
from .models import ModelSelection
from .tomlcheck import Table

MODULE_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


@dataclass(frozen=True)
class JitConfig:
    """The ``[jit]`` table as written: hand-listed modules, the builder module, the routes."""

    modules: tuple[JitModule, ...] = ()
    builder: str | None = None      # run as `python -m` in the stack env; None: the FlashInfer builder
    routes: tuple[str, ...] = DEFAULT_ROUTES


def parse_jit(top: Table) -> JitConfig | None:
    jt = top.table("jit", required=False)
    if jt is None:
        return None
    mods = jt.get("modules", list, required=False, what="an array of tables [[jit.modules]]") or []
    builder = jt.get("builder", str, required=False, what="a Python module name")
    routes = jt.str_list("routes", required=False) or DEFAULT_ROUTES
    bad = [r for r in routes if r not in ROUTES]
    if bad or "decode" not in routes or len(set(routes)) != len(routes):
        raise jt.err("routes", f"distinct routes from {', '.join(ROUTES)}, including decode", list(routes))
    if builder is not None and not MODULE_NAME.match(builder):
        raise jt.err("builder", "a dotted Python module name", builder)
    jt.done()
    modules = tuple(parse_jit_module(Table(top.file, m, f"jit.modules[{i}]")) for i, m in enumerate(mods))
    return JitConfig(modules=modules, builder=builder, routes=routes)


def parse_jit_module(mt: Table) -> JitModule:
    """One ``[[jit.modules]]`` entry."""
    kind = mt.get("kind", str)
    if kind not in KINDS:
        raise mt.err("kind", f"one of {', '.join(KINDS)}", kind)
    dts: dict[str, Any] = {}
    for d in ("q", "k", "v", "o"):
        dts[d] = mt.get(d, str)
        if dts[d] not in DTYPES:
            raise mt.err(d, f"one of {', '.join(DTYPES)}", dts[d])
    head_dim = mt.get("head_dim", int)
    if head_dim not in HEAD_DIMS:
        raise mt.err("head_dim", "64, 128 or 256 (FlashInfer rejects > 256)", head_dim)
    posenc = mt.get("posenc", int, required=False, default=0)
    if posenc not in (0, 1, 2):
        raise mt.err("posenc", "0 (none), 1 (rope llama) or 2 (alibi)", posenc)
    module = JitModule(kind=kind, head_dim=head_dim, posenc=posenc,
                       backend=mt.get("backend", str, required=False, default="fa2"), **dts)
    mt.done()
    return module


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
