"""``current verify`` of the stack env: its distributions against the lock, every file against its RECORD, the
RECORDs as the install wrote them, the venv's own files, files no RECORD owns, bytecode Python would run in place
of its source, and torch (in the env, or the site-provided one the lock records)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from packaging.utils import canonicalize_name

from . import fix as fixes
from ..core.hashing import sha256_file
from ..core.paths import StackPaths
from ..core.redact import redact_url
from ..engine import read_marker
from ..lock.pylock import TOOL
from ..pyenv import bytecode as verify_bytecode
from ..pyenv import scaffold
from ..pyenv import unowned as verify_unowned
from ..pyenv.dists import Dist, dists_in, record_hash, record_rows
from ..pyenv.systorch import same_build
from ..pyenv.venv import earlier_uv_files, torch_cuda, uv_own, uv_venv_files
from .forks import fork_dir, fork_entries
from .report import Difference, listed

def check_distributions(paths: StackPaths, lock: Mapping[str, Any], dists: Mapping[str, Dist],
                        rerun: str) -> list[Difference]:
    want = {str(canonicalize_name(p["name"])): str(p.get("version", "")) for p in lock.get("packages", [])}
    # a locked index file: installed from an index or find-links, which leaves no direct_url.json (PEP 610)
    from_index = {str(canonicalize_name(p["name"])) for p in lock.get("packages", []) if p.get("wheels")}
    forks = {e["name"]: (fork, e) for fork, e in fork_entries(lock).items()}
    diffs: list[Difference] = []
    for name in sorted(set(want) | set(dists)):
        d = dists.get(name)
        if d is None:
            diffs.append(Difference("distributions", name, f"{name} {want[name]} installed (locked)", "not installed",
                                    rerun))
        elif name not in want:
            how = "editable" if d.editable_path else ("from " + redact_url(str((d.direct_url or {}).get("url")))
                                                     if d.direct_url else "from an index or a find-links folder")
            diffs.append(Difference("distributions", name, "only the locked distributions",
                                    f"{name} {d.version} installed ({how}), not in the lock", rerun))
        elif d.version != want[name]:
            diffs.append(Difference("distributions", name, f"version {want[name]}", f"version {d.version}", rerun))
        elif name in from_index and d.direct_url is not None and name not in forks:
            # the same version from another file (`uv pip install --reinstall x.whl`): its RECORD is its own
            diffs.append(Difference("distributions", name, f"{name} {d.version} from the locked index file",
                                    f"{name} {d.version} installed from "
                                    f"{redact_url(str(d.direct_url.get('url')))}", rerun))
        if d is not None and name in forks:
            fork, entry = forks[name]
            src = fork_dir(paths, fork, entry).resolve()
            if d.editable_path != src:
                diffs.append(Difference("distributions", name, f"the fork {fork} installed editable from {src}",
                                        f"{d.editable_path or 'a non-editable copy'}", rerun))
    return diffs


def check_locked_files(paths: StackPaths, lock: Mapping[str, Any], dists: Mapping[str, Dist], rerun: str,
                       named: Sequence[Difference] = ()) -> list[Difference]:
    """Each index package installed from the file the lock names, where that wheel is a file here with the locked
    sha256 (a wheel republished under its file name: the lock hashed the new bytes, the env holds the old).  A
    distribution ``named`` already (its version, its source, its files or its RECORD) is not named twice."""
    from ..lock.installed import unlike_locked

    seen = {d.what.split(" ", 1)[0] for d in named if d.check in ("distributions", "files")}
    return [Difference("distributions", u.name, f"{u.name} {u.version} installed from the locked {u.wheel} "
                       f"(sha256 {u.sha256})", f"{len(u.files)} file(s) of its RECORD unlike that wheel's: "
                       + listed(list(u.files), ", "), rerun)
            for u in unlike_locked(lock.get("packages", []), paths.env,
                                   {n: d for n, d in dists.items() if n not in seen})]


Bytes = Callable[[float, "float | None"], None]   # (done, total) bytes hashed, for a progress bar


def check_files(dists: Mapping[str, Dist], hashed: Bytes | None = None,
                fix: Callable[[list[str], list[Path]], str] = lambda _names, _files: ""
                ) -> tuple[int, list[Difference], set[str]]:
    """Every hashed RECORD entry of every distribution; -> (files checked, differences, every path
    a RECORD owns).  ``fix`` gets the distributions that differ and their changed files still there."""
    checked = 0
    diffs: list[Difference] = []
    records: dict[str, list[tuple[str, str, str]]] = {}
    for name, d in sorted(dists.items()):
        try:
            records[name] = list(record_rows(d))
        except OSError:
            diffs.append(Difference("files", f"{name} RECORD", f"{d.info / 'RECORD'}", "no RECORD file",
                                    fix([name], [])))
    owned = verify_unowned.owned_paths((dists[n].site, rel) for n, rows in records.items() for rel, _h, _s in rows)
    total = float(sum(int(size) for rows in records.values() for _p, h, size in rows if h and size.isdigit()))
    done = [0.0]

    def on_chunk(n: int) -> None:
        done[0] += n
        if hashed is not None:
            hashed(done[0], total or None)

    changed: list[tuple[str, Dist, list[str]]] = []
    differing: list[Path] = []
    for name, rows in records.items():
        d = dists[name]
        bad: list[str] = []
        for rel, recorded, _size in rows:
            if not recorded or "=" not in recorded:
                continue
            algo, _, value = recorded.partition("=")
            path = (d.site / rel).resolve()
            checked += 1
            try:
                if (d.site / rel).is_symlink():     # its bytes hash as recorded, but they are another file's
                    bad.append(f"{rel} (a link to {os.readlink(d.site / rel)})")
                    differing.append(d.site / rel)
                elif record_hash(path, algo, on_chunk) != value:
                    bad.append(f"{rel} (changed)")
                    differing.append(path)
            except FileNotFoundError:
                bad.append(f"{rel} (missing)")
            except (OSError, ValueError) as exc:
                bad.append(f"{rel} ({exc})")
        if bad:
            changed.append((name, d, bad))
    todo = fix([name for name, _d, _b in changed], differing)
    for name, d, bad in changed:
        diffs.append(Difference("files", f"{name} {d.version}", "every file as its RECORD hashes it",
                                f"{len(bad)} file(s) differ: {listed(bad, ', ')}", todo))
    return checked, diffs, owned


def check_records(paths: StackPaths, dists: Mapping[str, Dist], rerun: str) -> list[Difference]:
    """Each distribution's RECORD as its install left it (the install step's record of their sha256): a RECORD
    rewritten since (the same version reinstalled from another index, or edited with the file it lists) hashes
    its own files.  A stack installed before the record: nothing."""
    recorded = _outputs(paths, "install").get("records")
    if not isinstance(recorded, dict):
        return []
    diffs: list[Difference] = []
    for name in sorted(set(recorded) & set(dists)):
        try:
            now = sha256_file(dists[name].info / "RECORD")
        except OSError:
            continue                    # a missing RECORD is check_files' finding
        if now != recorded[name]:
            diffs.append(Difference("files", f"{name} {dists[name].version} RECORD",
                                    f"the RECORD its install wrote (sha256 {str(recorded[name])[:12]})",
                                    f"another RECORD (sha256 {now[:12]}): reinstalled from elsewhere or edited since",
                                    rerun))
    return diffs


def _outputs(paths: StackPaths, step: str) -> dict[str, Any]:
    """The ``outputs`` of a step's marker ({} when there is none or it has none)."""
    outputs = (read_marker(paths.marker(step)) or {}).get("outputs")
    return outputs if isinstance(outputs, dict) else {}


