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


def test_the_cache_key_reaches_a_child_only_when_handed_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$OCTOBER_CACHE_KEY (the fleet hands it to a node's october_setup) reached every child by inheritance: uv, a
    fork's build backend, nvcc, vLLM could read it and sign a forged cache entry.  Only a caller naming it in
    ``extra_env`` hands it on (the fleet's node command)."""
    from october.installer.core.cachekey import KEY_ENV

    monkeypatch.setenv(KEY_ENV, "ab" * 32)
    runner = Runner(tmp_path / "logs")
    show = [sys.executable, "-c", f"import os; print('KEY', os.environ.get({KEY_ENV!r}, 'absent'))"]
    assert "KEY absent" in runner.run(show, step="t").output
    assert "KEY absent" in runner.run(show, step="t", env=dict(os.environ)).output
    handed = runner.run(show, step="t", extra_env={KEY_ENV: "cd" * 32}).output
    assert "KEY cd" in handed or "KEY ***" in handed


def test_the_cache_key_reaches_no_stack_python_the_checks_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: verify's and the lock check's own processes (the stack Python asked for its sys.path, uv asked
    for a venv's files, git) ran with the caller's environment, and a .pth in the stack's site, which runs at
    every start, read $OCTOBER_CACHE_KEY."""
    import subprocess as sp

    from october.installer.core.cachekey import KEY_ENV
    from october.installer.core.paths import StackPaths
    from october.installer.git import git_env
    from october.installer.lock.drift import _outside_sites
    from october.installer.pyenv.uvcmd import uv_exe
    from october.installer.verify.env import _uv_venv_files

    stack = tmp_path / "stack"
    sp.run([uv_exe(), "venv", "-q", str(stack / "env")], check=True, capture_output=True,
           env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    seen = tmp_path / "seen"
    site = next((stack / "env").glob("lib/python*/site-packages"))
    (site / "zz_spy.pth").write_text(f"import os; open({str(seen)!r}, 'a').write(os.environ.get({KEY_ENV!r}, 'absent') + chr(10))\n")
    monkeypatch.setenv(KEY_ENV, "ab" * 32)
    _outside_sites(stack / "env")
    _uv_venv_files(StackPaths(stack))
    assert KEY_ENV not in git_env()
    lines = seen.read_text().split()
    assert lines and set(lines) == {"absent"}, lines
