"""Check downloaded files against the hashes they must have; move bad ones aside.

Each file is read once, computing its sha256 and git blob id (so a plain git file, whose only hub record is
its blob id, is checked too); all problems are reported together.  Not ``HfApi.verify_repo_checksums``: it
lists the whole repository (no ``--offline``), knows no recipe pins and reads each file once per algorithm.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from ..core.errors import DownloadError
from ..core.hashing import CHUNK

CORRUPT_INFIX = ".corrupt-"


@dataclass(frozen=True)
class Expected:
    """What one file must be. At least one of ``sha256`` and ``blob_id`` is set."""

    path: str                    # relative, '/'-separated
    size: int | None
    sha256: str | None
    blob_id: str | None = None   # git blob sha1, checked when no sha256 is known
    source: str = "hub-lfs"      # recipe | hub-lfs | hub-git-blob | record
    record: str | None = None    # with a recipe pin: the sha256 the hub's record (LFS, or verified.json) gives


@dataclass(frozen=True)
class Digest:
    size: int
    sha256: str
    blob_id: str


@dataclass(frozen=True)
class VerifiedFile:
    path: str
    size: int
    sha256: str
    source: str


@dataclass(frozen=True)
class Problem:
    path: str
    what: str        # "missing" | "size" | "sha256" | "git blob id"
    expected: str
    found: str
    moved_to: Path | None = None
    hubs: bool = False   # the file is the hub's own (its record matches), only the recipe's pin differs: kept

    def line(self) -> str:
        tail = f" (moved aside to {self.moved_to})" if self.moved_to else " (left in place)" if self.hubs else ""
        return f"{self.path}: expected {self.what} {self.expected}, found {self.found}{tail}"


def digest_file(path: Path, on_chunk: Callable[[int], None] | None = None, *, blob_id: bool = True) -> Digest:
    """``blob_id``: git's object id too (the only hub record of a plain git file); else ``blob_id`` is ""."""
    size = path.stat().st_size
    sha = hashlib.sha256()
    blob = hashlib.sha1(f"blob {size}\0".encode()) if blob_id else None  # noqa: S324 - git's object id
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            sha.update(chunk)
            if blob is not None:
                blob.update(chunk)
            n += len(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
    if n != size:  # the file changed while we read it
        raise DownloadError(f"{path} changed while it was being hashed", expected=f"{size} bytes",
                            found=f"{n} bytes", fix="make sure no other process writes there, then re-run")
    return Digest(size=size, sha256=sha.hexdigest(), blob_id=blob.hexdigest() if blob is not None else "")


def _check(root: Path, exp: Expected, on_chunk: Callable[[int], None] | None = None
           ) -> tuple[VerifiedFile | None, Problem | None]:
    f = root / exp.path
    if not f.is_file():
        return None, Problem(exp.path, "file", "to exist", "nothing")
    pinned = exp.source == "recipe"
    d = digest_file(f, on_chunk, blob_id=exp.sha256 is None or (
        pinned and exp.record is None and exp.blob_id is not None))
    if exp.sha256 is not None and d.sha256 != exp.sha256:
        if pinned and (d.sha256 == exp.record if exp.record else d.blob_id == exp.blob_id):
            return None, Problem(exp.path, "sha256", f"{exp.sha256} (the recipe's pin)",
                                 f"{d.sha256}, which the hub's own record of this file at this revision gives: the "
                                 "recipe's pin is wrong, or the hub's file differs from the one pinned", hubs=True)
        return None, Problem(exp.path, "sha256", exp.sha256, d.sha256)
    if exp.sha256 is None:
        if exp.blob_id is None:
            return None, Problem(exp.path, "hash", "a sha256 or git blob id to check against",
                                 "neither (the hub recorded none)")
        if d.blob_id != exp.blob_id:
            return None, Problem(exp.path, "git blob id", exp.blob_id, f"{d.blob_id} (sha256 {d.sha256})")
    if exp.size is not None and d.size != exp.size:
        return None, Problem(exp.path, "size", f"{exp.size} bytes", f"{d.size} bytes")
    return VerifiedFile(path=exp.path, size=d.size, sha256=d.sha256, source=exp.source), None


def verify_files(root: Path, expected: Sequence[Expected], *, where: str,
                 on_bad: Callable[[str], None] | None = None,
                 progress: Callable[[str], None] | None = None,
                 hashed: Callable[[float, float | None], None] | None = None,
                 move_bad: bool = True, fix: str | None = None) -> list[VerifiedFile]:
    """Verify every file; move the bad ones aside (``on_bad(path)`` for each; not with ``move_bad=False``, for a
    copy the tool does not own) and raise once with the full list.  ``hashed(done, total)``: bytes read."""
    good: list[VerifiedFile] = []
    problems: list[Problem] = []
    total = float(sum((root / e.path).stat().st_size for e in expected if (root / e.path).is_file()))
    done = [0.0]

    def on_chunk(n: int) -> None:
        done[0] += n
        if hashed is not None:
            hashed(done[0], total or None)

    for exp in sorted(expected, key=lambda e: e.path):
        ok, bad = _check(root, exp, on_chunk if hashed is not None else None)
        if ok is not None:
            good.append(ok)
            if progress:
                progress(f"verified {exp.path} ({exp.source})")
            continue
        assert bad is not None
        f = root / exp.path
        if f.is_file() and move_bad and not bad.hubs:   # renamed so that nothing mistakes it for the real one
            aside = f.with_name(f"{f.name}{CORRUPT_INFIX}{digest_file(f, blob_id=False).sha256[:8]}")
            os.replace(f, aside)
            bad = replace(bad, moved_to=aside)
            if on_bad is not None:
                on_bad(exp.path)
        problems.append(bad)
    if problems:
        raise _error(problems, where, fix)
    return good


def _error(problems: list[Problem], where: str, fix: str | None = None) -> DownloadError:
    fix = fix or ("re-run the download to fetch the bad file(s) again; if the mismatch repeats, the hub or a "
                  "proxy serves other bytes than its record says: do not use them")
    pins = [p.path for p in problems if p.hubs]
    if pins:       # a re-download would fetch the same bytes: the pin is what to look at
        pin_fix = (f"check the recipe's sha256 pin of {', '.join(pins)} against the hub's file (the file matching "
                   "the hub's record was left in place)")
        fix = pin_fix if len(pins) == len(problems) else f"{pin_fix}; for the other file(s): {fix}"
    if len(problems) == 1:
        p = problems[0]
        moved = f"; it was moved aside to {p.moved_to}" if p.moved_to else ""
        return DownloadError(f"{where}: file '{p.path}' failed verification",
                             expected=f"{p.what} {p.expected}", found=f"{p.found}{moved}", fix=fix)
    lines = "\n".join(f"    - {p.line()}" for p in problems)
    return DownloadError(f"{where}: {len(problems)} files failed verification",
                         expected="every file to match its recorded hash and size",
                         found=f"{len(problems)} mismatches:\n{lines}", fix=fix)
