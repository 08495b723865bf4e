"""Every object a checkout of a commit reads, hashed against its name.

``git clone`` from a plain path copies object files unhashed, and ``git status`` (which compares stat
data) would call a clone of a changed cache clean; a clone over the pack protocol hashes the whole
history.  This hashes only the commit, its trees and their blobs (gitlinks are fetched on their own).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import git
from git.objects.fun import tree_entries_from_data

GITLINK_MODE = 0o160000
CHUNK = 1 << 20


def _read(odb: object, oid: bytes) -> tuple[bytes, str, bytes | None]:
    """(type, hex digest of the object as git names it, its data when a tree or commit); a missing
    object reads as type ``missing``, digest ``""``."""
    try:
        stream = odb.stream(oid)  # type: ignore[attr-defined]
    except ValueError:              # GitPython: "SHA ... could not be resolved, git returned: ... missing"
        return b"missing", "", None
    digest = hashlib.sha1(b"%s %d\0" % (stream.type, stream.size))
    keep = stream.type in (b"tree", b"commit")
    parts: list[bytes] = []
    left = stream.size
    while left > 0:
        chunk = stream.read(min(CHUNK, left))
        if not chunk:
            break
        left -= len(chunk)
        digest.update(chunk)
        if keep:
            parts.append(chunk)
    return stream.type, digest.hexdigest(), b"".join(parts) if keep else None


def mismatched(repo: Path, commit: str) -> tuple[list[str], int]:
    """(the objects of ``commit``'s checkout whose bytes do not hash to their name, as ``oid path``; how
    many were hashed).  A tree that does not match is still walked: every mismatch is named."""
    bad: list[str] = []
    count = 0
    with git.Repo(repo) as r:
        odb = r.odb
        kind, got, data = _read(odb, bytes.fromhex(commit))
        count += 1
        if got != commit or kind != b"commit" or data is None:
            return [f"{commit} (the commit)"], count
        first = data.split(b"\n", 1)[0]
        if not first.startswith(b"tree "):
            return [f"{commit} (the commit names no tree)"], count
        todo = [(bytes.fromhex(first[5:].decode("ascii")), "")]
        while todo:
            oid, path = todo.pop()
            kind, got, data = _read(odb, oid)
            count += 1
            if got != oid.hex():
                bad.append(f"{oid.hex()} ({path or '/'}{', missing' if kind == b'missing' else ''})")
            if kind == b"tree" and data is not None:
                todo += [(binsha, f"{path}/{name}" if path else name)
                         for binsha, mode, name in tree_entries_from_data(data) if mode != GITLINK_MODE]
    return bad, count