def check_env_scaffold(paths: StackPaths, rerun: str) -> list[Difference]:
    """pyvenv.cfg and the bin/python* links as the env step left them (its marker's record): which interpreter
    runs the stack is decided there, and no RECORD owns them; the activation scripts and lib64 (its ``scripts``
    record).  Without a record (older stacks), nothing."""
    link = scaffold.linked(paths.env)
    if link is not None:        # what is in it is not this stack's: another's env, or a folder anyone may write
        return [Difference("env", str(paths.env), "the folder the env step made", link, rerun)]
    outputs = _outputs(paths, "env")
    rec, scripts = outputs.get("scaffold"), outputs.get("scripts")
    moved = [*(scaffold.changed(paths.env, rec) if isinstance(rec, dict) else []),
             *scaffold.scripts_changed(paths.env, scripts if isinstance(scripts, dict) else None)]
    return [Difference("env", str(path), f"{want} (as the env step left it)", found, rerun) for path, want, found in moved]


def check_unowned(paths: StackPaths, owned: set[str], named: Sequence[Difference] = ()) -> list[Difference]:
    """``named``: what another check already names (a planted bin/python: making the env again is its fix)."""
    system = _outputs(paths, "env").get("system_torch")
    skip = {d.what for d in named}
    extra = [p for p in verify_unowned.unowned(paths.env, owned, system if isinstance(system, dict) else None)
             if str(p) not in skip]
    if extra:       # what uv's own venv has (uv 0.12's _virtualenv.pth), held to the install step's record of it
        uvs = _outputs(paths, "install").get("venv_files")
        if not isinstance(uvs, dict):       # a stack set up before that record: what this tool's uv writes,
            uvs = {**earlier_uv_files(paths.env), **_uv_venv_files(paths)}     # or uv 0.12 did
        theirs = uv_own(paths.env, extra, uvs)
        extra = [p for p in extra if p.relative_to(paths.env).as_posix() not in theirs]
    if not extra:
        return []
    shown = listed(extra, "; ", verify_unowned.describe)
    return [Difference("files", f"files in {paths.env} that no RECORD owns",
                       "every file owned by an installed distribution's RECORD (or the venv's own)",
                       f"{len(extra)} other file(s): {shown}", fixes.remove_files(extra))]


