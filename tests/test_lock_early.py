"""The lock's listing begun during install's checks (installer/steps/lockearly.py): the lock it makes is
the lock the step makes itself; an env changed after the listing is listed again; a run that ends
before the lock step ends the listing.  Real uv, real git, real wheels (the offline fixture world)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from october.installer.core.errors import InstallError
from october.installer.core.paths import StackPaths
from october.installer.core.runner import Runner
from october.installer.engine import SetupOptions, SilentReporter, StepContext, run_pipeline
from october.installer.pipeline.plan import plan_steps, stop_early
from october.installer.recipe import load_recipe
from october.installer.steps.lock import LockStep
from october.installer.steps.lockearly import EarlyLock
from tests.fixtures.world import World
from tests.fixtures.builtcache import rewrite_entry_with_manifest
from tests.test_setup_e2e import setup, world  # noqa: F401  (the world fixture and the one setup driver)

pytestmark = pytest.mark.slow


def lock_log(stack: Path) -> str:
    return (stack / "logs" / "lock.log").read_text()


def _ctx(world: World, stack: Path, cache: Path) -> StepContext:
    opts = SetupOptions(stack=stack, recipe=load_recipe(str(world.recipe)), cache_dir=cache)
    paths = StackPaths(stack)
    paths.state.mkdir(parents=True, exist_ok=True)
    return StepContext(options=opts, paths=paths, runner=Runner(paths.logs), ui=SilentReporter())


def _no_early_thread() -> bool:
    return not any(t.name == "october-lock-early" for t in threading.enumerate())


def test_the_listing_begun_during_install_makes_the_lock_the_step_would(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    setup(world, tmp_path / "a", cache)                     # run_setup: the listing begun during install
    log = lock_log(tmp_path / "a")
    assert "begun during the install step's checks" in log and "is used" in log
    assert log.index("begun during") < log.index("uv pip compile") < log.index("is used")

    ctx = _ctx(world, tmp_path / "b", cache)                # the steps alone: the lock step lists the env
    run_pipeline(plan_steps(ctx.recipe), ctx)
    assert "begun during" not in lock_log(tmp_path / "b")
    a = (tmp_path / "a" / "pylock.toml").read_text().replace(str(tmp_path / "a"), "STACK")
    b = (tmp_path / "b" / "pylock.toml").read_text().replace(str(tmp_path / "b"), "STACK")
    assert a == b
    assert _no_early_thread()


def test_on_an_env_copied_from_the_cache_the_listing_begins_with_the_install_step(world: World,
                                                                                  tmp_path: Path) -> None:
    """A second stack's env comes from the built-stack cache with the forks' editable installs in it: the listing
    begins once the install step took the forks' build outputs from the entry (ENV_COPIED), before its checks, and
    makes the lock the lock step makes alone."""
    cache = tmp_path / "cache"
    setup(world, tmp_path / "a", cache)
    setup(world, tmp_path / "b", cache)                     # its env copied from a's entry
    log = lock_log(tmp_path / "b")
    assert "begun once the forks' build outputs came from the built-stack cache" in log, log
    assert "is used" in log and "during the install step's checks" not in log
    install = (tmp_path / "b" / "logs" / "install.log").read_text()
    assert "fork build outputs copied from the built-stack cache entry" in install

    ctx = _ctx(world, tmp_path / "c", cache)                # the steps alone, on a copied env too
    run_pipeline(plan_steps(ctx.recipe), ctx)
    assert "begun" not in lock_log(tmp_path / "c")
    b = (tmp_path / "b" / "pylock.toml").read_text().replace(str(tmp_path / "b"), "STACK")
    c = (tmp_path / "c" / "pylock.toml").read_text().replace(str(tmp_path / "c"), "STACK")
    assert b == c and _no_early_thread()


def test_on_a_copied_env_whose_forks_are_installed_again_the_listing_waits_for_them(world: World, tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch
                                                                                     ) -> None:
    """Review: announced as install began, the listing ran while the forks were installed again into a copied env
    (their outputs not taken from the entry: a file in the way, another base wheel), was refused, and could not
    begin again: the lock step listed the env itself.  It now begins with the forks' outputs from the entry only."""
    from october.installer.steps import reuse

    cache = tmp_path / "cache"
    setup(world, tmp_path / "a", cache)
    monkeypatch.setattr(reuse, "forks_from_built_stack", lambda _ctx, _step, _forks: (None, None))
    setup(world, tmp_path / "b", cache)
    log = lock_log(tmp_path / "b")
    assert "env copied from the built-stack cache entry" in (tmp_path / "b" / "logs" / "env.log").read_text()
    assert "begun during the install step's checks" in log and "is used" in log, log
    assert _no_early_thread()


