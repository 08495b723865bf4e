"""The one gate for external commands.

Every git/uv/python/nvcc call of a step goes through :class:`Runner.run`: the
command is resolved on PATH (clear error if missing), echoed, its combined
output teed to ``STACK/logs/<step>.log`` (secrets masked), and a non-zero exit
becomes :class:`CommandFailed` naming the step, command, exit code, last lines
and log path.
"""

from __future__ import annotations

import collections
import os
import shlex
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from october.installer.core.errors import DISK_FULL_FIX, CommandFailed, DiskFullError, ToolMissing, says_disk_full
from october.installer.core.redact import env_secrets, redact

TAIL_LINES = 25


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    output: str
    seconds: float


class Runner:
    """Runs commands for one stack; ``echo`` receives each output line (for progress)."""

    def __init__(self, logs_dir: Path, *, echo: Callable[[str], None] | None = None,
                 secrets: Sequence[str] = ()) -> None:
        self.logs_dir = logs_dir
        self.echo = echo
        self.secrets = tuple(secrets) + tuple(env_secrets())

    def log_path(self, step: str) -> Path:
        return self.logs_dir / f"{step}.log"

    def note(self, step: str, text: str) -> None:
        """Append a line of our own to the step's log."""
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path(step), "a", encoding="utf-8") as fh:
            fh.write(redact(text, self.secrets).rstrip("\n") + "\n")

    def run(self, argv: Sequence[str | os.PathLike[str]], *, step: str, cwd: Path | None = None,
            env: Mapping[str, str] | None = None, extra_env: Mapping[str, str] | None = None,
            check: bool = True, timeout: float | None = None) -> Completed:
        args = [os.fspath(a) for a in argv]
        full_env = dict(os.environ if env is None else env)
        if extra_env:
            full_env.update(extra_env)
        exe = args[0]
        if os.sep not in exe:
            found = shutil.which(exe, path=full_env.get("PATH"))
            if found is None:
                raise ToolMissing(f"step '{step}' needs the program '{exe}'",
                                  expected=f"'{exe}' on PATH", found="nothing",
                                  fix=f"install {exe} or put it on PATH, then re-run")
        elif not Path(exe).exists():
            raise ToolMissing(f"step '{step}' needs the program '{exe}'",
                              expected=f"the file {exe}", found="no such file",
                              fix="re-run so the earlier steps recreate it")
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path(step)
        shown = redact(shlex.join(args), self.secrets)
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        chunks: list[str] = []
        start = time.monotonic()
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"$ {shown}\n")
            if cwd is not None:
                fh.write(f"# cwd: {cwd}\n")
            fh.flush()
            try:
                proc_cm = subprocess.Popen(args, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           text=True, errors="replace", bufsize=1)
            except OSError as exc:
                fh.write(f"# could not start: {exc}\n")
                raise ToolMissing(f"step '{step}' could not start `{shown}`",
                                  expected=f"an executable {exe}" + (f" and a directory {cwd}" if cwd else ""),
                                  found=exc.strerror or str(exc),
                                  fix="check that the program is executable and the directory exists; "
                                      "re-running recreates what earlier steps made") from None
            with proc_cm as proc:
                assert proc.stdout is not None
                timer = threading.Timer(timeout, proc.kill) if timeout else None
                if timer is not None:
                    timer.daemon = True
                    timer.start()
                try:
                    for line in proc.stdout:
                        clean = redact(line, self.secrets)
                        fh.write(clean)
                        chunks.append(clean)
                        tail.append(clean.rstrip("\n"))
                        if self.echo is not None:
                            self.echo(clean.rstrip("\n"))
                    rc = proc.wait()
                except BaseException:
                    proc.kill()
                    proc.wait()
                    raise
                finally:
                    if timer is not None:
                        timer.cancel()
            if timeout and time.monotonic() - start >= timeout and rc < 0:
                fh.write(f"# killed after {timeout:.0f}s timeout\n")
                raise CommandFailed(step, [shown], rc, "\n".join(tail) + f"\n(killed after {timeout:.0f} s)", log)
            elapsed = time.monotonic() - start
            fh.write(f"# exit {rc} after {elapsed:.2f}s\n")
        if check and rc != 0:
            if says_disk_full("\n".join(tail)):
                cause = next(ln for ln in reversed(tail) if says_disk_full(ln))
                raise DiskFullError(f"step '{step}': `{shown}` could not write",
                                    expected="free space on the filesystem it writes to",
                                    found=f"exit code {rc}: {cause.strip()} (full log: {log})", fix=DISK_FULL_FIX)
            raise CommandFailed(step, [shown], rc, "\n".join(tail), log)
        return Completed(tuple(args), rc, "".join(chunks), elapsed)
