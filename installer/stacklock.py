"""One lock per stack: a second concurrent run fails at once, naming the holder."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from installer.errors import StackLockedError


class StackLock:
    """An exclusive ``flock`` on ``STACK/.october.lock``; the file holds the holder's pid."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> "StackLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            if not holder:  # the holder took the lock a moment ago and is writing its pid
                time.sleep(0.1)
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StackLockedError(
                f"the stack {self.path.parent} is being set up by another process",
                expected="no other october_setup on this stack", found=f"pid {holder} holds {self.path}",
                fix=f"wait for pid {holder} to finish, or stop it (kill {holder}) and re-run") from None
        pid = f"{os.getpid()}\n".encode()
        os.pwrite(fd, pid, 0)           # write, then trim: the file is never seen empty while held
        os.ftruncate(fd, len(pid))
        self._fd = fd
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
