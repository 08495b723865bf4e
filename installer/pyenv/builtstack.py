"""The built-stack cache: a second stack with the same inputs takes the first one's finished env and
what its editable fork installs produced, as private copies, checked before anything reaches it.

When the install step finishes (every check passed), it stores ``CACHE/built/<key>/``: a copy of
``STACK/env`` and of each fork's untracked build outputs (``git ls-files --others``: FlashInfer's
``_build_meta.py`` and ``data/`` links, vLLM's precompiled ``.so`` files), ``__pycache__`` left out,
with the stack's own path in text files and link targets replaced by a placeholder, and
``manifest.json``: the sha256, mode and kind of every stored file, which ones carry the placeholder,
and the facts the entry was made under, signed with this user's key (:mod:`october.installer.core.cachekey`).
The key (:func:`key_for`) is every input that decides
what env and install produce: the env and install steps' inputs (the stack path replaced by the
placeholder), each fork's commit and submodule commits, the system torch's identity (its facts and
the stat signatures of its files), uv's version and its binary's size (:func:`uv_identity`) and this module's format.  A dirty fork, a wheel
trusted on first use or a path that a URL would have to quote has no key: that stack is built.

A later stack with the same key and no env yet (:func:`restore_env`, from the env step; a stack whose
existing env is made again builds it) copies the entry's env
(copies or reflinks, never hard links: :mod:`october.installer.core.clonefile`), hashing every byte
it copies against the manifest, puts its own path where the placeholder is, and checks that the
interpreter the env links to is the one the entry was made with.  The install step then puts the
fork outputs in place the same way (:func:`restore_fork_outputs`; one already there with the same
bytes is kept) and runs the same checks a
normal install runs (RECORD hashes, consistency, the install guards, the import with the stack
environment); its RECORD check takes each copied file's digest from the copy's hashing while the file's
stat signature is the one taken before and after it (:meth:`october.installer.core.filetrust.FileTrust.vouch`;
not on a filesystem with whole-second times), so the run's checks read the env's bytes once, not twice (the end
of the run reads again what is old enough to keep for the no-op, as it does any file hashed while racy).  The
forks' outputs come from the entry only in the run that copied the env, and are recorded as the entry made them
(:func:`restored_digest`).  A file of the entry that does not hash as its manifest says, a missing one, or an
unexpected one refuses the entry: it is removed, the user is told, and the stack is built as if
there were none.  What a restore trusts: the manifest, written once when the entry is made from a
stack whose checks had all passed and signed with the key (an entry is read-only; nothing of a stack shares
its inodes); a manifest the key does not verify is never taken.

A stack taking an entry stamps it (``used``); once the install step stored a new entry, :func:`prune`
removes those no stack is likely to take again (one made by other tool code after a week untaken, any
after 30 days), so that each upgrade of the tool no longer leaves an env-sized entry behind for good.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import io
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
from typing import Any, Callable, Mapping, Sequence

from .. import __version__
from ..core import cachekey, jsonread
from ..core.cachekey import read_regular
from ..core.atomic import write_text_atomic
from ..core.clonefile import clone_or_copy
from ..core.filetrust import FileTrust, signature
from ..core.hashing import fingerprint, record_digest, sha256_file
from .uvcmd import uv_exe

BUILT_FORMAT = 1
PLACEHOLDER = "@OCTOBER_STACK_ROOT@"
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")        # needs no quoting in a file:// URL, no regex meaning
SKIP_DIRS = frozenset({"__pycache__"})
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Hashed:
    """A file :func:`restore_env` copied and hashed: its stat signature, the same before and after the hash (taken
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


def path_ok(root: Path) -> bool:
    return bool(SAFE_PATH.match(str(root))) and PLACEHOLDER not in str(root)


def _root_pattern(root: str) -> re.Pattern[bytes]:
    # the root itself, not a longer name that starts with it (/tmp/st1 is not /tmp/st10)
    return re.compile(re.escape(root.encode()) + rb"(?![A-Za-z0-9._+-])")


def templated(value: Any, root: Path) -> Any:
    """``value`` (JSON) with the stack root replaced by the placeholder in every string."""
    text = json.dumps(value, sort_keys=True)
    return json.loads(_root_pattern(str(root)).sub(PLACEHOLDER.encode(), text.encode()).decode())


def placed(value: Any, root: Path) -> Any:
    """The inverse of :func:`templated` for ``root``."""
    return json.loads(json.dumps(value).replace(PLACEHOLDER, str(root)))


def stat_identity(paths: list[Path]) -> list[list[Any]]:
    """(path, inode, size, mtime_ns) of each file (a missing one: None): a reinstall changes them."""
    out: list[list[Any]] = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append([str(p), st.st_ino, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([str(p), None])
    return out


def system_torch_identity(facts: Mapping[str, Any]) -> list[Any]:
    """The site-provided torch's facts plus the stat signatures of the files that say which torch it is."""
    init = Path(str(facts.get("file") or facts.get("path") or ""))
    torch_dir = init.parent
    files = [init, torch_dir / "version.py", *sorted(torch_dir.glob("_C*.so"))]
    site = facts.get("dist_site")
    if site and facts.get("dist_version"):
        info = Path(str(site)) / f"torch-{facts['dist_version']}.dist-info"
        files += [info / "RECORD", info / "METADATA"]
    exe = facts.get("python_path") or facts.get("executable")
    if exe:
        files.append(Path(os.path.realpath(str(exe))))
    return [dict(facts), stat_identity(files)]


def _walk(top: Path) -> list[Path]:
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


def _hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _store_tree(src: Path, dest: Path, rels: list[Path], root: Path) -> dict[str, Any]:
    """Copy ``rels`` of ``src`` into ``dest`` (templated where the stack root appears); -> the manifest rows."""
    pattern = _root_pattern(str(root))
    rows: dict[str, Any] = {}
    dest.mkdir(parents=True, exist_ok=True)
    for rel in rels:
        s, d = src / rel, dest / rel
        st = os.lstat(s)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(s)
            new = pattern.sub(PLACEHOLDER.encode(), target.encode()).decode()
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
                data = pattern.sub(PLACEHOLDER.encode(), data)
            d.write_bytes(data)
            mode = st.st_mode & 0o777
            os.chmod(d, mode & ~0o222)
            rows[str(rel)] = {"kind": "file", "sha256": _hash_bytes(data), "mode": mode, "templated": templ}
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
        rows = {"env": _store_tree(env, partial / "env", _walk(env), root),
                "forks": {name: _store_tree(checkout, partial / "forks" / name, with_parents(rels), root)
                          for name, (checkout, rels) in sorted(fork_outputs.items())}}
        manifest: dict[str, Any] = {"format": BUILT_FORMAT, "key": key, "tool": __version__, "code": tool_code(),
                                    "files": rows, "facts": templated(dict(facts), root)}
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


OTHER_CODE_IDLE_S = 7 * 24 * 3600       # an entry other tool code made (an upgrade's leftover), not taken for a week
IDLE_S = 30 * 24 * 3600                 # any entry not taken for 30 days
USED = "used"                           # an entry's stamp: touched each time a stack takes it
KEY = re.compile(r"[0-9a-f]{64}")
GONE = ".gone-"                         # an entry being removed: renamed out of use first, then deleted


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


def prune(cache_dir: Path, keep: Path, now: float | None = None) -> list[tuple[Path, str]]:
    """Remove the entries no stack is likely to take again, once a new one (``keep``) was stored: one made by
    other tool code (an entry is only taken by the code that made it: each upgrade left an env-sized entry
    behind) not taken for :data:`OTHER_CODE_IDLE_S`, and any not taken for :data:`IDLE_S`.  Only a folder
    named by a key whose manifest is an entry's of that key counts; each is renamed out of use first (a
    ``.gone-*`` folder, deleted then, or by the next prune when that fails).  -> (entry, why) for each removed.
    A stack copying from one as it goes finds its files gone and is built as if there were none."""
    now = time.time() if now is None else now
    base = built_dir(cache_dir)
    for left in base.glob(f"{GONE}*"):
        discard(left)
    code = tool_code()
    signing = cachekey.load_key(cache=cache_dir)
    gone: list[tuple[Path, str]] = []
    for path in sorted(base.iterdir()):
        if path == keep or not KEY.fullmatch(path.name) or path.is_symlink() or not path.is_dir():
            continue
        entry = _read_entry(path)
        if entry is None:
            continue            # not an entry this code can read: left as it is
        try:
            stamps = [os.lstat(p).st_mtime for p in (path / MANIFEST, path / USED) if os.path.lexists(p)]
        except OSError:
            continue
        last, taken = max(stamps), os.path.lexists(path / USED)
        # another key's (another user's, or a lost key's): its own takers stamp it too; 30 days untaken, as any
        foreign = "mac" in entry.manifest and not cachekey.signed(entry.manifest, signing)
        other = not foreign and entry.manifest.get("code") != code
        if now - last <= (OTHER_CODE_IDLE_S if other else IDLE_S):
            continue
        days = f"{(now - last) / 86400:.0f} day(s)"
        why = ("signed with another key, " if foreign else "made by other tool code, " if other else "") + (
            f"not taken for {days}" if taken else f"stored {days} ago, no use recorded since")
        try:
            _retire(path)
        except OSError:
            continue
        gone.append((path, why))
    _forget_recipes(cache_dir)
    return gone


def _forget_recipes(cache_dir: Path) -> None:
    """Remove each remembered recipe key (:func:`note_recipe_key`) that names no entry any more."""
    index = built_dir(cache_dir) / BY_RECIPE
    with contextlib.suppress(OSError):
        for named in list(index.iterdir()):
            key = key_for_recipe(cache_dir, named.name)
            if key is None or not (built_dir(cache_dir) / key / MANIFEST).is_file():
                with contextlib.suppress(OSError):
                    named.unlink()


def _retire(path: Path) -> None:
    """Rename an entry out of use (a ``.gone-*`` folder: no stack finds it there), then delete it (what a failed
    deletion leaves, the next prune does).  The rename's OSError is the caller's: the entry is then where it was."""
    tomb = path.with_name(f"{GONE}{_partial_owner()}+{uuid.uuid4().hex}")
    os.rename(path, tomb)
    discard(tomb)


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
    entry = _read_entry(path)
    if entry is None or entry.ident is None or not cachekey.signed(entry.manifest, signer):
        return None
    if len(_found) >= FOUND_KEPT:
        _found.clear()
    _found[(path, entry.ident, signer)] = entry         # under the identity seen just before it was read
    return entry


def _read_entry(path: Path) -> Entry | None:
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
        _retire(entry.path)
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "replaced"
    return "removed"


def _restore_tree(src: Path, dest: Path, rows: Mapping[str, Any], root: Path, *, fresh: bool,
                  created: list[Path] | None = None, hashed: dict[str, Hashed] | None = None,
                  stop: Callable[[], bool] | None = None, wrote: dict[str, str] | None = None
                  ) -> dict[Path, tuple[str, int]]:
    """Make ``dest`` the tree ``rows`` describe from ``src`` (copied, hashed, placed at ``root``); ``fresh``: an
    env, else a fork checkout where only new paths are made.  -> the files the placeholder was replaced in, each
    with the RECORD-style sha256 and the size of the bytes written (what :func:`rerecord` writes into RECORD:
    not read back from the file, which anything could have written meanwhile).
    ``hashed``: each file copied as it is, by its path in ``rows`` -> what :class:`Hashed` says.
    ``stop``: asked before each path; True ends the restore (:class:`Stopped`).  ``wrote``: each file and link
    made, by its path in ``rows`` -> what it was made as (``sha256:<hex>`` of the bytes written, ``link:<target>``)."""
    relocated: dict[Path, tuple[str, int]] = {}
    present = {str(p) for p in _walk(src)}
    expected = set(rows)
    if present != expected:
        extra, missing = sorted(present - expected), sorted(expected - present)
        raise EntryRefused(f"{src}: " + (f"unexpected {extra[0]}" if extra else f"missing {missing[0]}"))
    for rel in sorted(rows):                  # parents sort before their children
        if stop is not None and stop():
            raise Stopped(f"stopped while copying into {dest}")
        row, s, d = rows[rel], src / rel, dest / rel
        kind = row.get("kind")
        exists = os.path.lexists(d)
        if not fresh and kind != "dir" and exists:
            if _same(s, d, row, root):
                continue            # left by this stack's own earlier install: the same bytes
            if os.path.isdir(d) and not os.path.islink(d):
                raise InTheWay(f"{d} is a folder where the cache entry has a {kind}")
            # a build output a killed copy left half-written (or one changed since): ignored by git, and
            # the build would write it too; the entry's verified bytes replace it
            os.unlink(d)
        if created is not None and not exists:
            created.append(d)
        if kind == "dir":
            d.mkdir(parents=True, exist_ok=True)
        elif kind == "link":
            if os.readlink(s) != row.get("target"):
                raise EntryRefused(f"{s}: the link's target changed")
            os.symlink(_place(str(row["target"]), root), d)
            if wrote is not None:
                wrote[rel] = "link:" + _place(str(row["target"]), root)
        elif kind == "file":
            if not s.is_file() or s.is_symlink():
                raise EntryRefused(f"{s} is not a plain file")
            mode = int(row.get("mode", 0o644)) & 0o777
            if row.get("templated"):
                data = _place_bytes(_checked(s, row), root)
                d.write_bytes(data)
                digest = hashlib.sha256(data)
                relocated[d] = (record_digest(digest.digest()), len(data))
                os.chmod(d, mode)
                if wrote is not None:
                    wrote[rel] = "sha256:" + digest.hexdigest()
            else:
                clone_or_copy(s, d)
                os.chmod(d, mode)           # the last change this tool makes to it, before the hash
                sig = signature(os.stat(d))
                if sha256_file(d) != row.get("sha256"):
                    raise EntryRefused(f"{s} does not hash as the manifest says")
                if wrote is not None:
                    wrote[rel] = f"sha256:{row['sha256']}"
                # vouched for only when it stats the same after the hash as before (FileTrust.digest's rule), on
                # a filesystem with sub-second times: with whole seconds, a write of the same size within the
                # second of the hash would keep the signature (read again by the check instead)
                if hashed is not None and signature(os.stat(d)) == sig and not _whole_seconds(sig):
                    hashed[rel] = Hashed(sig, str(row["sha256"]))
        else:
            raise EntryRefused(f"{rel}: unknown kind {kind!r} in the manifest")
    return relocated


def _whole_seconds(sig: Sequence[int]) -> bool:
    """Whether a signature's mtime and ctime (:func:`~october.installer.core.filetrust.signature`) are whole
    seconds: a filesystem that keeps no finer time (ext4 with small inodes, some NFS servers)."""
    return sig[2] % 1_000_000_000 == 0 and sig[3] % 1_000_000_000 == 0


def _place(text: str, root: Path) -> str:
    return text.replace(PLACEHOLDER, str(root))


def _place_bytes(data: bytes, root: Path) -> bytes:
    return data.replace(PLACEHOLDER.encode(), str(root).encode())


def _checked(src: Path, row: Mapping[str, Any]) -> bytes:
    data = src.read_bytes()
    if _hash_bytes(data) != row.get("sha256"):
        raise EntryRefused(f"{src} does not hash as the manifest says")
    return data


def _same(src: Path, dest: Path, row: Mapping[str, Any], root: Path) -> bool:
    """Whether ``dest`` already is what restoring ``src`` (a manifest ``row``) would make it."""
    if row.get("kind") == "link":
        return dest.is_symlink() and os.readlink(dest) == _place(str(row.get("target")), root)
    if dest.is_symlink() or not dest.is_file() or not src.is_file():
        return False
    data = _checked(src, row)
    return dest.read_bytes() == (_place_bytes(data, root) if row.get("templated") else data)


def restored_digest(entry: Entry, fork: str, rel: str, root: Path) -> str | None:
    """What :func:`october.installer.git.buildoutputs.digest` says of fork output ``rel`` as :func:`restore_forks`
    puts it in a stack at ``root`` (``link:<target>`` or ``sha256:<hex>``), or None for a folder.
    :class:`EntryRefused` when the entry's file the stack's path is placed into no longer verifies."""
    row = entry.manifest["files"]["forks"][fork][rel]
    if row.get("kind") == "link":
        return "link:" + _place(str(row.get("target")), root)
    if row.get("kind") != "file":
        return None
    if not row.get("templated"):
        return f"sha256:{row.get('sha256')}"
    return "sha256:" + _hash_bytes(_place_bytes(_checked(entry.path / "forks" / fork / rel, row), root))


def rerecord(env: Path, relocated: Mapping[Path, tuple[str, int]]) -> list[Path]:
    """The RECORD rows of the files the stack's own path was put into, made to say the bytes written there
    (``relocated``: :func:`_restore_tree`'s answer; a row of another algorithm than sha256 hashes the file);
    -> the RECORD files written again.  Not read back for sha256: a file changed after it was written stays unlike
    its row (the tamper hunt: a line added to an editable ``.pth`` while the rest of the env was copied was
    recorded)."""
    from .dists import installed, record_hash, record_rows

    moved = {p.resolve(): v for p, v in relocated.items()}
    rewritten: list[Path] = []
    for dist in installed(env).values():
        rows = [list(r) for r in record_rows(dist)]
        touched = False
        for row in rows:
            path = (dist.site / row[0]).resolve()
            algo, sep, _value = row[1].partition("=")
            if path in moved and sep:
                digest, size = moved[path] if algo == "sha256" else (record_hash(path, algo), path.stat().st_size)
                row[1], row[2] = f"{algo}={digest}", str(size)
                touched = True
        if touched:
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerows(rows)
            write_text_atomic(dist.info / "RECORD", out.getvalue())
            rewritten.append(dist.info / "RECORD")
    return rewritten


def import_restore() -> None:
    """Import what :func:`restore_env` imports where it is used (for a restore in another thread: an import there
    can wait for ever on a module lock a Ctrl-C left held, :mod:`october.installer.core.idle` says how)."""
    from . import dists  # noqa: F401


def restore_env(entry: Entry, env: Path, root: Path, *, stop: Callable[[], bool] | None = None,
                wrote: dict[str, str] | None = None) -> dict[Path, Hashed]:
    """``env`` made anew as the entry's env (see :func:`_restore_tree`), copied beside it (``env.partial``) and
    renamed into place: a run killed while copying leaves no half env, and a refused entry none at all.
    -> each file copied as it is (not one the stack's path was put into), at its place in ``env``: its
    signature after it was hashed and the sha256 it was found to have.  ``env`` may be elsewhere than
    ``root``'s env (copied ahead, renamed there later): the stack's path put into it is ``root``'s.
    ``stop``: asked before each file (:class:`Stopped`: nothing left, as for a refused entry); ``wrote``: see
    :func:`_restore_tree`."""
    partial = env.with_name(env.name + ".partial")
    for old in (partial, env):
        if os.path.lexists(old):
            shutil.rmtree(old)
    partial.mkdir(parents=True)
    hashed: dict[str, Hashed] = {}
    try:
        for record in rerecord(partial, _restore_tree(entry.path / "env", partial, entry.manifest["files"]["env"],
                                                      root, fresh=True, hashed=hashed, stop=stop, wrote=wrote)):
            hashed.pop(record.relative_to(partial).as_posix(), None)     # not the bytes hashed any more
        os.rename(partial, env)     # renaming the folder changes no signature of the files in it
    except (EntryRefused, Stopped, OSError):
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return {env / rel: h for rel, h in hashed.items()}


def vouch_copied(trust: FileTrust, hashed: Mapping[Path, Hashed], *, as_record: bool = True) -> None:
    """The files :func:`restore_env` (or :func:`restore_forks`) copied and hashed, vouched for
    (:meth:`~october.installer.core.filetrust.FileTrust.vouch`) as their RECORD hashes them (``as_record``: the
    env's files, for install's RECORD check), or by their plain sha256 (the forks' build outputs, for the record of
    them :mod:`october.installer.git.buildoutputs` keeps): the run's checks do not read the bytes copied a second
    time (a torch env, vLLM's extension modules: gigabytes).  A file changed since it was hashed has another
    signature and is read again."""
    from .dists import record_hash

    for path, h in hashed.items():
        if as_record:
            trust.vouch(path, "record-sha256", record_digest(bytes.fromhex(h.sha256)), h.signature,
                        lambda p: record_hash(p, "sha256"))
        else:
            trust.vouch(path, "sha256", h.sha256, h.signature, sha256_file)


def key_for(root: Path, *, env_inputs: Any, install_inputs: Mapping[str, Any], wheel_sha256: str | None,
            forks: Mapping[str, Mapping[str, Any]], uv_line: str,
            system_torch: Mapping[str, Any] | None = None, signer: str | None = None,
            files: Mapping[str, str | None] | None = None) -> str:
    """The key of a stack at ``root``: the env and install steps' inputs (the recipe's ``wheel_sha256`` pin
    standing for the wheel's hash: the wheel step runs after env), each fork's ``{commit, submodules, sparse}``,
    uv (:func:`uv_identity`), this tool's code, a site-provided torch's identity, the signing key's id
    (``signer``: :func:`october.installer.core.cachekey.key_id`) and the sha256 of each local file a requirement
    names by path or ``file:`` URL (``files``: :func:`october.installer.lock.asked.asked_files`; the line alone does
    not say which bytes it installs)."""
    install = dict(install_inputs)
    install.pop("wheel_sha256", None)
    parts: dict[str, Any] = {
        "env": templated(env_inputs, root), "install": templated(install, root),
        "wheel": wheel_sha256,
        "forks": {name: {"commit": rec["commit"], "submodules": dict(rec["submodules"]),
                         **({"sparse": {k: list(v) for k, v in sorted(rec["sparse"].items())}} if rec.get("sparse") else {})}
                  for name, rec in sorted(forks.items())},
        "uv": uv_identity(uv_line),
        "tool": tool_code(),
    }
    if system_torch is not None:
        parts["system_torch"] = system_torch_identity(system_torch)
    if files:
        parts["files"] = dict(sorted(files.items()))
    parts["signer"] = signer        # the signing key's id: each key's entries apart, another's never replaced or taken
    return fingerprint({"format": BUILT_FORMAT, "tool": __version__, **parts})


def uv_identity(uv_line: str) -> list[Any]:
    """uv as the key names it: its ``--version`` line and its binary's size.  Not its path or inode: every
    tool install brings its own copy of the same uv, and an identity by path made every reinstall build again."""
    try:
        size: int | None = os.path.getsize(os.path.realpath(uv_exe()))
    except OSError:
        size = None
    return [uv_line, size]


@functools.cache
def tool_code() -> str:
    """sha256 of the tool's own code: an entry made by other code is never taken, whatever the version
    says; a smoke receipt names the code that judged the stack (a no-op re-run never reads it)."""
    import october

    return code_digest(Path(october.__file__).resolve().parent)


def code_digest(top: Path) -> str:
    """sha256 of every ``.py`` under ``top`` by its path there (links followed: a checkout links installer/;
    ``__pycache__`` and ``_data`` are not code; the folders above ``top`` do not count)."""
    h = hashlib.sha256()
    files = [Path(d, f) for d, dirs, names in os.walk(top, followlinks=True)
             for f in names if f.endswith(".py")
             if not {"__pycache__", "_data"} & set(Path(d).relative_to(top).parts)]
    for path in sorted(files, key=lambda p: p.relative_to(top).as_posix()):
        h.update(path.relative_to(top).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def recorded_imports(entry: Entry, root: Path) -> dict[str, str]:
    """The ``import <fork>`` verdicts recorded in the entry (fork -> version), placed at ``root``."""
    got = placed(entry.facts.get("imports") or {}, root)
    return {str(k): str(v) for k, v in got.items()} if isinstance(got, dict) else {}


def entry_facts(env: Path, *, imports: Mapping[str, str], wheel_sha256: str | None,
                nested_installs: Mapping[str, Any], env_record: Mapping[str, Any]) -> dict[str, Any]:
    """The facts an entry is stored with (the interpreter ``env``'s ``bin/python`` resolves to, with its stat
    signature, and the install's verdicts)."""
    real = Path(os.path.realpath(env / "bin" / "python"))
    return {"interpreter": [str(real), stat_identity([real])], "imports": dict(imports),
            "wheel_sha256": wheel_sha256, "nested_installs": dict(nested_installs), "env": dict(env_record)}


def interpreter_moved(facts: Mapping[str, Any]) -> str | None:
    """The interpreter an entry's env links to (``facts``, placed) when its stat signature changed, else None."""
    interpreter = facts.get("interpreter") or [None, None]
    return str(interpreter[0]) if stat_identity([Path(str(interpreter[0]))]) != interpreter[1] else None


def restore_forks(entry: Entry, forks: Sequence[tuple[str, Path]], root: Path, *,
                  changed_tracked: Callable[[Path], list[str]], announce: Callable[[str, Path], None],
                  hashed: dict[Path, Hashed] | None = None) -> dict[str, Any]:
    """Each fork's build outputs (``forks``: name, checkout) put into its checkout, changing no tracked
    file; -> the entry's nested-install verdicts.  On a refusal what was made is taken back, deepest first.
    ``hashed``: filled as :func:`restore_env` answers, for the outputs copied as they are."""
    made: list[Path] = []
    try:
        for name, checkout in forks:
            before = changed_tracked(checkout)
            announce(name, checkout)
            rows = entry.manifest["files"]["forks"].get(name)
            if rows is None:
                raise EntryRefused(f"the entry holds nothing for fork {name}")
            copied: dict[str, Hashed] = {}
            _restore_tree(entry.path / "forks" / name, checkout, rows, root, fresh=False, created=made, hashed=copied)
            if hashed is not None:
                hashed.update((checkout / rel, h) for rel, h in copied.items())
            after = changed_tracked(checkout)
            if after != before:
                raise EntryRefused(f"it changes tracked files of fork {name}: {after[:3]}")
    except (EntryRefused, OSError):
        for p in sorted(made, key=lambda q: len(q.parts), reverse=True):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        raise
    return dict(placed(entry.facts.get("nested_installs") or {}, root))
