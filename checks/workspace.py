"""The FlashInfer JIT workspace's module set, before and after a smoke run (standard library only).

``current smoke`` proves the jit step built everything the checks use: the run
snapshots every ``.../cached_ops/<uri>/<uri>.so`` under
``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`` with its sha256 before the
checks import FlashInfer and again after them.  A module gained (FlashInfer had
to JIT-build it during the smoke) or changed fails the run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


def snapshot(base: Path | None) -> dict[str, str] | None:
    """``{module uri: sha256}`` of the workspace's JIT libraries; None when there is no workspace."""
    if base is None:
        return None
    root = base / ".cache" / "flashinfer"
    found: dict[str, str] = {}
    for so in sorted(root.glob("**/cached_ops/*/*.so")) if root.is_dir() else []:
        h = hashlib.sha256()
        with so.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        found[str(so.relative_to(root))] = h.hexdigest()
    return found


def compare(before: dict[str, str] | None, after: dict[str, str] | None) -> tuple[dict[str, Any], list[str]]:
    """The receipt entry and the run-level problems (empty when the workspace gained nothing)."""
    if before is None or after is None:
        return ({"workspace": None, "modules_before": None, "gained": [], "changed": [],
                 "note": "FLASHINFER_WORKSPACE_BASE is not set: the JIT workspace was not watched"},
                ["the JIT workspace was not watched (FLASHINFER_WORKSPACE_BASE unset): which kernels the "
                 "checks built during the run is unknown"])
    gained = sorted(set(after) - set(before))
    changed = sorted(k for k in set(after) & set(before) if after[k] != before[k])
    problems = []
    if gained:
        problems.append(f"the JIT workspace gained {len(gained)} module(s) during the smoke, so the jit step did "
                        f"not build everything the checks use: {', '.join(Path(g).parent.name for g in gained)}")
    if changed:
        problems.append(f"{len(changed)} JIT module(s) changed during the smoke: "
                        f"{', '.join(Path(c).parent.name for c in changed)}")
    return ({"modules_before": len(before), "modules_after": len(after),
             "before": {Path(k).parent.name: v for k, v in before.items()}, "gained": gained, "changed": changed,
             "unchanged": not gained and not changed}, problems)
