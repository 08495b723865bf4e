"""The built-stack cache: a second stack with the same inputs takes the first one's finished env and
what its editable fork installs produced, as private copies, checked before anything reaches it.

When the install step finishes (every check passed), it stores ``CACHE/built/<key>/``: a copy of
``STACK/env`` and of each fork's untracked build outputs (``git ls-files --others``: FlashInfer's
``_build_meta.py`` and ``data/`` links, vLLM's precompiled ``.so`` files), ``__pycache__`` left out,
with the stack's own path in text files and link targets replaced by a placeholder, and
``manifest.json``: the sha256, mode and kind of every stored file, which ones carry the placeholder,
and the facts the entry was made under, signed with this user's key (:mod:`october.installer.core.cachekey`).
The key (:func:`.builtkey.key_for`) is every input that decides
what env and install produce: the env and install steps' inputs (the stack path replaced by the
placeholder), each fork's commit and submodule commits, the system torch's identity (its facts and
the stat signatures of its files), uv's version and its binary's size (:func:`.builtkey.uv_identity`) and this module's format.  A dirty fork, a wheel
trusted on first use or a path that a URL would have to quote has no key: that stack is built.

A later stack with the same key and no env yet (:func:`.builtrestore.restore_env`, from the env step; a stack whose
existing env is made again builds it) copies the entry's env
(copies or reflinks, never hard links: :mod:`october.installer.core.clonefile`), hashing every byte
it copies against the manifest, puts its own path where the placeholder is, and checks that the
interpreter the env links to is the one the entry was made with.  The install step then puts the
fork outputs in place the same way (:func:`.builtrestore.restore_forks`; one already there with the same
bytes is kept) and runs the same checks a
normal install runs (RECORD hashes, consistency, the install guards, the import with the stack
environment); its RECORD check takes each copied file's digest from the copy's hashing while the file's
stat signature is the one taken before and after it (:meth:`october.installer.core.filetrust.FileTrust.vouch`;
not on a filesystem with whole-second times), so the run's checks read the env's bytes once, not twice (the end
of the run reads again what is old enough to keep for the no-op, as it does any file hashed while racy).  The
forks' outputs come from the entry only in the run that copied the env, and are recorded as the entry made them
(:func:`.builtrestore.restored_digest`).  A file of the entry that does not hash as its manifest says, a missing one, or an
unexpected one refuses the entry: it is removed, the user is told, and the stack is built as if
there were none.  What a restore trusts: the manifest, written once when the entry is made from a
stack whose checks had all passed and signed with the key (an entry is read-only; nothing of a stack shares
its inodes); a manifest the key does not verify is never taken.

A stack taking an entry stamps it (``used``); once the install step stored a new entry, :func:`.builtprune.prune`
removes those no stack is likely to take again (one made by other tool code after a week untaken, any
after 30 days), so that each upgrade of the tool no longer leaves an env-sized entry behind for good.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .. import __version__
from ..core import cachekey, jsonread
from ..core.cachekey import read_regular
from ..core.atomic import write_text_atomic
from . import builtkey
from .builtkey import BUILT_FORMAT


SKIP_DIRS = frozenset({"__pycache__"})
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Hashed:
    """A file :func:`.builtrestore.restore_env` copied and hashed: its stat signature, the same before and after the hash (taken
    after the last change this tool made to it, its mode), and its sha256, hex."""

    signature: list[int]
    sha256: str


class EntryRefused(Exception):
    """A cache entry that does not match its manifest (the message says which file and how)."""


class Stopped(Exception):
    """A restore ended by its ``stop`` (the run ended while an env was copied ahead)."""


class InTheWay(EntryRefused):
    """Something of this stack's where the entry puts a file: the entry is not at fault (it is kept)."""


@dataclass(frozen=True)
class Entry:
    path: Path
    manifest: Mapping[str, Any]
    ident: tuple[int, ...] | None = None    # the manifest file's stat as read (_ident): which store made this entry

    @property
    def facts(self) -> Mapping[str, Any]:
        return self.manifest["facts"]


def built_dir(cache_dir: Path) -> Path:
    return cache_dir / "built"


