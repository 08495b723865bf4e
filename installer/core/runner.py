"""The one gate for external commands: resolved on PATH, echoed, their output teed to
``STACK/logs/<step>.log`` (secrets masked), a non-zero exit a :class:`CommandFailed` naming the step,
command, exit code, last lines and log path."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .cachekey import without_key
from .errors import DISK_FULL_FIX, CommandFailed, DiskFullError, ToolMissing, says_disk_full
from .idle import wait_event, while_child
from .redact import env_secrets, redact

TAIL_LINES = 25

# What :meth:`Runner.start` (and ``run(..., guard=True)``) runs: a stdlib-only guard that leads the command's process group and holds
# the descriptors it is given (the stack lock).  It SIGKILLs the whole group when the starting thread
# ends (PR_SET_PDEATHSIG: even a run killed outright) or on SIGTERM, SIGHUP or SIGINT; else it exits as
# the command did.  The command dies with the guard, so it never runs on without the lock.
GUARD = r"""
import os, signal, subprocess, sys
parent, argv = int(sys.argv[1]), sys.argv[3:]
fds = [int(f) for f in sys.argv[2].split(",") if f]
def end_group(*_):
    os.killpg(0, signal.SIGKILL)
for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    if signal.getsignal(sig) is not signal.SIG_IGN:     # ignored by whoever started the run (nohup): kept
        signal.signal(sig, end_group)
prctl = None
if sys.platform.startswith("linux"):
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):      # no ctypes: the run's own clean-up still kills the group
        print("# no PR_SET_PDEATHSIG here: a run killed outright leaves this command running", flush=True)
if prctl is not None:
    prctl(1, signal.SIGTERM, 0, 0, 0)                   # PR_SET_PDEATHSIG: the starter ended
if os.getppid() != parent:                              # it ended before prctl took effect
    end_group()
def dies_with_guard():
    if prctl is not None:
        prctl(1, signal.SIGKILL, 0, 0, 0)
try:
    child = subprocess.Popen(argv, preexec_fn=dies_with_guard)
except OSError as exc:
    print(f"# could not start {argv[0]}: {exc}", flush=True)
    sys.exit(127)
rc = child.wait()
if rc < 0:
    signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
