"""The shared JIT cache: built FlashInfer modules reused by every stack on this machine.

Content-addressed: an entry's key is the sha256 of everything the module's bytes
depend on (the FlashInfer commit, the nvcc version, the arch list, the torch
build, the builder and the module request, which fixes FlashInfer's module URI).
An entry (``<cache_dir>/jit/k-<signing key id>/<key[:2]>/<key>/``) holds the module's whole build
directory (``cached_ops/<uri>/``: objects, ninja state, the ``.so``) and
``entry.json`` with each file's sha256.  Nothing is restored unless every file
hashes to what ``entry.json`` says and the library to the recorded sha256 (each file
again as it is copied); a corrupted, changed or half-written entry is removed and the module is
built again (one that changed while it was copied is left for the next look).
``entry.json`` lives in the cache beside what it describes, signed with this user's
key (:mod:`october.installer.core.cachekey`, kept outside the cache), under that
key's id: a library edited together with its record is refused like any other
(README: what the cache is trusted with), and another key's entries are never seen.
Entries are written to a temporary directory and renamed into place, so a killed
run never leaves a half entry under its key.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..core import cachekey, jsonread
from ..core.atomic import write_json_atomic
from ..core.hashing import fingerprint, sha256_file
from .integrity import module_dir

ENTRY_FORMAT = 1
ENTRY = "entry.json"
LEGACY_IDLE_S = 7 * 24 * 3600       # an entry of the layout before signing: removed a week after it was written
IDLE_S = 30 * 24 * 3600             # any other entry: removed 30 days after it was last stored or taken
_LEGACY_TOP = re.compile(r"[0-9a-f]{2}")
_LIB = re.compile(r"^\.cache/flashinfer/[^/]+/[^/]+/cached_ops/(?P<uri>[A-Za-z0-9_.+-]+)/(?P=uri)\.so$")


def cache_key(inputs: Mapping[str, Any], module: Mapping[str, Any]) -> str:
    """sha256 of the build inputs and the module request (its ``id`` excluded: ids are per recipe)."""
    return fingerprint({"inputs": dict(inputs), "module": {k: v for k, v in module.items() if k != "id"}})


@dataclass(frozen=True)
class Restored:
    uri: str
    lib: str                # relative to the workspace
    sha256: str


@dataclass(frozen=True)
class Lookup:
    restored: Restored | None
    refused: str | None = None      # why an entry under this key was not used (and whether it was removed)


class SharedJitCache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._swept = False         # the sweep runs once for a step's stores, not once for each module

    def entry_dir(self, key: str, signing: bytes) -> Path:
        """Under the signing key's id (:func:`october.installer.core.cachekey.key_id`): another user's entries are
        never seen here, so never taken, refused or replaced."""
        return self.root / f"k-{cachekey.key_id(signing)}" / key[:2] / key

    # ------------------------------------------------------------------ read

    def restore(self, key: str, workspace: Path) -> Lookup:
        """Copy the entry's module directory into ``workspace`` if it verifies; otherwise remove the entry."""
        signing = cachekey.load_key(cache=self.root.parent)
        if signing is None:
            return Lookup(None, refused=f"the shared JIT cache is not used: {cachekey.key_problem(cache=self.root.parent)}")
        d = self.entry_dir(key, signing)
        if not d.is_dir():
            return Lookup(None)
        if not os.access(d / ENTRY, os.R_OK) and os.path.lexists(d / ENTRY):
            return Lookup(None, refused=f"shared JIT cache entry {d} not used (kept): this user cannot read it "
                                        "(another user's, of the key file you share)")
        problem, entry = self._check(key, d, signing)
        if problem is not None or entry is None:
            shutil.rmtree(d, ignore_errors=True)
            return Lookup(None, refused=f"shared JIT cache entry {d} refused and removed: {problem}")
        lib = PurePosixPath(entry["lib"])
        target = workspace / lib.parent
        workspace.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".restore-", dir=workspace))
        try:
            for name, want in entry["files"].items():
                copied = tmp / name
                try:
                    shutil.copy2(d / "files" / name, copied, follow_symlinks=False)
                except OSError as exc:      # gone, or made a FIFO (shutil refuses one) since _check
                    return Lookup(None, refused=f"shared JIT cache entry {d} changed while it was copied ({name}: {exc})")
                # each copy hashed again (the library's row is its recorded sha256: _check): a file swapped (or made
                # a link) after _check read it never reaches the stack
                if copied.is_symlink() or not copied.is_file() or sha256_file(copied) != want:
                    return Lookup(None, refused=f"shared JIT cache entry {d} changed while it was copied ({name})")
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.utime(d / ENTRY, follow_symlinks=False)      # taken now: what the sweep reads as its last use
        return Lookup(Restored(uri=entry["uri"], lib=entry["lib"], sha256=entry["sha256"]))

    def _check(self, key: str, d: Path, signing: bytes) -> tuple[str | None, dict[str, Any] | None]:
        try:
            entry = jsonread.loads(cachekey.read_regular(d / ENTRY))
        except (OSError, ValueError) as exc:
            return f"{ENTRY} unreadable ({type(exc).__name__})", None
        if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT or entry.get("key") != key:
            return f"{ENTRY} is not an entry for key {key[:12]}...", None
        if not cachekey.signed(entry, signing):
            return f"{ENTRY} is not signed with the key its folder names: rewritten", None
        lib, files = entry.get("lib"), entry.get("files")
        m = _LIB.match(lib) if isinstance(lib, str) else None
        if m is None or m.group("uri") != entry.get("uri") or not isinstance(files, dict):
            return f"{ENTRY} names no library inside a FlashInfer module directory", None
        so = PurePosixPath(str(lib)).name
        if not isinstance(entry.get("sha256"), str) or files.get(so) != entry["sha256"]:
            return "the library's recorded sha256 disagrees with the file list", None
        on_disk = sorted(p.name for p in (d / "files").iterdir()) if (d / "files").is_dir() else []
        if on_disk != sorted(files):
            return f"files differ from the list in {ENTRY}", None
        for name, want in files.items():
            if "/" in name or name in ("", ".", ".."):
                return f"bad file name {name!r}", None
            if not stat.S_ISREG(os.lstat(d / "files" / name).st_mode):     # a FIFO would hang the hashing
                return f"{name} is not a plain file", None
            got = sha256_file(d / "files" / name)
            if got != want:
                return f"{name} has sha256 {got[:12]}..., the entry says {str(want)[:12]}...", None
        return None, entry

    # ----------------------------------------------------------------- write

    def sweep(self, now: float | None = None) -> list[Path]:
        """Remove the entries no stack took (or stored) for long: :data:`IDLE_S` under any key's folder (a restore
        stamps its entry's ``entry.json``), :data:`LEGACY_IDLE_S` in the layout before signing (``<key[:2]>/<key>/``,
        unsigned: this code never takes them).  -> those removed."""
        now = time.time() if now is None else now
        gone: list[Path] = []
        for top in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            legacy = _LEGACY_TOP.fullmatch(top.name) is not None
            if not (legacy or top.name.startswith("k-")) or top.is_symlink() or not top.is_dir():
                continue
            entries = [e for e in top.iterdir()] if legacy else [e for x in top.iterdir() if x.is_dir()
                                                                   and not x.is_symlink() for e in x.iterdir()]
            for entry in sorted(entries):
                try:
                    idle = now - os.lstat(entry / ENTRY).st_mtime
                except OSError:
                    continue
                if idle > (LEGACY_IDLE_S if legacy else IDLE_S) and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                    gone.append(entry)
            for empty in [*([] if legacy else [x for x in top.iterdir() if x.is_dir()]), top]:
                with contextlib.suppress(OSError):
                    empty.rmdir()       # only when empty
        return gone

    def store(self, key: str, inputs: Mapping[str, Any], workspace: Path, uri: str, lib: Path, sha256: str) -> bool:
        """Add the module built at ``lib`` (inside ``workspace``) under ``key``; False when not storable."""
        signing = cachekey.load_key(cache=self.root.parent)
        if signing is None:
            return False
        d = self.entry_dir(key, signing)
        src = module_dir(lib)
        rel = lib.relative_to(workspace).as_posix()
        if d.is_dir() or src is None or not _LIB.match(rel) or sha256_file(lib) != sha256:
            return False
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=d.parent))
        try:
            os.chmod(tmp, cachekey.shared_mode(0o755))      # mkdtemp's 0700: not even the key's sharers could read it
            (tmp / "files").mkdir(mode=0o755)
            files: dict[str, str] = {}
            for f in sorted(src.iterdir()):
                if f.is_file() and not f.is_symlink():
                    shutil.copy2(f, tmp / "files" / f.name)
                    files[f.name] = sha256_file(tmp / "files" / f.name)
            if files.get(lib.name) != sha256:
                return False
            doc: dict[str, Any] = {"format": ENTRY_FORMAT, "key": key, "inputs": dict(inputs), "uri": uri,
                                   "lib": rel, "sha256": sha256, "files": files}
            write_json_atomic(tmp / ENTRY, {**doc, "mac": cachekey.sign(doc, signing)})
            os.chmod(tmp / ENTRY, cachekey.shared_mode(0o644))
            try:
                tmp.rename(d)
            except OSError:             # another stack stored it first
                return False
            if not self._swept:
                self._swept = True
                self.sweep()
            return True
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