def tree_files(top: Path) -> list[Path]:
    """Every file, link and directory under ``top`` (relative), bytecode left out."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        here = Path(dirpath)
        out += [(here / d).relative_to(top) for d in dirnames]
        out += [(here / f).relative_to(top) for f in sorted(filenames) if not f.endswith(".pyc")]
    return out


def with_parents(rels: list[Path]) -> list[Path]:
    """``rels`` (files of a checkout) with the folders above them, parents first; bytecode left out."""
    keep = [r for r in rels if not r.name.endswith(".pyc") and not SKIP_DIRS.intersection(r.parts)]
    dirs = {p for r in keep for p in r.parents if str(p) != "."}
    return sorted(dirs) + sorted(keep)


def hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _store_tree(src: Path, dest: Path, rels: list[Path], root: Path) -> dict[str, Any]:
    """Copy ``rels`` of ``src`` into ``dest`` (templated where the stack root appears); -> the manifest rows."""
    pattern = builtkey.root_pattern(str(root))
    rows: dict[str, Any] = {}
    dest.mkdir(parents=True, exist_ok=True)
    for rel in rels:
        s, d = src / rel, dest / rel
        st = os.lstat(s)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(s)
            new = pattern.sub(builtkey.PLACEHOLDER.encode(), target.encode()).decode()
            d.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(new, d)
            rows[str(rel)] = {"kind": "link", "target": new}
        elif stat.S_ISDIR(st.st_mode):
            d.mkdir(parents=True, exist_ok=True)
            rows[str(rel)] = {"kind": "dir"}
        elif stat.S_ISREG(st.st_mode):
            d.parent.mkdir(parents=True, exist_ok=True)
            data = s.read_bytes()
            templ = bool(pattern.search(data))
            if templ:
                if b"\0" in data:
                    raise EntryRefused(f"{s} is binary and names the stack path")
                data = pattern.sub(builtkey.PLACEHOLDER.encode(), data)
            d.write_bytes(data)
            mode = st.st_mode & 0o777
            os.chmod(d, mode & ~0o222)
            rows[str(rel)] = {"kind": "file", "sha256": hash_bytes(data), "mode": mode, "templated": templ}
        else:
            raise EntryRefused(f"{s} is not a file, link or directory")
    return rows


def store(cache_dir: Path, key: str, root: Path, env: Path, fork_outputs: Mapping[str, tuple[Path, list[Path]]],
          facts: Mapping[str, Any]) -> Entry | None:
    """Store the env and the forks' build outputs (fork -> (checkout, untracked paths)) under ``key``,
    replacing an entry already there; :class:`EntryRefused` says why a stack cannot be stored."""
    signing = cachekey.load_key(cache=cache_dir)
    if signing is None:
        raise EntryRefused(f"no key to sign it with: {cachekey.key_problem(cache=cache_dir)}")
    base = built_dir(cache_dir)
    base.mkdir(parents=True, exist_ok=True)
    _sweep_partials(base)
    there = find(cache_dir, key)
    if there is not None:
        # the same inputs, stored by a stack set up beside this one: kept (replacing it removed the files another
        # stack was copying from it, which then took the entry for a tampered one and removed the new one)
        return there
    partial = base / f".partial-{_partial_owner()}+{uuid.uuid4().hex}"
    try:
        partial.mkdir()
        rows = {"env": _store_tree(env, partial / "env", tree_files(env), root),
                "forks": {name: _store_tree(checkout, partial / "forks" / name, with_parents(rels), root)
                          for name, (checkout, rels) in sorted(fork_outputs.items())}}
        manifest: dict[str, Any] = {"format": BUILT_FORMAT, "key": key, "tool": __version__, "code": builtkey.tool_code(),
                                    "files": rows, "facts": builtkey.templated(dict(facts), root)}
        manifest["mac"] = cachekey.sign(manifest, signing)
        write_text_atomic(partial / MANIFEST, json.dumps(manifest, sort_keys=True))
        os.chmod(partial / MANIFEST, cachekey.shared_mode(0o444))     # readable as the entry's files are
        final = base / key
        there = find(cache_dir, key)
        if there is not None:       # stored by a stack beside this one while this copy was made: theirs is kept
            return there
        if final.exists():          # not an entry of this key's signer (the key names it): a tampered one
            if not os.access(final / MANIFEST, os.R_OK):
                return None         # one this user cannot read (another user's, of a key file shared with them)
            discard(final)
        os.replace(partial, final)
        return Entry(final, manifest, _ident(os.stat(final / MANIFEST)))
    finally:
        if partial.exists():
            discard(partial)


USED = "used"                           # an entry's stamp: touched each time a stack takes it
KEY = re.compile(r"[0-9a-f]{64}")


def mark_used(entry: Entry) -> None:
    """Stamp the entry as taken now (best effort: a read-only cache keeps its entries as they are).  Never
    through a link: whoever can write the entry's folder must not make a taker touch a file elsewhere."""
    with contextlib.suppress(OSError):
        fd = os.open(entry.path / USED, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, 0o644)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):      # a FIFO planted there is neither waited on nor stamped
                os.utime(fd)
        finally:
            os.close(fd)


LEGACY_PARTIAL = re.compile(r"\.partial-[0-9a-f]{32}")
LEGACY_PARTIAL_AGE_S = 24 * 3600


def _partial_owner() -> str:
    """Who a store's ``.partial-*`` folder belongs to: this process, in this pid namespace (containers that
    share a host name do not share pids), on this host: ``<pid>.<pid namespace>@<host>``."""
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    return f"{os.getpid()}.{ns}@{socket.gethostname()}"


def _sweep_partials(base: Path) -> None:
    """Remove what a store killed in this pid namespace on this host left (``.partial-<pid>.<ns>@<host>+*`` of a
    process that is gone); a store of another host or namespace, on a shared cache, is its own to sweep."""
    me = _partial_owner()
    here = me.partition(".")[2]
    for left in base.glob(".partial-*"):
        if LEGACY_PARTIAL.fullmatch(left.name):     # an earlier october's, which named no owner: a day old is dead
            with contextlib.suppress(OSError):
                if time.time() - left.stat().st_mtime > LEGACY_PARTIAL_AGE_S:
                    discard(left)
            continue
        owner, plus, _rest = left.name[len(".partial-"):].partition("+")
        pid, dot, where = owner.partition(".")
        if plus and dot and where == here and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            discard(left)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True             # another user's process: alive
    return True


