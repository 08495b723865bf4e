"""``Runner.run(..., guard=True)``: a foreground command under the guard (what uv installing into the env runs
under).  Real processes; the commands are small Python programs standing in for uv and what it starts."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from october.installer.core.errors import CommandFailed, ToolMissing
from october.installer.core.runner import Runner
from tests.test_jit_overlap import leftovers, wait_for, wait_gone  # noqa: F401  (the fixture and helpers)


def test_a_timeout_ends_what_the_guarded_command_started(tmp_path: Path, leftovers: list[int]) -> None:
    """The review: the timer killed the guard alone; what the command started lived on (and held the pipe)."""
    pids = tmp_path / "pids"
    script = (f"import os, subprocess, time; c = subprocess.Popen(['sleep', '300']); "
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{c.pid}}'); time.sleep(300)")
    start = time.monotonic()
    with pytest.raises(CommandFailed, match="killed after"):
        Runner(tmp_path / "logs").run([sys.executable, "-c", script], step="install", guard=True, timeout=3)
    assert time.monotonic() - start < 60          # not held until `sleep 300` lets go of the output pipe
    leftovers.extend(map(int, pids.read_text().split()))
    for pid in map(int, pids.read_text().split()):
        wait_gone(pid, 20)


def test_a_guarded_program_that_cannot_start_is_tool_missing(tmp_path: Path) -> None:
    """The review: a uv that is there but not executable was exit 127 from the guard (CommandFailed), not the
    error that says to check the program."""
    prog = tmp_path / "uv"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(stat.S_IRUSR | stat.S_IWUSR)
    if os.access(prog, os.X_OK):
        pytest.skip("running as a user who may execute any file")
    with pytest.raises(ToolMissing, match="could not start"):
        Runner(tmp_path / "logs").run([str(prog), "pip", "install"], step="install", guard=True)
