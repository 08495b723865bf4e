"""What a killed fetch leaves in a clone, found and undone on the next run.

- A marker (``<git dir>/october-fetch-incomplete``, the target commit) is written before the step changes
  a clean or new clone and removed once it passed every check: a clone still marked holds a killed run's
  changes, which the next run resets; an unmarked clone's changes are the user's and are refused.
- A submodule repository git cannot use (missing, half-made, no commit checked out) holds only what the
  killed clone wrote: it is removed and cloned again from the local mirror.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import git

from ..core.paths import remove
from .diagnose import remove_partial_objects
from .exclude import git_dir

MARKER = "october-fetch-incomplete"


def _marker(repo: Path) -> Path | None:
    gd = git_dir(repo)
    return gd / MARKER if gd is not None else None


def mark_incomplete(repo: Path, commit: str) -> None:
    """Say (atomically) that the fetch step is changing the clone at ``repo`` towards ``commit``."""
    path = _marker(repo)
    if path is None:
        return
    tmp = path.with_name(f"{MARKER}.tmp")
    tmp.write_text(commit + "\n", encoding="utf-8")
    os.replace(tmp, path)


def is_incomplete(repo: Path) -> bool:
    """Whether a run that was changing the clone at ``repo`` did not finish."""
    path = _marker(repo)
    return path is not None and path.is_file()


def mark_complete(repo: Path) -> None:
    path = _marker(repo)
    if path is not None:
        path.unlink(missing_ok=True)


def git_dirs(repo: Path) -> Iterator[Path]:
    """The clone's git directory and every submodule git directory nested in it (``modules/``)."""
    top = git_dir(repo)
    if top is None or not top.is_dir():
        return
    todo = [top]
    while todo:
        gd = todo.pop()
        yield gd
        modules = gd / "modules"
        if not modules.is_dir():
            continue
        for root, dirs, _files in os.walk(modules):
            here = Path(root)
            if (here / "HEAD").exists() or (here / "objects").is_dir():
                todo.append(here)
                dirs[:] = []          # its own modules/ is walked when it is popped


def remove_stale_locks(repo: Path) -> list[str]:
    """Remove ``*.lock`` files and partial packs a killed git left in the clone's git directories
    (only on a clone marked incomplete: no other git is working there)."""
    return [str(gd / p) for gd in git_dirs(repo) for p in remove_partial_objects(gd)]


def _head(path: Path, *, work_tree: Path | None = None) -> str | None:
    """The commit checked out in the repository at ``path`` (whose work tree must be exactly ``work_tree``
    when given), or None (a ``.git`` pointing nowhere, an unborn HEAD, a git dir git cannot read)."""
    try:
        with git.Repo(path, search_parent_directories=False) as r:
            top = r.working_tree_dir
            if work_tree is not None and (top is None or Path(top).resolve() != work_tree.resolve()):
                return None
            return str(r.git.rev_parse("--verify", "HEAD^{commit}")).strip()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError, OSError, ValueError):
        return None


def _empty(path: Path) -> None:
    """Remove everything in ``path`` (a submodule's work tree), keep ``path`` itself."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    for p in path.iterdir():
        remove(p)


def unsafe_submodule(name: str, path: str) -> str | None:
    """Why a submodule of a fork's ``.gitmodules`` may not be handled (its git directory is
    ``.git/modules/<name>``, its work tree ``<path>``): an empty or absolute name or path, or one with a
    ``..`` component (git refuses such names; a stricter rule than git's for absolute ones), else None."""
    for what, value in (("name", name), ("path", path)):
        parts = value.replace("\\", "/").split("/")
        if not value or value.startswith(("/", "\\")) or ".." in parts or any(c in value for c in "\0\n\r"):
            return f"submodule {what} {value!r}"
    return None


def module_dir(super_gd: Path, name: str) -> Path:
    """``<super git dir>/modules/<name>``, which must lie inside ``modules`` (:func:`unsafe_submodule`)."""
    base = super_gd / "modules"
    path = base / name
    if unsafe_submodule(name, "x") is not None or not os.path.normpath(path).startswith(os.path.normpath(base) + os.sep):
        raise ValueError(f"submodule name {name!r} would lead outside {base}")
    return path


def reset_broken_submodule(super_dir: Path, name: str, sub_dir: Path, *, incomplete: bool) -> str | None:
    """Make the submodule ``name`` at ``sub_dir`` cloneable again when a killed run left it unusable;
    return what was removed (for the log), or None.  Removed: a ``.git`` with no usable repository
    behind it (with its work tree: nothing was checked out whole), a ``modules/`` git directory git
    cannot use (``submodule update`` would reuse it), or, in a clone marked ``incomplete``, files a
    checkout cut before its ``.git`` was written."""
    super_gd = git_dir(super_dir)
    kept = module_dir(super_gd, name) if super_gd is not None else None
    if (sub_dir / ".git").exists() or sub_dir.is_symlink():
        if (sub_dir / ".git").exists() and _head(sub_dir, work_tree=sub_dir) is not None:
            return None
        gd = git_dir(sub_dir)
        for d in {p for p in (gd, kept) if p is not None and p.is_dir()}:
            shutil.rmtree(d)
        _empty(sub_dir)
        return f"{sub_dir} (a submodule repository with no usable commit) and its git directory"
    if kept is not None and kept.is_dir() and _head(kept) is None:
        shutil.rmtree(kept)
        return f"{kept} (a half-made submodule git directory)"
    if incomplete and sub_dir.is_dir() and any(sub_dir.iterdir()):
        _empty(sub_dir)
        return f"the files in {sub_dir} (a submodule checkout cut before its .git was written)"
    return None
