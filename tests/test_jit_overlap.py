"""Issue 20: the JIT build begins once the install step's forks are in place and runs while install checks
them (october.installer.steps.jitearly); the verdicts, the resume and the no-op stay what they were.

A FlashInfer-only stack in a real offline world: a stand-in FlashInfer fork in a real bare git repo,
real uv, git and pipeline; the JIT builder is the real builder's ``main`` with the stand-in gcc build
(tests/fixtures/jit_overlap_builder.py).  The fork's ``import flashinfer`` logs when each process
imported it (install's import check, the builder), and plants the faults: an import check that waits for
the builder's import, or fails.  The signals (Ctrl-C, SIGTERM, SIGHUP, SIGKILL) reach a real october_setup
process mid-build.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from october.installer.core.errors import CommandFailed, InstallError, JitError, StackLockedError
from october.installer.core.paths import StackPaths
from october.installer.core.runner import Runner, Started
from october.installer.core.stackmutex import StackLock, holder_file
from october.installer.engine import SetupOptions, SilentReporter, StepRecord
from october.installer.jit.integrity import MANIFEST, report
from october.installer.pipeline.plan import SetupResult, run_setup
from october.installer.recipe import load_recipe
from tests.fixtures.gitrepos import git
from tests.fixtures.stack_forks import FLASHINFER_ASYM, TORCH, make_links, write_project
from tests.fixtures.world import RELAXED_PREFLIGHT, fork_entry, recipe_head, snapshot, write_forks_file

BUILDER = "tests.fixtures.jit_overlap_builder"

# prepended to the fork's flashinfer/__init__.py: who imports it ("check": install's `python -I -c`,
# "builder": the JIT builder), when, and the planted faults
HOOK = '''
import json as _json, os as _os, sys as _sys, time as _time
_arg0 = (_sys.argv[:1] or [""])[0]
_who = "check" if _arg0 == "-c" else "builder" if "jit_overlap_builder" in _arg0 else "other"
_t0 = _time.time()
_saw = None
if _who == "check" and _os.environ.get("OVERLAP_AWAIT_BUILDER"):   # ends once the builder has imported it
    _log, _until, _saw = _os.environ["OVERLAP_IMPORT_LOG"], _time.time() + 120, False
    while not _saw and _time.time() < _until:
        try:
            with open(_log) as _fh:
                _saw = '"who": "builder"' in _fh.read()
        except OSError:
            pass
        if not _saw:
            _time.sleep(0.05)
if _who == "check" and _os.environ.get("OVERLAP_FAIL_CHECK"):
    _hold, _until = _os.environ.get("JIT_OVERLAP_HOLD"), _time.time() + 120
    while _hold and not _os.path.exists(_hold) and _time.time() < _until:   # the builder is mid-build
        _time.sleep(0.05)
    raise ImportError("planted: install's import check fails")
if _os.environ.get("OVERLAP_IMPORT_LOG"):
    with open(_os.environ["OVERLAP_IMPORT_LOG"], "a") as _fh:
        _fh.write(_json.dumps({"who": _who, "pid": _os.getpid(), "start": _t0, "end": _time.time(),
                               "saw_builder": _saw}) + "\\n")
'''

JIT_MODULES = "".join(f"""[[jit.modules]]
kind = "{kind}"
q = "bf16"
k = "bf16"
v = "e4m3"
o = "bf16"
head_dim = {head_dim}
""" for kind, head_dim in (("decode", 128), ("prefill", 128), ("decode", 64)))


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("overlap-world")
    make_links(root)
    fi = root / "work" / "flashinfer"
    write_project(fi, "flashinfer-python", "0.6.7", "flashinfer", FLASHINFER_ASYM.replace(
        '__version__ = "0.6.7"\n', '__version__ = "0.6.7"\n' + HOOK, 1))
    git("init", "-q", "-b", "main", cwd=fi)
    git("add", "-A", cwd=fi)
    git("commit", "-q", "-m", "fork: asymmetric plan", cwd=fi)
    bare = root / "git" / "flashinfer.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    git("push", "-q", bare.as_uri(), "HEAD:refs/heads/main", cwd=fi)
    write_forks_file(root / "forks.toml", {"flashinfer": {"url": bare.as_uri(), "commit": git("rev-parse", "HEAD", cwd=fi)}})
    path = root / "overlap.toml"
    path.write_text(recipe_head("jit-overlap", TORCH, "links")
                    + fork_entry("flashinfer", "main", "flashinfer", deps=False, build_isolation=False)
                    + '[cuda]\nversion = "12.9"\narch_list = "9.0"\nvariant = "cu129"\n'
                    + RELAXED_PREFLIGHT + f'[jit]\nbuilder = "{BUILDER}"\n' + JIT_MODULES)
    return path


class Said(SilentReporter):
    """What a run warned of."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def setup(recipe: Path, tmp_path: Path, ui: SilentReporter | None = None) -> SetupResult:
    opts = SetupOptions(stack=tmp_path / "stack", recipe=load_recipe(str(recipe)), cache_dir=tmp_path / "cache",
                        skip_preflight=("nvcc",))
    return run_setup(opts, ui or SilentReporter())


