"""The env against what was recorded of it (the lock written from it, the install step's listing): which
distributions were added, removed or changed since (``uv pip install``/``uninstall`` by hand).  Read from
``.dist-info`` names and the lock's TOML, no process: the no-op re-run asks it (the env and lock steps' verify)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from packaging.utils import canonicalize_name, canonicalize_version

from ..core.cachekey import without_key
from ..core.hashing import sha256_file

SHOWN = 5


def installed_versions(env: Path) -> dict[str, str]:
    """name -> version of every distribution in the env, from its .dist-info names."""
    out: dict[str, str] = {}
    for site in env.glob("lib/python*/site-packages"):
        for info in site.glob("*.dist-info"):
            name, _, version = info.name[: -len(".dist-info")].partition("-")
            out[str(canonicalize_name(name))] = version
    return out


def site_versions(sites: Sequence[str]) -> dict[str, str]:
    """name -> version of every distribution in site directories outside the env (a system interpreter's): a
    ``.dist-info`` by its name, an ``.egg-info`` (apt's Python packages) by its metadata, as the stack's
    interpreter lists them (a name in two directories: the first, the one Python imports; ``sites`` in
    sys.path's order, as the lock records them)."""
    from importlib.metadata import PathDistribution

    out: dict[str, str] = {}
    for site in sites:
        try:
            entries = sorted(Path(site).iterdir())
        except OSError:
            continue
        for info in entries:
            if info.name.endswith(".dist-info"):
                name, _, version = info.name[: -len(".dist-info")].partition("-")
            elif info.name.endswith(".egg-info"):
                meta: Any = PathDistribution(info).metadata
                name, version = (meta["Name"] or "", meta["Version"] or "") if meta is not None else ("", "")
            else:
                continue
            if name and version:
                out.setdefault(str(canonicalize_name(name)), version)
    return out


STARTUP_MODULES = ("sitecustomize", "usercustomize")    # imported by ``site`` at every start, wherever on sys.path


def site_pth(sites: Sequence[str]) -> dict[str, str]:
    """path -> sha256 of every ``.pth`` file in the site directories: the stack's Python reads them as it starts
    (``site.addsitedir``), and a line of one that begins ``import`` runs."""
    return _hashed(sites, lambda name: name.endswith(".pth"))


def site_startup(sites: Sequence[str]) -> dict[str, str]:
    """path -> sha256 of every ``sitecustomize`` or ``usercustomize`` module in the site directories: ``site``
    imports them at every start (a ``.py``, ``.pyc`` or extension module; a package: each of its files)."""
    return _hashed(sites, lambda name: name.split(".", 1)[0] in STARTUP_MODULES)


def _hashed(sites: Sequence[str], wanted: Callable[[str], bool]) -> dict[str, str]:
    out: dict[str, str] = {}
    for site in sites:
        try:
            found = sorted(p for p in Path(site).iterdir() if wanted(p.name))
        except OSError:
            continue
        for entry in found:
            try:
                out[str(entry)] = _tree_sha256(entry) if entry.is_dir() else sha256_file(entry)   # through a link
            except OSError:
                out[str(entry)] = "unreadable"
    return out


def _tree_sha256(top: Path) -> str:
    """One digest of a package folder: each file's path under it and sha256, in order (its ``__pycache__`` left
    out: Python writes it there as it imports the package, and checks it against its source)."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.relative_to(top).parts):
        h.update(f"{f.relative_to(top).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def system_drift(lock: Mapping[str, Any], env: Path) -> str | None:
    """What differs between the lock's ``[tool.october.system.packages]`` (what a site-provided torch's
    interpreter gave the stack) and the site directories it records they were found in (``sites``), now
    (``name locked -> found``), versions compared as PEP 440 normalizes them, and between its ``pth`` (the
    ``.pth`` files of ``pth_sites``, every system site directory the stack's Python reads them from) and theirs
    now; None when they agree,
    or for a lock without that section.  A lock of an earlier version records no ``sites``: the stack
    interpreter's sys.path outside ``env`` (one short process) stands for them; one without ``pth`` is not
    held to its ``.pth`` files."""
    try:
        system = lock["tool"]["october"]["system"]
        locked = {str(canonicalize_name(k)): str(v) for k, v in system["packages"].items()}
        recorded = system.get("sites")
    except (KeyError, TypeError, AttributeError):
        return None
    sites = [str(s) for s in recorded] if isinstance(recorded, list) else _outside_sites(env)
    if sites is None:
        return None
    now = {n: v for n, v in site_versions(sites).items() if n != "torch"}
    same = {n for n in set(locked) & set(now) if canonicalize_version(locked[n]) == canonicalize_version(now[n])}
    was = {n: v for n, v in locked.items() if n not in same}
    found = {n: v for n, v in now.items() if n not in same}
    dirs = system.get("pth_sites")
    read = [str(d) for d in dirs] if isinstance(dirs, list) else sites
    # each record only where the lock has it (an earlier version's lock holds no startup modules: a sitecustomize
    # that was there at setup is not a difference; that lock is held to them from its next writing)
    for key, now_of in (("pth", site_pth), ("startup", site_startup)):
        recorded = system.get(key)
        if isinstance(recorded, dict):
            was.update({str(k): str(v) for k, v in recorded.items()})
            found.update(now_of(read))
    return differences(was, found)


def _outside_sites(env: Path) -> list[str] | None:
    """The stack interpreter's sys.path entries outside ``env``, in order (None: it cannot say)."""
    import json
    import subprocess

    python = env / "bin" / "python"
    try:
        done = subprocess.run([str(python), "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
                              capture_output=True, text=True, timeout=60, check=False, env=without_key())
        path = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    if not isinstance(path, list):
        return None
    inside = env.resolve()
    return [str(p) for p in path if isinstance(p, str) and p and Path(p).is_dir()
            and not Path(p).resolve().is_relative_to(inside)]


def read_toml(pylock: Path) -> dict[str, Any] | None:
    """The lock's TOML, or None when it cannot be read: an unreadable lock is not drift (whoever reads it for
    itself says what is wrong)."""
    try:
        with open(pylock, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return None


def drift(env: Path, pylock: Path) -> str | None:
    """What differs between the env's distributions and the lock's packages (``name locked -> installed``),
    or None when they agree (or the lock cannot be read)."""
    lock = read_toml(pylock)
    return None if lock is None else lock_drift(env, lock)


def lock_drift(env: Path, lock: Mapping[str, Any]) -> str | None:
    """:func:`drift` of a lock already read."""
    try:
        locked = {str(canonicalize_name(p["name"])): str(p.get("version")) for p in lock.get("packages", [])}
    except (KeyError, TypeError, AttributeError):
        return None
    return differences(locked, installed_versions(env))


def differences(was: Mapping[str, str], now: Mapping[str, str]) -> str | None:
    """``name was -> now`` for each distribution added, removed or of another version (``-``: none), the
    first :data:`SHOWN` named; None when the two agree."""
    changed = sorted(n for n in set(was) | set(now) if was.get(n) != now.get(n))
    if not changed:
        return None
    return ", ".join(f"{n} {was.get(n, '-')} -> {now.get(n, '-')}" for n in changed[:SHOWN]) + (
        f" (and {len(changed) - SHOWN} more)" if len(changed) > SHOWN else "")