def discard(path: Path) -> None:
    """Remove an entry (its files are read-only, its folders are not: rmtree can remove them)."""
    shutil.rmtree(path, ignore_errors=True)


GONE = ".gone-"                         # an entry being removed: renamed out of use first, then deleted


def retire(path: Path) -> None:
    """Rename an entry out of use (a ``.gone-*`` folder: no stack finds it there), then delete it (what a failed
    deletion leaves, the next prune does).  The rename's OSError is the caller's: the entry is then where it was."""
    tomb = path.with_name(f"{GONE}{_partial_owner()}+{uuid.uuid4().hex}")
    os.rename(path, tomb)
    discard(tomb)


BY_RECIPE = "by-recipe"      # CACHE/built/by-recipe/<recipe key>: the key of the entry a stack of that recipe took


def note_recipe_key(cache_dir: Path, recipe_key: str, key: str) -> None:
    """Remember that stacks of ``recipe_key`` (the recipe and machine, before the forks are fetched) took the
    entry of ``key``, for the next one to copy its env ahead (best effort).  Only a guess: whoever can write the
    cache can change it, and a stack copies what it names only from an entry signed under that key, and takes
    the copy only when its own key, reckoned once its forks are fetched, is that key."""
    if KEY.fullmatch(recipe_key) and KEY.fullmatch(key) and key_for_recipe(cache_dir, recipe_key) != key:
        with contextlib.suppress(OSError):
            write_text_atomic(built_dir(cache_dir) / BY_RECIPE / recipe_key, key + "\n")


def key_for_recipe(cache_dir: Path, recipe_key: str) -> str | None:
    """The key :func:`note_recipe_key` remembered for ``recipe_key``, or None."""
    try:
        text = read_regular(built_dir(cache_dir) / BY_RECIPE / recipe_key, 200).decode("ascii").strip()
    except (OSError, ValueError):
        return None
    return text if KEY.fullmatch(text) else None


# The entries this process read and found signed, by (manifest path, its identity as read, the key that signed it):
# a second stack looks its entry up four times (the copy during the fetch, the env step, the forks' outputs, the
# lock), and an env with its own torch has a manifest of ~12k rows (60 ms to read and check here, each time).
_found: dict[tuple[Path, tuple[int, ...], bytes], Entry] = {}


FOUND_KEPT = 8              # entries remembered at most (a process that sets up many stacks keeps no more)


def find(cache_dir: Path, key: str) -> Entry | None:
    """The entry stored under ``key`` when there is one with a readable manifest of this format, signed with this
    user's key (:mod:`october.installer.core.cachekey`): a manifest rewritten by whoever can write the cache, or
    stored by another user or an earlier version (unsigned), is never taken.  A manifest this process already read
    and found signed is not read again while its identity (:func:`_ident`) and the key are the same: a store never
    rewrites a manifest in place, and one rewritten by another hand within a timestamp's tick, its size kept, is
    answered with the manifest read and checked before, against which every file is still hashed as it is copied."""
    path = built_dir(cache_dir) / key
    try:
        ident = _ident(os.stat(path / MANIFEST))
    except OSError:
        return None
    signer = cachekey.load_key(cache=cache_dir)
    if signer is None:
        return None
    if (seen := _found.get((path, ident, signer))) is not None:
        return seen
    entry = read_entry(path)
    if entry is None or entry.ident is None or not cachekey.signed(entry.manifest, signer):
        return None
    if len(_found) >= FOUND_KEPT:
        _found.clear()
    _found[(path, entry.ident, signer)] = entry         # under the identity seen just before it was read
    return entry


def read_entry(path: Path) -> Entry | None:
    """The entry in ``path`` as its manifest says (read now, never remembered, its signature not checked: the
    caller judges it, as :func:`find` does) -> None when the manifest is missing, unreadable or not an entry's."""
    key = path.name
    try:
        ident = _ident(os.stat(path / MANIFEST))
        manifest = jsonread.loads(cachekey.read_regular(path / MANIFEST))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != BUILT_FORMAT or manifest.get("key") != key \
            or not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("facts"), dict):
        return None
    return Entry(path, manifest, ident)


def _ident(st: os.stat_result) -> tuple[int, ...]:
    """A file's identity: its device and inode, which a file made after it was removed may get again, with its
    size, mtime and ctime."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def discard_entry(entry: Entry) -> str:
    """Remove a refused entry when it is still the one that was read (its manifest's identity), renamed out of use
    first.  -> ``removed``; ``replaced`` (another run stored one in its place since: not this refusal's to
    remove); ``gone`` (removed meanwhile, by a prune or another refusal)."""
    try:
        if entry.ident is not None and _ident(os.stat(entry.path / MANIFEST)) != entry.ident:
            return "replaced"
        retire(entry.path)
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "replaced"
    return "removed"
