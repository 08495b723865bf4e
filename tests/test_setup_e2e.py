"""october_setup end to end on an offline fixture world: real git repos, real wheels, real uv.

Nothing is mocked: forks are bare git repos behind file:// URLs, torch is a tiny real wheel
named torch, and the wheels are offered to uv from a directory or a loopback find-links server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest

from october.installer.core.errors import FetchError, LockError, StackLockedError
from october.installer.core.hashing import sha256_file
from october.installer.core.stackmutex import StackLock
from october.installer.engine import SetupOptions, SilentReporter
from october.installer.lock.pylock import locked_state
from october.installer.pipeline.plan import run_setup
from october.installer.recipe import load_recipe
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.findlinks_server import serve_find_links
from tests.fixtures.gitrepos import add_commit, git
from tests.fixtures.world import World, make_world, snapshot

pytestmark = pytest.mark.slow


@pytest.fixture()
def world(tmp_path: Path) -> World:
    return make_world(tmp_path / "world")


def setup(world: World, stack: Path, cache: Path, **kw: object):
    opts = SetupOptions(stack=stack, recipe=load_recipe(str(world.recipe)), cache_dir=cache, **kw)  # type: ignore[arg-type]
    return run_setup(opts, SilentReporter())


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "october.installer.october_setup", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, env=env, timeout=300)


def verify(stack: Path) -> subprocess.CompletedProcess[str]:
    """``current verify --install STACK`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)


def test_full_run_then_noop(world: World, tmp_path: Path) -> None:
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    result = setup(world, stack, cache)
    assert [r.name for r in result.records] == ["preflight", "fetch", "env", "install", "lock", "receipt"]
    assert all(r.status == "ran" for r in result.records)

    # the lock lists both forks with their exact commits, and every index package with a hash
    state = locked_state(stack / "pylock.toml")
    assert state.commits == {"alpha": world.commits["alpha"], "beta": world.commits["beta"]}
    assert state.packages == {"tinydep": "1.0", "torch": "2.10.0+fixture"}

    receipt = json.loads((stack / "receipts" / "setup.json").read_text())
    schema = json.loads((PROJECT_ROOT / "receipts" / "setup.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(receipt)
    assert receipt["recipe"]["name"] == "fixture" and len(receipt["recipe"]["sha256"]) == 64
    assert {f["name"]: f["commit"] for f in receipt["forks"]} == world.commits
    # submodule commits (the gitlinks checked out) in the lock and the receipt
    gamma = subprocess.run(["git", "-C", str(world.beta_bare), "rev-parse", f"{world.commits['beta']}:third_party/gamma"],
                           capture_output=True, text=True, check=True).stdout.strip()
    lock_doc = tomllib.loads((stack / "pylock.toml").read_text())
    assert lock_doc["tool"]["october"]["forks"]["beta"]["submodules"] == {"third_party/gamma": gamma}
    assert "submodules" not in lock_doc["tool"]["october"]["forks"]["alpha"]
    assert {f["name"]: f.get("submodules") for f in receipt["forks"]} == {"alpha": {}, "beta": {"third_party/gamma": gamma}}
    assert [s["name"] for s in receipt["steps"]] == ["preflight", "fetch", "env", "install", "lock"]
    # the one runtime environment of the stack: written by the env step, recorded with its hash
    assert receipt["stack_env"]["path"] == str(stack / "stack-env.json")
    assert receipt["stack_env"]["sha256"] == sha256_file(stack / "stack-env.json")
    assert receipt["stack_env"]["env"]["FLASHINFER_WORKSPACE_BASE"] == str(stack / "jit")
    assert (stack / "activate").is_file()

    env_py = stack / "env" / "bin" / "python"
    out = subprocess.run([str(env_py), "-c", "import alpha, beta, tinydep, torch; print(torch.__version__)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "2.10.0+fixture"
    assert (stack / "src" / "beta" / "third_party" / "gamma" / "gamma" / "__init__.py").exists()

    before = snapshot(stack)
    start = time.perf_counter()
    again = setup(world, stack, cache)
    elapsed = time.perf_counter() - start
    assert all(r.status == "cached" for r in again.records)
    assert snapshot(stack) == before, "a no-op re-run must change no file"
    assert elapsed < 1.0, f"no-op re-run took {elapsed:.2f}s"


def test_changed_pin_reruns_from_fetch_and_second_stack_uses_cache(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    new = add_commit(world.alpha_bare, {"alpha/extra.py": "E = 5\n"})
    world.set_pin("alpha", new)
    recs = setup(world, tmp_path / "s1", cache).records
    assert {r.name: r.status for r in recs} == {"preflight": "cached", "fetch": "ran", "env": "ran",
                                                "install": "ran", "lock": "ran", "receipt": "ran"}
    assert locked_state(tmp_path / "s1" / "pylock.toml").commits["alpha"] == new

    # a second stack sharing the cache needs neither origin: move both away
    for bare in (world.alpha_bare, world.beta_bare):
        bare.rename(bare.with_name(bare.name + ".gone"))
    recs2 = setup(world, tmp_path / "s2", cache).records
    assert all(r.status == "ran" for r in recs2)
    assert (tmp_path / "s2" / "src" / "alpha" / "alpha" / "extra.py").exists()


def test_changing_skip_preflight_reruns_preflight_and_the_receipt_only(world: World, tmp_path: Path) -> None:
    """Issue 11: changing --skip-preflight re-ran all eight steps.  Later steps chain on the earlier
    steps' results, not their inputs: preflight gathers the same facts, so fetch..lock stay cached;
    the receipt, which records the options and the preflight verdicts, is written again.  A result
    that does change (planted in fetch's marker, which still verifies) re-runs every later step."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    lock_before = (stack / "pylock.toml").read_bytes()
    recs = setup(world, stack, cache, skip_preflight=("disk",)).records
    assert {r.name: r.status for r in recs} == {"preflight": "ran", "fetch": "cached", "env": "cached",
                                                "install": "cached", "lock": "cached", "receipt": "ran"}
    receipt = json.loads((stack / "receipts" / "setup.json").read_text())
    assert receipt["options"]["skip_preflight"] == ["disk"] and receipt["preflight"]["skipped"] == ["disk"]
    assert (stack / "pylock.toml").read_bytes() == lock_before

    marker_path = stack / ".state" / "fetch.json"
    marker = json.loads(marker_path.read_text())
    marker["outputs"]["forks"]["alpha"]["requested"] = "planted"
    marker_path.write_text(json.dumps(marker))
    recs = setup(world, stack, cache, skip_preflight=("disk",)).records
    assert {r.name: r.status for r in recs} == {"preflight": "cached", "fetch": "cached", "env": "ran",
                                                "install": "ran", "lock": "ran", "receipt": "ran"}


def test_dirty_fork_refused_then_allowed(world: World, tmp_path: Path) -> None:
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    (stack / "src" / "alpha" / "alpha" / "__init__.py").write_text("A = 'patched'\n")
    with pytest.raises(FetchError) as info:
        setup(world, stack, cache)
    assert "alpha" in info.value.message and "--allow-dirty" in info.value.message
    res = setup(world, stack, cache, allow_dirty=True)
    receipt = json.loads((stack / "receipts" / "setup.json").read_text())
    assert receipt["options"]["allow_dirty"] is True
    assert {f["name"]: f["dirty"] for f in receipt["forks"]}["alpha"] is True
    assert res.records[1].status == "ran"


def test_missing_pin_upstream_is_a_clear_cli_error(world: World, tmp_path: Path) -> None:
    world.set_pin("alpha", "0123456789abcdef0123456789abcdef01234567")
    proc = cli(str(tmp_path / "stack"), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 8, proc.stderr
    assert "0123456789abcdef0123456789abcdef01234567" in proc.stderr and "alpha" in proc.stderr
    assert world.alpha_bare.as_uri() in proc.stderr


def test_concurrent_run_refused(world: World, tmp_path: Path) -> None:
    stack = tmp_path / "stack"
    stack.mkdir()
    with StackLock(stack / ".october.lock"):
        proc = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == StackLockedError.exit_code
    assert f"pid {os.getpid()}" in proc.stderr and "kill" in proc.stderr


def test_locked_reproduces_the_same_lock_and_refuses_drift(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    lock1 = tmp_path / "s1" / "pylock.toml"
    # a newer tinydep appears upstream: a plain run would take it, --locked must not
    from tests.fixtures.wheels import build_wheel
    build_wheel(world.wheels, "tinydep", "2.0", {"tinydep/__init__.py": "VALUE = 2\n"})
    proc = cli(str(tmp_path / "s2"), "--recipe", str(world.recipe), "--cache-dir", str(cache), "--locked",
               "--lock-file", str(lock1), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "s2" / "pylock.toml").read_text() == lock1.read_text()

    # a lock that names a package the stack does not get is refused with the difference listed
    tampered = tmp_path / "tampered.toml"
    tampered.write_text(lock1.read_text() + '\n[[packages]]\nname = "ghost"\nversion = "1.0"\n'
                        'wheels = [{ url = "file:///nowhere/ghost-1.0-py3-none-any.whl", hashes = { sha256 = "'
                        + "0" * 64 + '" } }]\n')
    with pytest.raises(LockError) as info:
        setup(world, tmp_path / "s3", cache, locked=locked_state(tampered))
    assert "gives no file hash" not in info.value.message
    assert "do not match the lock" in info.value.message  # ghost's file does not exist anywhere

    # a lock whose recorded file hash differs from what the sources serve is refused before any fork install
    state = locked_state(lock1)
    forged = tmp_path / "forged.toml"
    forged.write_text(lock1.read_text().replace(state.hashes["tinydep"][0], "f" * 64))
    with pytest.raises(LockError) as info:
        setup(world, tmp_path / "s4", cache, locked=locked_state(forged))
    assert "do not match the lock" in info.value.message and "sha256" in info.value.message
    assert not (tmp_path / "s4" / ".state" / "install.json").exists()
    # which package, which hash is the lock's and which the served file's (it said "uv refused (   sha256:...)")
    assert (f"tinydep==1.0: the lock has sha256:{'f' * 64}, the sources serve a file with "
            f"sha256:{state.hashes['tinydep'][0]}") in info.value.found, info.value.found
    assert "a re-run without --locked" in info.value.fix
    # refused on a finished stack, whose env it made anew first: the re-run that fix names puts it back
    with pytest.raises(LockError):
        setup(world, tmp_path / "s1", cache, locked=locked_state(forged))
    setup(world, tmp_path / "s1", cache)
    checked = verify(tmp_path / "s1")
    assert checked.returncode == 0, checked.stderr

    # a version drift that hashes cannot catch (a package the lock has and the stack lacks) is listed
    extra = tmp_path / "extra.toml"
    text = lock1.read_text()
    extra.write_text(text.replace('name = "tinydep"', 'name = "tinydep-gone"', 1))
    with pytest.raises(LockError) as info:
        setup(world, tmp_path / "s5", cache, locked=locked_state(extra))
    assert "tinydep-gone" in info.value.message


@contextmanager
def _stalled_at_torch(world: World, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Any, Path]]:
    """october_setup started on ``tmp_path/stack`` (a session of its own), stalled by a loopback find-links
    server halfway through the torch wheel: (the run, the server, the stack) once the env step asked for it."""
    text = world.recipe.read_text()
    with serve_find_links(world.wheels, slow="torch-2.10.0+fixture-py3-none-any.whl", pause=30) as slow:
        world.recipe.write_text(text.replace('find_links = ["wheels"]', f'find_links = ["{slow.url}"]'))
        stack = tmp_path / "stack"
        proc = subprocess.Popen([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe",
                                 str(world.recipe), "--cache-dir", str(tmp_path / "cache"), "-q"],
                                cwd=PROJECT_ROOT, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert slow.requested.wait(60), "the env step never asked for torch"
            yield proc, slow, stack
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_killed_during_env_resumes_to_identical_lock(world: World, tmp_path: Path) -> None:
    """The torch wheel is served slowly from loopback so the run can be killed mid-download."""
    with _stalled_at_torch(world, tmp_path) as (proc, slow, stack):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert (stack / ".state" / "fetch.json").exists() and not (stack / ".state" / "env.json").exists()
        slow.slow = None  # the network recovers
        res = setup(world, stack, tmp_path / "cache")
        assert {r.name: r.status for r in res.records}["fetch"] == "cached"
        assert {r.name: r.status for r in res.records}["env"] == "ran"
        clean = tmp_path / "clean"
        setup(world, clean, tmp_path / "cache2")
        assert (stack / "pylock.toml").read_text() == (clean / "pylock.toml").read_text()


def _running_in(stack: Path) -> list[int]:
    """Pids of the processes whose command line names ``stack`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(stack).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_run_killed_outright_takes_its_uv_install_with_it(world: World, tmp_path: Path) -> None:
    """The scenario hunt: october_setup killed by SIGKILL alone (not its group) while uv installed into the env;
    uv ran on after the stack lock was free, so a re-run (another recipe) said "stack ready" and the killed
    run's torch landed over it.  uv now runs under the guard: it ends with the run that started it."""
    with _stalled_at_torch(world, tmp_path) as (proc, _slow, stack):
        try:
            assert [p for p in _running_in(stack / "env") if p != proc.pid], "no uv install running"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            deadline = time.monotonic() + 20
            while _running_in(stack / "env") and time.monotonic() < deadline:
                time.sleep(0.1)
            left = _running_in(stack / "env")
        finally:
            for pid in _running_in(stack / "env"):          # what this test started, by pid
                os.kill(pid, signal.SIGKILL)
    assert left == [], f"still writing into the stack after the run was killed: {left}"


