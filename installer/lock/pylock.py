"""PEP 751 ``pylock.toml`` for a stack: build it, read it back for ``--locked``, compare.

Index packages carry their files' URLs and hashes, forks are VCS entries with their full ``commit-id``,
and toolchain facts, the base wheel and the JIT modules live under ``[tool.october]``.  No timestamps:
an identical install gives an identical file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import unquote, urlparse

import tomli_w
from packaging.pylock import Pylock, PylockValidationError
from packaging.utils import canonicalize_name

from .. import __version__
from ..core.errors import FileSystemError, LockError, one_line
from ..core.hashing import sha256_file
from ..core.redact import redact_url
from ..core.tomlgate import LOCK_MAX_BYTES, TomlRefused, read_toml_file

TOOL = "october"


@dataclass(frozen=True)
class LockedState:
    """What a ``--locked`` run must reproduce, read from an existing pylock."""

    path: Path
    sha256: str
    commits: Mapping[str, str]                 # fork name -> full commit id
    wheel_sha256: str | None
    packages: Mapping[str, str]                # normalized name -> version (index packages)
    hashes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> sha256 of its locked wheels
    submodules: Mapping[str, Mapping[str, str]] = field(default_factory=dict)   # fork -> path -> commit
    system: Mapping[str, str] = field(default_factory=dict)     # what a site-provided torch's interpreter gives


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    direct_url: Mapping[str, Any] | None


def split_installed(dists: Sequence[Installed], fork_paths: Mapping[str, Path]
                    ) -> tuple[dict[str, Installed], list[Installed], list[Installed]]:
    """-> (fork name -> dist, index dists, other direct-URL dists)."""
    by_path = {p.resolve(): name for name, p in fork_paths.items()}
    forks: dict[str, Installed] = {}
    index: list[Installed] = []
    other: list[Installed] = []
    for d in dists:
        info = d.direct_url or {}
        url = str(info.get("url", ""))
        p = Path(unquote(urlparse(url).path)).resolve() if url.startswith("file://") else None
        if p is not None and p in by_path and info.get("dir_info", {}).get("editable"):
            forks[by_path[p]] = d
        elif d.direct_url:
            other.append(d)
        else:
            index.append(d)
    return forks, index, other


def _drop_none(obj: Any, *, sort: bool = False) -> Any:
    """None left out at every level (TOML has no null); ``sort``: keys sorted at every level too."""
    if isinstance(obj, dict):
        return {k: _drop_none(obj[k], sort=sort) for k in (sorted(obj) if sort else obj) if obj[k] is not None}
    if isinstance(obj, list):
        return [_drop_none(v, sort=sort) for v in obj]
    return obj


def shown_package(package: Mapping[str, Any]) -> dict[str, Any]:
    """An index package of uv's pylock as a lock may hold it: the URL of each of its files (wheels, sdist,
    archive) through :func:`~october.installer.core.redact.redact_url`.  An index or find-links page may hand
    out signed links (``?X-Amz-Signature=...``); nothing reads a file's URL back from a lock (``--locked``
    installs by name, version and sha256)."""
    out = dict(package)
    if isinstance(out.get("wheels"), list):
        out["wheels"] = [_shown_file(w) for w in out["wheels"]]
    for key in ("sdist", "archive"):
        if isinstance(out.get(key), dict):
            out[key] = _shown_file(out[key])
    return out


def _shown_file(entry: Any) -> Any:
    if isinstance(entry, dict) and isinstance(entry.get("url"), str):
        return {**entry, "url": redact_url(entry["url"])}
    return entry


def build_lock(*, python_version: str, index_packages: Sequence[Mapping[str, Any]],
               forks: Mapping[str, tuple[Installed, Mapping[str, Any]]],
               other: Sequence[Installed], tool: Mapping[str, Any]) -> dict[str, Any]:
    """Assemble the lock dict; ``forks`` maps fork name -> (installed dist, fetch record)."""
    packages: list[dict[str, Any]] = [shown_package(p) for p in index_packages]
    for name, (dist, rec) in sorted(forks.items()):
        packages.append({
            "name": str(canonicalize_name(dist.name)), "version": dist.version,
            "vcs": {"type": "git", "url": redact_url(str(rec["url"])),
                    "requested-revision": rec.get("branch") or rec.get("requested") or rec["commit"],
                    "commit-id": rec["commit"]},
            "tool": {TOOL: {"fork": name, "editable": True, "path": f"src/{name}"}},
        })
    for dist in other:
        info = dict(dist.direct_url or {})
        hashes = info.get("archive_info", {}).get("hashes") or {}
        if not hashes and "hash" in info.get("archive_info", {}):
            algo, _, value = info["archive_info"]["hash"].partition("=")
            hashes = {algo: value}
        entry: dict[str, Any] = {"name": str(canonicalize_name(dist.name)), "version": dist.version}
        url = redact_url(str(info.get("url", "")))
        if hashes:
            entry["archive"] = {"url": url, "hashes": dict(hashes)}
        else:
            entry["directory"] = {"path": unquote(urlparse(url).path) if url.startswith("file://") else url,
                                  "editable": bool(info.get("dir_info", {}).get("editable"))}
        packages.append(entry)
    packages.sort(key=lambda p: (p["name"], str(p.get("version", ""))))
    lock = _drop_none({"lock-version": "1.0", "created-by": TOOL,
                       "requires-python": f"=={python_version}", "packages": packages,
                       "tool": {TOOL: _drop_none(dict(tool), sort=True)}})
    try:
        Pylock.from_dict(lock)
    except PylockValidationError as exc:
        raise LockError("the lock we built is not valid PEP 751", expected="a valid pylock.toml",
                        found=str(exc), fix="report this as a bug with STACK/logs/lock.log") from None
    return lock


def dumps(lock: Mapping[str, Any]) -> str:
    header = f"# pylock.toml written by october {__version__}; PEP 751. Do not edit by hand.\n"
    return header + tomli_w.dumps(lock)


def read_lock(path: Path, *, option: str | None = None) -> dict[str, Any]:
    """A pylock through the TOML read gate, valid PEP 751, its ``[tool.october]`` parts tables.  ``option``:
    the user named this file (``--lock-file``): a TOML file that is no PEP 751 lock at all (no
    ``lock-version``: a recipe, a pyproject) is that option naming nothing usable (exit 19), not a lock
    to restore."""
    try:
        data = read_toml_file(path, max_bytes=LOCK_MAX_BYTES)
    except TomlRefused as exc:
        if exc.kind == "missing":
            raise LockError("the lock file for --locked does not exist", expected=f"a pylock.toml at {path}",
                            found="no such file", fix="run october_setup once without --locked, or pass the lock "
                            "path") from None
        raise LockError(f"the lock file {path} cannot be read", expected=exc.expected, found=exc.found,
                        fix=_restore(path)) from None
    if option is not None and "lock-version" not in data:
        raise FileSystemError(f"{option} {path} is not a PEP 751 lock", expected="a pylock.toml (PEP 751: "
                              "`lock-version`, `[[packages]]`), as october_setup writes STACK/pylock.toml",
                              found=f"a TOML file without lock-version (keys: {one_line(', '.join(sorted(data)), 120)})",
                              fix=f"pass a lock to {option} (a stack's pylock.toml or locks/<recipe>.pylock.toml), "
                                  f"or drop {option} to use the recipe's")
    try:
        Pylock.from_dict(data)
    except PylockValidationError as exc:
        raise LockError("the lock file is not valid PEP 751", expected="a valid pylock.toml",
                        found=one_line(str(exc), 200), fix=f"restore {path} or re-create it without --locked") from None
    bad = _tool_shape(data)
    if bad:
        raise LockError(f"the lock file's [tool.{TOOL}] is malformed", expected=f"{bad} as a table",
                        found="another type", fix=f"restore {path} or re-create it without --locked")
    return data


def _restore(path: Path) -> str:
    """How an unreadable lock comes back: a stack's own ``pylock.toml`` (beside its ``.state/``) is under no
    version control, its lock step writes it again; a project's lock is restored from version control."""
    if path.name == "pylock.toml" and (path.parent / ".state").is_dir():
        return (f"{path} is a stack's own lock (no version control holds it): re-run october_setup on that stack "
                "without --locked, which writes it again")
    return f"restore {path} from version control"


