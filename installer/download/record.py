"""The record of a download's verified hashes, ``<local_dir>/.october/verified.json``: written once every file
checked against the hub (or the recipe's pins), read by ``--offline`` to re-verify the copy without the hub.  Its
entries must be files inside the copy; the patterns it was written for must cover the recipe's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..core.atomic import write_json_atomic
from ..core.ids import SHA256
from . import hub
from .copycheck import OWN_DIR
from .plan import DownloadPlan
from .verify import VerifiedFile


RECORD_NAME = "verified.json"


RECORD_KIND = "october-verified-files"


def record_path(plan: DownloadPlan) -> Path:
    return plan.local_dir / OWN_DIR / RECORD_NAME


def write_record(plan: DownloadPlan, files: list[VerifiedFile], *, patterns: bool = True) -> None:
    write_json_atomic(record_path(plan), {
        "kind": RECORD_KIND, "format_version": 1, "repo": plan.repo, "revision": plan.revision,
        **({"patterns": list(plan.patterns)} if patterns else {}),
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256, "verified_against": f.source}
                  for f in files],
    })


def record_entry(f: Any) -> bool:
    return (isinstance(f, dict) and isinstance(f.get("path"), str) and _safe(f["path"])
            and type(f.get("size")) is int and f["size"] >= 0
            and isinstance(f.get("sha256"), str) and SHA256.fullmatch(f["sha256"]) is not None)


def _safe(path: str) -> bool:
    """A path of the copy's files: relative, inside it, not in the tool's or huggingface_hub's own folders."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and "\\" not in path and \
        not any(x in ("", ".", "..") for x in parts) and parts[0] not in (OWN_DIR, ".cache")


def uncovered_patterns(wanted: Sequence[str], recorded: Any, paths: set[str]) -> list[str]:
    """The recipe's patterns a record does not show complete: one the record's patterns do not include, unless it
    names a file (no wildcard) that a recorded pattern covers (the record lists every file those matched).  A
    record of an earlier version names no patterns: each file the recipe names must be among its files, and each
    wildcard match one of them."""
    def literal(p: str) -> bool:
        return not any(c in p for c in "*?[")

    if recorded is None:        # a wildcard must match a recorded file (the weights' *.safetensors above all)
        return [p for p in wanted if (p not in paths) if literal(p) or not hub.select(sorted(paths), [p])]
    if not (isinstance(recorded, list) and all(isinstance(q, str) for q in recorded)):
        return list(wanted)
    return [p for p in wanted if p not in recorded and not (literal(p) and hub.select([p], recorded))]
