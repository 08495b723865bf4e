"""Every installed file as its distribution's RECORD hashes it: checked before install is marked done and on
every re-run (through :mod:`october.installer.core.filetrust`'s stat signatures, so a no-op re-reads only what
changed), and the way back for a tampered file (re-install the distributions whose RECORD no longer matches).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Sequence

from packaging.utils import canonicalize_name

from ..core.cpus import available_cpus
from ..core.filetrust import FileTrust
from ..core.hashing import sha256_file
from ..core.listing import first
from ..pyenv.venv import uv_own
from ..pyenv.dists import Dist, installed, record_hash, record_rows, site_packages

if TYPE_CHECKING:
    from ..core.errors import InstallError

MAX_SHOWN = 5
HASH_THREADS = min(8, available_cpus())


def tampered(env: Path, trust: FileTrust, dists: Mapping[str, Dist] | None = None) -> dict[str, list[str]]:
    """distribution -> its files that are missing or differ from their RECORD hash.  Files whose stat signature
    is unchanged are not read; the others are hashed in parallel (hashlib releases the GIL)."""
    bad: dict[str, list[str]] = {}
    todo: list[tuple[str, str, str, str, Path]] = []        # dist, rel, algo, value, path
    for name, dist in sorted((installed(env) if dists is None else dists).items()):
        try:
            rows = list(record_rows(dist))
        except OSError:
            bad.setdefault(name, []).append(f"{dist.info.name}/RECORD (missing)")
            continue
        for rel, recorded, _size in rows:
            algo, sep, value = recorded.partition("=")
            if not sep:
                continue        # RECORD itself, bytecode: no hash to hold them to
            path = dist.site / rel
            try:
                got = trust.known(path, f"record-{algo}")
            except FileNotFoundError:
                bad.setdefault(name, []).append(f"{rel} (missing)")
                continue
            except OSError as exc:
                bad.setdefault(name, []).append(f"{rel} ({exc.__class__.__name__})")
                continue
            if got is None:
                todo.append((name, rel, algo, value, path))
            elif got != value:
                bad.setdefault(name, []).append(f"{rel} (changed)")

    def check(row: tuple[str, str, str, str, Path]) -> str | None:
        _name, rel, algo, value, path = row
        try:
            got = trust.digest(path, f"record-{algo}", lambda p: record_hash(p, algo))
        except FileNotFoundError:
            return f"{rel} (missing)"
        except (OSError, ValueError) as exc:
            return f"{rel} ({exc.__class__.__name__})"
        return None if got == value else f"{rel} (changed)"

    if len(todo) > 1 and HASH_THREADS > 1:
        with ThreadPoolExecutor(max_workers=HASH_THREADS) as pool:
            verdicts = list(pool.map(check, todo))
    else:
        verdicts = [check(row) for row in todo]
    for row, verdict in zip(todo, verdicts):
        if verdict is not None:
            bad.setdefault(row[0], []).append(verdict)
    return {name: bad[name] for name in sorted(bad)}


def describe(found: Mapping[str, list[str]]) -> str:
    """One line per distribution, at most :data:`MAX_SHOWN` files each."""
    return "; ".join(f"{name}: " + first(files, MAX_SHOWN) for name, files in found.items())


def reinstall_args(env: Path, names: list[str], forks: Collection[str] = ()) -> list[str]:
    """``uv pip install`` arguments that put the named index distributions back at their installed version
    (``--no-deps``); forks and editable installs are left out (the step installs them again anyway)."""
    dists = installed(env)
    skip = {str(canonicalize_name(f)) for f in forks}
    index = [n for n in names if n in dists and n not in skip and dists[n].editable_path is None]
    if not index:
        return []
    return ["--no-deps", *(a for n in index for a in ("--reinstall-package", n)),
            *(f"{n}=={dists[n].version}" for n in index)]


def record_digests(env: Path, trust: FileTrust, dists: Mapping[str, Dist] | None = None) -> dict[str, str]:
    """distribution -> sha256 of its RECORD (an unchanged file: one stat).  A RECORD rewritten since its
    install (the same version reinstalled from another index, or edited with the file it lists) hashes its
    own files, so the RECORD check alone cannot see it: the install's record of these can."""
    out: dict[str, str] = {}
    for name, dist in sorted((installed(env) if dists is None else dists).items()):
        try:
            out[name] = trust.digest(dist.info / "RECORD", "sha256", sha256_file)
        except OSError:
            out[name] = "unreadable"
    return out


def rewritten(env: Path, trust: FileTrust, recorded: Mapping[str, str] | None,
              dists: Mapping[str, Dist] | None = None) -> dict[str, list[str]]:
    """distribution -> ["RECORD (rewritten since its install)"] for each whose RECORD is not the one recorded
    (``recorded``: :func:`record_digests` as the install left them; None: nothing recorded, nothing said)."""
    if not recorded:
        return {}
    now = record_digests(env, trust, dists)
    return {n: ["RECORD (rewritten since its install)"] for n in sorted(set(now) & set(recorded))
            if now[n] != recorded[n]}