def _tool_shape(lock: Mapping[str, Any]) -> str | None:
    """The first ``[tool.october]`` part that is not a table (None: all are)."""
    ours = lock.get("tool", {}).get(TOOL, {})
    if not isinstance(ours, dict):
        return f"[tool.{TOOL}]"
    if not isinstance(ours.get("wheel", {}), dict):
        return f"[tool.{TOOL}.wheel]"
    for i, p in enumerate(lock.get("packages", [])):
        tool = (p.get("tool") or {}).get(TOOL, {})
        if not isinstance(tool, dict):
            return f"packages[{i}].tool.{TOOL}"
    return None


def locked_state(path: Path, *, option: str | None = None, recipe_name: str | None = None) -> LockedState:
    """``recipe_name``: the lock must be readable for that recipe (:func:`check_locked`)."""
    lock = read_lock(path, option=option)
    parts = locked_state_from_dict(lock)
    if recipe_name is not None:
        check_locked(lock, path, recipe_name, parts["commits"])
    return LockedState(path=path.resolve(), sha256=sha256_file(path), **parts)


def diff_against(locked: LockedState, lock: Mapping[str, Any]) -> list[str]:
    """Every way ``lock`` (just built) differs from what ``--locked`` demanded."""
    new = locked_state_from_dict(lock)
    problems: list[str] = []
    for name in sorted(set(locked.packages) | set(new["packages"])):
        want, got = locked.packages.get(name), new["packages"].get(name)
        if want is None:
            problems.append(f"{name} {got} is installed but not in the lock")
        elif got is None:
            problems.append(f"{name} {want} is in the lock but not installed")
        elif want != got:
            problems.append(f"{name}: lock says {want}, installed {got}")
    # an index-scope lock (locks/<recipe>.pylock.toml) names no fork commits: the recipe pins those
    for fork in sorted(set(locked.commits) | (set(new["commits"]) if locked.commits else set())):
        want, got = locked.commits.get(fork), new["commits"].get(fork)
        if want != got:
            problems.append(f"fork {fork}: lock says commit {want}, stack has {got}")
    for fork in sorted(locked.submodules):
        want, got = dict(locked.submodules[fork]), dict(new["submodules"].get(fork) or {})
        for sub in sorted(set(want) | set(got)):
            if want.get(sub) != got.get(sub):
                problems.append(f"fork {fork} submodule {sub}: lock says commit {want.get(sub)}, stack has {got.get(sub)}")
    for name in sorted(set(locked.system) | set(new["system"]) if locked.system else ()):
        want, got = locked.system.get(name), new["system"].get(name)
        if want != got:
            problems.append(f"{name} from the system interpreter: lock says {want or 'none'}, stack has {got or 'none'}")
    if locked.wheel_sha256 and locked.wheel_sha256 != new["wheel_sha256"]:
        problems.append(f"base wheel: lock says sha256 {locked.wheel_sha256}, stack has {new['wheel_sha256']}")
    return problems


