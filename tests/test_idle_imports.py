"""Imports made while the main thread waits for a child (installer/core/idle.py): only while the child runs
past the grace, only in the main thread, never on a no-op re-run; a module that fails to import there fails
where it is used, as it would have.  Real processes (``sleep``, ``git``), real modules written to tmp_path."""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from october.installer.core import idle
from october.installer.core.runner import Runner
from october.installer.engine import StepContext, run_pipeline, verify_pipeline
from october.installer.git import look
from tests.test_pipeline import FileResult, FileStep, make_ctx


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for modules that say when they were imported; the queue left empty after."""
    folder = tmp_path / "mods"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    idle.forget()
    yield folder
    idle.forget()
    for name in [n for n in sys.modules if n.startswith("idle_probe_")]:
        del sys.modules[name]


def _module(folder: Path, name: str, body: str = "") -> str:
    (folder / f"{name}.py").write_text("import time\nIMPORTED_AT = time.monotonic()\n" + body)
    importlib.invalidate_caches()
    return name


def test_a_module_queued_is_imported_while_a_command_runs_past_the_grace(modules: Path, tmp_path: Path) -> None:
    name = _module(modules, "idle_probe_a")
    idle.later([name])
    runner = Runner(tmp_path / "logs")
    start = time.monotonic()
    runner.run(["sleep", "0.3"], step="t")
    end = time.monotonic()
    assert name in sys.modules
    assert start + idle.GRACE_S <= sys.modules[name].IMPORTED_AT < end - 0.1      # during the wait, not after it
    assert idle.pending() == []


def test_a_command_that_ends_within_the_grace_imports_nothing(modules: Path, tmp_path: Path) -> None:
    name = _module(modules, "idle_probe_b")
    idle.later([name])
    Runner(tmp_path / "logs").run(["true"], step="t")
    look(tmp_path, "--version")
    assert name not in sys.modules and idle.pending() == [name]


def test_git_s_looks_and_the_probes_wait_the_same_way(modules: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``git.look`` starts git itself (no runner): a look that lasts imports too (a git that sleeps: an alias)."""
    name = _module(modules, "idle_probe_c")
    idle.later([name])
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "alias.nap")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "!sleep 0.3")
    start = time.monotonic()
    _out, err = look(tmp_path, "nap")
    assert err is None
    assert name in sys.modules and sys.modules[name].IMPORTED_AT < start + 0.25


def test_a_child_s_output_is_read_at_once_not_held_back_by_an_import(modules: Path, tmp_path: Path) -> None:
    """Review: the imports ran before the runner read the child's pipe, so its progress froze for their length.
    A child with output waiting is read; nothing is imported during it."""
    slow = _module(modules, "idle_probe_slow", "time.sleep(0.5)\n")
    idle.later([slow])
    seen: list[float] = []
    start = time.monotonic()
    Runner(tmp_path / "logs", echo=lambda line: seen.append(time.monotonic() - start)).run(
        ["sh", "-c", "echo progress; sleep 0.3; echo done"], step="t")
    assert len(seen) == 2 and seen[0] < 0.2
    assert slow not in sys.modules and idle.pending() == [slow]


def test_a_process_holding_more_than_1023_descriptors_still_waits(modules: Path, tmp_path: Path) -> None:
    """Review: ``select`` refuses a descriptor past 1023 (ValueError: an internal error, exit 70, in the fetch);
    a run started with many inherited descriptors must work as before."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this machine allows {hard} open files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200) if hard == resource.RLIM_INFINITY
                                                else min(max(soft, 1200), hard), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        name = _module(modules, "idle_probe_fds")
        idle.later([name])
        Runner(tmp_path / "logs").run(["sleep", "0.3"], step="t")
        assert name in sys.modules
        idle.later([_module(modules, "idle_probe_fds2")])
        assert look(tmp_path, "--version")[1] is None
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_only_the_main_thread_imports(modules: Path, tmp_path: Path) -> None:
    """Another thread's import could wait for ever on a module lock a Ctrl-C left held in the main thread."""
    name = _module(modules, "idle_probe_d")
    idle.later([name])
    done: list[int] = []
    runner = Runner(tmp_path / "logs")
    worker = threading.Thread(target=lambda: done.append(runner.run(["sleep", "0.2"], step="t").returncode))
    worker.start()
    worker.join()
    assert done == [0] and name not in sys.modules and idle.pending() == [name]