def repair(env: Path, trust: FileTrust, forks: Collection[str], *, reinstall: Callable[[list[str]], None],
           warn: Callable[[str], None], recorded: Mapping[str, str] | None = None) -> None:
    """Put back every index distribution whose files no longer match its RECORD, or whose RECORD is not the
    one ``recorded`` at its install (``reinstall`` gets the :func:`reinstall_args`)."""
    bad = {**tampered(env, trust), **rewritten(env, trust, recorded)}
    args = reinstall_args(env, sorted(bad), forks)
    if args:
        warn(f"re-installing what no longer matches its RECORD: {describe(bad)}")
        reinstall(args)


def owned(env: Path) -> set[str]:
    """The files of ``env`` an installed distribution's RECORD names (normalized absolute paths)."""
    from ..pyenv.unowned import owned_paths

    rows: list[tuple[Path, str]] = []
    for dist in installed(env).values():
        try:
            rows += [(dist.site, rel) for rel, _h, _s in record_rows(dist)]
        except OSError:
            continue            # a missing RECORD is tampered()'s finding
    return owned_paths(rows)


def forged_bytecode(env: Path, recorded: set[str]) -> list[tuple[Path, str]] | str:
    """The ``__pycache__/*.pyc`` in ``env`` that no RECORD owns (``recorded``: :func:`owned`'s answer), that Python
    would load instead of their source (a header it holds to the source: the unowned check lets those pass) and
    that are not their source's code, compared in the env's own Python (:func:`october.installer.pyenv.bytecode.forged`, ``current verify``'s
    check) -> (pyc, why); a str: the env's Python could not say (why).  uv copies every file of a cached wheel, a
    checked hash-based ``.pyc`` with the clean source's hash and other code included.  One found its source's code
    earlier in this process is not compared again while neither file changed (:data:`_CLEAN`): the check runs after
    every uv install (the second review of session 38: with ``UV_COMPILE_BYTECODE=1`` every check compared the
    whole env's bytecode again, 2-10 s each on a real stack)."""
    from ..pyenv.bytecode import candidates, forged

    pairs = [(pyc, src) for pyc, src in candidates([env]) if os.path.normpath(pyc) not in recorded]
    signed = [(pyc, src, _signature(pyc, src)) for pyc, src in pairs]
    todo = [(pyc, src, sig) for pyc, src, sig in signed if sig is None or _CLEAN.get(str(pyc)) != sig]
    found = forged(env / "bin" / "python", [(pyc, src) for pyc, src, _ in todo])
    if not isinstance(found, str):
        bad = {pyc for pyc, _ in found}
        _CLEAN.update((str(pyc), sig) for pyc, _, sig in todo if sig is not None and pyc not in bad)
    return found


_CLEAN: dict[str, tuple[int, ...]] = {}     # pyc -> its and its source's stat signatures when found its source's code


def _signature(pyc: Path, source: Path) -> tuple[int, ...] | None:
    """Inode, size, mtime and ctime of the pyc and of its source (ctime: no user sets it back), None if one is gone."""
    try:
        stats = [os.stat(pyc), os.stat(source)]
    except OSError:
        return None
    return tuple(v for st in stats for v in (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))


def require_intact(env: Path, trust: FileTrust, uv_cache_dir: Callable[[], str],
                   system_torch: Mapping[str, Any] | None = None,
                   scaffold: Callable[[], Mapping[str, str]] | None = None) -> dict[str, str]:
    """Every file in ``env`` as its RECORD hashes it, and none that no RECORD owns (a ``.pth`` runs at every
    start; uv copies every file of a cached wheel, listed or not), else :class:`InstallError`
    (``uv_cache_dir``: for the fix; ``scaffold``: relative path -> sha256 of what this uv's ``uv venv`` writes
    itself, asked only when unowned files are found: uv 0.12 writes ``_virtualenv.pth`` and ``_virtualenv.py``).
    Before the built-stack cache stores the env: nothing unchecked goes on.  Nor unowned bytecode Python would run
    in place of its source that is other code (:func:`forged_bytecode`; before anything runs the env's Python on
    the stack's packages).  -> the unowned files taken as uv's own (relative path -> sha256), which ``current
    verify`` holds to that record."""
    from ..pyenv.unowned import unowned

    bad = tampered(env, trust)
    if bad:
        raise tampered_error(env, bad, uv_cache_dir)
    recorded = owned(env)
    extra = unowned(env, recorded, system_torch)     # by ``current verify``'s rules (the venv's scaffolding, our .pth)
    uvs: dict[str, str] = {}
    if extra and scaffold is not None:
        uvs = uv_own(env, extra, scaffold())
        extra = [p for p in extra if p.relative_to(env).as_posix() not in uvs]
    if extra:
        raise unowned_error(extra, uv_cache_dir)
    require_own_bytecode(env, recorded, uv_cache_dir)
    return uvs


