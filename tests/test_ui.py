"""What a user watches: step lines in plain words, progress bars on a terminal, plain progress lines
in a log, driven by real command output (git, uv, the JIT builder) and by byte counts (downloads, hashing)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from october.checks.jit_build import ModuleProgress
from october.installer.core.runner import Runner
from october.installer.core.ui import ConsoleReporter, UvProgress, parse_progress
from october.installer.pyenv.uvcmd import uv_exe
from tests.fixtures.fake_jit import MODULES, builder_command, jit_env
from tests.fixtures.findlinks_server import serve_find_links
from tests.fixtures.gitrepos import git
from tests.fixtures.wheels import build_wheel

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
    # git's phases beyond GitPython's op codes, and the lines without a total, read as before GitPython parsed them
    assert parse_progress("Updating files:  50% (1/2)") == ("git: updating files", "git: updating files", 1.0, 2.0, "")
    assert parse_progress("Checking out files: 100% (7/7), done.")[:4] == ("git: checking out files",) * 2 + (7.0, 7.0)
    assert parse_progress("Counting objects: 4, done.") is None
    assert parse_progress("Writing objects:  50% (1/2)") is None
    assert parse_progress("fatal: Receiving objects:  50% (1/2)") is None


def test_git_progress_is_parsed_by_gitpython_imported_only_for_git_lines() -> None:
    """GitPython's RemoteProgress reads git's lines; a run that shows no git progress never imports it."""
    code = ("import sys; from october.installer.core.ui import parse_progress; "
            "parse_progress('[3/12] cc'); parse_progress('Resolved 5 packages'); print('git' in sys.modules); "
            "print(parse_progress('Receiving objects:  45% (450/1000)')); "
            "from git import RemoteProgress; from october.installer.core import ui; "
            "print(issubclass(ui._git_parser(), RemoteProgress))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split("\n")[:3] == ["False", "('git: receiving objects', 'git: receiving objects', 450.0, 1000.0, '')",
                                             "True"], proc.stdout + proc.stderr


def test_rich_s_bars_are_imported_at_the_first_bar_on_a_terminal_only() -> None:
    """A run whose output goes to a log, a pipe or nowhere draws no bar, so it never imports rich's progress
    machinery (15 ms of every second stack's imports); a terminal imports it at its first bar."""
    code = ("import io, sys; from rich.console import Console; from october.installer.core.ui import ConsoleReporter; "
            "logged = ConsoleReporter(console=Console(file=io.StringIO(), force_terminal=False)); "
            "quiet = ConsoleReporter(quiet=True, console=Console(file=io.StringIO(), force_terminal=True)); "
            "[(r.step_start('wheel', ''), r.transfer('w.whl', 5, 10), r.progress('Receiving objects:  45% (450/1000)'))"
            " for r in (logged, quiet)]; print('rich.progress' in sys.modules); "
            "shown = ConsoleReporter(console=Console(file=io.StringIO(), force_terminal=True)); "
            "shown.step_start('wheel', ''); shown.transfer('w.whl', 5, 10); shown.step_done('wheel', 1.0); "
            "print('rich.progress' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["False", "True"], proc.stdout + proc.stderr


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
    # a checkout's own phase ("Updating files"), which GitPython has no op code for
    work = tmp_path / "work"
    git("clone", "-q", "--no-checkout", str(tmp_path / "m.git"), str(work))
    Runner(tmp_path / "logs", echo=ui.progress).run(["git", "-C", str(work), "checkout", "--progress", "main"],
                                                   step="fetch", extra_env={"GIT_PROGRESS_DELAY": "0"})
    assert "fetch: git: updating files: 100% (40 of 40)" in out.getvalue(), out.getvalue()


# uv 0.13.9's own lines in a pipe (recorded: `uv pip install numpy pandas six` with a cold cache, and a
# fork's editable build), in the order uv printed them
UV_RECORDED = ["Using Python 3.11.7 environment at: e", "Resolved 5 packages in 256ms",
               "Downloading pandas (11.8MiB)", "Downloading numpy (16.1MiB)", " Downloaded numpy",
               " Downloaded pandas", "Prepared 5 packages in 230ms", "Installed 5 packages in 20ms",
               " + numpy==2.4.6", " + pandas==3.1.1"]
UV_BUILD = ["Building vllm @ file:///tmp/s/forks/vllm", " Built vllm @ file:///tmp/s/forks/vllm"]


def test_uv_download_lines_become_bytes_and_wheels_done() -> None:
    uv = UvProgress()
    seen = [p for p in map(uv.feed, UV_RECORDED) if p is not None]
    mib = 1 << 20
    assert [(p[0], p[4]) for p in seen] == [("uv: downloads", "B")] * 4
    assert [(round(p[2] / mib, 1), round(p[3] / mib, 1)) for p in seen] == [(0, 11.8), (0, 27.9), (16.1, 27.9),
                                                                            (27.9, 27.9)]
    assert seen[-1][2] == seen[-1][3]
    assert seen[-1][1] == "uv: 2 of 2 wheel(s) downloaded"
    assert [uv.feed(ln) for ln in UV_BUILD] == [("uv: builds", "uv: source builds", 0.0, 1.0, ""),
                                                ("uv: builds", "uv: source builds", 1.0, 1.0, "")]
    assert UvProgress().feed(" Downloaded numpy") is None      # a wheel uv never announced counts for nothing
    assert UvProgress().feed("Building editable for vllm") is None


def test_uv_progress_is_per_step_and_plain_in_a_log() -> None:
    ui, out = plain()
    ui.step_start("env", "")
    for line in UV_RECORDED:
        ui.progress(line)
    ui.step_done("env", 1.0)
    ui.step_start("install", "")
    ui.progress(" Downloaded numpy")                          # the env step's download is not this step's
    lines = [ln for ln in out.getvalue().splitlines() if "uv: " in ln]
    assert lines[0] == "    env: uv: 0 of 1 wheel(s) downloaded: 0% (0.0 of 12.4 MB)", lines
    assert lines[-1] == "    env: uv: 2 of 2 wheel(s) downloaded: 100% (29.3 of 29.3 MB)", lines


def test_real_uv_download_drives_the_progress(tmp_path: Path) -> None:
    """Real uv from the tool env, a real wheel of 3 MiB on a loopback find-links page: uv's own lines
    (not a recording) must still give the bar; this fails when a uv upgrade changes them."""
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "bigpkg", "1.0", {"bigpkg/__init__.py": "", "bigpkg/pad.bin": os.urandom(3 << 20)})
    ui, out = plain()
    runner = Runner(tmp_path / "logs", echo=ui.progress)
    ui.step_start("env", "")
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    runner.run([uv_exe(), "venv", "-q", str(tmp_path / "venv")], step="env", env=env)
    with serve_find_links(wheels) as served:
        runner.run([uv_exe(), "pip", "install", "--python", str(tmp_path / "venv" / "bin" / "python"), "--no-index",
                    "--find-links", served.url, "bigpkg"], step="env", env=env)
    lines = [ln for ln in out.getvalue().splitlines() if "env: uv: " in ln]
    assert lines == ["    env: uv: 0 of 1 wheel(s) downloaded: 0% (0.0 of 3.1 MB)",
                     "    env: uv: 1 of 1 wheel(s) downloaded: 100% (3.1 of 3.1 MB)"], out.getvalue()


def test_jit_builder_reports_modules_done_of_total(tmp_path: Path) -> None:
    """The real builder (stand-in FlashInfer API, as in test_jit_step) through the runner: one line per
    module, and a second run finds both cached in one line."""
    workspace = tmp_path / "jit"
    for run, expected in ((1, ["0% (0 of 2)", "50% (1 of 2)", "100% (2 of 2)"]), (2, ["100% (2 of 2)"])):
        ui, out = plain()
        ui.step_start("jit", "")
        argv, _ = builder_command(workspace, MODULES)
        Runner(tmp_path / "logs", echo=ui.progress).run(argv, step="jit", cwd=workspace, env=jit_env(workspace))
        lines = [ln for ln in out.getvalue().splitlines() if "jit: JIT modules built" in ln]
        assert [ln.rsplit(": ", 1)[1] for ln in lines] == expected, (run, out.getvalue())


def test_module_progress_lines_parse_as_modules_not_compile_jobs() -> None:
    buf = io.StringIO()
    progress = ModuleProgress(3, out=buf)
    progress.cached(1)
    progress.built("batch_decode_with_kv_cache_dtype_q_bf16")
    parsed = [parse_progress(ln) for ln in buf.getvalue().splitlines()]
    assert parsed == [("JIT modules", "JIT modules built", 1.0, 3.0, ""), ("JIT modules", "JIT modules built", 2.0, 3.0, "")]


def test_terminal_shows_uv_bytes_and_jit_modules_as_bars() -> None:
    out = io.StringIO()
    ui = ConsoleReporter(console=Console(file=out, width=150, force_terminal=True, color_system=None))
    ui.step_start("env", "")
    for line in UV_RECORDED[:5]:
        ui.progress(line)
    ui.step_done("env", 1.0)
    ui.step_start("install", "")
    ui.progress("Downloading vllm (12.0MiB)")
    ui.progress(" Downloaded vllm")
    ui.step_done("install", 1.0)
    ui.step_start("jit", "")
    ui.progress("JIT modules built: 1/2 (batch_decode)")
    ui.step_done("jit", 1.0)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "env: uv: 1 of 2 wheel(s) downloaded" in text and "16.9/29.3 MB" in text and "━" in text
    # one wheel is one step (uv reports whole wheels): the rate is the average since the bar began, not "?"
    assert re.search(r"install: uv: 1 of 1 wheel\(s\) downloaded .*12\.6/12\.6 MB [\d.]+ [kMGT]?B/s", text), text
    assert "jit: JIT modules built" in text and "1/2" in text


def test_an_emoji_code_in_a_path_is_printed_as_written(tmp_path: Path) -> None:
    """A path holding rich's emoji codes (``:x:``, ``:100:``) reaches the user as written, not as an emoji
    (the audit's ``/tmp/c:x:`` came out as a red cross).  The real command line, in a subprocess."""
    recipe = tmp_path / "a:x:b:100:" / "r.toml"
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(tmp_path / "stack"),
                           "--recipe", str(recipe)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode != 0 and "a:x:b:100:" in proc.stderr, proc.stderr
    assert "\u274c" not in proc.stderr and "\U0001f4af" not in proc.stderr
