"""One lock per stack: a second concurrent run fails at once, naming the holder.

The mutex is :class:`filelock.FileLock` on ``STACK/.october.lock`` (the same library guards the
shared caches); the holder's pid and command line are written beside it (``.october.lock.pid``) once the lock is
held, so a second run can say who holds it.  A holder that dies releases the lock with its file
descriptor; its stale pid file is simply overwritten by the next holder.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import TracebackType

from filelock import FileLock, Timeout

from october.installer.core.errors import StackLockedError


def holder_file(lock: Path) -> Path:
    return lock.with_name(lock.name + ".pid")


class StackLock:
    """An exclusive, non-blocking :class:`filelock.FileLock` on ``STACK/.october.lock``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: FileLock | None = None

    def _holder(self) -> str:
        for _ in range(10):  # the holder took the lock a moment ago and may still be writing its pid
            try:
                text = holder_file(self.path).read_text(encoding="utf-8").strip()
            except OSError:
                text = ""
            if text:
                return text
            time.sleep(0.05)
        return "unknown"

    def __enter__(self) -> "StackLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.path, timeout=0)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            pid, _, cmd = self._holder().partition("\n")
            holder = f"pid {pid} ({cmd.strip() or 'command unknown'})"
            raise StackLockedError(
                f"the stack {self.path.parent} is being set up by another process",
                expected="no other october_setup on this stack", found=f"{holder} holds {self.path}",
                fix=f"wait for pid {pid} to finish, or stop it (kill {pid}) and re-run") from None
        pid_file = holder_file(self.path)
        tmp = pid_file.with_name(f"{pid_file.name}.{os.getpid()}")
        tmp.write_text(f"{os.getpid()}\n{' '.join(sys.argv)}\n", encoding="utf-8")
        os.replace(tmp, pid_file)       # never seen half-written
        self._lock = lock
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._lock is not None:
            holder_file(self.path).unlink(missing_ok=True)
            self._lock.release()
            self._lock = None
