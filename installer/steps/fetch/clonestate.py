"""Read-only looks at a working clone: HEAD, local changes, submodule states, the full check.

Everything here reads through GitPython (never through the runner: nothing is written).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import git

MAX_LISTED = 10


@dataclass(frozen=True)
class SubmoduleState:
    flag: str        # " " at the recorded commit, "+" another commit, "-" not initialized, "U" conflict
    commit: str
    path: str


def _open(path: Path) -> git.Repo:
    return git.Repo(path, search_parent_directories=False)


def head_commit(path: Path) -> str | None:
    """The commit HEAD points at, or None when ``path`` is not a clone or HEAD is unborn."""
    try:
        with _open(path) as repo:
            return str(repo.git.rev_parse("--verify", "HEAD^{commit}")).strip()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError):
        return None


def dirty_entries(path: Path) -> list[str]:
    """Every change, untracked file and submodule difference (`git status --porcelain`)."""
    with _open(path) as repo, repo.git.custom_environment(GIT_OPTIONAL_LOCKS="0"):
        # GIT_OPTIONAL_LOCKS=0: a read-only look must not refresh (rewrite) the index
        out = repo.git.status("--porcelain", "--ignore-submodules=none", "--untracked-files=all")
    return [ln for ln in out.splitlines() if ln.strip()]


def submodule_states(path: Path) -> list[SubmoduleState]:
    """``git submodule status --recursive``, parsed."""
    with _open(path) as repo, repo.git.custom_environment(GIT_OPTIONAL_LOCKS="0"):
        out = repo.git.submodule("status", "--recursive")
    states: list[SubmoduleState] = []
    for line in out.splitlines():
        if not line.strip():
            continue
        flag, rest = line[0], line[1:]
        commit, _, where = rest.partition(" ")
        if where.endswith(")") and " (" in where:
            where = where.rsplit(" (", 1)[0]
        states.append(SubmoduleState(flag=flag, commit=commit, path=where))
    return states


def check_clone(path: Path, commit: str, *, allow_dirty: bool,
                submodules: Mapping[str, str] | None = None,
                submodule_paths: Sequence[str] | None = None) -> str | None:
    """None when the clone at ``path`` is at ``commit`` (and clean, and its (selected)
    submodules at the recorded commits); otherwise the reason it is not."""
    try:
        return _check_clone(path, commit, allow_dirty=allow_dirty, submodules=submodules,
                            selection=submodule_paths)
    except git.GitCommandError as exc:
        return f"git cannot inspect {path} ({_stderr(exc)})"


def _stderr(exc: git.GitCommandError) -> str:
    text = str(exc.stderr or "").strip().strip("'").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {exc.status}"


def _check_clone(path: Path, commit: str, *, allow_dirty: bool,
                 submodules: Mapping[str, str] | None, selection: Sequence[str] | None = None) -> str | None:
    head = head_commit(path)
    if head is None:
        return f"{path} is not a git clone"
    if head != commit:
        return f"{path} is at {head}, not {commit}"
    if not allow_dirty:
        dirty = dirty_entries(path)
        if dirty:
            return f"{path} has local changes ({listed(dirty)})"
    if submodules is not None:
        now = {s.path: s.commit for s in submodule_states(path) if selected(s.path, selection)}
        off = [s.path for s in submodule_states(path) if selected(s.path, selection) and s.flag != " "]
        if off:
            return f"{path} submodules not at their recorded commits: {', '.join(off)}"
        if now != dict(submodules):
            return f"{path} submodules are {now}, not {dict(submodules)}"
    return None


def listed(items: Sequence[str]) -> str:
    shown = "; ".join(i.strip() for i in items[:MAX_LISTED])
    return shown + (f"; ... {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def selected(path: str, selection: Sequence[str] | None) -> bool:
    """Whether a (recursive) submodule path is one the recipe selected (None: all)."""
    if selection is None:
        return True
    return any(path == p or path.startswith(p + "/") for p in selection)
