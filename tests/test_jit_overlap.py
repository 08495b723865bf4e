"""Issue 20: the JIT build begins once the install step's forks are in place and runs while install checks
them (october.installer.steps.jit.early); the verdicts, the resume and the no-op stay what they were.

A FlashInfer-only stack in a real offline world: a stand-in FlashInfer fork in a real bare git repo,
real uv, git and pipeline; the JIT builder is the real builder's ``main`` with the stand-in gcc build
(tests/fixtures/jit_overlap_builder.py).  The fork's ``import flashinfer`` logs when each process
imported it (install's import check, the builder), and plants the faults: a slow or failing import check.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from october.installer.core.errors import InstallError, JitError
from october.installer.core.paths import StackPaths
from october.installer.core.runner import Runner
from october.installer.pipeline.engine import SetupOptions, SilentReporter, StepRecord
from october.installer.pipeline.plan import SetupResult, run_setup
from october.installer.recipe import load_recipe
from october.installer.steps.jit.integrity import MANIFEST, report
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
if _who == "check" and _os.environ.get("OVERLAP_CHECK_SECONDS"):
    _time.sleep(float(_os.environ["OVERLAP_CHECK_SECONDS"]))
if _who == "check" and _os.environ.get("OVERLAP_FAIL_CHECK"):
    _hold, _until = _os.environ.get("JIT_OVERLAP_HOLD"), _time.time() + 120
    while _hold and not _os.path.exists(_hold) and _time.time() < _until:   # the builder is mid-build
        _time.sleep(0.05)
    raise ImportError("planted: install's import check fails")
if _os.environ.get("OVERLAP_IMPORT_LOG"):
    with open(_os.environ["OVERLAP_IMPORT_LOG"], "a") as _fh:
        _fh.write(_json.dumps({"who": _who, "pid": _os.getpid(), "start": _t0, "end": _time.time()}) + "\\n")
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


def setup(recipe: Path, tmp_path: Path) -> SetupResult:
    opts = SetupOptions(stack=tmp_path / "stack", recipe=load_recipe(str(recipe)), cache_dir=tmp_path / "cache",
                        skip_preflight=("nvcc",))
    return run_setup(opts, SilentReporter())


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


@pytest.mark.slow
def test_the_jit_build_runs_while_install_checks_and_the_noop_stays_a_noop(recipe: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    imports = tmp_path / "imports.jsonl"
    monkeypatch.setenv("OVERLAP_IMPORT_LOG", str(imports))
    monkeypatch.setenv("OVERLAP_CHECK_SECONDS", "2")          # install's `import flashinfer` takes 2 s
    done = records(setup(recipe, tmp_path))
    stack = tmp_path / "stack"
    assert done["install"].status == done["jit"].status == "ran"
    seen = [json.loads(line) for line in imports.read_text().splitlines()]
    check = [s for s in seen if s["who"] == "check"]
    builder = [s for s in seen if s["who"] == "builder"]
    assert len(check) == 1 and len(builder) == 1, seen
    # real processes: the builder imported flashinfer before install's import check had ended
    assert builder[0]["start"] < check[0]["end"], seen
    assert check[0]["pid"] != builder[0]["pid"]
    log = (StackPaths(stack).logs / "jit.log").read_text()
    assert "begun during the install step's checks" in log and builder_runs(stack) == 1
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
    started.kill()
    assert started.finished
    for pid in map(int, pids.read_text().split()):
        until = time.monotonic() + 10
        while not gone(pid):
            assert time.monotonic() < until, pid
            time.sleep(0.05)
    with pytest.raises(Exception, match="exit code -9|-9"):
        started.wait()
    assert os.path.exists(tmp_path / "logs" / "jit.log")


@pytest.mark.slow
def test_a_build_prepared_for_another_checkout_is_not_used(recipe: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The build begun early names FlashInfer's AOT directory from the fetch result; when install recorded
    another checkout, the jit step drops it (killed, or its output not used) and builds as it always did."""
    from october.installer.steps.jit import early

    monkeypatch.setattr(early, "fetched_checkout", lambda ctx: tmp_path / "elsewhere")
    done = records(setup(recipe, tmp_path))
    stack = tmp_path / "stack"
    log = (StackPaths(stack).logs / "jit.log").read_text()
    assert "prepared for another FlashInfer checkout than install recorded" in log and builder_runs(stack) == 2
    out = done["jit"].outputs
    assert all(m["aot_path"].startswith(str(stack / "src" / "flashinfer")) for m in out["modules"])
    assert report(stack / "jit")["ok"] and not (tmp_path / "elsewhere").exists()