SCAFFOLD_PTH = ("_virtualenv.pth", "_october_system_site.pth")    # uv 0.12's venv's, the env step's: require_intact's


def require_owned_pth(env: Path, recorded: set[str], uv_cache_dir: Callable[[], str]) -> None:
    """No top-level ``.pth`` in the env's site directories that no RECORD owns (``recorded``: :func:`owned`'s
    answer), uv's venv's and the env step's own aside (:func:`require_intact` holds those to what they must be), else
    :func:`unowned_error` naming every unowned file of the env (one round).  A ``.pth`` runs at every start of the
    env's Python: asked right after each uv install, before anything starts it."""
    from ..pyenv.unowned import unowned

    if any(os.path.normpath(p) not in recorded and p.name not in SCAFFOLD_PTH
           for site in site_packages(env) for p in site.glob("*.pth")):
        raise unowned_error([p for p in unowned(env, recorded) if p.name not in (*SCAFFOLD_PTH, "_virtualenv.py")],
                            uv_cache_dir)


def tampered_error(env: Path, bad: Mapping[str, list[str]], uv_cache_dir: Callable[[], str]) -> InstallError:
    """The error for files unlike their RECORD (:func:`tampered`'s answer)."""
    from ..core.errors import UnlikeRecordError

    dists = installed(env)
    return UnlikeRecordError(f"installed files differ from their distribution's RECORD: {describe(bad)}",
                             paths=[dists[name].site / item.rsplit(" (", 1)[0] for name, items in bad.items()
                                    for item in items if name in dists],
                             expected="every file in the stack env with the hash its RECORD lists",
                             found=f"{sum(len(v) for v in bad.values())} file(s) in {len(bad)} distribution(s)",
                             fix=f"uv's cache served these bytes: delete {uv_cache_dir()} (a "
                                 "cache edited through a stack that hard-linked it) and re-run october_setup")


def unowned_error(extra: Sequence[Path], uv_cache_dir: Callable[[], str]) -> InstallError:
    """The error for files of the env no RECORD owns."""
    from ..core.errors import UnlikeRecordError

    return UnlikeRecordError(f"{len(extra)} file(s) in the stack env that no installed distribution's RECORD "
                             "owns", paths=extra,
                             expected="every file in the env owned by a RECORD (or the venv's own scaffolding)",
                             found=first([str(p) for p in extra], MAX_SHOWN, "; "),
                             fix=f"remove them; if uv's cache served them (a wheel unpacked there with files its "
                                 f"RECORD does not list), delete {uv_cache_dir()} as well, then re-run "
                                 "october_setup")


def require_own_bytecode(env: Path, recorded: set[str], uv_cache_dir: Callable[[], str]) -> None:
    """No unowned bytecode in ``env`` that Python would run in place of its source and that is not its source's code
    (:func:`forged_bytecode`; ``recorded``: :func:`owned`'s answer), else
    :class:`UnlikeRecordError`.  Run after every uv install into the env too (``StackUv.after_install``), before
    anything starts the env's Python with its site: a ``.pth`` imports its module at every start (the first review
    of session 38: a planted ``.pyc`` of a module a ``.pth`` imports ran 3-4 times before the install step's
    check); the comparison itself runs in the env's Python with ``-I -S``, no ``.pth`` read.  A source edited with
    its RECORD row is the hold's to find (:func:`october.installer.steps.indexcheck.hold_started` for what a
    ``.pth`` runs, at the same moment)."""
    from ..core.errors import UnlikeRecordError

    forged = forged_bytecode(env, recorded)
    expected = ("each __pycache__/*.pyc no RECORD owns compiled from its source (Python loads it without reading the "
                "source)")
    if isinstance(forged, str):
        raise UnlikeRecordError("the bytecode in the stack env could not be checked", paths=[], expected=expected,
                                found=forged, fix="check that the stack env's Python runs, then re-run october_setup")
    if forged:
        raise UnlikeRecordError(f"{len(forged)} bytecode file(s) in the stack env that Python would run in place of "
                                "their source and that no RECORD owns are not their source's code",
                                paths=[p for p, _why in forged], expected=expected,
                                found=first([f"{p} ({why})" for p, why in forged], MAX_SHOWN, "; "),
                                fix=f"remove them; uv's cache served them (a wheel unpacked there with bytecode its "
                                    f"RECORD does not list): delete {uv_cache_dir()} as well, then re-run october_setup")