# october_setup's run_setup in a process of its own (a session of its own, as a CI job or a terminal's):
# prints the exception a run ended with, then exits 130 for an interrupt, 1 for anything else
SETUP_PROCESS = """
import faulthandler, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)     # the test asks where a run that hangs waits
from pathlib import Path
from october.installer.engine import SetupOptions, SilentReporter
from october.installer.pipeline.plan import run_setup
from october.installer.recipe import load_recipe
recipe, tmp = sys.argv[1], Path(sys.argv[2])
opts = SetupOptions(stack=tmp / "stack", recipe=load_recipe(recipe), cache_dir=tmp / "cache", skip_preflight=("nvcc",))
try:
    run_setup(opts, SilentReporter())
except KeyboardInterrupt as exc:
    print("ended by", type(exc).__name__, exc, flush=True)
    sys.exit(130)
"""


def records(result: SetupResult) -> dict[str, StepRecord]:
    return {r.name: r for r in result.records}


def builder_runs(stack: Path) -> int:
    log = StackPaths(stack).logs / "jit.log"
    return log.read_text().count(f"-m {BUILDER} ") if log.is_file() else 0


def gone(pid: int) -> bool:
    """Ended (a zombie waiting for its new parent counts: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state in ("Z", "X")


def wait_gone(pid: int, patience: float = 60) -> None:
    """``pid`` ends (a deadline for something that must happen, not a race)."""
    until = time.monotonic() + patience
    while not gone(pid):
        assert time.monotonic() < until, f"pid {pid} still running after {patience}s"
        time.sleep(0.05)


@pytest.fixture
def leftovers() -> Any:
    """Pids a test saw started; any still running at its end (a failed test) are killed, one by one."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if not gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_for(path: Path, proc: subprocess.Popen[str] | None = None, patience: float = 120) -> None:
    until = time.monotonic() + patience
    while not path.exists():
        assert proc is None or proc.poll() is None, f"the run ended before {path} appeared: {proc.communicate()}"
        assert time.monotonic() < until, f"{path} did not appear in {patience}s"
        time.sleep(0.05)