sys.exit(rc if rc >= 0 else 128 - rc)
"""


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    output: str
    seconds: float


class Started:
    """A command :meth:`Runner.start` runs in the background, in a process group of its own; its output
    reaches the progress display only from :meth:`attach` on, and :meth:`kill` ends the whole group."""

    # how long :meth:`kill` waits for the output to close (a process outside the group may hold it for ever)
    KILL_WAIT_S = 10.0
    POLL_S = 0.25

    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._killed = False
        self._echo: Callable[[str], None] | None = None
        self._last: str | None = None
        self._outcome: Completed | BaseException | None = None
        self._thread: threading.Thread | None = None
        # set when the command's thread is done; never Thread.join/is_alive: a join interrupted by a
        # signal handler's exception (Ctrl-C, SIGTERM) marks a running thread stopped (CPython 3.11)
        self._done = threading.Event()

    def attach(self, echo: Callable[[str], None] | None) -> None:
        """From now on each output line also goes to ``echo``, starting with the latest one so far."""
        with self._lock:
            self._echo = echo
            if echo is not None and self._last is not None:
                echo(self._last)

    def wait(self) -> Completed:
        """What :meth:`Runner.run` returns or raises, once the command has ended."""
        assert self._thread is not None
        # in slices: a signal the kernel hands to another thread wakes no blocked wait of the main
        # thread, whose handler (Ctrl-C, SIGTERM) then runs at its next slice, not when the build ends
        while not self._done.wait(self.POLL_S):
            pass
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None
        return self._outcome

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def ended_within(self, timeout: float) -> bool:
        """Whether the command has ended within ``timeout`` s (waited for in slices, as :meth:`wait`)."""
        return wait_event(self._done, timeout, self.POLL_S)

    def kill(self) -> bool:
        """SIGKILL the command's process group, then wait at most :attr:`KILL_WAIT_S` for its output to
        close; False when it did not (a process outside the group holds the pipe: the reader is left to end
        with it, as closing the pipe from here would wait on the reader's own lock)."""
        with self._lock:
            self._killed = True
            proc = self._proc
        if proc is not None and not self.finished:     # an ended group's id may be another's by now
            _kill_group(proc)
        if self._thread is not None:
            self._done.wait(self.KILL_WAIT_S)
        return self.finished

    def _spawned(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._proc = proc
            killed = self._killed
        if killed:              # killed while it was being started
            _kill_group(proc)

    def _line(self, line: str) -> None:
        with self._lock:
            self._last = line
            if self._echo is not None:
                self._echo(line)

    def _work(self, job: Callable[[], Completed]) -> None:
        try:
            self._outcome = job()
        except BaseException as exc:  # noqa: BLE001 - handed to wait(), which raises it in the step
            self._outcome = exc
        finally:
            self._done.set()


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass                    # the group has ended


class Runner:
    """Runs commands for one stack; ``echo`` receives each output line (for progress)."""

    def __init__(self, logs_dir: Path, *, echo: Callable[[str], None] | None = None,
                 secrets: Sequence[str] = ()) -> None:
        self.logs_dir = logs_dir
        self.echo = echo
        self.secrets = tuple(dict.fromkeys((*secrets, *env_secrets())))     # each once (a runner's secrets passed on)

    def log_path(self, step: str) -> Path:
        return self.logs_dir / f"{step}.log"

    def note(self, step: str, text: str, *, best_effort: bool = False) -> None:
        """Append a line of our own to the step's log.  ``best_effort``: a log that cannot be written is
        passed over (clean-up's note must never replace the error it is cleaning up after)."""
        try:
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            with open(self.log_path(step), "a", encoding="utf-8") as fh:
                fh.write(redact(text, self.secrets).rstrip("\n") + "\n")
        except OSError:
            if not best_effort:
                raise

    def run(self, argv: Sequence[str | os.PathLike[str]], *, step: str, cwd: Path | None = None,
            env: Mapping[str, str] | None = None, extra_env: Mapping[str, str] | None = None,
            check: bool = True, timeout: float | None = None, quiet: bool = False, guard: bool = False) -> Completed:
        """``quiet``: the output goes to the step's log and :attr:`Completed.output` only, not to ``echo``
        (a probe's JSON answer is not progress).  ``guard``: under :data:`GUARD`, as :meth:`start`'s are, for a
        command that writes the stack for long (uv installing into the env): a run killed outright takes it and
        what it started with it, so it never writes on after the stack lock is free (a re-run's install over it)."""
        args, full_env = self._resolve(argv, step, env, extra_env)
        return self._run(args, full_env, step=step, cwd=cwd, check=check, timeout=timeout, job=None, quiet=quiet,
                         guard=guard)

    def start(self, argv: Sequence[str | os.PathLike[str]], *, step: str, cwd: Path | None = None,
              env: Mapping[str, str] | None = None, hold_fds: Sequence[int] = (),
              preface: str | None = None) -> Started:
        """:meth:`run` in a thread of its own (``check=True``, no timeout) under :data:`GUARD`, which holds
        ``hold_fds`` while the group lives; ``preface`` goes to the log before the ``$`` line.  A missing
        program raises here; nothing is echoed until :meth:`Started.attach`."""
        args, full_env = self._resolve(argv, step, env, None)
        job = Started()
        job._thread = threading.Thread(target=job._work, name=f"october-{step}", daemon=True, args=(
            lambda: self._run(args, full_env, step=step, cwd=cwd, check=True, timeout=None, job=job,
                              hold_fds=tuple(hold_fds), preface=preface),))
        job._thread.start()
        return job

    def _resolve(self, argv: Sequence[str | os.PathLike[str]], step: str, env: Mapping[str, str] | None,
                 extra_env: Mapping[str, str] | None) -> tuple[list[str], dict[str, str]]:
        args = [os.fspath(a) for a in argv]
        # the cache's signing key never reaches a child by inheritance (a fork's build backend, uv, nvcc, vLLM
        # could read it and sign a forged entry); a caller that means to hand it on names it in extra_env
        full_env = {**without_key(env), **(extra_env or {})}
        exe = args[0]
        if os.sep not in exe:
            if shutil.which(exe, path=full_env.get("PATH")) is None:
                raise ToolMissing(f"step '{step}' needs the program '{exe}'",
                                  expected=f"'{exe}' on PATH", found="nothing",
                                  fix=f"install {exe} or put it on PATH, then re-run")
        elif not Path(exe).exists():
            raise ToolMissing(f"step '{step}' needs the program '{exe}'",
                              expected=f"the file {exe}", found="no such file",
                              fix="re-run so the earlier steps recreate it")
        return args, full_env

    def _run(self, args: list[str], full_env: dict[str, str], *, step: str, cwd: Path | None, check: bool,
             timeout: float | None, job: Started | None, hold_fds: tuple[int, ...] = (),
             preface: str | None = None, quiet: bool = False, guard: bool = False) -> Completed:
        echo = job._line if job is not None else None if quiet else self.echo
        guard = guard or job is not None
        launch = args if not guard else [sys.executable, "-I", "-S", "-c", GUARD, str(os.getpid()),
                                         ",".join(map(str, hold_fds)), *args]
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path(step)
        shown = redact(shlex.join(args), self.secrets)
        chunks: list[str] = []
        start = time.monotonic()
        with open(log, "a", encoding="utf-8") as fh:
            if preface is not None:
                fh.write(redact(preface, self.secrets).rstrip("\n") + "\n")
            fh.write(f"$ {shown}\n")
            if cwd is not None:
                fh.write(f"# cwd: {cwd}\n")
            fh.flush()
            try:
                proc_cm = subprocess.Popen(launch, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           text=True, errors="replace", bufsize=1, pass_fds=hold_fds,
                                           process_group=0 if guard else None)
            except OSError as exc:
                fh.write(f"# could not start: {exc}\n")
                raise ToolMissing(f"step '{step}' could not start `{shown}`",
                                  expected=f"an executable {args[0]}" + (f" and a directory {cwd}" if cwd else ""),
                                  found=exc.strerror or str(exc),
                                  fix="check that the program is executable and the directory exists; "
                                      "re-running recreates what earlier steps made") from None
            with proc_cm as proc:
                assert proc.stdout is not None
                if job is not None:
                    job._spawned(proc)
                # under the guard the whole group: the guard's SIGKILL alone leaves what the command started
                timer = threading.Timer(timeout, (lambda: _kill_group(proc)) if guard else proc.kill) if timeout else None
                if timer is not None:
                    timer.daemon = True
                    timer.start()
                try:
                    if job is None:         # the main thread's wait: imports a later step makes (.idle)
                        while_child(proc, proc.stdout)
                    for line in proc.stdout:
                        clean = redact(line, self.secrets)
                        fh.write(clean)
                        chunks.append(clean)
                        if echo is not None:
                            echo(clean.rstrip("\n"))
                    rc = proc.wait()
                except BaseException:
                    if guard:
                        _kill_group(proc)
                    proc.kill()
                    proc.wait()
                    raise
                finally:
                    if timer is not None:
                        timer.cancel()
            tail = [chunk.rstrip("\n") for chunk in chunks[-TAIL_LINES:]]
            if timeout and time.monotonic() - start >= timeout and rc < 0:
                fh.write(f"# killed after {timeout:.0f}s timeout\n")
                raise CommandFailed(step, [shown], rc, "\n".join(tail) + f"\n(killed after {timeout:.0f} s)", log)
            elapsed = time.monotonic() - start
            fh.write(f"# exit {rc} after {elapsed:.2f}s\n")
        if guard and job is None and rc == 127 and tail and tail[-1].startswith(f"# could not start {args[0]}: "):
            raise ToolMissing(f"step '{step}' could not start `{shown}`",
                              expected=f"an executable {args[0]}" + (f" and a directory {cwd}" if cwd else ""),
                              found=tail[-1].split(": ", 1)[1],
                              fix="check that the program is executable and the directory exists; "
                                  "re-running recreates what earlier steps made")
        if check and rc != 0:
            if says_disk_full("\n".join(tail)):
                cause = next(ln for ln in reversed(tail) if says_disk_full(ln))
                raise DiskFullError(f"step '{step}': `{shown}` could not write",
                                    expected="free space on the filesystem it writes to",
                                    found=f"exit code {rc}: {cause.strip()} (full log: {log})", fix=DISK_FULL_FIX)
            raise CommandFailed(step, [shown], rc, "\n".join(tail), log)
        return Completed(tuple(args), rc, "".join(chunks), elapsed)
