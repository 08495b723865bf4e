"""Tracked files ``git status`` is told not to look at: index entries with the assume-unchanged bit
(``git update-index --assume-unchanged``) or the skip-worktree bit (``--skip-worktree``).  An edit
under either bit is invisible to every clean-tree check (``git status``, ``git diff``), so a clone
called clean must have none, in its own index or a checked-out submodule's.

Each index is read from its file (git's index format, versions 2-4: one pass, no process, so the
no-op re-run can afford it); an index this reader does not know (a split index, an unknown version
or a malformed file, and a sparse index's directory entries) is asked of git instead (``git ls-files
-v``).  In a sparse checkout (``core.sparseCheckout``) git sets skip-worktree on every path outside
the cone and removes the file; there, a skip-worktree entry is hidden when its file is on disk or
it lies inside the cone (a file the cone should have, deleted or edited out of git's sight).
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from pathlib import Path
from typing import Callable, Iterable

from ..core.version import git_dir
from . import look
from .config import config_items, truth, value_in

__all__ = ["Hidden", "hidden_entries", "read_index_flags"]

ASSUME_VALID = 0x8000          # the entry's flags: git's CE_VALID, set by --assume-unchanged
EXTENDED = 0x4000              # two more flag bytes follow (index version 3 and up)
SKIP_WORKTREE = 0x4000         # in the extended flags

Flagged = list[tuple[str, str]]        # (path, "assume-unchanged" | "skip-worktree")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """git's offset varint (index v4's prefix length): value, next position."""
    c = data[pos]
    pos += 1
    value = c & 0x7F
    while c & 0x80:
        c = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (c & 0x7F)
    return value, pos


def read_index_flags(index: Path, hash_len: int = 20) -> Flagged | None:
    """The entries of ``index`` with either bit set, or None when this reader does not know the file."""
    try:
        data = index.read_bytes()
    except FileNotFoundError:
        return []                      # no index yet: nothing is tracked
    except OSError:
        return None                    # unreadable here: git is asked (and says why)
    try:
        if data[:4] != b"DIRC":
            return None
        version, count = struct.unpack_from(">II", data, 4)
        if version not in (2, 3, 4):
            return None
        pos, prev, found = 12, b"", []
        fixed = 40 + hash_len          # ten 32-bit stat fields, then the object id
        for _ in range(count):
            start = pos
            (flags,) = struct.unpack_from(">H", data, pos + fixed)
            pos += fixed + 2
            ext = 0
            if flags & EXTENDED:
                if version < 3:
                    return None
                (ext,) = struct.unpack_from(">H", data, pos)
                pos += 2
            if version == 4:           # the name is the previous one's prefix plus this suffix, no padding
                strip, pos = _varint(data, pos)
                end = data.index(b"\0", pos)
                if strip > len(prev):
                    return None
                name = prev[:len(prev) - strip] + data[pos:end]
                pos = end + 1
            else:                      # NUL-padded to a multiple of eight, at least one NUL
                end = data.index(b"\0", pos)
                name = data[pos:end]
                pos = start + ((end - start) // 8 + 1) * 8
            prev = name
            if flags & ASSUME_VALID:
                found.append((name.decode("utf-8", "surrogateescape"), "assume-unchanged"))
            elif ext & SKIP_WORKTREE:
                found.append((name.decode("utf-8", "surrogateescape"), "skip-worktree"))
        while pos + 8 <= len(data) - hash_len:  # extensions, then the trailing checksum
            if data[pos:pos + 4] == b"link":     # a split index: most entries live in another file
                return None
            (size,) = struct.unpack_from(">I", data, pos + 4)
            pos += 8 + size
        return found if pos == len(data) - hash_len else None
    except (struct.error, ValueError, IndexError):
        return None


def _asked_of_git(work: Path) -> Flagged:
    """``git ls-files -v``: ``S`` skip-worktree, a lower-case tag assume-unchanged."""
    listing, error = look(work, "ls-files", "-v", "-z")
    if error is not None:
        return [("(the index)", f"unreadable: {error}")]
    out: Flagged = []
    for entry in listing.split(b"\0"):
        if len(entry) > 2:
            tag, name = chr(entry[0]), entry[2:].decode("utf-8", "surrogateescape")
            if tag.islower():
                out.append((name, "assume-unchanged"))
            elif tag == "S":
                out.append((name, "skip-worktree"))
    return out


def _repo_hidden(work: Path) -> Flagged:
    gd = git_dir(work)
    if gd is None:
        return []
    config = config_items(gd)
    found = read_index_flags(gd / "index", 32 if value_in(config, "extensions.objectformat") == "sha256" else 20)
    if found is None or any(p.endswith("/") for p, _ in found):
        found = _asked_of_git(work)     # a sparse index's directory entries ("dir/"): git expands them
    if found and truth(value_in(config, "core.sparsecheckout")):
        cone = _cone(gd) if truth(value_in(config, "core.sparsecheckoutcone")) else None
        in_cone, on_disk = _in_cone(cone), _on_disk(work)
        found = [(p, why) for p, why in found if why != "skip-worktree" or in_cone(p) or on_disk(p)]
    return found


def _on_disk(work: Path) -> Callable[[str], bool]:
    """Whether a path under ``work`` names something on disk (a dangling link too), links followed on the
    way as the kernel does; one that cannot be looked at (a folder without search permission) counts as there,
    so it is named.  A folder that is not there answers for every entry under it, so the thousands of paths a
    sparse clone leaves out cost one look per folder, not one per file."""
    root = str(work)
    dirs: dict[str, bool] = {"": True}

    def there(path: str, follow: bool) -> bool:
        try:
            st = os.stat(path) if follow else os.lstat(path)
        except OSError as exc:
            return exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG)
        return stat.S_ISDIR(st.st_mode) if follow else True

    def is_dir(rel: str) -> bool:
        if rel not in dirs:
            dirs[rel] = is_dir(rel.rpartition("/")[0]) and there(os.path.join(root, rel), True)
        return dirs[rel]

    return lambda path: is_dir(path.rpartition("/")[0]) and there(os.path.join(root, path), False)


def _cone(gd: Path) -> tuple[set[str], set[str]] | None:
    """(recursive directories, parent directories) of a cone-mode sparse-checkout file."""
    try:
        lines = [ln.strip() for ln in (gd / "info" / "sparse-checkout").read_text(errors="replace").splitlines()]
    except OSError:
        return None
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    pos = {ln.strip("/") for ln in lines if not ln.startswith("!") and ln != "/*"}
    neg = {ln[1:].strip("/").removesuffix("/*") for ln in lines if ln.startswith("!") and ln != "!/*/"}
    return pos - neg, {""} | (pos & neg)


def _in_cone(cone: tuple[set[str], set[str]] | None) -> Callable[[str], bool]:
    """Whether a path lies in the cone (:func:`_cone`: its recursive and its parent folders), answered once
    per folder (CCCL's 6,000 out-of-cone paths lie in a few hundred)."""
    if cone is None:
        return lambda path: False
    recursive, parents = cone
    folders: dict[str, bool] = {}

    def inside(path: str) -> bool:
        folder = path.rpartition("/")[0]
        if folder not in folders:
            folders[folder] = folder in parents or any((folder + "/").startswith(r + "/") for r in recursive)
        return folders[folder]

    return inside


class Hidden(str):
    """One entry of :func:`hidden_entries` for a file git status does not look at (``path (skip-worktree)``
    or ``path (assume-unchanged)``): among ``git status`` lines it says so by its type, not its wording."""


BITS = ("skip-worktree", "assume-unchanged")


def hidden_entries(root: Path, submodules: Iterable[str] = ()) -> list[str]:
    """Each tracked file of the clone at ``root`` and of its checked-out ``submodules`` (paths under
    ``root``) that git status does not look at, as ``path (why)`` (a :class:`Hidden`); an index that could
    not be read is a plain entry saying so."""
    out = [_entry(p, why) for p, why in _repo_hidden(root)]
    for sub in sorted(set(submodules)):
        out += [_entry(f"{sub}/{p}", why) for p, why in _repo_hidden(root / sub)]
    return out


def _entry(path: str, why: str) -> str:
    return Hidden(f"{path} ({why})") if why in BITS else f"{path} ({why})"
