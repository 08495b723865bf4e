"""One lock per stack: an exclusive ``flock`` on ``STACK/.october.lock``, so a second concurrent run
fails at once, naming the holder (its pid and command line, written beside it in ``.october.lock.pid``).

An ``flock`` belongs to the open file description: a child given the descriptor (:attr:`StackLock.fd`;
the background JIT builder) holds the stack too, even if the run is killed.  So releasing only closes
this process's descriptor, never ``LOCK_UN``.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sys
import time
from pathlib import Path

from .errors import NO_LOCK_ERRNOS, StackLockedError, no_file_locks


def flock_now(fd: int, lock: Path, guards: str, option: str, what: str | None = None) -> None:
    """An exclusive, non-blocking ``flock`` on ``fd`` (the file ``lock``): BlockingIOError while another holds it; a
    filesystem without locks is :func:`~october.installer.core.errors.no_file_locks` (``guards``: what the lock is
    for; ``option``: what moves it; ``what``: the folder as the user named it)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise
    except OSError as exc:
        if exc.errno in NO_LOCK_ERRNOS:
            raise no_file_locks(lock, exc, guards, option, what) from None
        raise


def holder_file(lock: Path) -> Path:
    return lock.with_name(lock.name + ".pid")


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


class StackLock:
    """An exclusive, non-blocking ``flock`` on ``STACK/.october.lock``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def fd(self) -> int:
        """The locked descriptor (close-on-exec), for a child that must hold the stack (``pass_fds``)."""
        assert self._fd is not None, "the stack lock is not held"
        return self._fd

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

    def _busy(self, then: str = "re-run") -> StackLockedError:
        """The error for a stack another process holds; ``then``: what to do once it is free."""
        pid, _, cmd = self._holder().partition("\n")
        holder = f"pid {pid} ({cmd.strip() or 'command unknown'})"
        if _alive(pid):
            return StackLockedError(
                f"the stack {self.path.parent} is being set up by another process",
                expected="no other october_setup on this stack", found=f"{holder} holds {self.path}",
                fix=f"wait for pid {pid} to finish, or stop it (kill {pid}), and {then}")
        return StackLockedError(
            f"the stack {self.path.parent} is still held by a process an earlier run started",
            expected="no other october_setup on this stack, and nothing it started still running",
            found=f"{holder} has ended, but a process it started (the JIT builder) still holds {self.path}",
            fix=f"wait a few seconds and {then}; `fuser -v {shlex.quote(str(self.path))}` names the holder if it stays")

    def require_free(self, then: str) -> None:
        """Raise :meth:`_busy` when a run holds the stack now (a shared lock tried and let go at once: a reader
        such as ``current verify``, which takes nothing and may not be able to write the stack)."""
        try:            # O_NONBLOCK: a FIFO in its place does not hang the open
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return                  # never set up, or not ours to read: nothing holds it that we could see
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._busy(then) from None
        except OSError:
            return                  # no flock here (NFS without lockd, some FUSE mounts): no run could hold it
        finally:
            os.close(fd)

    def __enter__(self) -> "StackLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            flock_now(fd, self.path, "one october_setup per stack at a time", "STACK")
        except BlockingIOError:
            os.close(fd)
            raise self._busy() from None
        except BaseException:
            os.close(fd)
            raise
        pid_file = holder_file(self.path)
        tmp = pid_file.with_name(f"{pid_file.name}.{os.getpid()}")
        try:
            tmp.write_text(f"{os.getpid()}\n{' '.join(sys.argv)}\n", encoding="utf-8")
            os.replace(tmp, pid_file)       # never seen half-written
        except BaseException as exc:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError) and exc.filename is None:   # ENOSPC from write(): name the file
                raise OSError(exc.errno, exc.strerror, str(tmp)) from exc
            raise
        self._fd = fd
        return self

    def __exit__(self, *_: object) -> None:
        if self._fd is not None:
            holder_file(self.path).unlink(missing_ok=True)
            fd, self._fd = self._fd, None
            os.close(fd)        # never LOCK_UN: a child given the descriptor still holds the lock
