"""The step engine, the command runner and the stack lock, with toy steps and real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping

import pytest

from october.installer.core.errors import CommandFailed, StackLockedError, ToolMissing
from october.installer.core.paths import StackPaths
from october.installer.core.runner import Runner
from october.installer.core.stackmutex import StackLock
from october.installer.engine import MARKER_FORMAT, SetupOptions, SilentReporter, StepContext, run_pipeline
from october.installer.recipe import ForkUse, Pin, PreflightLimits, Recipe, SmokeConfig, Sources, TorchPin


def toy_recipe(tmp_path: Path) -> Recipe:
    return Recipe(name="toy", path=tmp_path / "toy.toml", sha256="0" * 64, description="", python="3.11",
                  torch=TorchPin("2.0.0"), build_requirements=(), sources=Sources(),
                  forks=(ForkUse("a", "file:///a", None, Pin("p", "a" * 40)),), cuda=None, wheel=None,
                  preflight=PreflightLimits(), jit=(), models={}, smoke=SmokeConfig())


@dataclass(frozen=True)
class FileResult:
    step: ClassVar[str] = "toy"
    file: str
    value: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "value": self.value}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileResult":
        if not isinstance(d.get("file"), str) or not isinstance(d.get("value"), str):
            raise ValueError("not a FileResult")
        return cls(file=d["file"], value=d["value"])

    def chain_json(self) -> Any:
        return self.to_json()


class FileStep:
    """Writes STACK/<name>.txt with its input value; counts runs in a side file.  ``note`` is an
    input that does not reach the result (as ``--skip-preflight`` for the preflight step's facts)."""

    def __init__(self, name: str, value: dict[str, str]) -> None:
        self.name = name  # type: ignore[misc]
        self.value = value

    def inputs(self, ctx: StepContext) -> Any:
        return {"value": self.value["v"], "note": self.value.get("note")}

    def load(self, outputs: Mapping[str, Any]) -> FileResult:
        return FileResult.from_json(outputs)

    def run(self, ctx: StepContext) -> FileResult:
        out = ctx.paths.root / f"{self.name}.txt"
        out.write_text(self.value["v"])
        runs = ctx.paths.root / "runs.log"
        with open(runs, "a") as fh:
            fh.write(self.name + "\n")
        return FileResult(file=str(out), value=self.value["v"])

    def verify(self, ctx: StepContext, result: FileResult) -> str | None:
        return None if Path(result.file).exists() else "file missing"


def make_ctx(tmp_path: Path) -> StepContext:
    paths = StackPaths(tmp_path / "stack")
    paths.root.mkdir()
    opts = SetupOptions(stack=paths.root, recipe=toy_recipe(tmp_path), cache_dir=tmp_path / "cache")
    return StepContext(options=opts, paths=paths, runner=Runner(paths.logs), ui=SilentReporter())


def runs(ctx: StepContext) -> list[str]:
    p = ctx.paths.root / "runs.log"
    return p.read_text().split() if p.exists() else []


def test_skip_rerun_and_cascade(tmp_path: Path) -> None:
    vals = [{"v": "1"}, {"v": "2"}, {"v": "3"}]
    steps = [FileStep(n, v) for n, v in zip("abc", vals)]
    ctx = make_ctx(tmp_path)
    recs = run_pipeline(steps, ctx)
    assert [r.status for r in recs] == ["ran"] * 3
    marker = json.loads(ctx.paths.marker("a").read_text())
    assert marker["format_version"] == MARKER_FORMAT == 2 and marker["outputs"]["file"].endswith("a.txt")

    ctx2 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    assert [r.status for r in run_pipeline(steps, ctx2)] == ["cached"] * 3
    assert runs(ctx) == ["a", "b", "c"]

    vals[1]["v"] = "changed"  # a changed input re-runs that step; its new result re-runs every later one
    ctx3 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    assert [r.status for r in run_pipeline(steps, ctx3)] == ["cached", "ran", "ran"]

    (ctx.paths.root / "a.txt").unlink()  # outputs that no longer verify re-run the step; the same result
    ctx4 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    assert [r.status for r in run_pipeline(steps, ctx4)] == ["ran", "cached", "cached"]
    assert (ctx.paths.root / "a.txt").read_text() == "1"


def test_an_input_that_does_not_change_the_result_reruns_only_its_step(tmp_path: Path) -> None:
    """Issue 11: changing --skip-preflight re-ran all eight steps.  A step whose inputs changed runs
    again; the steps after it stay cached while its result is the same."""
    vals = [{"v": "1"}, {"v": "2"}, {"v": "3"}]
    steps = [FileStep(n, v) for n, v in zip("abc", vals)]
    ctx = make_ctx(tmp_path)
    run_pipeline(steps, ctx)
    vals[0]["note"] = "skip-something"
    ctx2 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    assert [r.status for r in run_pipeline(steps, ctx2)] == ["ran", "cached", "cached"]
    assert runs(ctx) == ["a", "b", "c", "a"]


def test_a_planted_change_in_an_earlier_result_reruns_the_later_steps(tmp_path: Path) -> None:
    """The later steps' fingerprints chain on the earlier results: a result that differs from the one
    they were made from (here planted in a's marker, which still verifies) re-runs them."""
    steps = [FileStep(n, {"v": v}) for n, v in zip("abc", "123")]
    ctx = make_ctx(tmp_path)
    run_pipeline(steps, ctx)
    marker = json.loads(ctx.paths.marker("a").read_text())
    marker["outputs"]["value"] = "planted"
    ctx.paths.marker("a").write_text(json.dumps(marker))
    ctx2 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    reasons: list[str] = []

    class Recording(SilentReporter):
        def step_start(self, name: str, reason: str) -> None:
            reasons.append(f"{name}: {reason}")

    ctx2.ui = Recording()
    assert [r.status for r in run_pipeline(steps, ctx2)] == ["cached", "ran", "ran"]
    assert reasons[0] == "b: an earlier step's result changed"


def test_old_format_or_unknown_result_counts_as_not_done(tmp_path: Path) -> None:
    steps = [FileStep("a", {"v": "1"})]
    ctx = make_ctx(tmp_path)
    run_pipeline(steps, ctx)
    marker = json.loads(ctx.paths.marker("a").read_text())
    for planted in ({**marker, "format_version": 1}, {**marker, "outputs": {"file": 7}}, {**marker, "outputs": []}):
        ctx.paths.marker("a").write_text(json.dumps(planted))
        again = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
        assert [r.status for r in run_pipeline(steps, again)] == ["ran"]


def test_failed_step_leaves_no_marker_and_resumes(tmp_path: Path) -> None:
    class Boom(FileStep):
        fail = True

        def run(self, ctx: StepContext) -> FileResult:
            if Boom.fail:
                raise RuntimeError("killed")
            return super().run(ctx)

    steps = [FileStep("a", {"v": "1"}), Boom("b", {"v": "2"}), FileStep("c", {"v": "3"})]
    ctx = make_ctx(tmp_path)
    with pytest.raises(RuntimeError):
        run_pipeline(steps, ctx)
    assert ctx.paths.marker("a").exists() and not ctx.paths.marker("b").exists()
    Boom.fail = False
    ctx2 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    assert [r.status for r in run_pipeline(steps, ctx2)] == ["cached", "ran", "ran"]


def test_torn_marker_counts_as_not_done(tmp_path: Path) -> None:
    steps = [FileStep("a", {"v": "1"})]
    ctx = make_ctx(tmp_path)
    run_pipeline(steps, ctx)
    ctx.paths.marker("a").write_text('{"format_version": 1, "fingerp')
    ctx2 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    assert [r.status for r in run_pipeline(steps, ctx2)] == ["ran"]


def test_runner_tees_output_and_names_failure(tmp_path: Path) -> None:
    r = Runner(tmp_path / "logs")
    ok = r.run([sys.executable, "-c", "print('hello')"], step="s1")
    assert ok.returncode == 0 and "hello" in ok.output
    with pytest.raises(CommandFailed) as info:
        r.run([sys.executable, "-c", "import sys; print('line1'); print('oops', file=sys.stderr); sys.exit(3)"],
              step="s1")
    msg = info.value.message
    assert "step 's1'" in msg and "exit code 3" in msg and "oops" in msg and str(tmp_path / "logs" / "s1.log") in msg
    log = (tmp_path / "logs" / "s1.log").read_text()
    assert "hello" in log and "oops" in log and "# exit 3" in log


def test_runner_masks_secrets(tmp_path: Path) -> None:
    token = "hf_" + "Z" * 30
    r = Runner(tmp_path / "logs")
    env = dict(os.environ, HF_TOKEN=token)
    r2 = Runner(tmp_path / "logs", secrets=[token])
    r2.run([sys.executable, "-c", f"print('{token}'); print('https://user:pw@example.com/x')"], step="s", env=env)
    log = (tmp_path / "logs" / "s.log").read_text()
    assert token not in log and "pw@" not in log and "***" in log
    assert r.log_path("s") == tmp_path / "logs" / "s.log"


def test_runner_missing_tool(tmp_path: Path) -> None:
    with pytest.raises(ToolMissing) as info:
        Runner(tmp_path).run(["definitely-not-a-tool-xyz"], step="s")
    assert "'definitely-not-a-tool-xyz' on PATH" in info.value.message


def test_stack_lock_refuses_second_holder(tmp_path: Path) -> None:
    lock = tmp_path / ".october.lock"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import time, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from october.installer.core.stackmutex import StackLock
from pathlib import Path
sys.argv = ["october_setup", "./stack", "--recipe", "current"]
with StackLock(Path({str(lock)!r})):
    print('held', flush=True)
    time.sleep(30)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StackLockedError) as info:
            with StackLock(lock):
                pass
        # the holder's pid and its command, as the README promises
        assert f"pid {holder.pid} (october_setup ./stack --recipe current)" in info.value.message
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    with StackLock(lock):  # released when the holder dies
        pass