def test_on_an_env_an_earlier_run_copied_the_listing_waits_for_the_repair(world: World, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: the env step done by an earlier run (it copied the env, its install failed), a file of it edited since:
    this run's install repairs the env.  The listing began before the repair (the env's result still names the
    entry), was refused and could not begin again.  It begins with this run's copy only."""
    from october.installer.core.errors import InstallError
    from october.installer.steps.install import InstallStep
    from tests.test_cache_isolation import POISON, site

    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    with monkeypatch.context() as m:                # s2's first run: env copied, install fails in its checks
        def fail(_self: InstallStep, _ctx: StepContext, *_markers: object) -> None:
            raise InstallError("planted", expected="-", found="-", fix="-")

        m.setattr(InstallStep, "check_consistency", fail)
        with pytest.raises(InstallError):
            setup(world, s2, cache)
    with open(site(s2) / "tinydep" / "__init__.py", "a") as fh:
        fh.write(POISON)
    (s2 / "logs" / "lock.log").unlink(missing_ok=True)
    res = setup(world, s2, cache)
    assert {r.name: r.status for r in res.records}["env"] == "cached"
    assert "--reinstall-package" in (s2 / "logs" / "install.log").read_text()
    log = lock_log(s2)
    assert "begun during the install step's checks" in log and "is used" in log, log
    assert "came from the built-stack cache" not in log and _no_early_thread()


def test_an_env_changed_after_the_listing_is_listed_again(world: World, tmp_path: Path) -> None:
    stack, cache = tmp_path / "s", tmp_path / "cache"
    ctx = _ctx(world, stack, cache)
    steps = plan_steps(ctx.recipe)
    early = EarlyLock.wire(ctx, steps)
    assert early is not None
    upto = [s.name for s in steps].index("install") + 1
    run_pipeline(steps[:upto], ctx)                         # install announced its forks: the listing began
    site = next((stack / "env").glob("lib/python*/site-packages"))
    # what an import leaves (bytecode, a module of no distribution) is no change of what the env holds
    (site / "__pycache__").mkdir(exist_ok=True)
    (site / "__pycache__" / "zz.cpython-311.pyc").write_bytes(b"")
    (site / "zz_module.py").write_text("")
    listing = early.take(ctx)
    assert listing is not None and "tinydep" in json.dumps(dict(listing.raw))
    # planted: a distribution leaves the env after it was listed (its metadata directory gone)
    for info in site.glob("tinydep-*.dist-info"):
        shutil.rmtree(info)
    # the run goes on from the lock step (a whole re-run would make the env again: the env step holds the env
    # to what the install left, test_setup_e2e)
    run_pipeline(steps[upto:], ctx)
    assert "is not used (the env changed after it was listed)" in lock_log(stack)
    assert "tinydep" not in (stack / "pylock.toml").read_text()
    early.stop(ctx)
    assert _no_early_thread()


def test_a_listing_still_running_when_the_run_ends_is_ended(world: World, tmp_path: Path) -> None:
    """What stop() does to a command of the listing that is still running: a real one (``sleep``) that
    the listing runs through its own runner, as it runs ``uv pip compile``."""
    ctx = _ctx(world, tmp_path / "s", tmp_path / "cache")
    started = threading.Event()

    def slow_lister(_ctx: StepContext, runs: EarlyLock):
        started.set()
        return runs.run(["sleep", "60"], step="lock")

    early = EarlyLock(LockStep(), lister=slow_lister)
    early.begin(ctx, [])
    assert started.wait(10)
    log, deadline = tmp_path / "s" / "logs" / "lock.log", time.monotonic() + 10
    while not (log.exists() and "$ sleep 60" in log.read_text()):     # the command is starting
        assert time.monotonic() < deadline, "the listing's command never started"
        time.sleep(0.01)
    start = time.monotonic()
    early.stop(ctx)
    assert time.monotonic() - start < 10 and _no_early_thread()
    assert early.listing is None and "listing it failed" in (early.why_not or "")
    assert "ended: the run ended before the lock step" in lock_log(tmp_path / "s")
    with pytest.raises(RuntimeError, match="ended before the listing"):
        early.run(["true"], step="lock")                    # nothing more starts after stop


