"""Digests a no-op re-run may take without re-reading a file (``STACK/.state/file-trust.json``).

Per file it keeps the stat signature ``(st_ino, st_size, st_mtime_ns, st_ctime_ns)`` taken when the
content was hashed, and the digest; a file whose signature is unchanged is taken to hold the same bytes
(git's index rule).  Every write moves mtime and ctime, a replace changes the inode, and ctime cannot be
set from user space.  Timestamps come from a coarse clock, so a signature is recorded only when mtime and
ctime are older than :data:`RACY_NS` and the file stats the same after hashing ("racy" files).
Not defended: someone rewriting this file with the files it covers, a clock set back by root, a
filesystem without ctime (``current verify`` re-reads every byte).  Digests are recorded whether or not
they were the expected ones; only a run in which a step ran saves the store.

A file this run wrote and hashed itself (a built-stack cache entry's env, each file hashed as it was copied:
:func:`october.installer.pyenv.builtrestore.restore_env`) is *vouched* for (:meth:`FileTrust.vouch`): its digest
serves this run while its signature is unchanged, is never saved (it was hashed while racy), and the store
settles it as any racy file.
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
        self.vouched: dict[str, list[object]] = {}     # this run's only: never saved
        self.changed = False
        try:
            data = jsonread.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return              # none yet, torn or foreign: trust nothing
        files = data.get("files") if isinstance(data, dict) and data.get("format") == TRUST_FORMAT else None
        if isinstance(files, dict):
            self.entries = {k: v for k, v in files.items() if isinstance(v, list) and len(v) == 6}

    def known(self, file: Path, kind: str) -> str | None:
        """The recorded (or vouched-for) ``kind`` digest of ``file`` when its signature is unchanged, else
        None (one ``stat``; ``OSError`` when it fails)."""
        return self._hit(str(file), kind, signature(os.stat(file)))

    def _hit(self, key: str, kind: str, sig: list[int]) -> str | None:
        for table in (self.entries, self.vouched):
            hit = table.get(key)
            if hit is not None and hit[4] == kind and hit[:4] == sig:
                return str(hit[5])
        return None

    def vouch(self, file: Path, kind: str, value: str, sig: list[int], compute: Callable[[Path], str]) -> None:
        """``value`` is the ``kind`` digest of ``file`` as this run wrote it (``sig``: its signature, the same
        before and after it was hashed, after the last change this run made to it): taken for this run while the
        signature holds, never saved, settled as a racy file (``compute``) by :meth:`save`."""
        self.vouched[str(file)] = [*sig, kind, value]
        self.racy[str(file)] = (kind, compute)

    def as_vouched(self, file: Path) -> bool | None:
        """Whether ``file`` still has the signature this run vouched for it with (None: not vouched for; False:
        another signature now, or gone)."""
        row = self.vouched.get(str(file))
        if row is None:
            return None
        try:
            return signature(os.stat(file)) == row[:4]
        except OSError:
            return False

    def unvouch(self, under: Path) -> None:
        """Forget what was vouched for at or under ``under`` (removed: a file made there later is read)."""
        top = str(under)
        for key in [k for k in self.vouched if k == top or k.startswith(top + os.sep)]:
            del self.vouched[key]

    def digest(self, file: Path, kind: str, compute: Callable[[Path], str]) -> str:
        """``compute(file)``, from the store when its signature is unchanged (``OSError`` when unreadable)."""
        key = str(file)
        now = time.time_ns()
        st = os.stat(file)
        sig = signature(st)
        known = self._hit(key, kind, sig)
        if known is not None:
            return known
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
        """Settle the files that were too new to record (hash them again now: not those still too new, whose
        digest could not be kept either), then write the store."""
        now = time.time_ns()
        for key, (kind, compute) in list(self.racy.items()):
            self.vouched.pop(key, None)         # hashed while racy: settled only by hashing it again
            try:
                st = os.stat(key)
                if now - max(st.st_mtime_ns, st.st_ctime_ns) <= RACY_NS:
                    continue
                self.digest(Path(key), kind, compute)
            except OSError:
                self.entries.pop(key, None)
        if self.changed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, json.dumps({"format": TRUST_FORMAT, "files": self.entries},
                                                    separators=(",", ":")))
            self.changed = False
