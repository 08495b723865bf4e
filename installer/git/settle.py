"""A clone's indexes rewritten once no entry is racily clean, so later no-op checks do not hash its files again.

Git records a file's stat data in the index; an entry written in the index's own timestamp tick stays "racily
clean" and is hashed again by every ``git status``.  One ``git status`` a tick later records them clean
(:class:`october.installer.pipeline.plan.CloneSettler` runs it in the background).  A clone this run has just
checked out has its files set back instead (:func:`age_checkout`), so the fetch's own clean check records them.
"""

from __future__ import annotations

from pathlib import Path

from ..core.runner import Runner
from . import git_env


COARSE_MARGIN_S = 1.0      # whole-second timestamps (ext3, some network filesystems)


FINE_MARGIN_S = 0.25       # sub-second ones; the H200's clock ticks every 100 ms


AGE_S = 2                  # whole seconds a new checkout's files are set back: older than any index written now


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


def age_checkout(path: Path) -> int:
    """Set the times of every file of a clone this run has just made (its submodules' too; nothing in a git
    directory) :data:`AGE_S` whole seconds back -> how many.  Checked out in the tick its index was written in,
    each entry is racily clean, and every ``git status`` until an index is rewritten a tick later hashes each file
    again: the install and lock steps' looks at FlashInfer's clone, 0.15-0.3 s each (the H100, git without
    nanosecond stat data).  Set back, the fetch's clean check that follows (a ``git status`` that may rewrite the
    indexes: :func:`october.installer.git.clonecheck.dirty_entries`) sees every file's stat data changed, compares
    each one's bytes with the index, and records them clean; any later write stamps the present time, not these.
    Only for a clone whose files are all this run's: a user's files keep their times.  For speed only: a file whose
    times cannot be set (a filesystem that refuses it, an immutable file) keeps them, and is hashed by those looks.
    What it costs: the clean check records each file's ctime in the second it runs in, so until that second ends a
    same-size edit with its mtime put back to the stamp looks unchanged to ``git status`` (git compares whole
    seconds); ``current verify`` (exact) hashes every file and sees it."""
    import os
    import time

    stamp = (int(time.time()) - AGE_S) * 1_000_000_000
    aged = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            if name == ".git":      # a submodule's gitfile is the superproject's, untracked
                continue
            try:
                os.utime(os.path.join(root, name), ns=(stamp, stamp), follow_symlinks=False)
                aged += 1
            except OSError:
                continue
    return aged
