"""The lock's toolchain reads uv's version from the preflight when the preflight read this same uv,
unchanged since (its size and mtime); otherwise it asks uv again.  Real uv, a real StepContext."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from october.installer.core.runner import Runner
from october.installer.engine import SetupOptions, SilentReporter, StepContext, StepRecord
from october.installer.core.paths import StackPaths
from october.installer.pyenv.uvcmd import uv_exe
from october.installer.steps.lock import toolchain_facts
from october.installer.steps.results import PreflightResult
from tests.test_pipeline import toy_recipe

PLANTED = "0.0.1+preflight"


@pytest.fixture(autouse=True)
def _nothing_asked_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """uv is asked once per process (steps/preflight.py ``_ASKED``): each test starts as a new process."""
    from october.installer.steps import preflight

    monkeypatch.setattr(preflight, "_ASKED", {})


def _ctx(tmp_path: Path, tools: dict[str, list[int] | None], path: str) -> StepContext:
    paths = StackPaths(tmp_path / "stack")
    paths.root.mkdir()
    opts = SetupOptions(stack=paths.root, recipe=toy_recipe(tmp_path), cache_dir=tmp_path / "cache")
    ctx = StepContext(options=opts, paths=paths, runner=Runner(paths.logs), ui=SilentReporter())
    pre = PreflightResult(facts={"uv": {"path": path, "version": PLANTED, "line": f"uv {PLANTED} (x86_64)"}, "os": "Linux"}, machine={}, checks=(),
                          skipped=(), tools=tools)
    ctx.done["preflight"] = StepRecord("preflight", "f" * 64, pre, 0.0, "", "cached")
    return ctx


def _uv_version(ctx: StepContext) -> str:
    return str(toolchain_facts(ctx, "3.11")["uv"])


def _asked(ctx: StepContext) -> bool:
    log = ctx.paths.logs / "lock.log"
    return log.exists() and "--version" in log.read_text()


def test_the_preflight_s_reading_of_the_same_unchanged_uv_is_used(tmp_path: Path) -> None:
    exe = uv_exe()
    st = Path(exe).resolve().stat()
    ctx = _ctx(tmp_path, {exe: [st.st_size, st.st_mtime_ns]}, exe)
    assert _uv_version(ctx) == PLANTED and not _asked(ctx)


@pytest.mark.parametrize("fault", ["changed since", "another uv", "gone"])
def test_a_uv_changed_since_the_preflight_or_another_one_is_asked_again(tmp_path: Path, fault: str) -> None:
    exe = uv_exe()
    st = Path(exe).resolve().stat()
    sig = {"changed since": [st.st_size, st.st_mtime_ns + 1], "another uv": [st.st_size, st.st_mtime_ns],
           "gone": None}[fault]
    ctx = _ctx(tmp_path, {exe: sig}, "/elsewhere/uv" if fault == "another uv" else exe)
    real = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    assert _uv_version(ctx) == real != PLANTED and _asked(ctx)


def test_uv_is_asked_once_per_process_for_the_same_uv(tmp_path: Path) -> None:
    """The built-stack key reads uv's line from the env and install steps (up to three times a run): a uv
    the preflight did not read is asked once, while it stays as it was."""
    exe = uv_exe()
    ctx = _ctx(tmp_path, {exe: None}, "/elsewhere/uv")
    assert _uv_version(ctx) == _uv_version(ctx) != PLANTED
    assert (ctx.paths.logs / "lock.log").read_text().count("--version") == 1
