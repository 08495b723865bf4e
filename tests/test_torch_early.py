"""The site torch warmed during the fetch (``steps/torchearly.py``, ``checks/probes/warm_torch.py``): its modules
compiled into this run's pycache prefix in parallel, before the env step's probe imports torch from it.

The "system" interpreter is a real uv venv holding a torch stand-in (a real wheel, installed by uv without
bytecode, as the H200 image's torch is): a CUDA torch cannot be installed offline here; what is warmed is its
package's ``.py`` files, which the stand-in has, and its ``lib/*.so`` files, which it has too (read ahead only).
Mocked: the CPU count, in the tests that warm (``torchearly.available_cpus``): a machine of 16 CPUs, as the H200
has, cannot exist here (this one has 2); ``test_a_machine_with_few_cpus_warms_nothing`` runs with the real count.
"""

from __future__ import annotations

import compileall
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.core.errors import CommandFailed, FileSystemError
from october.installer.engine import FETCH_BEGUN
from october.installer.pyenv import systorch
from october.installer.recipe import TorchPin
from october.installer.steps.env import EnvStep
from october.installer.steps.fetch import FetchStep
from october.installer.steps.results import PreflightResult
from october.installer.steps import torchearly
from october.installer.steps.torchearly import KEY, MIN_CPUS, WARM, EarlyTorch, drop, settle
from tests.fixtures import stack_forks as sf
from tests.fixtures.wheels import build_wheel
from tests.test_system_torch import _pycs, _uv

VERSION = "2.11.0+cu130"
MODULES = 40


def _system(root: Path, modules: int = MODULES, version: str = VERSION) -> tuple[Path, Path]:
    """A system interpreter with a torch stand-in of ``modules`` submodules that ``import torch`` imports, and
    a library -> (its python, its site torch package)."""
    files = {"torch/version.py": f'__version__ = "{version}"\ncuda = "13.0"\n',
             "torch/lib/libtorch_stand_in.so": b"\x7fELF" + bytes(4096)}
    files |= {f"torch/m{i}.py": f"VALUE = {i}\n" for i in range(modules)}
    files["torch/__init__.py"] = (f'__version__ = "{version}"\nfrom . import version\n'
                                  + "".join(f"from . import m{i}\n" for i in range(modules)))
    build_wheel(root / "wheels", "torch", version, files)
    _uv("venv", "-q", "--python", sys.executable, str(root / "sys"), cache=root / "uvc")
    _uv("pip", "install", "-q", "--python", str(root / "sys/bin/python"), "--no-index", "--find-links",
        str(root / "wheels"), f"torch=={version}", cache=root / "uvc")
    return root / "sys" / "bin" / "python", next((root / "sys").glob("lib/python*/site-packages/torch"))


def _ctx(tmp: Path, python: Path, site_torch: Path):
    """A step context whose recipe takes torch from ``python`` and whose preflight located it."""
    rec = sf.recipe(sf.Links(tmp / "links", b""), None, tmp, fork_uses=())
    rec = dataclasses.replace(rec, torch=TorchPin(VERSION, source="system", system_python=str(python)))
    ctx = sf.context(tmp / "stack", rec, tmp / "cache")
    ctx.paths.state.mkdir(parents=True)
    ctx.done["preflight"] = sf.record(PreflightResult(
        facts={"system_torch": {"file": str(site_torch / "__init__.py")}}, machine={}, checks=(), skipped=(),
        tools={}))
    return ctx


@pytest.fixture
def many_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torchearly, "available_cpus", lambda: 16)


def _warm_line(log: str) -> dict:
    line = next(ln for ln in log.splitlines() if ln.startswith("OCTOBER_WARM "))
    return json.loads(line[len("OCTOBER_WARM "):])


def _torch_pycs(prefix: Path, site_torch: Path) -> dict[str, tuple[str, int]]:
    under = prefix / str(site_torch).lstrip("/")
    return _pycs(under) if under.is_dir() else {}


