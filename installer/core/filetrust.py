"""Digests a no-op re-run may take without re-reading a file (``STACK/.state/file-trust.json``).

Per file it keeps the stat signature ``(st_ino, st_size, st_mtime_ns, st_ctime_ns)`` taken when the
content was hashed, and the digest; a file whose signature is unchanged is taken to hold the same bytes
(git's index rule).  Every write moves mtime and ctime, a replace changes the inode, and ctime cannot be
set from user space.  Timestamps come from a coarse clock, so a signature is recorded only when mtime and
ctime are older than :data:`RACY_NS` and the file stats the same after hashing ("racy" files).
Not defended: someone rewriting this file with the files it covers, a clock set back by root, a
filesystem without ctime (``current verify`` re-reads every byte).  Digests are recorded whether or not
they were the expected ones; only a run in which a step ran saves the store.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from . import jsonread
from .atomic import write_text_atomic

TRUST_FORMAT = 1
RACY_NS = 1_000_000_000         # a signature younger than this at the stat is not recorded


def signature(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class FileTrust:
    """path -> (signature, kind, digest), loaded from and saved to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, list[object]] = {}
        self.racy: dict[str, tuple[str, Callable[[Path], str]]] = {}
        self.changed = False
        try:
            data = jsonread.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return              # none yet, torn or foreign: trust nothing
        files = data.get("files") if isinstance(data, dict) and data.get("format") == TRUST_FORMAT else None
        if isinstance(files, dict):
            self.entries = {k: v for k, v in files.items() if isinstance(v, list) and len(v) == 6}

    def known(self, file: Path, kind: str) -> str | None:
        """The recorded ``kind`` digest of ``file`` when its signature is unchanged, else None (one
        ``stat``; ``OSError`` when it fails)."""
        hit = self.entries.get(str(file))
        if hit is not None and hit[4] == kind and hit[:4] == signature(os.stat(file)):
            return str(hit[5])
        if hit is None:
            os.stat(file)
        return None

    def digest(self, file: Path, kind: str, compute: Callable[[Path], str]) -> str:
        """``compute(file)``, from the store when its signature is unchanged (``OSError`` when unreadable)."""
        key = str(file)
        now = time.time_ns()
        st = os.stat(file)
        sig = signature(st)
        hit = self.entries.get(key)
        if hit is not None and hit[:4] == sig and hit[4] == kind:
            return str(hit[5])
        value = compute(file)
        after = os.stat(file)
        if signature(after) == sig and now - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_NS:
            self.entries[key] = [*sig, kind, value]
            self.racy.pop(key, None)
        else:
            self.racy[key] = (kind, compute)
            if self.entries.pop(key, None) is None:
                return value
        self.changed = True
        return value

    def save(self) -> None:
        """Settle the files that were too new to record (hash them again now), then write the store."""
        for key, (kind, compute) in list(self.racy.items()):
            try:
                self.digest(Path(key), kind, compute)
            except OSError:
                self.entries.pop(key, None)
        if self.changed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, json.dumps({"format": TRUST_FORMAT, "files": self.entries},
                                                    separators=(",", ":")))
            self.changed = False
