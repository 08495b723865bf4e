"""What a user watches: step lines in plain words, progress bars on a terminal, plain progress lines
in a log, driven by real command output (git) and by byte counts (downloads, hashing)."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

from rich.console import Console

from october.installer.core.runner import Runner
from october.installer.core.ui import ConsoleReporter, parse_progress
from tests.fixtures.gitrepos import git

# lines as git 2.39 and ninja print them (recorded)
GIT_RECEIVING = "Receiving objects:  45% (450/1000), 1.20 GiB | 30.00 MiB/s"
GIT_COUNTING = "remote: Counting objects:  12% (4/32)        "
NINJA = "[3/12] Building CUDA object batch_decode_kernel.cuda.o"


def plain() -> tuple[ConsoleReporter, io.StringIO]:
    out = io.StringIO()
    return ConsoleReporter(console=Console(file=out, width=200, force_terminal=False)), out


def test_progress_lines_are_recognised() -> None:
    assert parse_progress(GIT_RECEIVING) == ("git: receiving objects",
                                             "git: receiving objects, 1.20 GiB | 30.00 MiB/s", 450.0, 1000.0, "")
    assert parse_progress(GIT_COUNTING) == ("git: counting objects", "git: counting objects", 4.0, 32.0, "")
    assert parse_progress(NINJA) == ("compile jobs", "compile jobs", 3.0, 12.0, "")
    assert parse_progress("Resolving deltas: 100% (3/3), done.")[2:4] == (3.0, 3.0)
    assert parse_progress("Building editable for vllm") is None


def test_step_lines_use_plain_words() -> None:
    ui, out = plain()
    ui.step_start("fetch", "not done yet")
    ui.step_done("fetch", 1.25)
    ui.step_skip("env")
    ui.step_start("jit", "an earlier step ('install') ran")
    text = out.getvalue()
    assert "==> fetch: starting" in text and "fetch: ok in 1.2s" in text
    assert "==> env: already done (inputs unchanged)" in text
    assert "==> jit: starting (earlier step ('install') ran)" in text
    assert "not done yet" not in text and "cached" not in text


def test_plain_progress_is_one_line_per_tenth() -> None:
    ui, out = plain()
    ui.step_start("wheel", "")
    for done in range(0, 1_000_001, 10_000):
        ui.transfer("vllm.whl", done, 1_000_000)
    lines = [ln for ln in out.getvalue().splitlines() if "vllm.whl" in ln]
    assert len(lines) == 11 and lines[0].endswith("0% (0.0 of 1.0 MB)") and lines[-1].endswith("100% (1.0 of 1.0 MB)")


def test_terminal_progress_draws_a_bar_with_bytes_rate_and_time_left() -> None:
    out = io.StringIO()
    ui = ConsoleReporter(console=Console(file=out, width=150, force_terminal=True, color_system=None))
    ui.step_start("wheel", "")
    ui.transfer("vllm-0.18.0.whl", 250_000_000, 1_000_000_000)
    ui.transfer("vllm-0.18.0.whl", 500_000_000, 1_000_000_000)
    ui.step_done("wheel", 2.0)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "vllm-0.18.0.whl" in text and "0.5/1.0 GB" in text and "━" in text and re.search(r"B/s", text)
    assert re.search(r"\d+:\d\d:\d\d|-:--:--", text)           # time left
    assert "wheel: ok in 2.0s" in text


def test_a_real_git_fetch_drives_the_progress(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    git("init", "-q", "-b", "main", cwd=src)
    for i in range(40):
        (src / f"f{i}").write_bytes(os.urandom(2000))
    git("add", "-A", cwd=src)
    git("commit", "-q", "-m", "x", cwd=src)
    git("init", "-q", "--bare", str(tmp_path / "m.git"))
    ui, out = plain()
    ui.step_start("fetch", "")
    Runner(tmp_path / "logs", echo=ui.progress).run(
        ["git", "-C", str(tmp_path / "m.git"), "fetch", "--progress", src.as_uri(), "main:refs/heads/main"],
        step="fetch")
    lines = [ln for ln in out.getvalue().splitlines() if "fetch: git: " in ln]
    assert any("100% (" in ln for ln in lines) and len(lines) <= 40, out.getvalue()
