"""Taking a built-stack cache entry (:mod:`.builtstack`): its env copied into a stack (:func:`restore_env`) and its
forks' build outputs put into their checkouts (:func:`restore_forks`), every byte hashed against the signed
manifest as it is copied and the stack's path put where the placeholder is; what was copied and hashed vouched for
(:func:`vouch_copied`), so the run's checks do not read it a second time."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..core.atomic import write_text_atomic
from ..core.clonefile import clone_or_copy
from ..core.filetrust import FileTrust, signature
from ..core.hashing import record_digest, sha256_file
from .builtkey import PLACEHOLDER, placed, stat_identity
from .builtstack import Entry, EntryRefused, Hashed, InTheWay, Stopped, hash_bytes, tree_files


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
    present = {str(p) for p in tree_files(src)}
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
    if hash_bytes(data) != row.get("sha256"):
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
    return "sha256:" + hash_bytes(_place_bytes(_checked(entry.path / "forks" / fork / rel, row), root))


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
