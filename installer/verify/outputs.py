"""Each fork's build outputs against the digests its install recorded (:mod:`october.installer.git.buildoutputs`).

An editable fork install leaves files git does not track in the checkout (vLLM's ``_C.abi3.so`` and other
extension modules, FlashInfer's ``data/`` links and ``_build_meta.py``), and they are imported at run time:
every one recorded must be there with its digest (every byte read again), and a file git ignores there that
no install recorded (a planted ``.so`` or ``.py``) is named, except ``__pycache__`` bytecode and FlashInfer's
AOT directories (:mod:`.jit` checks those).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.paths import StackPaths
from ..engine import read_marker
from ..git import buildoutputs
from ..git.clonecheck import GitInspectError


@dataclass(frozen=True)
class OutputFinding:
    fork: str
    checkout: Path
    rel: str                    # "" for a fork whose outputs were never recorded
    expected: str
    found: str
    unrecorded: bool = False


def recorded_outputs(paths: StackPaths) -> Mapping[str, Any] | None:
    """fork -> {path: digest} as the install step recorded it; None when its result holds no record (a stack
    set up before the record, or no install result)."""
    outputs = (read_marker(paths.marker("install")) or {}).get("outputs")
    found = outputs.get("build_outputs") if isinstance(outputs, dict) else None
    return found if isinstance(found, dict) else None


def check(paths: StackPaths, forks: Mapping[str, Path], skip: Iterable[Path]) -> tuple[int, list[OutputFinding]]:
    """-> (build outputs looked at, findings)."""
    record = recorded_outputs(paths)
    dirs = list(skip)
    looked = 0
    found: list[OutputFinding] = []
    for name, checkout in sorted(forks.items()):
        try:
            present = buildoutputs.listed(checkout, dirs)
        except GitInspectError:
            continue                    # no clone git can read: named by the fork check
        if record is None:
            found.append(OutputFinding(name, checkout, "", "the files its install left, recorded with their digests",
                                       "none recorded (installed by an earlier october, or its record is gone)"))
            continue
        rows = record.get(name) if isinstance(record.get(name), dict) else {}
        want = {str(rel): str(d) for rel, d in rows.items()}
        looked += len(want)
        found += [OutputFinding(name, checkout, c.rel, c.expected, c.found)
                  for c in buildoutputs.changed(checkout, want)]
        found += [OutputFinding(name, checkout, rel, "only the build outputs its install recorded",
                                "a file no install recorded", unrecorded=True) for rel in present if rel not in want]
    return looked, found