def test_runner_timeout_kills_a_silent_hang(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(CommandFailed) as info:
        Runner(tmp_path).run([sys.executable, "-c", "import time; time.sleep(30)"], step="s", timeout=1)
    assert time.monotonic() - start < 10
    assert "killed after 1 s" in info.value.message


def test_conftest_guard_refuses_non_loopback_connections() -> None:
    """tests/conftest.py's guard must itself be able to stop a test that reaches out."""
    import socket
    with pytest.raises(ConnectionRefusedError, match="only connect to loopback"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)


def test_runner_program_that_cannot_start(tmp_path: Path) -> None:
    """A file that is there but not executable, or a missing working directory: a message, not a traceback."""
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(ToolMissing) as info:
        Runner(tmp_path / "logs").run([str(script)], step="s")
    assert "could not start" in info.value.message and "Permission denied" in info.value.message
    with pytest.raises(ToolMissing) as info:
        Runner(tmp_path / "logs").run([sys.executable, "-c", "pass"], step="s", cwd=tmp_path / "nowhere")
    assert "No such file or directory" in info.value.message


def test_killed_after_an_earlier_step_ran_later_steps_never_look_cached(tmp_path: Path) -> None:
    """Killed right after a step re-ran: a later marker is trusted only if the result it was made
    from is the one now recorded."""
    vals = [{"v": "1"}, {"v": "2"}, {"v": "3"}]
    steps = [FileStep(n, v) for n, v in zip("abc", vals)]
    ctx = make_ctx(tmp_path)
    run_pipeline(steps, ctx)

    def killed_after(rec: Any) -> None:
        if rec.name == "b" and rec.status == "ran":
            raise KeyboardInterrupt

    vals[1]["v"] = "new"                          # b's result changes; c's marker stays from before
    ctx2 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(steps, ctx2, on_record=killed_after)
    assert ctx.paths.marker("c").exists()
    ctx3 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    assert [r.status for r in run_pipeline(steps, ctx3)] == ["cached", "cached", "ran"]

    (ctx.paths.root / "b.txt").unlink()          # b re-runs to the same result: c stays valid
    ctx4 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(steps, ctx4, on_record=killed_after)
    ctx5 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    assert [r.status for r in run_pipeline(steps, ctx5)] == ["cached", "cached", "cached"]


def test_a_step_killed_while_running_leaves_no_marker(tmp_path: Path) -> None:
    """A step that runs again has no marker until it finishes, even when it had one before."""
    vals = [{"v": "1"}, {"v": "2"}]
    steps = [FileStep(n, v) for n, v in zip("ab", vals)]
    ctx = make_ctx(tmp_path)
    run_pipeline(steps, ctx)
    vals[0]["v"] = "changed"

    class Killed(SilentReporter):
        def step_start(self, name: str, reason: str) -> None:
            raise KeyboardInterrupt

    ctx2 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=Killed())
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(steps, ctx2)
    assert not ctx.paths.marker("a").exists()
    ctx3 = StepContext(options=ctx.options, paths=ctx.paths, runner=ctx.runner, ui=ctx.ui)
    assert [r.status for r in run_pipeline(steps, ctx3)] == ["ran", "ran"]
