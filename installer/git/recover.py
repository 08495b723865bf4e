"""What a killed fetch leaves in a clone, found and undone on the next run.

The fetch step changes a clone in many git commands (checkout, ``submodule init/sync``, the
submodule's own clone and checkout, ``config``).  A SIGKILL can land inside any of them.
Two rules make every such state recoverable by a plain re-run:

- **A marker says the changes are ours.**  Before the step changes a clone that was clean (or
  a new one), it writes ``<git dir>/october-fetch-incomplete`` with the target commit; it removes
  it only once the clone passed every check.  A clone that still has the marker was left by a
  killed run: its differences (a half-done checkout, a submodule at its old commit, stale
  ``*.lock`` files) are the step's own, so the next run resets them instead of refusing them as
  local changes.  A clone without the marker was finished and checked: its changes are the
  user's and are refused as before.
- **A submodule repository git cannot use is made again.**  A submodule whose git directory is
  missing, half-made, or has no commit checked out (``Unable to find current revision``) holds
  nothing but what the killed clone wrote: it is removed and cloned again from the local mirror.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import git

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
    """Remove ``*.lock`` files and partial packs a killed git left in the clone's git
    directories (only called on a clone marked incomplete: no other git is working there)."""
    return [str(gd / p) for gd in git_dirs(repo) for p in remove_partial_objects(gd)]


def usable_head(repo: Path) -> str | None:
    """The commit checked out in the repository whose work tree is exactly ``repo``, or None
    (no ``.git``, a ``.git`` pointing nowhere, an unborn HEAD, a git dir git cannot read)."""
    if not (repo / ".git").exists():
        return None
    try:
        with git.Repo(repo, search_parent_directories=False) as r:
            top = r.working_tree_dir
            if top is None or Path(top).resolve() != repo.resolve():
                return None
            return str(r.git.rev_parse("--verify", "HEAD^{commit}")).strip()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError, OSError, ValueError):
        return None


def _git_dir_usable(gd: Path) -> bool:
    try:
        with git.Repo(gd, search_parent_directories=False) as r:
            r.git.rev_parse("--verify", "HEAD^{commit}")
        return True
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError, OSError, ValueError):
        return False


def _empty(path: Path) -> None:
    """Remove everything in ``path`` (a submodule's work tree), keep ``path`` itself."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    for p in path.iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def reset_broken_submodule(super_dir: Path, name: str, sub_dir: Path, *, incomplete: bool) -> str | None:
    """Make the submodule ``name`` at ``sub_dir`` cloneable again when a killed run left it
    unusable; return what was removed (for the log), or None when nothing had to be.

    - its work tree has a ``.git`` but no usable repository behind it: the git directory and
      the work tree are removed (git wrote both; nothing there was ever checked out whole);
    - no ``.git`` in the work tree, but a git directory under ``modules/`` git cannot use:
      that git directory is removed (``submodule update`` would otherwise try to reuse it);
    - no ``.git`` and files in the work tree of a clone marked ``incomplete``: a checkout
      was cut before git wrote the ``.git`` file; the files are removed.
    """
    super_gd = git_dir(super_dir)
    kept = super_gd / "modules" / name if super_gd is not None else None
    if (sub_dir / ".git").exists() or sub_dir.is_symlink():
        if usable_head(sub_dir) is not None:
            return None
        gd = git_dir(sub_dir)
        for d in {p for p in (gd, kept) if p is not None and p.is_dir()}:
            shutil.rmtree(d)
        _empty(sub_dir)
        return f"{sub_dir} (a submodule repository with no usable commit) and its git directory"
    if kept is not None and kept.is_dir() and not _git_dir_usable(kept):
        shutil.rmtree(kept)
        return f"{kept} (a half-made submodule git directory)"
    if incomplete and sub_dir.is_dir() and any(sub_dir.iterdir()):
        _empty(sub_dir)
        return f"the files in {sub_dir} (a submodule checkout cut before its .git was written)"
    return None