def test_the_site_torch_is_compiled_during_the_fetch_and_the_probe_imports_that_bytecode(tmp_path: Path,
                                                                                          many_cpus: None) -> None:
    """Begun on FETCH_BEGUN, the warm-up compiles every module of the site torch into the run's prefix (none
    beside the site's files, none a module the site ships compiled); the env step's wait returns once it has
    ended; the probe then imports torch and compiles nothing again (names, bytes and mtimes unchanged)."""
    python, site_torch = _system(tmp_path / "system")
    # one module the site ships compiled beside its source: offered by the env step's seed, not compiled here
    assert compileall.compile_file(str(site_torch / "m0.py"), quiet=1)
    shipped = _pycs(site_torch)
    ctx = _ctx(tmp_path, python, site_torch)
    early = EarlyTorch.wire(ctx, [FetchStep(), EnvStep()])
    assert early is not None
    ctx.announce(FETCH_BEGUN, None)
    assert early.started is not None and ctx.early[KEY] is early
    settle(ctx)
    assert early.started.finished and KEY not in ctx.early
    log = ctx.runner.log_path("env").read_text()
    warmed = _warm_line(log)
    assert warmed["sources"] == warmed["compiled"] == MODULES - 1 + 2      # m1.., version, __init__ (not m0)
    assert warmed["read_ahead_bytes"] == 4100
    before = _torch_pycs(ctx.paths.run_pycache, site_torch)
    assert sorted(before) == sorted(f"{p.stem}.{sys.implementation.cache_tag}.pyc"
                                    for p in site_torch.glob("*.py") if p.name != "m0.py")
    facts = systorch.probe(ctx.runner, "env", python, python_args=ctx.paths.pycache_args())
    assert facts.get("version") == VERSION, facts
    after = _torch_pycs(ctx.paths.run_pycache, site_torch)
    assert {k: v for k, v in after.items() if k in before} == before        # read, not compiled again
    assert set(after) - set(before) == {f"m0.{sys.implementation.cache_tag}.pyc"}   # not seeded here
    assert _pycs(site_torch) == shipped                 # nothing written beside the system interpreter's files


def test_nothing_is_warmed_for_an_env_that_is_there_or_copied_or_a_torch_installed_into_the_env(
        tmp_path: Path, many_cpus: None) -> None:
    python, site_torch = _system(tmp_path / "system", modules=1)
    ctx = _ctx(tmp_path, python, site_torch)
    installed = dataclasses.replace(ctx.recipe, torch=TorchPin(VERSION))
    assert EarlyTorch.wire(dataclasses.replace(ctx, options=dataclasses.replace(ctx.options, recipe=installed)),
                           [FetchStep(), EnvStep()]) is None
    assert EarlyTorch.wire(ctx, [EnvStep(), FetchStep()]) is None           # env before fetch: nothing to overlap
    early = EarlyTorch(EnvStep())
    ctx.early[EnvStep.name] = object()         # EarlyEnv copies the env of an identical stack: no probe compiles
    early.begin(ctx, None)
    assert early.started is None
    del ctx.early[EnvStep.name]
    ctx.paths.env.mkdir(parents=True)          # an env is there (uv venv --clear makes it again, no overlap)
    early.begin(ctx, None)
    assert early.started is None
    ctx.paths.env.rmdir()
    early.begin(ctx, None)
    assert early.started is not None
    settle(ctx)


def test_a_run_that_ends_during_the_warm_up_kills_it_and_a_failed_one_is_only_noted(tmp_path: Path,
                                                                                     many_cpus: None) -> None:
    """The run's end (before the stack lock is released and the prefix removed) kills a warm-up still running;
    a warm-up that fails is noted in the env log and the env step goes on (its probe compiles what it needs)."""
    python, site_torch = _system(tmp_path / "system", modules=3000)
    ctx = _ctx(tmp_path, python, site_torch)
    early = EarlyTorch(EnvStep())
    early.begin(ctx, None)
    assert early.started is not None and not early.started.finished
    early.stop(ctx)
    assert early.started.finished
    log = ctx.runner.log_path("env").read_text()
    assert "# the torch warm-up begun during the fetch was killed: the run ended first" in log
    assert "OCTOBER_WARM " not in log
    # a failed one: the probe script given a folder count it cannot read
    failing = EarlyTorch(EnvStep())
    failing.started = ctx.runner.start([str(python), "-I", str(WARM), str(site_torch), "not-a-number"], step="env")
    ctx.early[KEY] = failing
    settle(ctx)
    assert "# the torch warm-up failed (exit 1); the probe compiles what it needs" in \
        ctx.runner.log_path("env").read_text()
    with pytest.raises(CommandFailed):
        failing.started.wait()
    # the review: a warm-up that dies of a full disk (its pool's semaphore in a full /dev/shm) is the runner's
    # DiskFullError, not a CommandFailed: noted all the same, never the env step's failure
    full = EarlyTorch(EnvStep())
    full.started = ctx.runner.start([str(python), "-c", "import sys; print('OSError: [Errno 28] No space left on "
                                     "device'); sys.exit(1)"], step="env")
    ctx.early[KEY] = full
    settle(ctx)
    assert "# the torch warm-up failed (DiskFullError: " in ctx.runner.log_path("env").read_text()
    with pytest.raises(FileSystemError):
        full.started.wait()