def test_a_run_whose_install_fails_after_the_forks_are_in_place_leaves_no_listing(world: World,
                                                                                 tmp_path: Path) -> None:
    """Install fails in its checks, after the listing began (a built-stack entry whose manifest and
    file were changed together: the RECORD check refuses it); the run ends with the listing ended."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    rewrite_entry_with_manifest(cache)
    with pytest.raises(InstallError):
        setup(world, s2, cache)
    log = lock_log(s2)
    assert "begun once the forks' build outputs came from the built-stack cache" in log
    assert "is used" not in log and "was ended" in log
    assert not (s2 / ".state" / "lock.json").exists() and _no_early_thread()


@pytest.mark.parametrize("when", ["while it was listed", "after it was listed"])
def test_a_distribution_rewritten_in_place_is_listed_again(world: World, tmp_path: Path, when: str) -> None:
    """A METADATA rewritten in place (its directory's mtime unchanged; here with the same bytes, so the
    env still verifies) while the listing runs, or after it ended: the lock step lists the env itself."""
    stack, cache = tmp_path / "s", tmp_path / "cache"
    ctx = _ctx(world, stack, cache)
    steps = plan_steps(ctx.recipe)

    def rewrite() -> None:
        meta = next((stack / "env").glob("lib/python*/site-packages/tinydep-*.dist-info/METADATA"))
        info = os.stat(meta.parent)
        meta.write_text(meta.read_text())
        os.utime(meta, ns=(info.st_atime_ns, info.st_mtime_ns + 7_000_000))     # another tick, whatever the clock
        os.utime(meta.parent, ns=(info.st_atime_ns, info.st_mtime_ns))

    def lister(c: StepContext, runs: EarlyLock):
        from october.installer.steps.lock import list_env

        listing = list_env(c, runs)
        if when == "while it was listed":
            rewrite()
        return listing

    early = EarlyLock.wire(ctx, steps)
    assert early is not None
    early.lister = lister
    upto = [s.name for s in steps].index("install") + 1
    run_pipeline(steps[:upto], ctx)
    if when == "after it was listed":
        assert early.wait(timeout=30)
        rewrite()
    try:
        run_pipeline(steps, ctx)
        assert f"is not used (the env changed {when})" in lock_log(stack)
        assert "tinydep" in (stack / "pylock.toml").read_text()
    finally:
        early.stop(ctx)


def test_a_listing_held_open_outside_its_group_does_not_hold_the_run(world: World, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A process of the listing in a session of its own (``setsid``) survives the kill and keeps the
    output open: stop() waits once, a bounded time (Started.KILL_WAIT_S, shortened here), says so, and
    returns."""
    from october.installer.core.runner import Started

    monkeypatch.setattr(Started, "KILL_WAIT_S", 1.0)
    ctx = _ctx(world, tmp_path / "s", tmp_path / "cache")
    pid_file = tmp_path / "holder.pid"

    def lister(_ctx: StepContext, runs: EarlyLock):
        # the sleep is forked (the guard's death signal is not inherited across a fork), in a session
        # of its own: neither the group's kill nor the guard's death reaches it
        return runs.run(["setsid", "sh", "-c", f"sleep 30 & echo $! > {pid_file}; wait"], step="lock")

    early = EarlyLock(LockStep(), lister=lister)
    early.begin(ctx, [])
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text().strip()):     # the holder is up
        assert time.monotonic() < deadline, "the listing's command never started"
        time.sleep(0.01)
    holder = int(pid_file.read_text())
    try:
        start = time.monotonic()
        early.stop(ctx)
        assert time.monotonic() - start < 1.5 * Started.KILL_WAIT_S + 0.5      # one bounded wait, not two
        text = lock_log(tmp_path / "s")
        assert "still held open by a process outside its group" in text and "not waiting longer" in text
    finally:
        os.kill(holder, signal.SIGKILL)
    assert early.wait(timeout=10) and _no_early_thread()        # the holder gone, the thread ends