def test_uv_under_the_guard_never_asks_at_the_terminal(world: World, tmp_path: Path) -> None:
    """The review: under the guard uv runs in a process group of its own, where git asking at the terminal for a
    git+https requirement's credentials is stopped (SIGTTIN) and the run hangs; uv's git never asks."""
    from october.installer.core.paths import StackPaths
    from october.installer.pyenv.uvcmd import StackUv

    env = StackUv(StackPaths(tmp_path / "s"), load_recipe(str(world.recipe)), tmp_path / "cache").env()
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GCM_INTERACTIVE"] == "never"


def test_an_exported_git_dir_reaches_no_git_of_the_tool(world: World, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell with GIT_DIR (and GIT_WORK_TREE) exported for the user's own project: the new mirror's
    ``git init`` (GitPython's, with the process's environment) re-initialised that project as bare and the
    run ended in a traceback (70), or with both set exit 8 blaming the cache dir.  The project is untouched
    and the stack set up and verified."""
    project = tmp_path / "project"
    project.mkdir()
    git("init", "-q", "-b", "main", cwd=project)
    config = (project / ".git" / "config").read_text()
    monkeypatch.setenv("GIT_DIR", str(project / ".git"))
    from october.installer.git.mirror import open_mirror      # the library alone, without the console script

    open_mirror(tmp_path / "c0", world.alpha_bare.as_uri(), "alpha")
    assert (project / ".git" / "config").read_text() == config
    env = dict(os.environ, GIT_WORK_TREE=str(project))
    done = cli(str(tmp_path / "s"), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "c"), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (project / ".git" / "config").read_text() == config and git("status", "--short", cwd=project) == ""
    monkeypatch.delenv("GIT_DIR")
    assert verify(tmp_path / "s").returncode == 0


def test_a_stack_inside_another_stacks_own_parts_is_refused(world: World, tmp_path: Path) -> None:
    """The odd-environment hunt: ``october_setup OUTER/env/inner`` was set up, and the outer stack's next env
    rebuild removed it with the user's files in it, exit 0; one in ``OUTER/src/alpha/`` broke the outer stack
    (verify 13, its fix naming the inner stack's files as nobody's).  Refused, exit 2, nothing written; a
    folder of the user's in the outer stack's directory is fine."""
    outer, cache = tmp_path / "outer", tmp_path / "cache"
    setup(world, outer, cache)
    for inner in (outer / "env" / "inner", outer / "src" / "alpha" / "st", outer / "jit"):
        done = cli(str(inner), "--recipe", str(world.recipe), "--cache-dir", str(cache))
        assert done.returncode == 2 and f"is inside the stack {outer}" in done.stderr, done.stderr
        assert not (inner / ".state").exists()
    assert cli(str(outer / "mine" / "st"), "--recipe", str(world.recipe), "--cache-dir", str(cache)).returncode == 0
    assert verify(outer).returncode == 0


@pytest.mark.parametrize("plant", ["activate", "activate_this", "lib64"])
def test_the_venvs_activation_scripts_and_lib64_are_held_to_what_the_env_step_left(world: World, tmp_path: Path,
                                                                                    plant: str) -> None:
    """The cache hunt: ``env/bin/activate`` (which a user sources), ``activate_this.py`` and the ``lib64`` link (a
    site root where sys.platlibdir is lib64) were checked by name only: an edit passed verify (0) and the no-op
    kept it.  Verify names it (13) and a re-run makes the env again.  They are a record of their own (``scripts``):
    the ``scaffold`` record an earlier version reads is as it was (that version named them all as changed), and a
    stack an earlier version set up (no ``scripts``) is not held to files it never recorded: it stays a no-op."""
    stack, cache = tmp_path / "s", tmp_path / "cache"
    setup(world, stack, cache)
    env = stack / "env"
    marker = stack / ".state" / "env.json"
    kept = marker.read_text()
    if plant == "lib64":
        (tmp_path / "evil").mkdir()
        (env / "lib64").unlink()
        (env / "lib64").symlink_to(tmp_path / "evil")
    else:
        with open(env / "bin" / f"{plant}{'.py' if plant == 'activate_this' else ''}", "a") as fh:
            fh.write("\nexport PYTHONPATH=/tmp/evil\n" if plant == "activate" else "\nprint(1)\n")
    done = verify(stack)
    assert done.returncode == 13 and plant in done.stdout + done.stderr, done.stdout + done.stderr
    data = json.loads(kept)
    assert all(k == "pyvenv.cfg" or k.startswith("bin/python") for k in data["outputs"]["scaffold"])
    del data["outputs"]["scripts"]          # a record an earlier version made: its scaffold record, unchanged
    marker.write_text(json.dumps(data))
    assert verify(stack).returncode == 0
    # the env step's own verify holds (steps chained on its result run again: the record was edited, not made)
    assert {r.name: r.status for r in setup(world, stack, cache).records}["env"] == "cached"
    marker.write_text(kept)
    res = setup(world, stack, cache)
    assert {r.name: r.status for r in res.records}["env"] == "ran" and verify(stack).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_cache_another_user_owns_is_named_as_such(world: World, tmp_path: Path) -> None:
    """The odd-environment hunt: a shared cache whose mirrors another user made: git refuses them ("dubious
    ownership") and setup's fix said "check free disk space" (a remote another user owns: "check the URL and
    your network").  The fix names the folder, its owner and safe.directory, as verify does."""
    import pwd

    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    nobody = pwd.getpwnam("nobody")
    for top, dirs, files in os.walk(cache / "git"):
        for name in [top, *(os.path.join(top, n) for n in dirs + files)]:
            os.lchown(name, nobody.pw_uid, nobody.pw_gid)
    done = cli(str(tmp_path / "s2"), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    assert done.returncode != 0 and "belongs to another user (nobody)" in done.stderr, done.stderr
    assert "safe.directory" in done.stderr and "free disk space" not in done.stderr, done.stderr


def test_prefix_pin_resolved_once_and_recorded_in_full(world: World, tmp_path: Path) -> None:
    full = world.commits["alpha"]
    text = world.forks_toml.read_text().replace(f'main = "{full}"', f'main = {{ prefix = "{full[:9]}", branch = "main" }}', 1)
    world.forks_toml.write_text(text)
    setup(world, tmp_path / "s1", tmp_path / "cache")
    lock = tmp_path / "s1" / "pylock.toml"
    assert locked_state(lock).commits["alpha"] == full
    assert 'requested-revision = "main"' in lock.read_text()
    # --locked uses the full id even after the branch moved on
    add_commit(world.alpha_bare, {"alpha/later.py": "L = 1\n"})
    setup(world, tmp_path / "s2", tmp_path / "cache", locked=locked_state(lock))
    assert locked_state(tmp_path / "s2" / "pylock.toml").commits["alpha"] == full


def test_pin_fetched_from_upstream(world: World, tmp_path: Path) -> None:
    """A pin that only exists upstream (like a PR head) is fetched from the fork's upstream URL."""
    upstream = tmp_path / "alpha-upstream.git"
    shutil.copytree(world.alpha_bare, upstream)
    pr_head = add_commit(upstream, {"alpha/pr.py": "PR = 3812\n"}, branch="pr-3812")
    text = world.forks_toml.read_text().replace(
        f'url = "{world.alpha_bare.as_uri()}"\n', f'url = "{world.alpha_bare.as_uri()}"\nupstream = "{upstream.as_uri()}"\n')
    text = text.replace(f'main = "{world.commits["alpha"]}"',
                        f'main = {{ commit = "{pr_head}", fetch_from = "upstream" }}', 1)
    world.forks_toml.write_text(text)
    setup(world, tmp_path / "stack", tmp_path / "cache")
    assert (tmp_path / "stack" / "src" / "alpha" / "alpha" / "pr.py").exists()
    lock = (tmp_path / "stack" / "pylock.toml").read_text()
    assert f'commit-id = "{pr_head}"' in lock and upstream.as_uri() in lock


def test_a_directory_with_other_files_is_not_taken_over(world: World, tmp_path: Path) -> None:
    """No lost data: a non-empty directory that is not a stack is refused before anything is written."""
    home = tmp_path / "home"
    (home / "env").mkdir(parents=True)
    (home / "env" / "precious.txt").write_text("keep me")
    proc = cli(str(home), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 2 and "is not empty and is not an october stack" in proc.stderr
    assert "env" in proc.stderr and "choose a new directory" in proc.stderr
    assert sorted(p.name for p in home.iterdir()) == ["env"]
    assert (home / "env" / "precious.txt").read_text() == "keep me"
    afile = tmp_path / "afile"
    afile.write_text("x")
    proc = cli(str(afile), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 19 and "is a file" in proc.stderr      # a file where a directory belongs


def _unshare_mount_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _unshare_mount_works(), reason="no mount namespace here (unshare -m refused)")
def test_a_read_only_cache_dir_is_exit_19_before_any_fork_is_cloned(world: World, tmp_path: Path) -> None:
    """Plant: --cache-dir on a real read-only mount (a bind mount remounted read-only in a mount namespace
    of its own: root writes anywhere else).  The README's exit 19 for a path that cannot be written, the
    directory and the fix named; the stack holds no fork."""
    cache, stack = tmp_path / "cache", tmp_path / "stack"
    cache.mkdir()
    argv = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "october.installer.october_setup", str(stack),
                                            "--recipe", str(world.recipe), "--cache-dir", str(cache)])
    script = (f"mount --bind {shlex.quote(str(cache))} {shlex.quote(str(cache))} && "
              f"mount -o remount,bind,ro {shlex.quote(str(cache))} && exec {argv}")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 19, proc.stderr
    assert f"cannot use the cache directory {cache}" in proc.stderr and "Read-only file system" in proc.stderr
    assert "--cache-dir pointing at a writable directory" in proc.stderr
    assert not stack.exists()       # checked with the options: no stack, no preflight (session 18's audit)


def test_a_package_changed_by_hand_is_noticed_and_locked(world: World, tmp_path: Path) -> None:
    """The lock must not go stale: a package upgraded in the env by hand re-runs lock (and receipt)."""
    from october.installer.pyenv.uvcmd import uv_exe
    from tests.fixtures.wheels import build_wheel

    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    build_wheel(world.wheels, "tinydep", "2.0", {"tinydep/__init__.py": "VALUE = 2\n"})
    subprocess.run([uv_exe(), "pip", "install", "-q", "--python", str(stack / "env" / "bin" / "python"),
                    "--no-index", "--find-links", str(world.wheels), "tinydep==2.0"], check=True,
                   env=dict(os.environ, UV_CACHE_DIR=str(tmp_path / "uvc")))
    res = setup(world, stack, cache)
    assert {r.name: r.status for r in res.records}["lock"] == "ran"
    assert locked_state(stack / "pylock.toml").packages["tinydep"] == "2.0"


def test_each_verify_notices_its_output_changed(world: World, tmp_path: Path) -> None:
    """Planted faults for env, install, lock and receipt verification: each re-runs from that step."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)

    def statuses() -> dict[str, str]:
        return {r.name: r.status for r in setup(world, stack, cache).records}

    receipt = stack / "receipts" / "setup.json"
    receipt.write_text(receipt.read_text().replace('"fixture"', '"forged"'))
    assert statuses() == {"preflight": "cached", "fetch": "cached", "env": "cached", "install": "cached",
                          "lock": "cached", "receipt": "ran"}
    assert '"forged"' not in receipt.read_text()

    lock = stack / "pylock.toml"
    lock.write_text(lock.read_text().replace('version = "1.0"', 'version = "0.9"'))
    assert statuses()["lock"] == "ran" and 'version = "0.9"' not in lock.read_text()

    site = next((stack / "env").glob("lib/python*/site-packages"))
    alpha_info = next(site.glob("alpha-*.dist-info"))
    (alpha_info / "direct_url.json").write_text('{"url": "https://pypi.org/alpha", "archive_info": {}}')
    got = statuses()
    assert got["install"] == "ran" and got["env"] == "cached"

    env_file = stack / "stack-env.json"
    env_file.write_text(env_file.read_text().replace(str(stack / "jit"), "/elsewhere/jit"))
    got = statuses()
    assert got["env"] == "ran" and "/elsewhere" not in env_file.read_text()

    shutil.rmtree(next(site.glob("torch-*.dist-info")))
    got = statuses()
    # env and install put back the same results, so the lock (which still verifies against the env's
    # distributions) stays cached; its packages are the env's again
    assert got["env"] == "ran" and got["install"] == "ran" and got["lock"] == "cached"
    assert next(site.glob("torch-*.dist-info")).name == "torch-2.10.0+fixture.dist-info"
    assert locked_state(lock).packages["torch"] == "2.10.0+fixture"


def test_a_changed_or_missing_stack_env_or_activate_is_written_again_by_a_rerun(world: World, tmp_path: Path) -> None:
    """The audit's false pass: `export EVIL=1` appended to STACK/activate ("do not edit (re-run october_setup)")
    survived a plain re-run.  The env step records both files' sha256; a changed or missing one re-runs it, which
    writes both again byte for byte.  Untouched, the re-run stays a no-op."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    env_file, activate, marker = stack / "stack-env.json", stack / "activate", stack / ".state" / "env.json"
    originals = env_file.read_bytes(), activate.read_bytes()

    def statuses() -> dict[str, str]:
        return {r.name: r.status for r in setup(world, stack, cache).records}

    def append_evil() -> None:
        with open(activate, "a") as fh:
            fh.write("export EVIL=1\n")

    def edit_workspace() -> None:
        env_file.write_text(env_file.read_text().replace(str(stack / "jit"), "/elsewhere/jit"))

    before = snapshot(stack)
    assert set(statuses().values()) == {"cached"} and snapshot(stack) == before
    for plant in (append_evil, activate.unlink, env_file.unlink, lambda: (edit_workspace(), append_evil())):
        plant()
        assert statuses()["env"] == "ran", plant
        assert (env_file.read_bytes(), activate.read_bytes()) == originals, plant
    assert set(statuses().values()) == {"cached"}
    rec = json.loads(marker.read_text())["outputs"]["stack_env"]
    assert (rec["sha256"], rec["activate_sha256"]) == (sha256_file(env_file), sha256_file(activate))


def test_an_older_env_record_without_activate_s_hash_stays_a_noop_until_activate_changes(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack set up before activate's sha256 was recorded (the env step's record made without it, and every
    later marker chained on that): it loads, its re-run is a no-op (activate is checked against the text the
    recorded env makes), and an edited activate re-runs env, which writes it again and records its sha256."""
    from october.installer.steps import env as env_step

    stack, cache = tmp_path / "stack", tmp_path / "cache"
    write = env_step.write_stack_env
    monkeypatch.setattr(env_step, "write_stack_env", lambda ctx: {
        k: v for k, v in write(ctx).items() if k != "activate_sha256"})
    setup(world, stack, cache)
    monkeypatch.undo()
    activate, marker = stack / "activate", stack / ".state" / "env.json"
    assert "activate_sha256" not in json.loads(marker.read_text())["outputs"]["stack_env"]
    original = activate.read_bytes()

    def statuses() -> dict[str, str]:
        return {r.name: r.status for r in setup(world, stack, cache).records}

    before = snapshot(stack)
    assert set(statuses().values()) == {"cached"} and snapshot(stack) == before
    with open(activate, "a") as fh:
        fh.write("export EVIL=1\n")
    assert statuses()["env"] == "ran" and activate.read_bytes() == original
    assert json.loads(marker.read_text())["outputs"]["stack_env"]["activate_sha256"] == sha256_file(activate)
    assert set(statuses().values()) == {"cached"}


def _uv_pip(stack: Path, cache: Path, *args: str) -> None:
    from october.installer.pyenv.uvcmd import uv_exe

    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    subprocess.run([uv_exe(), "pip", *args, "--python", str(stack / "env" / "bin" / "python")], check=True,
                   capture_output=True, env=dict(env, UV_CACHE_DIR=str(cache / "uv")))


def test_a_distribution_installed_or_removed_by_hand_is_put_back_not_locked(world: World, tmp_path: Path) -> None:
    """The scenario hunt's false pass: after `uv pip uninstall tinydep` (which alpha requires) a plain re-run
    wrote a lock without tinydep and `current verify` passed a stack whose `import tinydep` failed; after
    `uv pip install` of a tinydep the recipe's sources do not serve, the lock took it as a local file.  Now
    the env step sees the change, the env is made again, and the lock stays what a new stack gets."""
    from october.installer.lock.drift import installed_versions
    from tests.fixtures.wheels import build_wheel

    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    lock = (stack / "pylock.toml").read_bytes()
    other = build_wheel(tmp_path / "elsewhere", "tinydep", "2.0", {"tinydep/__init__.py": "VALUE = 2\n"})
    for change in (["uninstall", "tinydep"], ["install", str(other)]):
        _uv_pip(stack, cache, *change)
        assert installed_versions(stack / "env").get("tinydep") != "1.0"
        ran = {r.name: r.status for r in setup(world, stack, cache).records}
        assert ran["env"] == ran["install"] == "ran", ran
        assert (stack / "pylock.toml").read_bytes() == lock
        assert installed_versions(stack / "env")["tinydep"] == "1.0"
        done = verify(stack)
        assert done.returncode == 0, done.stderr
    # nothing changed by hand: the next run is a no-op
    assert all(r.status == "cached" for r in setup(world, stack, cache).records)


def test_a_run_stopped_before_its_lock_step_does_not_make_the_env_again(world: World, tmp_path: Path) -> None:
    """The lock compared is the one written after the last install: a lock older than the install (a run that
    stopped before its lock step, here a recipe whose packages changed) says nothing of the env, and the
    env, made by that run, is kept."""
    from tests.fixtures.wheels import build_wheel

    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    build_wheel(world.wheels, "extra", "1.0", {"extra/__init__.py": ""})
    text = world.recipe.read_text()
    assert "[install]" not in text
    world.recipe.write_text(text + '\n[install]\nsupply = ["extra==1.0"]\n')
    _stop_before_lock(world, stack, cache)
    ran = {r.name: r.status for r in setup(world, stack, cache).records}
    assert ran["env"] == ran["install"] == "cached" and ran["lock"] == "ran", ran


def _stop_before_lock(world: World, stack: Path, cache: Path) -> None:
    """A run of the recipe as it is now that ends (Ctrl-C) as its lock step begins."""
    from october.installer.steps.lock import LockStep

    def interrupted(self: object, ctx: object) -> None:
        raise KeyboardInterrupt

    original = LockStep.run
    LockStep.run = interrupted          # type: ignore[method-assign,assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            setup(world, stack, cache)
    finally:
        LockStep.run = original         # type: ignore[method-assign]


def test_a_stack_that_lost_its_state_is_still_a_stack_and_a_rerun_restores_it(world: World, tmp_path: Path) -> None:
    """The scenario hunt: with ``STACK/.state`` removed, a plain re-run and the ``--locked`` one verify named were
    both refused as "not an october stack" (exit 2), though the setup receipt says it is one."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    shutil.rmtree(stack / ".state")
    again = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "-q")
    assert again.returncode == 0, again.stderr
    checked = verify(stack)
    assert checked.returncode == 0, checked.stderr


def test_an_empty_state_folder_beside_files_of_the_user_is_no_stack(world: World, tmp_path: Path) -> None:
    """The scenario hunt: any directory with a ``.state/`` counted as a stack, and a user's ``env/mydata`` in it
    was removed (rc 0, said only in logs/env.log).  An empty ``.state/`` is not enough: refused, nothing
    touched.  One alone (a run stopped as it began) is still taken."""
    mine = tmp_path / "project"
    (mine / ".state").mkdir(parents=True)
    (mine / "env" / "mydata").mkdir(parents=True)
    (mine / "env" / "mydata" / "weights.bin").write_text("weights")
    (mine / ".state" / ".DS_Store").write_text("")     # another tool's files there make it no stack either
    (mine / ".state" / "settings.json").write_text('{"theme": "dark"}')
    before = snapshot(mine)
    refused = cli(str(mine), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"), "-q")
    assert refused.returncode == 2 and "is not an october stack" in refused.stderr, refused.stderr
    assert "found other files (env)" in refused.stderr
    assert snapshot(mine) == before
    begun = tmp_path / "begun"
    (begun / ".state").mkdir(parents=True)
    done = cli(str(begun), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"), "-q")
    assert done.returncode == 0, done.stderr


def test_a_commit_of_the_user_s_in_a_fork_is_kept_as_a_branch_before_the_rerun_moves_it(
        world: World, tmp_path: Path) -> None:
    """The scenario hunt: work committed in ``STACK/src/alpha`` was checked away by a plain re-run, left to
    git's reflog without a word.  Now the re-run keeps it as a branch and says which; one a branch of the
    user's already holds gets none."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    alpha = stack / "src" / "alpha"

    def commit_locally(text: str) -> str:
        (alpha / "alpha" / "__init__.py").write_text(text)
        subprocess.run(["git", "-C", str(alpha), "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit",
                        "-qam", "mine"], check=True)
        return subprocess.run(["git", "-C", str(alpha), "rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()

    mine = commit_locally("A = 2\n")
    found = verify(stack)
    assert found.returncode == 13 and f"kept first as the branch october-kept-{mine[:12]}" in found.stderr, found.stderr
    again = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    assert again.returncode == 0, again.stderr
    assert f"kept as the branch october-kept-{mine[:12]}" in again.stderr
    kept = subprocess.run(["git", "-C", str(alpha), "rev-parse", f"october-kept-{mine[:12]}"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert kept == mine and (alpha / "alpha" / "__init__.py").read_text() == "A = 1\n"

    held = commit_locally("A = 3\n")
    subprocess.run(["git", "-C", str(alpha), "branch", "work", held], check=True)
    found = verify(stack)
    assert found.returncode == 13 and "kept first" not in found.stderr, found.stderr
    again = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    assert again.returncode == 0 and "kept as the branch" not in again.stderr, again.stderr
    branches = subprocess.run(["git", "-C", str(alpha), "branch", "--list", "october-kept-*"], capture_output=True,
                              text=True, check=True).stdout.split()
    assert branches == [f"october-kept-{mine[:12]}"]


def test_a_fork_install_setting_changed_on_a_stack_gives_what_a_new_stack_gets(world: World, tmp_path: Path) -> None:
    """The scenario hunt: ``deps = true`` turned ``false`` for alpha (which requires tinydep) re-ran install over
    the env the first install filled, which kept tinydep: rc 0, verify clean, where a new stack of that recipe
    is refused (exit 11, alpha's requirement unmet).  Now the env is made again first: the same refusal."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    text = world.recipe.read_text()
    assert text.count("deps = true") == 1
    world.recipe.write_text(text.replace("deps = true", "deps = false"))
    fresh = cli(str(tmp_path / "fresh"), "--recipe", str(world.recipe), "--cache-dir", str(cache), "-q")
    again = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    assert fresh.returncode == again.returncode == 11, (fresh.stderr, again.stderr)
    assert "the forks' install settings changed" in again.stderr and "tinydep" in again.stderr
    # and back: the stack is what a new one of the first recipe is
    world.recipe.write_text(text)
    back = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "-q")
    assert back.returncode == 0, back.stderr
    checked = verify(stack)
    assert checked.returncode == 0, checked.stderr


def test_a_run_stopped_between_env_and_install_does_not_make_the_env_again(world: World, tmp_path: Path) -> None:
    """The review: a run that made the env again and stopped before its install began (Ctrl-C as the env step
    ended, a wheel step that fails) left the older install record, and the next run held the new env to it
    ("alpha 0.1 -> -") and made the env again, every time.  Only an install record written after the env's
    counts."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    with open(stack / "activate", "a") as fh:
        fh.write("export EVIL=1\n")                     # the env step runs again, then install
    shutil.rmtree(cache / "built")                      # made, not copied with the forks in it from a built stack

    class StopAfterEnv(SilentReporter):
        def step_done(self, name: str, seconds: float) -> None:
            if name == "env":
                raise KeyboardInterrupt

    opts = SetupOptions(stack=stack, recipe=load_recipe(str(world.recipe)), cache_dir=cache)
    with pytest.raises(KeyboardInterrupt):
        run_setup(opts, StopAfterEnv())
    ran = {r.name: r.status for r in setup(world, stack, cache).records}
    assert ran["env"] == "cached" and ran["install"] == "ran", ran


def test_an_install_record_of_an_earlier_version_holds_the_env_to_the_lock(world: World, tmp_path: Path) -> None:
    """The review: a stack whose install record has no listing (made before it existed) still locked a
    hand-removed package.  Such a record is held to the lock its step wrote after that install."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    marker = stack / ".state" / "install.json"
    doc = json.loads(marker.read_text())
    for key in ("installed", "settings"):
        del doc["outputs"][key]
    was = marker.stat().st_mtime_ns
    marker.write_text(json.dumps(doc))
    os.utime(marker, ns=(was, was))                     # as old as it was: after the env's, before the lock's
    lock = (stack / "pylock.toml").read_bytes()
    _uv_pip(stack, cache, "uninstall", "tinydep")
    ran = {r.name: r.status for r in setup(world, stack, cache).records}
    assert ran["env"] == ran["install"] == "ran", ran
    assert (stack / "pylock.toml").read_bytes() == lock


def _swap_under_a_replace_ref(repo: Path, path: str, text: str) -> None:
    """Commit ``text`` at ``path`` in ``repo``, replace its pinned HEAD with that commit (``git replace``) and check
    the pin out again: HEAD at the pin and ``git status`` clean as git shows it, the other code on disk."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    pin = git("rev-parse", "HEAD")
    git("checkout", "-q", "-b", "t")
    (repo / path).write_text(text)
    git("commit", "-qam", "other code")
    git("replace", pin, git("rev-parse", "HEAD"))
    git("checkout", "-q", "--detach", pin)
    git("branch", "-q", "-D", "t")
    assert git("rev-parse", "HEAD") == pin and git("status", "--porcelain") == ""


def test_a_replace_ref_that_swaps_a_forks_code_under_its_pinned_commit_is_a_difference(
        world: World, tmp_path: Path) -> None:
    """The scenario hunt: ``git replace <pin> <evil>`` and a checkout of the pin left HEAD at the pinned
    commit and ``git status`` clean (git shows the replacement), while the editable install ran the other
    code; verify passed and a re-run was a no-op.  The tool's git commands now ignore replace refs
    (``GIT_NO_REPLACE_OBJECTS``): the checkout differs from the pinned tree, verify says so, a re-run refuses
    the changed clone as any other (exit 8, the way to keep it), and its fix, followed, gives the pinned files."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    alpha = stack / "src" / "alpha"
    _swap_under_a_replace_ref(alpha, "alpha/__init__.py", "A = 666\n")
    found = verify(stack)
    assert found.returncode == 13 and "alpha" in found.stderr, found.stderr
    again = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    assert again.returncode == 8 and "M  alpha/__init__.py" in again.stderr, again.stdout + again.stderr
    (move,) = re.findall(r"run `(mv [^`]+)`", again.stderr)
    subprocess.run(shlex.split(move), check=True)
    done = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "-q")
    assert done.returncode == 0, done.stderr
    assert (alpha / "alpha" / "__init__.py").read_text() == "A = 1\n"
    assert verify(stack).returncode == 0


def test_a_replace_ref_inside_a_submodule_is_a_difference_too(world: World, tmp_path: Path) -> None:
    """Tamper hunt: git hands GIT_NO_REPLACE_OBJECTS to no submodule's git (it is a local-repo variable), so the
    same swap inside beta's submodule passed verify and the re-run; command-scope config reaches them
    (``core.useReplaceRefs=false``, with the tool's other no-repo-code settings)."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    _swap_under_a_replace_ref(stack / "src" / "beta" / "third_party" / "gamma", "gamma/__init__.py", "G = 666\n")
    found = verify(stack)
    assert found.returncode == 13 and "third_party/gamma" in found.stderr, found.stderr
    again = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    assert again.returncode == 8 and "third_party/gamma" in again.stderr, again.stdout + again.stderr


def _index_scope(lock: dict) -> dict:
    """A stack's lock made into a recipe's committed one (locks/<recipe>.pylock.toml): its index packages
    only, no fork commits (the recipe pins those), scope "index", format-version 2."""
    out = dict(lock)
    out["packages"] = [p for p in lock["packages"] if "vcs" not in p]
    tool = dict(lock["tool"]["october"])
    tool.pop("forks", None)
    tool.update({"scope": "index", "format-version": 2})
    out["tool"] = {"october": tool}
    return out


def test_locked_takes_an_index_scope_lock_whose_forks_the_recipe_pins(world: World, tmp_path: Path) -> None:
    """The scenario hunt: ``--recipe R --locked`` with the recipe's committed lock (scope "index", no fork
    commits by design) failed every time before any download: "fork 'vllm' has no usable commit in the lock"
    (exit 13).  The forks now come from the recipe's pins, the packages from the lock."""
    import tomli_w

    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    index = tmp_path / "index.pylock.toml"
    index.write_text(tomli_w.dumps(_index_scope(tomllib.loads((tmp_path / "s1" / "pylock.toml").read_text()))))
    proc = cli(str(tmp_path / "s2"), "--recipe", str(world.recipe), "--cache-dir", str(cache), "--locked",
               "--lock-file", str(index), "-q")
    assert proc.returncode == 0, proc.stderr
    assert verify(tmp_path / "s2").returncode == 0


@pytest.mark.parametrize("edit", ["newer-format", "other-recipe", "fork-commit", "submodule-commit"])
def test_locked_refuses_a_lock_it_would_only_half_read(world: World, tmp_path: Path, edit: str) -> None:
    """The scenario hunt: each of these hand edits passed ``--locked`` (exit 0, the receipt "locked": true
    from that file, a stack lock that differs from it): a newer format-version (its new parts unread),
    another recipe's lock, a fork entry whose commit contradicts its package's commit-id, another submodule
    commit.  Each is refused now (exit 13), naming the part."""
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    lock = tomllib.loads((tmp_path / "s1" / "pylock.toml").read_text())
    tool = lock["tool"]["october"]
    if edit == "newer-format":
        tool["format-version"], words = 99, "format this october does not read"
    elif edit == "other-recipe":
        tool["recipe"]["name"], words = "someone-elses", "was written for recipe someone-elses"
    elif edit == "fork-commit":
        tool["forks"]["alpha"]["commit"], words = "f" * 40, "contradicts itself for fork alpha"
    else:
        (sub,) = tool["forks"]["beta"]["submodules"]
        tool["forks"]["beta"]["submodules"][sub], words = "e" * 40, f"fork beta submodule {sub}"
    import tomli_w

    edited = tmp_path / "edited.toml"
    edited.write_text(tomli_w.dumps(lock))
    proc = cli(str(tmp_path / "s2"), "--recipe", str(world.recipe), "--cache-dir", str(cache), "--locked",
               "--lock-file", str(edited), "-q")
    assert proc.returncode == 13 and words in proc.stderr, proc.stderr
    assert not (tmp_path / "s2" / "receipts" / "setup.json").exists()


def test_a_torch_pin_without_its_local_tag_names_the_build_the_sources_served(world: World, tmp_path: Path) -> None:
    """The scenario hunt: ``[torch] version = "2.10.0"`` where the sources hold only ``2.10.0+fixture``: uv took
    that build (PEP 440), the check then failed on an exact dist-info and its message crashed on a recipe
    without a torch index (a traceback, exit 1, nothing on stdout with --json).  Now the env error names the
    build installed and the pin to write."""
    text = world.recipe.read_text()
    assert 'version = "2.10.0+fixture"' in text
    world.recipe.write_text(text.replace('version = "2.10.0+fixture"', 'version = "2.10.0"', 1))
    proc = cli(str(tmp_path / "s"), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"), "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    from october.installer.core.errors import EnvError

    assert proc.returncode == EnvError.exit_code, proc.stderr
    assert "found torch 2.10.0+fixture" in proc.stderr and 'version = "2.10.0+fixture"' in proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == EnvError.exit_code


def test_a_python_the_machine_lacks_is_named_as_the_recipes_python(world: World, tmp_path: Path) -> None:
    """The scenario hunt: ``[python] version = "3.9.1"`` on a machine without it (uv cannot download one
    offline) was "command `uv venv ...` failed" with uv's DNS error: nothing named the recipe's key or a way
    out.  Now an env error names [python] version, what uv said, and the fixes; a re-run with the recipe
    fixed finishes."""
    text = world.recipe.read_text()
    world.recipe.write_text(re.sub(r'(\[python\]\s*\nversion = )"[^"]+"', r'\1"3.9.1"', text, count=1))
    assert world.recipe.read_text() != text, "the fixture recipe's [python] section moved"
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")     # as on an offline node: nothing to download
    proc = cli(str(tmp_path / "s"), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"), env=env)
    assert proc.returncode == 9 and "no Python 3.9.1 for the stack env" in proc.stderr, proc.stderr
    assert "[python] version" in proc.stderr and "uv python install 3.9.1" in proc.stderr
    world.recipe.write_text(text)
    assert cli(str(tmp_path / "s"), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"),
               "-q").returncode == 0


def test_a_find_links_folder_that_is_not_there_is_named_as_the_recipes_key(world: World, tmp_path: Path) -> None:
    """The scenario hunt: ``find_links = ["nowheels"]`` failed at the env step as a generic "command failed"
    (exit 6) naming no recipe key.  Now an env error (exit 9) names [sources] find_links, the folder and the
    recipe (asked when uv failed: uv minds a missing folder only when it needs a package from it)."""
    text = world.recipe.read_text()
    assert 'find_links = ["wheels"]' in text
    world.recipe.write_text(text.replace('find_links = ["wheels"]', 'find_links = ["nowheels"]'))
    proc = cli(str(tmp_path / "s"), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 9 and "[sources] find_links" in proc.stderr and "nowheels" in proc.stderr, proc.stderr


def test_only_uvs_own_no_python_messages_are_taken_for_a_missing_python() -> None:
    """The review: any failed ``uv venv`` became "no Python X" (uv always prints "Using CPython ... interpreter
    at: ..." first): a path that is a file, a permission error.  Only uv's own no-Python errors are (the outputs
    below are uv 0.13's, captured here)."""
    from october.installer.pyenv.venv import missing_python

    not_a_dir = ("Using CPython 3.11.7 interpreter at: /usr/bin/python3.11\nCreating virtual environment at: /x/env\n"
                 "error: Failed to create virtual environment\n  cause: Not a directory (os error 20)\n")
    assert missing_python(not_a_dir) is None
    inspect = ("error: Failed to inspect Python interpreter from first executable in the search path at "
               "`/root/.pyenv/shims/python3.9`\n  cause: Querying Python failed with exit status 127\n")
    download = ("error: Request failed after 3 retries in 10.9s\n  cause: Failed to download `http://127.0.0.1:9/"
                "cpython-3.9.1-x86_64-unknown-linux-gnu.tar.zst`\n")
    none = "error: No interpreter found for Python 3.9.1 in managed installations or search path\n"
    assert missing_python(inspect) and missing_python(none) == none.strip()
    assert "cpython-3.9.1" in (missing_python(download) or "")


def test_a_find_links_file_url_is_read_as_uv_reads_it(tmp_path: Path) -> None:
    """The review: ``file:///a%20b`` and ``file://localhost/...`` folders that are there were reported missing."""
    import dataclasses

    from october.installer.pyenv.uvcmd import missing_find_links
    from october.installer.recipe import load_recipe
    from october.installer.recipe.env import Sources
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    spaced = tmp_path / "wheels dir"
    spaced.mkdir()
    recipe = load_recipe(str(world.recipe))
    for link in (spaced.as_uri(), f"file://localhost{spaced.as_posix().replace(' ', '%20')}", "https://x.invalid/w"):
        assert missing_find_links(dataclasses.replace(recipe, sources=Sources(find_links=(link,)))) == []
    gone = tmp_path / "gone"
    assert missing_find_links(dataclasses.replace(recipe, sources=Sources(find_links=(gone.as_uri(),)))) == [gone]


@pytest.mark.parametrize("cuda, ok", [("12.6", False), (None, False), ("13.2", True)])
def test_a_torch_built_for_another_cuda_major_than_the_recipe_is_refused_by_the_env_step(
        world: World, tmp_path: Path, cuda: str | None, ok: bool) -> None:
    """The new-user hunt: a recipe pinning a torch build whose CUDA does not match its [cuda] (a cu126 wheel,
    or a CPU build, under [cuda] 13.0) set up a finished stack (exit 0) and verify passed.  The env step reads
    the installed torch's version.py (read, not run) and refuses another CUDA major; the same major (PyPI's
    torch 2.10.0 is the 12.8 build, which the shipped [cuda] 12.9 recipe runs) is accepted."""
    from tests.fixtures.wheels import build_wheel

    version = "2.10.0+fixture"
    for old in world.wheels.glob("torch-*.whl"):
        old.unlink()
    build_wheel(world.wheels, "torch", version, {"torch/__init__.py": f'__version__ = "{version}"\n',
                                                  "torch/version.py": f"from typing import Optional\n"
                                                                      f"__version__ = '{version}'\n"
                                                                      f"cuda: Optional[str] = {cuda!r}\n"})
    world.recipe.write_text(world.recipe.read_text() + '\n[cuda]\nversion = "13.0"\narch_list = "9.0"\nvariant = "cu130"\n')
    proc = cli(str(tmp_path / "stack"), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"),
               "--skip-preflight", "nvcc,gpu,cuda_arch")
    if ok:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 9, proc.stderr            # environment error
    assert "torch is built for another CUDA than the recipe's [cuda]" in proc.stderr
    assert (f"a build for CUDA {cuda}" if cuda else "a CPU build (no CUDA)") in proc.stderr


def test_without_git_on_path_every_command_says_so_not_a_traceback(world: World, tmp_path: Path) -> None:
    """The new-user hunt: with no git on PATH, GitPython's import raised ImportError ("Bad git executable") and
    every command that touches a stack ended in a traceback (exit 70), before the preflight could list git as
    missing.  Now setup gives the punch list (exit 4), verify names the clones it could not read (exit 13), and
    `current env` reports without git."""
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sh", "env", "uname"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    env = {**os.environ, "PATH": str(bare)}
    again = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), env=env)
    assert again.returncode == 4 and "[git] expected git on PATH" in again.stderr, again.stderr
    checked = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, env=env, timeout=300)
    assert checked.returncode == 13 and "cannot run git" in checked.stderr, checked.stderr
    report = subprocess.run([sys.executable, "-m", "october", "env", "--install", str(stack)], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, env=env, timeout=300)
    for proc in (again, checked, report):
        assert "Traceback" not in proc.stderr and proc.returncode != 70, proc.stderr
    # the review: another git first on PATH (a conda env's, `module load git`) is no reason to run the preflight
    # again, which every later step is chained on (the env made again, the forks installed again)
    assert cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache)).returncode == 0   # git back
    first = tmp_path / "first"
    first.mkdir()
    shutil.copy2(shutil.which("git") or "/usr/bin/git", first / "git")
    moved = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache),
                env={**os.environ, "PATH": f"{first}{os.pathsep}{os.environ['PATH']}"})
    assert moved.returncode == 0, moved.stderr
    assert not [ln for ln in moved.stderr.splitlines() if "running again" in ln and "receipt:" not in ln], moved.stderr


