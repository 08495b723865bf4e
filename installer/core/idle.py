"""Imports a run will make later, made while the main thread only waits for a child process.

A second stack is mostly waiting: on ``git`` in the fetch, on probes in the stack's Python, on ``uv pip
compile`` in the lock.  The modules its later steps import where they are used (lazily, so that a no-op
re-run never pays for them: jsonschema for the receipt, the guards, the lock's readers) are imported in that
time instead, one module between two looks at the child, so a wait that ends is noticed within one import.

Only the main thread imports here: an import in another thread could wait for ever on a module lock that a
Ctrl-C in the middle of the main thread's own import left held (:class:`~october.installer.pipeline.plan.
CloneSettler` says how that was found).  A module that fails to import here is left out of ``sys.modules``
as Python leaves it: the import where it is used raises the error, as it would have.  Nothing is queued on
a no-op re-run (:func:`october.installer.engine.run_pipeline` queues only when a step runs)."""

from __future__ import annotations

import importlib
import math
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future

_queued: deque[str] = deque()


def later(modules: Iterable[str]) -> None:
    """Queue ``modules`` (dotted names, in the order they will be needed) for the next waits."""
    _queued.extend(name for name in modules if name not in sys.modules and name not in _queued)


def pending() -> list[str]:
    """What is queued and not imported yet."""
    return [name for name in _queued if name not in sys.modules]


def forget() -> None:
    """Drop what is queued (the run is over: nothing of it is needed any more)."""
    _queued.clear()


GRACE_S = 0.02      # git's looks and most checkouts end within it: an import would outlast them


def while_waiting(wait: Callable[[float], bool]) -> int:
    """Import queued modules, one at a time, while what ``wait`` waits for goes on (``wait(t)``: wait at most
    ``t`` seconds, -> whether it has ended), once it has gone on for :data:`GRACE_S`; main thread only.
    -> how many were imported here."""
    if not _ready() or wait(GRACE_S):
        return 0
    imported = 0
    while _queued and not wait(0):
        name = _queued.popleft()
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
            imported += 1
        except Exception:  # noqa: BLE001, S112 - raised again where the module is used, as it would have been
            continue
    return imported


def wait_event(done: threading.Event, timeout: float | None, slice_s: float) -> bool:
    """Wait for ``done`` (a thread's end: never ``Thread.join``, which a signal handler's exception leaves marking a
    running thread stopped on CPython 3.11) at most ``timeout`` s, in slices of ``slice_s`` so that a signal is
    handled, importing what is queued meanwhile (:func:`while_waiting`); -> whether it was set."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while_waiting(done.wait)
    while not done.wait(slice_s):
        if deadline is not None and time.monotonic() >= deadline:
            return False
    return True


def while_futures(jobs: Iterable[Future[Any]]) -> int:
    """:func:`while_waiting` for a thread pool's jobs (the preflight's probes, the system torch's): imports while
    any is running, returning when all are done or nothing is left to import (the caller then waits on each job's
    result); main thread only."""
    from concurrent.futures import wait     # not on a no-op re-run, which starts no pool

    pending = list(jobs)
    return while_waiting(lambda seconds: not wait(pending, timeout=seconds).not_done)


def while_child(proc: subprocess.Popen[Any], *streams: IO[Any]) -> int:
    """:func:`while_waiting` for a child, woken the moment it exits (a pidfd) or writes to one of ``streams`` (its
    output pipes): output waiting is read at once, so a child's progress is never held back by an import and a
    child that fills its pipe does not wait on us; ``poll``, not ``select``, so a process holding more than 1023
    descriptors is not refused (the review of this change).  Without a pidfd, ``Popen.wait``'s polling."""
    if not _ready():
        return 0
    poller = select.poll()
    try:
        fd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        fd = None
    for watched in ([fd] if fd is not None else []) + [s.fileno() for s in streams]:
        poller.register(watched, select.POLLIN)

    def wait(seconds: float) -> bool:
        if proc.poll() is not None:
            return True
        if fd is not None or streams:
            return bool(poller.poll(math.ceil(seconds * 1000))) or proc.poll() is not None
        try:
            proc.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    try:
        return while_waiting(wait)
    finally:
        if fd is not None:
            os.close(fd)


def _ready() -> bool:
    return bool(_queued) and threading.current_thread() is threading.main_thread()
