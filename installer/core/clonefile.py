"""Copy a file into a stack without sharing its bytes with the source: a reflink where the
filesystem has them (btrfs, XFS: own inode, blocks shared until one side writes), else a plain copy.

Never a hard link: a hard link is one inode, so an edit to the stack's copy would edit the cache
(and every stack linked to it) -- issue 22's poisoned cache.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

FICLONE = 0x40049409        # linux/fs.h: _IOW(0x94, 9, int)


def clone_or_copy(source: Path, dest: Path) -> str:
    """Make ``dest`` (which must not exist) a private copy of ``source``; -> "reflink" or "copy"."""
    try:
        import fcntl
    except ImportError:      # not on POSIX: copy
        shutil.copyfile(source, dest)
        return "copy"
    with open(source, "rb") as src, open(dest, "xb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
            return "reflink"
        except OSError:
            pass                # EOPNOTSUPP / EXDEV / EINVAL / ...: this filesystem cannot; copy
        shutil.copyfileobj(src, dst, 1 << 20)
    os.chmod(dest, os.stat(source).st_mode & 0o777)
    return "copy"


@lru_cache(maxsize=None)
def reflinks_work(directory: Path) -> bool:
    """Whether files in ``directory`` can be reflinked (tried once per directory and process on two
    scratch files there, removed again)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        with tempfile.TemporaryDirectory(dir=directory, prefix=".reflink-probe-") as tmp:
            src, dst = Path(tmp) / "a", Path(tmp) / "b"
            src.write_bytes(b"october reflink probe\n")
            with open(src, "rb") as s, open(dst, "xb") as d:
                fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
        return True
    except OSError:
        return False