def test_an_env_made_again_is_not_held_to_the_records_of_the_install_before_it(world: World, tmp_path: Path) -> None:
    """The review: the install's RECORD digests (.state/install-records.json) outlived the env they described;
    a recipe that bumps torch made the env again, and the install then "re-installed what no longer matches its
    RECORD" (torch, gigabytes on a real stack).  The env step removes them as it makes the env."""
    from tests.fixtures.wheels import build_wheel

    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    assert (stack / ".state" / "install-records.json").is_file()
    build_wheel(world.wheels, "torch", "2.10.1+fixture", {"torch/__init__.py": '__version__ = "2.10.1+fixture"\n'})
    world.recipe.write_text(world.recipe.read_text().replace('version = "2.10.0+fixture"', 'version = "2.10.1+fixture"'))
    proc = cli(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "--skip-preflight", "nvcc,gpu,cuda_arch")
    assert proc.returncode == 0, proc.stderr
    assert "==> env: running again" in proc.stderr and "re-installing what no longer matches" not in proc.stderr, \
        proc.stderr


def _republish_tinydep(world: World) -> str:
    """tinydep 1.0 built again with other code under the same file name (a private index or find-links folder
    may; PyPI may not); -> the new file's sha256."""
    from tests.fixtures.wheels import build_wheel

    whl = world.wheels / "tinydep-1.0-py3-none-any.whl"
    whl.unlink()
    build_wheel(world.wheels, "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 2\n"})
    return sha256_file(whl)