def test_a_module_that_fails_there_fails_where_it_is_used(modules: Path, tmp_path: Path) -> None:
    broken = _module(modules, "idle_probe_e", "raise RuntimeError('broken on import')\n")
    fine = _module(modules, "idle_probe_f")
    idle.later([broken, fine])
    Runner(tmp_path / "logs").run(["sleep", "0.3"], step="t")
    assert broken not in sys.modules and fine in sys.modules     # the next one is imported all the same
    with pytest.raises(RuntimeError, match="broken on import"):
        importlib.import_module(broken)


def test_a_ctrl_c_during_an_import_there_kills_the_command(modules: Path, tmp_path: Path) -> None:
    """The import runs inside the runner's guard: the interrupt ends the child as it always did."""
    _module(modules, "idle_probe_g", "raise KeyboardInterrupt\n")
    idle.later(["idle_probe_g"])
    marker = tmp_path / "still-running"
    with pytest.raises(KeyboardInterrupt):
        Runner(tmp_path / "logs").run(["sh", "-c", f"sleep 1; touch {marker}"], step="t")
    time.sleep(1.3)
    assert not marker.exists()


def test_every_step_s_warm_list_names_modules_that_import() -> None:
    """The lists are names in strings: one renamed away would quietly stop being imported ahead."""
    import october.installer.steps as steps_pkg

    names: list[str] = []
    for path in sorted(Path(steps_pkg.__file__).parent.glob("*.py")):
        mod = importlib.import_module(f"october.installer.steps.{path.stem}")
        for cls in vars(mod).values():
            if isinstance(cls, type) and cls.__module__ == mod.__name__ and "warm" in vars(cls):
                names += list(cls.warm)
    assert len(names) > 10 and all(n.startswith("october.installer.") for n in names)
    for name in names:
        importlib.import_module(name)


class WarmStep(FileStep):
    """A FileStep that names modules to import ahead and records what is queued when it runs."""

    def __init__(self, name: str, warm: tuple[str, ...], seen: list[list[str]]) -> None:
        super().__init__(name, {"v": name})
        self.warm = warm
        self.seen = seen

    def run(self, ctx: StepContext) -> FileResult:
        self.seen.append(idle.pending())
        return super().run(ctx)


def test_the_pipeline_queues_when_a_step_runs_this_one_s_and_the_next_s(modules: Path, tmp_path: Path) -> None:
    a, b, c = (_module(modules, f"idle_probe_{x}") for x in "hij")
    seen: list[list[str]] = []
    steps = [WarmStep("one", (a,), seen), WarmStep("two", (b,), seen), WarmStep("three", (c,), seen)]
    ctx = make_ctx(tmp_path)
    assert verify_pipeline(steps, ctx) is None and idle.pending() == []     # verifying queues nothing
    run_pipeline(steps, ctx)
    # a big import begun late in a short wait would hold the step up: two steps ahead is not queued
    assert seen == [[a, b], [a, b, c], [a, b, c]]
    assert idle.pending() == []                                              # forgotten at the end
    assert verify_pipeline(steps, ctx) is not None and idle.pending() == []  # a no-op queues nothing
    # review: a next step done before is most likely cached again, its imports not needed
    seen.clear()
    steps[0].value = {"v": "changed"}
    run_pipeline(steps, ctx)
    assert seen[0] == [a]


def test_the_preflight_imports_while_the_system_torch_probe_outlasts_the_others(
        modules: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The system torch's probe (a real interpreter importing torch: ~1 s on the H200) ends after the machine's
    probes; the main thread imports what the fetch will need meanwhile, not after.  The probe is a stand-in that
    sleeps (no site-provided torch interpreter is configured here), run in the step's own worker thread."""
    from october.installer.steps import preflight
    from tests.fixtures.preflight import make_ctx, write_recipe

    ended: list[float] = []

    def slow_torch(*_args: object) -> None:
        time.sleep(0.4)
        ended.append(time.monotonic())

    monkeypatch.setattr(preflight, "system_torch_facts", slow_torch)
    name = _module(modules, "idle_probe_pf")
    idle.later([name])
    ctx = make_ctx(tmp_path, write_recipe(tmp_path / "r", "min_ram_gb = 0.01\nmin_disk_gb = 0.01\n"),
                   skip=("nvcc", "gpu", "cuda_arch"))
    preflight.PreflightStep().run(ctx)
    assert name in sys.modules and ended
    assert sys.modules[name].IMPORTED_AT < ended[0] - 0.1       # during the torch probe's wait, not after it