def _uv_venv_files(paths: StackPaths) -> dict[str, str]:
    """:func:`uv_venv_files` on the stack's interpreter; empty when uv cannot make one (nothing is excused)."""
    import subprocess

    from ..core.cachekey import without_key

    env = {k: v for k, v in without_key().items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    try:
        return uv_venv_files(lambda argv: subprocess.run(argv, env={**env, "UV_PYTHON_DOWNLOADS": "never"},
                                                         capture_output=True, check=True, timeout=120),
                             str(paths.python))
    except (OSError, subprocess.SubprocessError):
        return {}


def check_bytecode(paths: StackPaths, lock: Mapping[str, Any], rerun: str) -> tuple[int, list[Difference]]:
    """-> (bytecode files looked at, differences): bytecode Python would load that is not its source's code."""
    forks = [fork_dir(paths, name, entry) for name, entry in sorted(fork_entries(lock).items())]
    pairs = verify_bytecode.candidates([paths.env, *(f for f in forks if f.is_dir())])
    found = verify_bytecode.forged(paths.python, pairs)
    what = "bytecode in the env and the fork clones"
    expected = "each file Python loads instead of its source compiled from that source"
    if isinstance(found, str):
        return len(pairs), [Difference("files", what, expected, f"not checked: {found}", rerun)]
    if not found:
        return len(pairs), []
    shown = listed(found, "; ", lambda f: f"{f[0]} ({f[1]})")
    # another release of the stack's Python (3.11.2 beside 3.11.7: one bytecode format) compiles some sources
    # otherwise, and this check cannot tell its bytecode from a forged one; removing either is safe
    return len(pairs), [Difference("files", what, expected, f"{len(found)} file(s) are other code than the stack's "
                                   f"Python compiles from their sources (forged, or written by another release of "
                                   f"that Python): {shown}",
                                   fixes.remove_files([p for p, _why in found], "Python runs them in place of their "
                                                      "sources") + " (Python compiles each from its source again)")]


def check_torch(lock: Mapping[str, Any], dists: Mapping[str, Dist], rerun: str) -> list[Difference]:
    tool = (lock.get("tool") or {}).get(TOOL) or {}
    want = (tool.get("toolchain") or {}).get("torch")
    system = (tool.get("system") or {}).get("torch") if isinstance(tool.get("system"), dict) else None
    if not want:
        return []
    d = dists.get("torch")
    got = d.version if d is not None else None
    if system is None:
        if got != want:
            return [Difference("torch", "torch build", f"torch {want} (the recipe's build)",
                               f"torch {got}" if got else "no torch", rerun)]
        return []
    # a site-provided torch: none in the env (it would shadow the system's), the recorded one in place
    if d is not None:
        return [Difference("torch", "torch build", f"no torch in the env (torch {want} from the system, "
                           f"{system.get('path')})", f"torch {got} installed in {d.site}", rerun)]
    where = Path(str(system.get("path") or ""))
    versions = [d.version for d in dists_in([where.parent], "torch-*.dist-info")] if system.get("path") else []
    if not (where / "__init__.py").is_file() or not set(versions) & set(same_build(str(want))):
        found = f"torch {', '.join(str(v) for v in versions)} there" if versions else f"no torch at {where}"
        return [Difference("torch", "system torch", f"torch {want} at {where} (recorded in [tool.october.system])",
                           found, rerun)]
    # the same version of another CUDA build (PyPI's 2.11.0 is cu128 and cu130 alike): its version.py says which
    if "cuda" in system:
        built = torch_cuda(where / "version.py")
        if built != system.get("cuda"):
            return [Difference("torch", "system torch", f"torch {want} built for CUDA {system.get('cuda')} at {where} "
                               "(recorded in [tool.october.system])",
                               f"a build for CUDA {built} ({where / 'version.py'})",
                               "put the recorded build back in that interpreter (this tool never changes it), or "
                               + rerun)]
    return []


def check_system(paths: StackPaths, lock: Mapping[str, Any], receipt: Mapping[str, Any]) -> list[Difference]:
    """A site-provided torch's interpreter: the distributions it gives the stack as the lock recorded them
    (``[tool.october.system.packages]``, in its ``sites``)."""
    from ..lock.drift import system_drift

    changed = system_drift(lock, paths.env)
    if not changed:
        return []
    return [Difference("system", "the distributions the stack takes from outside its env (the system "
                       "interpreter's site directories, [tool.october.system].sites of pylock.toml)",
                       "what [tool.october.system.packages] of pylock.toml records",
                       changed, "put them back in that interpreter (this tool never changes it), or "
                       + fixes.rewrite_lock(paths, receipt) + " as the stack now is")]