def _tinydep(stack: Path) -> str:
    return next((stack / "env").glob("lib/python*/site-packages/tinydep/__init__.py")).read_text()


@pytest.mark.parametrize("copy", ["built-stack", "uv-cache", "own-env"])
def test_a_wheel_republished_under_its_name_is_never_locked_over_the_old_bytes(world: World, tmp_path: Path,
                                                                                copy: str) -> None:
    """Hunt: a find-links wheel replaced by other bytes under the same file name.  uv's cache and the built-stack
    cache take the old bytes (a file's name is its identity to both), while the lock step's `uv pip compile`
    hashed the new file: the lock named a file that was not installed and `current verify` passed it.  Now the
    lock step holds the installed RECORD to the locked wheel's: it refuses and removes nothing (which bytes are
    right is the user's to say: the upgrade hunt saw a forced re-lock delete a clean env), and its fix's commands
    (the env and the built-stack entry removed, uv's cache of the package cleaned) make the re-run install and
    lock the new file."""
    first, cache = tmp_path / "s1", tmp_path / "cache"
    setup(world, first, cache)
    assert _tinydep(first) == "VALUE = 1\n"
    new = _republish_tinydep(world)
    stack = first if copy == "own-env" else tmp_path / "s2"
    if copy == "own-env":
        shutil.rmtree(first / "env")                  # its env made again: from the built-stack entry it stored
    elif copy == "uv-cache":
        shutil.rmtree(cache / "built")                # no entry: uv's cache installs the old bytes
    with pytest.raises(LockError, match="does not hold the files its lock would name") as info:
        setup(world, stack, cache)
    assert "tinydep 1.0: 1 file(s) unlike tinydep-1.0-py3-none-any.whl" in str(info.value)
    assert _tinydep(stack) == "VALUE = 1\n"                       # nothing removed
    fix = info.value.fix
    assert "nothing was removed" in fix and "put the original file back" in fix
    for command in re.findall(r"`([^`]+)`", fix):
        subprocess.run(command, shell=True, check=True, capture_output=True)
    assert not (stack / "env").exists()
    ran = {r.name: r.status for r in setup(world, stack, cache).records}
    assert ran["env"] == ran["install"] == ran["lock"] == "ran", ran
    assert _tinydep(stack) == "VALUE = 2\n"
    assert locked_state(stack / "pylock.toml").hashes["tinydep"] == (new,)
    done = verify(stack)
    assert done.returncode == 0, done.stderr


