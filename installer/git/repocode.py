"""What a clone's own git files make git run or read beyond its tracked files: a filter driver in its config
(``filter.<name>.clean``/``smudge``/``process``: a program git runs on ``git status`` and checkout, whose output
git compares in place of the file, so it can hide an edit), an ``[include]`` of another config file, a
``core.worktree`` that is another folder (git then compares that one), and attributes of its own
(``.git/info/attributes``, which can put any file under such a filter).  A clone the tool
made has none of them: each is a local change (no stash takes it), and every filter named there is turned off
for the tool's own git commands (command-scope config outranks the repository's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..core.version import common_dir, git_dir
from .config import config_items
from .hidden import Hidden

FILTER_KEYS = ("clean", "smudge", "process")


class RepoCode(Hidden):
    """One entry of :func:`repo_code`: a clone file no stash takes (the fix moves the clone aside)."""


def _attributes(gd: Path) -> list[str]:
    try:
        text = (common_dir(gd) / "info" / "attributes").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _one(work: Path, shown: str) -> tuple[list[str], set[str]]:
    gd = git_dir(work)
    if gd is None:
        return [], set()
    found: list[str] = []
    names: set[str] = set()
    config = common_dir(gd) / "config"
    for key, value in config_items(gd):
        section, _, rest = key.partition(".")
        name, _, option = rest.rpartition(".")
        if section == "filter" and name:
            names.add(name)
            if option in FILTER_KEYS:
                found.append(f'{config} [filter "{name}"] {option} (a program git runs on status and checkout)')
        elif section in ("include", "includeif"):
            found.append(f"{config} [{section}{' ' + repr(name) if name else ''}] {option} (another config file git reads)")
        elif key in ("core.worktree", "core.bare") and not _own_tree(gd, work, key, value):
            found.append(f"{config} {key} = {value} (git then compares another folder than {work})")
    lines = _attributes(gd)
    if lines:
        found.append(f"{common_dir(gd) / 'info' / 'attributes'} ({len(lines)} line(s) of attributes of "
                     f"{shown or 'the clone'}'s own)")
        names |= {tok.partition("=")[2] for ln in lines for tok in ln.split()[1:] if tok.startswith("filter=")}
    return [RepoCode(f) for f in found], {n for n in names if n}


def _own_tree(gd: Path, work: Path, key: str, value: str) -> bool:
    """Whether ``core.worktree`` (resolved as git does, against the git directory) is the checkout itself, or
    ``core.bare`` is false: a submodule's git directory names its work tree so."""
    if key == "core.bare":
        return value.lower() in ("false", "no", "off", "0")
    try:
        return (gd / value).resolve() == work.resolve()
    except OSError:
        return False


def includes(found: Iterable[str]) -> bool:
    """Whether an entry of :func:`repo_code` is an ``[include]``: the filters of a file git includes are
    unknown here, so no git command that may run one is started."""
    return any("(another config file git reads)" in f for f in found)


def repo_code(root: Path, submodules: Iterable[str] = ()) -> tuple[list[str], set[str]]:
    """(an entry per thing the clone at ``root`` and its checked-out ``submodules`` make git run or read, the
    filter driver names they set or use)."""
    found, names = _one(root, "")
    for sub in sorted(set(submodules)):
        more, more_names = _one(root / sub, sub)
        found += more
        names |= more_names
    return found, names


def filters_off(names: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Command-scope config that turns each named filter driver off (an empty command is no filter; not
    required, so git does not stop for want of one)."""
    return tuple((f"filter.{n}.{k}", v) for n in sorted(set(names))
                 for k, v in (*((key, "") for key in FILTER_KEYS), ("required", "false")))