def test_a_site_outside_the_env_the_listing_read_is_watched_too(world: World, tmp_path: Path) -> None:
    """A distribution the listing found outside the env (a system site under a site-provided torch;
    here a directory of one dist-info added to what the real listing found) changed after the listing:
    the lock step lists the env itself."""
    stack, cache = tmp_path / "s", tmp_path / "cache"
    ctx = _ctx(world, stack, cache)
    steps = plan_steps(ctx.recipe)
    system = tmp_path / "system-site"
    (system / "sysdep-1.0.dist-info").mkdir(parents=True)
    (system / "sysdep-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sysdep\nVersion: 1.0\n")

    def lister(c: StepContext, runs: EarlyLock):
        from october.installer.steps.lock import Listing, list_env

        got = list_env(c, runs)
        return Listing(raw={**got.raw, "distributions": [*got.raw["distributions"], {
            "name": "sysdep", "version": "1.0", "direct_url": None, "installer": "pip", "site": str(system)}]},
            index_packages=got.index_packages)

    early = EarlyLock.wire(ctx, steps)
    assert early is not None
    early.lister = lister
    run_pipeline(steps[:[s.name for s in steps].index("install") + 1], ctx)
    try:
        assert early.wait(timeout=30) and early.listing is not None
        (system / "sysdep-1.0.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: sysdep\nVersion: 1.0\nRequires-Dist: other\n")
        assert early.take(ctx) is None and "the env changed after it was listed" in (early.why_not or "")
    finally:
        early.stop(ctx)


class _Begun:
    """Work begun early whose stop records itself, or raises (a terminal gone after SIGHUP: EIO)."""

    def __init__(self, name: str, fails: bool) -> None:
        self.step, self.fails, self.stopped = LockStep() if name == "lock" else None, fails, False

    def stop(self, ctx: StepContext) -> None:
        self.stopped = True
        if self.fails:
            raise OSError(5, "Input/output error")


@pytest.mark.parametrize("run_failed", [True, False])
def test_every_early_start_is_stopped_and_the_run_s_own_error_is_the_one_seen(world: World, tmp_path: Path,
                                                                               run_failed: bool) -> None:
    ctx = _ctx(world, tmp_path / "s", tmp_path / "cache")
    first, second = _Begun("jit", fails=True), _Begun("lock", fails=False)
    if run_failed:                      # the run's error is in flight: the clean-up's is noted, not raised
        stop_early([first, second], ctx, raise_first=False)
    else:
        with pytest.raises(OSError, match="Input/output error"):
            stop_early([first, second], ctx, raise_first=True)
    assert first.stopped and second.stopped
    assert "stopping what was begun early failed: OSError(5, 'Input/output error')" in (
        tmp_path / "s" / "logs" / "setup.log").read_text()


def test_the_lock_asks_uv_about_the_interpreter_the_env_s_python_is(world: World, tmp_path: Path) -> None:
    """``uv pip compile --python`` names the interpreter the env's Python is (its real path): uv keeps what it
    learnt of an interpreter by its path, and each stack's env is a new path (~50 ms a second stack).  The files
    it names are those it names for the env's own path."""
    import shlex
    import subprocess
    import tomllib

    from october.installer.pyenv.uvcmd import uv_exe

    stack = tmp_path / "a"
    setup(world, stack, tmp_path / "cache")
    line = next(ln for ln in lock_log(stack).splitlines() if ln.startswith("$ ") and " pip compile " in ln)
    argv = shlex.split(line[2:])
    env_python = stack / "env" / "bin" / "python"
    assert argv[argv.index("--python") + 1] == os.path.realpath(env_python) != str(env_python)

    lock = tomllib.loads((stack / "pylock.toml").read_text())
    pins = [f"{p['name']}=={p['version']}" for p in lock["packages"] if "fork" not in p.get("tool", {}).get("october", {})]
    assert pins
    (tmp_path / "req.in").write_text("\n".join(pins) + "\n")
    out: dict[str, list[object]] = {}
    for which, python in (("real", os.path.realpath(env_python)), ("env", str(env_python))):
        (tmp_path / which).mkdir()
        rest = argv[argv.index("--no-deps"):argv.index("-o")]
        rest[rest.index("--python") + 1] = python
        subprocess.run([uv_exe(), "pip", "compile", str(tmp_path / "req.in"), *rest, "-o",
                        str(tmp_path / which / "pylock.toml")], check=True, timeout=120,
                       env={**os.environ, "UV_CACHE_DIR": str(tmp_path / f"uv-{which}")})
        out[which] = tomllib.loads((tmp_path / which / "pylock.toml").read_text())["packages"]
    assert out["real"] == out["env"] and len(out["real"]) == len(pins)