def test_verify_names_a_locked_wheel_the_env_does_not_hold(world: World, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack locked before the lock step held the env to its wheels (the check left out here, as an earlier
    version wrote it): its lock names the republished tinydep, its env holds the old one.  `current verify`
    says so (exit 13), naming the file that differs, where it said 'matches its lock'; `--locked` puts it back."""
    import october.installer.lock.installed as held

    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    new = _republish_tinydep(world)
    stack = tmp_path / "s2"
    with monkeypatch.context() as m:
        m.setattr(held, "unlike_locked", lambda *_a, **_k: [])
        setup(world, stack, cache)                  # its env from the built-stack entry: the old bytes
    assert locked_state(stack / "pylock.toml").hashes["tinydep"] == (new,) and _tinydep(stack) == "VALUE = 1\n"
    done = verify(stack)
    assert done.returncode == 13, done.stdout + done.stderr
    assert "[distributions] tinydep" in done.stderr and "tinydep/__init__.py" in done.stderr
    assert "--locked" in done.stderr
    setup(world, stack, cache, locked=locked_state(stack / "pylock.toml"))
    assert _tinydep(stack) == "VALUE = 2\n"
    assert verify(stack).returncode == 0


def test_an_ignored_folder_inside_a_submodule_is_named_by_verify(world: World, tmp_path: Path) -> None:
    """The verify hunt: a folder that ignores itself (`*` in its .gitignore, as pytest, mypy, ruff and uv make
    them) planted with a module and an extension inside a selected submodule passed `current verify` ('matches');
    git lists no ignored file inside a submodule from the fork.  The same in the fork's own tree was named."""
    stack = tmp_path / "stack"
    setup(world, stack, tmp_path / "cache")
    planted = stack / "src" / "beta" / "third_party" / "gamma" / "gamma" / "_cache"
    planted.mkdir(parents=True)
    (planted / ".gitignore").write_text("*\n")
    (planted / "evil.py").write_text('raise SystemExit("planted")\n')
    (planted / "evil.abi3.so").write_bytes(b"\x7fELF planted")
    done = verify(stack)
    assert done.returncode == 13, done.stdout + done.stderr
    assert "third_party/gamma/gamma/_cache/evil.py" in done.stderr and "evil.abi3.so" in done.stderr, done.stderr
    shutil.rmtree(planted)
    assert verify(stack).returncode == 0