def locked_state_from_dict(lock: Mapping[str, Any]) -> dict[str, Any]:
    commits: dict[str, str] = {}
    packages: dict[str, str] = {}
    hashes: dict[str, tuple[str, ...]] = {}
    for p in lock.get("packages", []):
        fork = p.get("tool", {}).get(TOOL, {}).get("fork")
        if fork and "vcs" in p:
            commits[fork] = p["vcs"]["commit-id"]
        elif "version" in p:
            name = str(canonicalize_name(p["name"]))
            packages[name] = str(p["version"])
            files = [*(p.get("wheels") or []), *([p["sdist"]] if isinstance(p.get("sdist"), dict) else [])]
            shas = tuple(f["hashes"]["sha256"] for f in files if "sha256" in f.get("hashes", {}))
            if shas:
                hashes[name] = shas
    tool = lock.get("tool", {}).get(TOOL, {})
    wheel = tool.get("wheel") or {}
    submodules = {str(n): {str(k): str(v) for k, v in (f.get("submodules") or {}).items()}
                  for n, f in (tool.get("forks") or {}).items() if isinstance(f, dict) and f.get("submodules")}
    system = tool.get("system") if isinstance(tool.get("system"), dict) else {}
    outside = {str(canonicalize_name(k)): str(v) for k, v in (system.get("packages") or {}).items()}
    return {"commits": commits, "packages": packages, "hashes": hashes, "wheel_sha256": wheel.get("sha256"),
            "submodules": submodules, "system": outside}


# the [tool.october] format-version this tool reads, by the lock's scope (a stack's own lock; a recipe's
# committed index lock, locks/<recipe>.pylock.toml)
FORMAT_VERSIONS = {"stack": 1, "index": 2}


def check_locked(lock: Mapping[str, Any], path: Path, recipe_name: str, ids: Mapping[str, str]) -> None:
    """What ``--locked`` would otherwise half-read: a lock of a newer format (its new parts unread), another
    recipe's lock, a fork entry whose ``commit`` is not its package's ``commit-id`` (``ids``: fork -> that id,
    as :func:`locked_state_from_dict` reads them; a hand edit: which of the two would the run install?).
    :class:`LockError` naming the file and the part."""
    tool = lock.get("tool", {}).get(TOOL, {})
    scope = str(tool.get("scope") or "stack")
    known, version = FORMAT_VERSIONS.get(scope), tool.get("format-version", 1)    # none: a lock made by hand
    if known is None or not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= known:
        raise LockError(f"the lock {path} is of a format this october does not read",
                        expected=f"[tool.{TOOL}] scope = one of {sorted(FORMAT_VERSIONS)} with format-version 1 to "
                                 f"{known or max(FORMAT_VERSIONS.values())}",
                        found=f"scope {scope!r}, format-version {version!r}",
                        fix="use the october that wrote it, or re-create the lock without --locked")
    name = (tool.get("recipe") or {}).get("name") if isinstance(tool.get("recipe"), dict) else None
    if name is not None and name != recipe_name:
        raise LockError(f"the lock {path} was written for recipe {name}, not {recipe_name}",
                        expected=f"a lock of recipe {recipe_name} ([tool.{TOOL}.recipe] name)", found=repr(name),
                        fix=f"pass --recipe {name} to install that lock, or the lock of {recipe_name}")
    for fork, entry in sorted((tool.get("forks") or {}).items()):
        said = entry.get("commit") if isinstance(entry, dict) else None
        if said is not None and fork in ids and said != ids[fork]:
            raise LockError(f"the lock {path} contradicts itself for fork {fork}",
                            expected=f"[tool.{TOOL}.forks.{fork}] commit = the package's vcs commit-id {ids[fork]}",
                            found=str(said), fix=f"restore {path} (a stack's own is written again by a run "
                                                 "without --locked)")

