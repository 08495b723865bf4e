"""The FlashInfer JIT workspace, watched over a smoke run: the one mechanism (standard library only).

``current smoke`` proves the jit step built everything the checks use.  :func:`base` is the
workspace the run uses: the selection's ``jit_workspace`` (the stack's ``STACK/jit``, where the
jit step built) or else ``$FLASHINFER_WORKSPACE_BASE``; it is exported as
``FLASHINFER_WORKSPACE_BASE`` before FlashInfer is imported, so FlashInfer builds and loads
there.  A :class:`Watch` snapshots every ``.../cached_ops/<uri>/<uri>.so`` under
``BASE/.cache/flashinfer`` with its sha256 before the checks and again after them; a module
gained (FlashInfer had to JIT-build it during the smoke) or changed fails the run: at the kernel
level as a run-level problem, at the engine level through its JIT check (``jit_complete``), which
also reads from the same snapshot which derived modules were there before the engine started.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

ENV = "FLASHINFER_WORKSPACE_BASE"


def base(selection: Mapping[str, Any] | None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The workspace a run uses: the selection's ``jit_workspace``, else ``$FLASHINFER_WORKSPACE_BASE``."""
    ws = (selection or {}).get("jit_workspace") or environ.get(ENV)
    return Path(ws) if ws else None


def snapshot(root_dir: Path | None) -> dict[str, str] | None:
    """``{library path under .cache/flashinfer: sha256}`` of the workspace's JIT libraries; None
    when there is no workspace."""
    if root_dir is None:
        return None
    root = root_dir / ".cache" / "flashinfer"
    found: dict[str, str] = {}
    for so in sorted(root.glob("**/cached_ops/*/*.so")) if root.is_dir() else []:
        h = hashlib.sha256()
        with so.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        found[str(so.relative_to(root))] = h.hexdigest()
    return found


def uri(library: str) -> str:
    """The module URI of a library path in a snapshot (``.../cached_ops/<uri>/<uri>.so``)."""
    return Path(library).parent.name


def compare(before: dict[str, str] | None, after: dict[str, str] | None) -> tuple[dict[str, Any], list[str]]:
    """The receipt entry and the run-level problems (empty when the workspace gained nothing)."""
    if before is None or after is None:
        return ({"workspace": None, "modules_before": None, "gained": [], "changed": [],
                 "note": f"{ENV} is not set: the JIT workspace was not watched"},
                [f"the JIT workspace was not watched ({ENV} unset): which kernels the "
                 "checks built during the run is unknown"])
    gained = sorted(set(after) - set(before))
    changed = sorted(k for k in set(after) & set(before) if after[k] != before[k])
    problems = []
    if gained:
        problems.append(f"the JIT workspace gained {len(gained)} module(s) during the smoke, so the jit step did "
                        f"not build everything the checks use: {', '.join(uri(g) for g in gained)}")
    if changed:
        problems.append(f"{len(changed)} JIT module(s) changed during the smoke: "
                        f"{', '.join(uri(c) for c in changed)}")
    return ({"modules_before": len(before), "modules_after": len(after),
             "before": {uri(k): v for k, v in before.items()}, "gained": gained, "changed": changed,
             "unchanged": not gained and not changed}, problems)


@dataclass
class Watch:
    """One smoke run's watch over its workspace: :meth:`start` before FlashInfer is imported,
    :meth:`finish` after the checks."""

    base: Path | None
    before: dict[str, str] | None = None
    after: dict[str, str] | None = field(default=None, init=False)

    @classmethod
    def start(cls, workspace: Path | None, environ: dict[str, str] | os._Environ[str] = os.environ) -> "Watch":
        if workspace is not None:           # FlashInfer reads it at import: the verified workspace, not $HOME
            environ[ENV] = str(workspace)
        return cls(workspace, snapshot(workspace))

    def built_before(self) -> dict[str, str]:
        """``{module uri: library path}`` of every module in the workspace before the run."""
        root = self.base / ".cache" / "flashinfer" if self.base is not None else Path()
        return {uri(k): str(root / k) for k in self.before or {} if Path(k).stem == uri(k)}

    def finish(self) -> tuple[dict[str, Any], list[str]]:
        """The receipt entry and the problems (see :func:`compare`); idempotent."""
        if self.after is None:
            self.after = snapshot(self.base)
        return compare(self.before, self.after)