@pytest.mark.slow
def test_the_jit_build_runs_while_install_checks_and_the_noop_stays_a_noop(recipe: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    imports = tmp_path / "imports.jsonl"
    monkeypatch.setenv("OVERLAP_IMPORT_LOG", str(imports))
    monkeypatch.setenv("OVERLAP_AWAIT_BUILDER", "1")     # install's `import flashinfer` ends once the builder's has
    done = records(setup(recipe, tmp_path))
    stack = tmp_path / "stack"
    assert done["install"].status == done["jit"].status == "ran"
    seen = [json.loads(line) for line in imports.read_text().splitlines()]
    check = [s for s in seen if s["who"] == "check"]
    builder = [s for s in seen if s["who"] == "builder"]
    assert len(check) == 1 and len(builder) == 1, seen
    # real processes: install's import check saw the builder's import before it ended (without the
    # overlap the builder starts only after install, and the check gives up after 120 s, saw_builder false)
    assert check[0]["saw_builder"] is True, seen
    assert check[0]["pid"] != builder[0]["pid"]
    log = (StackPaths(stack).logs / "jit.log").read_text()
    assert "begun during the install step's checks" in log and builder_runs(stack) == 1
    # the note is the line just before the builder's command (one handle writes both)
    lines = log.splitlines()
    assert lines[lines.index(next(ln for ln in lines if f"-m {BUILDER} " in ln)) - 1].startswith("# begun during")
    out = done["jit"].outputs
    assert [m["source"] for m in out["modules"]] == ["built"] * 3 and out["discarded"] == []
    assert report(stack / "jit")["ok"] and not StackPaths(stack).run_pycache.exists()

    # the no-op re-run does nothing and changes nothing
    before = snapshot(stack)
    again = records(setup(recipe, tmp_path))
    assert {r.status for r in again.values()} == {"cached"} and snapshot(stack) == before

    # install runs again (its marker lost), with the same result: the jit step is done already, so no
    # build is begun during install (nothing of it would be used)
    StackPaths(stack).marker("install").unlink()
    third = records(setup(recipe, tmp_path))
    assert third["install"].status == "ran" and third["jit"].status == "cached"
    assert builder_runs(stack) == 1 and report(stack / "jit")["ok"]


@pytest.mark.slow
def test_a_failing_install_check_kills_the_background_build_and_the_rerun_rebuilds(
        recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hold = tmp_path / "hold.json"
    monkeypatch.setenv("JIT_OVERLAP_HOLD", str(hold))     # the builder builds one module, then hangs
    monkeypatch.setenv("OVERLAP_FAIL_CHECK", "1")          # install's import check fails once it does
    stack = tmp_path / "stack"
    paths = StackPaths(stack)
    with pytest.raises(InstallError, match="import flashinfer"):
        setup(recipe, tmp_path)
    pids = json.loads(hold.read_text())
    # the builder and the compiler it started are killed before the run returns (the lock released)
    assert gone(pids["builder"]) and gone(pids["child"]), pids
    partial = sorted((stack / "jit").rglob("*.so"))
    assert len(partial) == 1                                  # what it built before the kill is on disk,
    assert not (stack / "jit" / MANIFEST).exists()            # recorded nowhere,
    assert not paths.marker("install").exists() and not paths.marker("jit").exists()
    assert not (paths.state / "jit" / "result.json").exists()
    assert "the JIT build begun during install was killed" in (paths.logs / "jit.log").read_text()
    assert not paths.run_pycache.exists()

    # the faults gone: the re-run discards the unrecorded library and builds every module
    monkeypatch.delenv("JIT_OVERLAP_HOLD")
    monkeypatch.delenv("OVERLAP_FAIL_CHECK")
    done = records(setup(recipe, tmp_path))
    out = done["jit"].outputs
    assert done["install"].status == done["jit"].status == "ran"
    assert [d["path"] for d in out["discarded"]] == [str(partial[0])]
    assert [m["source"] for m in out["modules"]] == ["built"] * 3 and out["modules"][0]["path"] == str(partial[0])
    assert report(stack / "jit")["ok"]
    before = snapshot(stack)
    assert {r.status for r in records(setup(recipe, tmp_path)).values()} == {"cached"}
    assert snapshot(stack) == before


@pytest.mark.slow
def test_a_builder_that_fails_in_the_background_fails_the_jit_step_as_before(recipe: Path, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JIT_STANDIN_FAULT", "crash")
    with pytest.raises(JitError, match="stand-in build failed on purpose"):
        setup(recipe, tmp_path)
    paths = StackPaths(tmp_path / "stack")
    assert paths.marker("install").exists() and not paths.marker("jit").exists()
    assert not (tmp_path / "stack" / "jit" / MANIFEST).exists()


def test_a_started_command_is_killed_with_the_processes_it_started(tmp_path: Path) -> None:
    """Runner.start: the step's log gets the output; the display only from attach on, the latest line first;
    kill ends the command's whole process group."""
    pids = tmp_path / "pids"
    script = (f"import os, subprocess, sys, time; c = subprocess.Popen(['sleep', '300']); "
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{c.pid}}'); print('one', flush=True); "
              "print('two', flush=True); time.sleep(300)")
    shown: list[str] = []
    started = Runner(tmp_path / "logs").start(["python3", "-c", script], step="jit")
    until = time.monotonic() + 60
    while not (pids.is_file() and "two" in (tmp_path / "logs" / "jit.log").read_text()):
        assert time.monotonic() < until
        time.sleep(0.05)
    started.attach(shown.append)
    assert shown == ["two"] and not started.finished
    assert started.kill() is True
    assert started.finished
    for pid in map(int, pids.read_text().split()):
        wait_gone(pid)
    with pytest.raises(CommandFailed) as info:
        started.wait()
    assert info.value.returncode == -signal.SIGKILL
    assert f"# exit {-signal.SIGKILL} after" in (tmp_path / "logs" / "jit.log").read_text()


@pytest.mark.slow
def test_a_build_prepared_for_another_checkout_is_not_used(recipe: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The build begun early names FlashInfer's AOT directory from the fetch result; when install recorded
    another checkout, the jit step drops it (killed, or its output not used) and builds as it always did."""
    from october.installer.steps.jitearly import EarlyJit

    begin = EarlyJit.begin        # install announces another checkout than it records

    def elsewhere(self: EarlyJit, ctx: Any, forks: Any) -> None:
        begin(self, ctx, [dataclasses.replace(f, path=tmp_path / "elsewhere") for f in forks])

    monkeypatch.setattr(EarlyJit, "begin", elsewhere)
    done = records(setup(recipe, tmp_path))
    stack = tmp_path / "stack"
    log = (StackPaths(stack).logs / "jit.log").read_text()
    assert "prepared for another FlashInfer checkout than install recorded" in log and builder_runs(stack) == 2
    out = done["jit"].outputs
    assert all(m["aot_path"].startswith(str(stack / "src" / "flashinfer")) for m in out["modules"])
    assert report(stack / "jit")["ok"] and not (tmp_path / "elsewhere").exists()


def terminal_defaults() -> None:
    """A job as a terminal's shell starts it: SIGINT, SIGHUP and SIGTERM at their defaults, whatever this
    test process inherited (a CI runner under nohup ignores SIGHUP; one started as a background job of a
    shell without job control, ``cmd &`` in a script, ignores SIGINT; an ignored signal stays ignored)."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def held_setup(recipe: Path, tmp_path: Path, hold: Path, preexec: Any) -> subprocess.Popen[str]:
    """SETUP_PROCESS in a session of its own (a terminal's job), its builder held mid-build at ``hold``;
    ``preexec`` sets the signal dispositions it starts with."""
    return subprocess.Popen([sys.executable, "-c", SETUP_PROCESS, str(recipe), str(tmp_path)],
                            env=dict(os.environ, JIT_OVERLAP_HOLD=str(hold)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=preexec)


def ended(proc: subprocess.Popen[str], after: str) -> str:
    """The run's output once it ended, at most 120 s after ``after``; else where it waits (and it is killed)."""
    try:
        return proc.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        pytest.fail(f"october_setup did not end within 120 s of {after}:\n{hang_report(proc)}")


def hang_report(proc: subprocess.Popen[str]) -> str:
    """Where a process that did not end waits: each thread's signal masks and kernel wait (/proc), then
    its Python stacks (faulthandler on SIGUSR1, see SETUP_PROCESS) and its output; it is killed after."""
    lines = []
    for task in sorted(Path(f"/proc/{proc.pid}/task").glob("*")):
        try:
            status = dict(ln.split(":", 1) for ln in (task / "status").read_text().splitlines() if ":" in ln)
            wchan = (task / "wchan").read_text()
        except OSError as exc:
            lines.append(f"{task.name}: {exc}")
            continue
        lines.append(f"thread {task.name} {status.get('Name', '').strip()} state={status.get('State', '').strip()} "
                     f"wchan={wchan} " + " ".join(f"{k}={status.get(k, '').strip()}"
                                                   for k in ("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")))
    os.kill(proc.pid, signal.SIGUSR1)
    time.sleep(2)
    proc.kill()
    out, _ = proc.communicate()
    return "\n".join(lines) + "\n" + out


def lock_is_free(stack: Path) -> bool:
    try:
        with StackLock(StackPaths(stack).lockfile):
            return True
    except StackLockedError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=lambda s: signal.Signals(s).name)
def test_a_signal_mid_build_leaves_no_builder_and_the_rerun_trusts_nothing_it_left(
        recipe: Path, tmp_path: Path, sig: int, leftovers: list[int]) -> None:
    """october_setup in a session of its own, the builder held mid-build (one module built, a compiler
    running): Ctrl-C, SIGTERM (timeout(1), a CI cancel) and SIGHUP (the terminal closed) go to setup's
    whole process group, which the builder's group is not part of; SIGKILL to setup alone.  However the
    run ends, no builder or compiler outlives it holding nothing: the stack lock is free only once they
    are gone, and the next run discards what the builder left."""
    hold = tmp_path / "hold.json"
    stack = tmp_path / "stack"
    paths = StackPaths(stack)
    proc = held_setup(recipe, tmp_path, hold, terminal_defaults)
    try:
        wait_for(hold, proc)                             # the builder is mid-build, the jit step waits for it
        pids = json.loads(hold.read_text())
        leftovers.extend(pids.values())
        assert not lock_is_free(stack)
        if sig == signal.SIGKILL:
            os.kill(proc.pid, sig)                       # no handler, no finally: the guard ends the group
        else:
            os.killpg(proc.pid, sig)                     # the job's whole group, as a terminal or CI does
        out = ended(proc, signal.Signals(sig).name)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        assert holder_file(paths.lockfile).exists()      # setup never got to clean up
    else:
        assert proc.returncode == 130, out
        assert ("ended by KeyboardInterrupt" if sig == signal.SIGINT
                else f"ended by Terminated stopped by {signal.Signals(sig).name}") in out, out
        assert "the JIT build begun during install was killed" in (paths.logs / "jit.log").read_text()
        # killed before setup ended: nothing of the builder's group outlived it
        assert gone(pids["builder"]) and gone(pids["child"]), pids
        assert not holder_file(paths.lockfile).exists() and not paths.run_pycache.exists()
    wait_gone(pids["builder"])
    wait_gone(pids["child"])
    deadline = time.monotonic() + 60
    while not lock_is_free(stack):                       # held by the guard until its group is gone
        assert time.monotonic() < deadline, "the stack lock stayed held after the builder's group ended"
        time.sleep(0.05)
    partial = sorted((stack / "jit").rglob("*.so"))
    assert len(partial) == 1 and not (stack / "jit" / MANIFEST).exists() and not paths.marker("jit").exists()

    done = records(setup(recipe, tmp_path))
    out_jit = done["jit"].outputs
    assert done["jit"].status == "ran"
    assert [d["path"] for d in out_jit["discarded"]] == [str(partial[0])]
    assert [m["source"] for m in out_jit["modules"]] == ["built"] * 3 and report(stack / "jit")["ok"]


def test_the_guard_holds_the_stack_lock_until_its_group_is_gone(tmp_path: Path, leftovers: list[int]) -> None:
    """Runner.start(hold_fds=...): the command's guard holds the lock's descriptor; the run's own release
    (it closes its descriptor, never LOCK_UN) leaves the stack locked until the group is killed; a second
    run is told the holder ended and a process it started still holds the lock."""
    stack = tmp_path / "stack"
    pids = tmp_path / "pids"
    script = (f"import os, subprocess, time; c = subprocess.Popen(['sleep', '300']); "
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{c.pid}}'); time.sleep(300)")
    with StackLock(StackPaths(stack).lockfile) as lock:
        started = Runner(tmp_path / "logs").start([sys.executable, "-c", script], step="jit", hold_fds=(lock.fd,))
        wait_for(pids)
    leftovers.extend(map(int, pids.read_text().split()))
    with pytest.raises(StackLockedError) as info:
        with StackLock(StackPaths(stack).lockfile):
            pass
    assert "a process it started (the JIT builder) still holds" in info.value.message
    assert started.kill() is True
    for pid in map(int, pids.read_text().split()):
        wait_gone(pid)
    assert lock_is_free(stack)


def test_the_guard_ends_the_group_when_the_run_is_killed_outright(tmp_path: Path, leftovers: list[int]) -> None:
    """The run that started the command dies by SIGKILL (no handler, no finally): the guard sees it
    (PR_SET_PDEATHSIG) and kills the command and the process it started."""
    pids = tmp_path / "pids"
    script = (f"import os, subprocess, time; c = subprocess.Popen(['sleep', '300']); "
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{c.pid}}'); time.sleep(300)")
    starter = (f"import sys, time; from pathlib import Path; from october.installer.core.runner import Runner; "
               f"Runner(Path({str(tmp_path / 'logs')!r})).start([sys.executable, '-c', {script!r}], step='jit'); "
               f"time.sleep(300)")
    run = subprocess.Popen([sys.executable, "-c", starter])
    try:
        wait_for(pids, None)
        leftovers.extend(map(int, pids.read_text().split()))
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    for pid in map(int, pids.read_text().split()):
        wait_gone(pid)


def test_kill_does_not_wait_for_ever_on_a_pipe_held_outside_the_group(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that left the command's group (a session of its own) keeps the output pipe open: kill ends
    the group, waits KILL_WAIT_S for the output, and returns False instead of hanging the run's clean-up."""
    from october.installer.core.runner import Started

    monkeypatch.setattr(Started, "KILL_WAIT_S", 1.0)
    daemon = tmp_path / "daemon"
    script = (f"import os, subprocess, time; d = subprocess.Popen(['sleep', '300'], start_new_session=True); "
              f"open({str(daemon)!r}, 'w').write(str(d.pid)); time.sleep(300)")
    started = Runner(tmp_path / "logs").start([sys.executable, "-c", script], step="jit")
    wait_for(daemon)
    held = int(daemon.read_text())
    try:
        assert started.kill() is False and not started.finished
    finally:
        os.kill(held, signal.SIGKILL)               # the daemon this test started
    wait_gone(held)
    deadline = time.monotonic() + 60
    while not started.finished:                      # the pipe closed with the daemon: the reader ends
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(CommandFailed):
        started.wait()


@pytest.mark.slow
def test_discards_by_a_run_that_failed_in_install_are_shown_and_recorded_by_the_next(
        recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorded library tampered with; install runs again and its import check fails after the early
    preparation removed the library: the warning is shown in that run, and the next run's jit result
    names the library in ``discarded`` (the receipt's source)."""
    stack = tmp_path / "stack"
    paths = StackPaths(stack)
    first = records(setup(recipe, tmp_path))["jit"].outputs
    lib = Path(first["modules"][0]["path"])
    with open(lib, "ab") as fh:
        fh.write(b"tampered")
    paths.marker("install").unlink()
    paths.marker("jit").unlink()
    monkeypatch.setenv("OVERLAP_FAIL_CHECK", "1")
    said = Said()
    with pytest.raises(InstallError, match="import flashinfer"):
        setup(recipe, tmp_path, said)
    # removed by the early preparation (the builder may have made it again before install failed)
    assert not lib.exists() or not lib.read_bytes().endswith(b"tampered")
    assert any(str(lib) in w and "not trusted" in w for w in said.warnings), said.warnings
    assert (paths.state / "jit" / "discarded.json").is_file()

    monkeypatch.delenv("OVERLAP_FAIL_CHECK")
    done = records(setup(recipe, tmp_path))
    assert done["jit"].status == "ran"
    assert str(lib) in [d["path"] for d in done["jit"].outputs["discarded"]], done["jit"].outputs["discarded"]
    assert not (paths.state / "jit" / "discarded.json").exists() and report(stack / "jit")["ok"]


@pytest.mark.slow
def test_a_preparation_that_fails_during_install_says_its_warnings_and_the_jit_step_builds(
        recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The early preparation raises (after discarding a tampered library): nothing is begun during install
    ("# not begun during install" in the jit log), its warning is shown then, and the jit step prepares
    and builds in its turn, recording the discard."""
    from october.installer.steps.jit import JitStep

    stack = tmp_path / "stack"
    paths = StackPaths(stack)
    lib = Path(records(setup(recipe, tmp_path))["jit"].outputs["modules"][1]["path"])
    with open(lib, "ab") as fh:
        fh.write(b"tampered")
    paths.marker("install").unlink()
    paths.marker("jit").unlink()
    prepare, calls = JitStep.prepare, []

    def fails_first(self: JitStep, ctx: Any, ui: Any, aot: Any) -> Any:
        calls.append(ui)
        build = prepare(self, ctx, ui, aot)
        if len(calls) == 1:
            raise RuntimeError("planted: the early preparation fails")
        return build

    monkeypatch.setattr(JitStep, "prepare", fails_first)
    said = Said()
    done = records(setup(recipe, tmp_path, said))
    log = (paths.logs / "jit.log").read_text()
    assert "# not begun during install: RuntimeError('planted: the early preparation fails')" in log
    assert len(calls) == 2                                  # the early preparation, the jit step's own
    assert log.count("# begun during the install step's checks") == 1      # the first run's only
    assert any(str(lib) in w for w in said.warnings), said.warnings
    out = done["jit"].outputs
    assert done["install"].status == done["jit"].status == "ran"
    assert [d["path"] for d in out["discarded"]] == [str(lib)] and report(stack / "jit")["ok"]
    # the module came back from the shared cache (the first run stored it; the early preparation restored
    # it before it failed), verified by hash: nothing is built
    assert "built" not in [m["source"] for m in out["modules"]] and builder_runs(stack) == 1


@pytest.mark.slow
def test_the_build_begins_during_install_when_the_jit_marker_is_there_but_its_inputs_changed(
        recipe: Path, tmp_path: Path) -> None:
    """engine.must_run: a jit marker whose inputs no longer match (a module added to the recipe) means the
    jit step runs whatever install's result, so the build begins during install."""
    stack = tmp_path / "stack"
    setup(recipe, tmp_path)
    more = recipe.with_name("overlap-more.toml")      # beside the world's forks.toml
    more.write_text(recipe.read_text() + '[[jit.modules]]\nkind = "prefill"\nq = "bf16"\nk = "bf16"\n'
                    'v = "e4m3"\no = "bf16"\nhead_dim = 64\n')
    StackPaths(stack).marker("install").unlink()
    assert StackPaths(stack).marker("jit").exists()
    done = records(setup(more, tmp_path))
    assert done["install"].status == done["jit"].status == "ran"
    log = (StackPaths(stack).logs / "jit.log").read_text()
    assert log.count("# begun during the install step's checks") == 2 and builder_runs(stack) == 2
    assert len(done["jit"].outputs["modules"]) == 4 and report(stack / "jit")["ok"]


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (None, 130)])
def test_the_cli_exits_128_plus_the_signal_that_stopped_the_run(signum, code) -> None:
    """A run stopped by SIGTERM/SIGHUP (plan.Terminated) exits as a shell reports a signal (143, 129); Ctrl-C 130."""
    import io

    import typer
    from rich.console import Console

    from october.installer.cli.common import guarded
    from october.installer.core.ui import ConsoleReporter
    from october.installer.pipeline.plan import Terminated

    out = io.StringIO()
    ui = ConsoleReporter(console=Console(file=out, width=200))

    def stopped() -> None:
        raise Terminated(signum) if signum is not None else KeyboardInterrupt()

    with pytest.raises(typer.Exit) as exc:
        guarded(stopped, ui)
    assert exc.value.exit_code == code
    assert ("SIGTERM" if signum == signal.SIGTERM else "SIGHUP" if signum else "by the user") in out.getvalue()


def test_a_signal_another_thread_received_still_ends_the_wait_for_a_background_command(
        tmp_path: Path, leftovers: list[int]) -> None:
    """The kernel may hand a process's signal to any of its threads; Python then runs the handler in the
    main thread only when that thread next runs.  Started.wait (the jit step waiting for the builder)
    waits in slices, so an interrupt that landed on another thread ends it within a slice, not when the
    command (here one that would run 60 s) ends.  Planted: the signal sent to a helper thread alone."""
    import threading

    class Stop(Exception):
        pass

    def handler(signum: int, frame: Any) -> None:
        raise Stop()

    started = Runner(tmp_path / "logs").start(["sleep", "60"], step="jit")
    parked = threading.Event()
    helper = threading.Thread(target=parked.wait, daemon=True)
    helper.start()
    previous = signal.signal(signal.SIGUSR2, handler)
    sender = threading.Timer(0.5, signal.pthread_kill, args=(helper.ident, signal.SIGUSR2))
    t0 = time.monotonic()
    try:
        sender.start()
        with pytest.raises(Stop):
            started.wait()
    finally:
        signal.signal(signal.SIGUSR2, previous)
        parked.set()
        assert started.kill() is True
    assert time.monotonic() - t0 < 0.5 + 3 * Started.POLL_S + 2


@pytest.mark.slow
def test_under_nohup_a_closed_terminal_does_not_stop_the_run(recipe: Path, tmp_path: Path,
                                                            leftovers: list[int]) -> None:
    """``nohup october_setup ...``: SIGHUP is ignored by whoever started the run, so the terminal
    closing mid-build leaves it running (the lock held, the builder alive); a SIGTERM still ends it as
    an interrupted run.  Planted: the same SIGHUP without nohup ends it (the test above)."""
    hold = tmp_path / "hold.json"
    stack = tmp_path / "stack"

    def nohup() -> None:
        terminal_defaults()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = held_setup(recipe, tmp_path, hold, nohup)
    try:
        wait_for(hold, proc)
        pids = json.loads(hold.read_text())
        leftovers.extend(pids.values())
        os.killpg(proc.pid, signal.SIGHUP)
        time.sleep(2)
        assert proc.poll() is None and not lock_is_free(stack) and not gone(pids["builder"])
        os.killpg(proc.pid, signal.SIGTERM)
        out = ended(proc, "SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and "ended by Terminated stopped by SIGTERM" in out, out
    wait_gone(pids["builder"])
