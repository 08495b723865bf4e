"""One `current smoke` per stack, per GPU and per output directory at a time: a second is refused at once,
naming the holder.

Two engines on one GPU fail late and obscurely (out of GPU memory after minutes of model
loading), and the page runs the AWQ and FP16 selections one after the other.  Each lock
is an exclusive ``flock`` on a file holding the holder's pid and command line:
``STACK/.october-smoke.lock`` for the stack, and ``october-smoke-gpu-<device>.lock`` in
``$OCTOBER_LOCK_DIR`` (default: the system temp dir) for the GPU, ``<device>`` being the
first entry of ``CUDA_VISIBLE_DEVICES`` (``0`` when unset).  A ``--device cpu`` run takes
only the stack lock.  The kernel drops a lock when its holder dies, so a crash never leaves
one behind.  The output directory has its own (:func:`output_lock`, ``OUTPUT/.october-smoke-output.lock``),
taken first: two runs of two stacks into one ``--output`` read each other's ``stack-info.json`` and
receipt, and a broken stack's receipt said passed.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Mapping

from ..core.errors import SmokeBusyError
from ..core.stackmutex import flock_now


def gpu_key(env: Mapping[str, str]) -> str:
    first = (env.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", first)


def lock_paths(install: Path, device: str, env: Mapping[str, str]) -> list[tuple[str, Path, str]]:
    """(what each lock guards, its file, the option that moves it)."""
    paths = [(f"the stack {install}", install / ".october-smoke.lock", "--install (the stack)")]
    if device != "cpu":
        base = Path(env.get("OCTOBER_LOCK_DIR") or tempfile.gettempdir())
        key = gpu_key(env)
        paths.append((f"GPU {key}", base / f"october-smoke-gpu-{key}.lock", "$OCTOBER_LOCK_DIR"))
    return paths


def _take(what: str, path: Path, option: str) -> int:
    """An exclusive flock on ``path`` (``what`` it guards; ``option``: how the user moves it) -> its descriptor."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        flock_now(fd, path, f"one `current smoke` at a time on {what}", option)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip().splitlines() or ["unknown"]
        os.close(fd)
        pid, cmd = holder[0], " ".join(holder[1:2]) or "?"
        raise SmokeBusyError(f"another `current smoke` is running on {what}",
                             expected="no other smoke run on this stack, GPU or output directory",
                             found=f"pid {pid} ({cmd}) holds {path}",
                             fix=f"wait for pid {pid} to finish (the selections run one after the other), "
                                 f"or stop it (kill {pid}) and re-run") from None
    except BaseException:
        os.close(fd)
        raise
    record = f"{os.getpid()}\n{' '.join(sys.argv)}\n".encode()
    os.pwrite(fd, record, 0)
    os.ftruncate(fd, len(record))
    return fd


class output_lock:      # noqa: N801 - used as a context manager, like a function
    """The output directory's lock (made if missing), held while a run reads and writes its files there."""

    NAME = ".october-smoke-output.lock"

    def __init__(self, output: Path) -> None:
        self.path = output / self.NAME
        self._fd: int | None = None

    def __enter__(self) -> "output_lock":
        self._fd = _take(f"the output directory {self.path.parent}", self.path, "--output")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            _release(self._fd)


class SmokeMutex:
    """Holds every lock of :func:`lock_paths` (all or none) while the smoke runs."""

    def __init__(self, install: Path, device: str, env: Mapping[str, str]) -> None:
        self.paths = lock_paths(install, device, env)
        self._stack = ExitStack()

    def __enter__(self) -> "SmokeMutex":
        with ExitStack() as taking:
            for what, path, option in self.paths:
                taking.callback(_release, _take(what, path, option))
            self._stack = taking.pop_all()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stack.close()


def _release(fd: int) -> None:
    os.ftruncate(fd, 0)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
