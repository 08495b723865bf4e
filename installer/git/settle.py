"""A clone's indexes rewritten once no entry is racily clean, so later no-op checks do not hash its files again.

Git records a file's stat data in the index; an entry written in the index's own timestamp tick stays "racily
clean" and is hashed again by every ``git status``.  One ``git status`` a tick later records them clean
(:class:`october.installer.pipeline.plan.CloneSettler` runs it in the background).
"""

from __future__ import annotations

from pathlib import Path

from ..core.runner import Runner
from . import git_env


COARSE_MARGIN_S = 1.0      # whole-second timestamps (ext3, some network filesystems)


FINE_MARGIN_S = 0.25       # sub-second ones; the H200's clock ticks every 100 ms


def index_files(path: Path) -> list[Path]:
    """The clone's index and that of every (nested) submodule git directory under ``.git/modules``."""
    dot_git = path / ".git"
    if not dot_git.is_dir():
        return []
    found = [dot_git / "index"]
    todo = [dot_git / "modules"]
    while todo:
        here = todo.pop()
        try:
            children = sorted(c for c in here.iterdir() if c.is_dir())
        except OSError:
            continue
        for child in children:
            if (child / "HEAD").is_file():
                found.append(child / "index")
                todo.append(child / "modules")
            else:
                todo.append(child)
    return found


def settle_wait(path: Path) -> float | None:
    """Seconds until every index of the clone is one timestamp tick old, so a rewrite leaves no racily
    clean entry; 0.0 when it is now; None without an index."""
    import time

    waits = []
    for index in index_files(path):
        try:
            st = index.stat()
        except OSError:
            continue
        margin = COARSE_MARGIN_S if st.st_mtime_ns % 1_000_000_000 == 0 else FINE_MARGIN_S   # whole seconds?
        # clamped: an index from the future (a server clock ahead, a clock set back) waits no longer
        waits.append(min(margin, max(0.0, margin - (time.time() - st.st_mtime_ns / 1e9))))
    return max(waits) if waits else None


def settle_index(runner: Runner, step: str, path: Path, *, wait: bool = False) -> bool:
    """Rewrite the clone's (and submodules') indexes with one ``git status`` so entries written in the
    index's own timestamp tick ("racily clean", hashed again by every later no-op check) are recorded
    clean.  False (nothing run) while an index is too new, unless ``wait``: then sleep the rest first."""
    import time

    left = settle_wait(path)
    if left is None:
        return False
    if left > 0:
        if not wait:
            return False
        time.sleep(left)
    # -uno: the rewrite needs the tracked files only; no walk for untracked ones
    runner.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no", "--ignore-submodules=none"],
               step=step, env=git_env(), check=False)
    return True