def test_a_warm_up_that_does_not_end_is_killed_after_the_wait_and_one_no_probe_reads_is_killed_at_once(
        tmp_path: Path) -> None:
    """The review: the env step waited without end for a warm-up that hung (a stalled network filesystem); it
    waits at most ``WAIT_S``, then kills it.  And an env copied from the built-stack cache runs no probe: the
    warm-up is killed then (``drop``), not left compiling beside the install and the JIT."""
    ctx = _ctx(tmp_path, Path(sys.executable), tmp_path / "no-torch")
    hung = EarlyTorch(EnvStep())
    hung.started = ctx.runner.start([sys.executable, "-c", "import time; time.sleep(60)"], step="env")
    ctx.early[KEY] = hung
    settle(ctx, wait_s=1.0)
    assert hung.started.finished and KEY not in ctx.early
    assert "# the torch warm-up begun during the fetch was killed: not done after 1s" in \
        ctx.runner.log_path("env").read_text()
    unread = EarlyTorch(EnvStep())
    unread.started = ctx.runner.start([sys.executable, "-c", "import time; time.sleep(60)"], step="env")
    ctx.early[KEY] = unread
    drop(ctx)
    assert unread.started.finished and KEY not in ctx.early
    assert "killed: the env was copied from the built-stack cache" in ctx.runner.log_path("env").read_text()


def test_the_warm_up_compiles_nothing_without_a_pycache_prefix(tmp_path: Path) -> None:
    """Run without ``-X pycache_prefix`` (never by the tool) it would write beside the site's files: it writes
    nothing and says so."""
    python, site_torch = _system(tmp_path / "system", modules=2)
    out = subprocess.run([str(python), "-I", str(WARM), str(site_torch)], capture_output=True, text=True, check=True)
    assert _warm_line(out.stdout)["compiled"] == 0 and not list(site_torch.rglob("*.pyc"))


def test_a_machine_with_few_cpus_warms_nothing(tmp_path: Path) -> None:
    """This machine's real CPU count (2): compiling every module of torch would cost more than the probe's
    compile of those it imports, beside the fetch; nothing is started and the env log says why."""
    cpus = torchearly.available_cpus()
    if cpus >= MIN_CPUS:
        pytest.skip(f"{cpus} CPUs here: the warm-up runs (the tests above)")
    python, site_torch = _system(tmp_path / "system", modules=1)
    ctx = _ctx(tmp_path, python, site_torch)
    early = EarlyTorch(EnvStep())
    early.begin(ctx, None)
    assert early.started is None and KEY not in ctx.early
    assert f"# torch not warmed during the fetch: {cpus} CPU(s), fewer than {MIN_CPUS}" in \
        ctx.runner.log_path("env").read_text()


def _world(tmp: Path, modules: int):
    """The offline fixture world whose recipe takes torch from a system interpreter holding the stand-in of
    ``modules`` submodules -> (the recipe, the world)."""
    from october.installer.recipe import load_recipe
    from tests.fixtures.world import make_world

    world = make_world(tmp / "world")
    world.recipe.write_text(world.recipe.read_text().replace('version = "2.10.0+fixture"\n',
                                                             'version = "2.10.0+fixture"\nallow_system = true\n'))
    python, _ = _system(tmp / "system", modules, "2.10.0+fixture")
    return systorch.with_system_torch(load_recipe(str(world.recipe)), python), world


def test_a_setup_warms_torch_during_the_fetch_and_one_that_fails_kills_the_warm_up_before_it_ends(
        tmp_path: Path, many_cpus: None) -> None:
    """october_setup (run_setup) on the fixture world with a site torch: the warm-up begins with the fetch and
    ends before the probe; the prefix is gone with the run.  A run whose fetch fails (a fork's repository gone)
    kills a warm-up of 3,000 modules as it ends, before its lock is released and the prefix removed."""
    from october.installer.core.errors import OctoberError
    from october.installer.engine import SetupOptions, SilentReporter
    from october.installer.pipeline.plan import run_setup

    recipe, _ = _world(tmp_path / "a", MODULES)
    stack = tmp_path / "stack"
    done = run_setup(SetupOptions(stack=stack, recipe=recipe, cache_dir=tmp_path / "cache"), SilentReporter())
    assert {r.name: r.status for r in done.records}["env"] == "ran"
    log = (stack / "logs" / "env.log").read_text()
    assert "# begun during the fetch (october.installer.steps.torchearly)" in log
    assert _warm_line(log)["compiled"] == MODULES + 2
    probe = log.index("torch_facts.py\n")      # the env-side probe (preflight's runs with --locate)
    assert log.index("OCTOBER_WARM ") < probe
    assert not (stack / ".state" / "pycache").exists()
    recipe, world = _world(tmp_path / "b", 3000)
    for bare in (world.root / "git").glob("*.git"):
        shutil.rmtree(bare)
    stack = tmp_path / "stack-b"
    with pytest.raises(OctoberError):
        run_setup(SetupOptions(stack=stack, recipe=recipe, cache_dir=tmp_path / "cache-b"), SilentReporter())
    log = (stack / "logs" / "env.log").read_text()
    assert "# begun during the fetch (october.installer.steps.torchearly)" in log
    assert "# the torch warm-up begun during the fetch was killed: the run ended first" in log
    assert not (stack / ".state" / "pycache").exists()
