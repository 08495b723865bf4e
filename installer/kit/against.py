"""A kit checked against the recipe and the lock it is used with, not only against its own manifest.

``kit.json``'s file table proves only that the files are the ones it names; here the forks must be
the recipe's at their ``forks.toml`` pins, the target (Python, arch, torch) the recipe's, and every
wheel the lock's file with the lock's sha256 (build requirements, which no lock names, excepted).
The lock is ``--locked``'s, else ``locks/<recipe>.pylock.toml``; with neither, the wheels are held to
the manifest only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ..core.errors import one_line
from ..core.paths import inside
from ..core.resources import locks_dir
from . import url_key
from .wheels import wants_in
from ..lock.pylock import TOOL, read_lock
from ..recipe import Recipe


def committed_lock(recipe: Recipe) -> Path | None:
    """``locks/<recipe>.pylock.toml`` when the project commits one."""
    p = inside(locks_dir(), f"{recipe.name}.pylock.toml")
    return p if p.is_file() else None


def kit_problems(doc: Mapping[str, Any], recipe: Recipe, lock: Path | None) -> list[str]:
    """Every way the kit's manifest ``doc`` disagrees with ``recipe`` and ``lock`` (empty: none), each
    one bounded line (a changed kit.json may hold any text)."""
    found = [*fork_problems(doc, recipe), *target_problems(doc, recipe), *wheel_problems(doc, recipe, lock)]
    return [one_line(p, 400) for p in found]


def fork_problems(doc: Mapping[str, Any], recipe: Recipe) -> list[str]:
    problems: list[str] = []
    have: Mapping[str, str] = doc["forks"]
    for fork in recipe.forks:
        got, pin = have.get(fork.name), fork.pin
        if got is None:
            problems.append(f"fork {fork.name}: not in the kit")
            continue
        copies = [r for r in doc["repos"] if r["key"] == url_key(fork.fetch_url)]
        if not pin.is_prefix and got != pin.commit:
            problems.append(f"fork {fork.name}: the kit has commit {got}, the recipe pins {pin.commit}")
        elif pin.is_prefix and not got.startswith(pin.commit):
            problems.append(f"fork {fork.name}: the kit has commit {got}, the recipe pins {pin.commit}... "
                            f"on {pin.branch}")
        elif pin.is_prefix and not any(r["branches"].get(str(pin.branch)) == got for r in copies):
            problems.append(f"fork {fork.name}: the kit's copy does not record {got} on branch {pin.branch}")
        elif not any(got in r["commits"] for r in copies):
            problems.append(f"fork {fork.name}: commit {got} is not in the kit's copy of {url_key(fork.fetch_url)}")
    for extra in sorted(set(have) - {f.name for f in recipe.forks}):
        problems.append(f"fork {extra}: in the kit, not in the recipe")
    return problems


def target_problems(doc: Mapping[str, Any], recipe: Recipe) -> list[str]:
    problems: list[str] = []
    target, torch = doc["target"], doc["torch"]
    if target["python"] != recipe.python:
        problems.append(f"target: the kit's wheels are for Python {target['python']}, the recipe's is {recipe.python}")
    if target["arch"] != recipe.preflight.arch:
        problems.append(f"target: the kit's wheels are for {target['arch']}, the recipe's arch is "
                        f"{recipe.preflight.arch}")
    if torch["requirement"] != recipe.torch.requirement:
        problems.append(f"torch: the kit is for {torch['requirement']}, the recipe pins {recipe.torch.requirement}")
    elif torch["from_system"] and not recipe.torch.from_system:
        problems.append(f"torch: the kit has no torch wheel (made for a system torch), the recipe installs "
                        f"{recipe.torch.requirement} itself")
    return problems


def wheel_problems(doc: Mapping[str, Any], recipe: Recipe, lock: Path | None) -> list[str]:
    problems: list[str] = []
    files: Mapping[str, Mapping[str, Any]] = doc["files"]
    listed = {w["filename"]: w for w in doc["wheels"]}
    for name, entry in sorted(listed.items()):
        if files.get(f"wheels/{name}", {}).get("sha256") != entry["sha256"]:
            problems.append(f"wheels/{name}: kit.json lists sha256 {entry['sha256']}, its file table another")
    lock_doc = read_lock(lock) if lock is not None else None
    base = doc["base_wheel"]
    if base is not None:
        problems += _base_problems(base, files, recipe, lock_doc)
    if lock is None:
        return problems + [f"wheels/{rel[7:]}: not listed among the kit's wheels" for rel in sorted(files)
                           if rel.startswith("wheels/") and rel[7:] not in listed
                           and rel[7:] != (base or {}).get("filename")]
    # a torch the system gives need not be in the kit; one that is must still be the lock's
    optional = {"torch"} if recipe.torch.from_system or doc["torch"]["from_system"] else set()
    wanted: set[str] = set()
    # (package, file) of each wheel left out: the node checks its interpreter has that package at that version
    left_out = {(str(canonicalize_name(str(d.get("package")))), str(d.get("filename")))
                for d in doc.get("left_out") or [] if isinstance(d, Mapping)}
    assert lock_doc is not None
    for want in wants_in(lock_doc, lock.parent, recipe):
        wanted.add(want.filename)
        got = files.get(f"wheels/{want.filename}", {}).get("sha256")
        if got is None:
            # one the kit left out as the target has it (--have; the node checks its interpreter has it)
            if want.package not in optional and (str(canonicalize_name(want.package)), want.filename) not in left_out:
                problems.append(f"wheels/{want.filename}: the lock's file for {want.package} is not in the kit")
        elif want.sha256 is None:
            problems.append(f"wheels/{want.filename}: the lock {lock.name} names no sha256 to check it by")
        elif got != want.sha256:
            problems.append(f"wheels/{want.filename}: sha256 {got}, the lock {lock.name} says {want.sha256}")
    pinned = {str(canonicalize_name(str(p.get("name", "")))) for p in lock_doc.get("packages", [])}
    for rel in sorted(files):
        name = rel[len("wheels/"):]
        if not rel.startswith("wheels/") or name in wanted or name == (base or {}).get("filename"):
            continue
        if listed.get(name, {}).get("role") != "build":
            problems.append(f"wheels/{name}: not a file the lock {lock.name} names")
        elif (package := _wheel_package(name)) in pinned:     # --find-links offers it to the env's resolution too
            problems.append(f"wheels/{name}: a build requirement of {package}, which the lock "
                            f"{lock.name} pins to another file (the env could take it; a kit made before its build "
                            "requirements were resolved to the lock's versions: make it again)")
    return problems


def lock_pins(lock: Path) -> dict[str, str]:
    """name -> version of every package the lock pins (canonical names)."""
    return {str(canonicalize_name(str(p["name"]))): str(p["version"]) for p in read_lock(lock).get("packages", [])
            if isinstance(p, Mapping) and p.get("name") and p.get("version")}


def _wheel_package(filename: str) -> str:
    try:
        return str(parse_wheel_filename(filename)[0])
    except InvalidWheelFilename:
        return filename.split("-", 1)[0].lower()


def _base_problems(base: Mapping[str, Any], files: Mapping[str, Mapping[str, Any]], recipe: Recipe,
                   lock_doc: Mapping[str, Any] | None) -> list[str]:
    name = base["filename"]
    problems = []
    if files.get(f"wheels/{name}", {}).get("sha256") != base["sha256"]:
        problems.append(f"wheels/{name}: the base wheel's sha256 in kit.json is not its file table's")
    if recipe.wheel is None:
        return problems + [f"wheels/{name}: a base wheel, and the recipe has no [wheel]"]
    pinned = recipe.wheel.sha256 or ((lock_doc or {}).get("tool", {}).get(TOOL, {}).get("wheel") or {}).get("sha256")
    if name != recipe.wheel.filename:
        problems.append(f"wheels/{name}: the recipe's base wheel is {recipe.wheel.filename}")
    elif pinned and base["sha256"] != pinned:
        problems.append(f"wheels/{name}: sha256 {base['sha256']}, the recipe (or lock) pins {pinned}")
    return problems
