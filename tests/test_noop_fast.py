"""Issue 20: the no-op re-run of ``october_setup`` answers from the fast path (no typer, nothing run,
nothing written) only when every step still verifies; anything else goes to the full command line.

Real uv, real git, real wheels (tests/fixtures/world.py); the CLI runs as a user runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from october.installer.cli.noop import parse
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.world import World, make_world, snapshot

PROBE = """
import json, sys
from october.installer.cli import noop
from october.installer.october_setup import setup_main
answered = []
def watched(args, _orig=noop.try_noop):
    rc = _orig(args)
    answered.append(rc is not None)
    return rc
noop.try_noop = watched
rc = setup_main(sys.argv[1:])
print(json.dumps({"rc": rc, "typer": "typer" in sys.modules, "pydantic": "pydantic" in sys.modules,
                  "noop": any(answered), "git": "git" in sys.modules,
                  "httpx": "httpx" in sys.modules, "jsonschema": "jsonschema" in sys.modules}))
"""
NOOP = {"rc": 0, "typer": False, "pydantic": False, "noop": True, "git": False, "httpx": False, "jsonschema": False}


def setup_cli(*args: str) -> tuple[dict[str, object], subprocess.CompletedProcess[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)
    last = proc.stdout.strip().splitlines()[-1]
    return json.loads(last), proc


@pytest.mark.slow
def test_noop_takes_the_fast_path_and_a_change_does_not(tmp_path: Path) -> None:
    world: World = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    args = (str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    first, proc = setup_cli(*args)
    # a new stack: not a no-op; plain options run the same provisioning without typer or click (the recipe is
    # validated, by its pydantic models: installer/recipe/spec.py)
    assert (first["rc"], first["noop"], first["typer"]) == (0, False, False), proc.stderr
    assert "stack ready:" in proc.stdout
    # a second stack from the same cache: plain options, no typer either
    second, proc = setup_cli(str(tmp_path / "stack2"), *args[1:])
    assert (second["rc"], second["noop"], second["typer"]) == (0, False, False), proc.stderr

    before = snapshot(stack)
    again, proc = setup_cli(*args)
    assert again == NOOP, proc.stderr
    assert "stack ready:" in proc.stdout and "(0 step(s) ran, 6 already done)" in proc.stdout
    assert "==> install: already done (inputs unchanged)" in proc.stderr
    # the file-trust store alone, and once: signatures of files too new to keep when the run ended
    trust = ".state/file-trust.json"
    assert {k: v for k, v in snapshot(stack).items() if k != trust} == {k: v for k, v in before.items() if k != trust}
    before = snapshot(stack)
    again, proc = setup_cli(*args)
    assert again == NOOP, proc.stderr
    assert snapshot(stack) == before, "the fast path must change no file"
    # a stack whose recipe marker is gone or another digest's (set up by an older tool, or the recipe since
    # changed): the no-op takes the signed mark provisioning left in the cache, and writes nothing
    shutil.rmtree(stack / ".state" / "recipe-checked")
    before = snapshot(stack)
    unmarked, proc = setup_cli(*args)
    assert unmarked == NOOP, proc.stderr
    assert snapshot(stack) == before, "the fast path must change no file, a missing recipe marker included"
    # without that mark either (an upgrade changed the recipe code): the first no-op validates with the models and
    # marks the cache only, so the next ones do not import pydantic again (a scenario hunt: every no-op of every
    # stack made before an upgrade imported it)
    shutil.rmtree(cache / "recipe-checked")
    unmarked, proc = setup_cli(*args)
    assert unmarked == {**NOOP, "pydantic": True}, proc.stderr
    assert snapshot(stack) == before, "the fast path must change no file in the stack"
    assert len(list((cache / "recipe-checked").glob("*/*"))) == 1
    unmarked, proc = setup_cli(*args)
    assert unmarked == NOOP, proc.stderr
    assert snapshot(stack) == before

    # a local change in a fork: the fast path does not answer; the full command line reports it
    (stack / "src" / "alpha" / "alpha" / "__init__.py").write_text("A = 2\n")
    changed, proc = setup_cli(*args)
    assert not changed["noop"] and changed["rc"] != 0
    assert "local changes" in proc.stderr

    # an option the fast path does not take, and a different option value, go to the full path
    assert parse([*args, "--kit", str(tmp_path)]).kit == tmp_path     # a kit: see the test below
    assert parse(["kit", "--recipe", "x", str(tmp_path)]) is None
    assert parse([*args, "--verbose"]) is None and parse([*args, "--help"]) is None
    assert parse([*args, "--skip-preflight", "gpu,nvcc", "-q"]).skip_preflight == ["gpu,nvcc"]


@pytest.mark.slow
def test_a_noop_with_the_cache_in_the_stack_marks_nothing_there(tmp_path: Path) -> None:
    """--cache-dir STACK/mine (a folder of the user's in the stack, which the tool allows): a no-op that had to
    run the models does not write the cache's mark there either (a no-op writes nothing in the stack)."""
    world: World = make_world(tmp_path / "world")
    stack = tmp_path / "stack"
    args = (str(stack), "--recipe", str(world.recipe), "--cache-dir", str(stack / "mine"))
    first, proc = setup_cli(*args)
    assert first["rc"] == 0, proc.stderr
    shutil.rmtree(stack / ".state" / "recipe-checked")
    shutil.rmtree(stack / "mine" / "recipe-checked")
    before = snapshot(stack)
    again, proc = setup_cli(*args)
    assert again == {**NOOP, "pydantic": True}, proc.stderr
    trust = ".state/file-trust.json"                # the one write a no-op may make (see the test above)
    assert {k: v for k, v in snapshot(stack).items() if k != trust} == {k: v for k, v in before.items() if k != trust}
    assert not (stack / "mine" / "recipe-checked").exists()


@pytest.mark.parametrize("extra, code", [
    (("--recipe", "no-such-recipe"), 3),                        # a recipe error
    (("--lock-file", "missing.toml"), 19),                      # an option checked before anything is written
    (("--skip-preflight", "no-such-check"), 2),                 # a usage error the command itself raises
])
def test_plain_and_typer_command_lines_fail_alike(tmp_path: Path, extra: tuple[str, ...], code: int) -> None:
    """A failing run with plain options goes through the fast path; it must say exactly what the typer
    command line says, with the same exit code (one provisioning function, one error handler)."""
    args = (str(tmp_path / "stack"), "--cache-dir", str(tmp_path / "cache"), *extra)
    plain, proc_plain = setup_cli(*args)
    typer_run = subprocess.run([sys.executable, "-c", "import sys; from october.installer.cli.main import setup_main; "
                                "sys.exit(setup_main(sys.argv[1:]))", *args], cwd=PROJECT_ROOT, capture_output=True,
                               text=True, timeout=120)
    assert (plain["rc"], plain["typer"], plain["pydantic"]) == (code, False, False), proc_plain.stderr
    assert typer_run.returncode == code, typer_run.stderr
    assert proc_plain.stderr == typer_run.stderr and proc_plain.stderr.strip()
    assert not (tmp_path / "stack" / ".state").exists()


def test_options_the_plain_parser_does_not_take_go_to_typer(tmp_path: Path) -> None:
    """--json, -v and --help are the typer command line's (their output is its own)."""
    out, proc = setup_cli(str(tmp_path / "stack"), "--recipe", "no-such-recipe", "--json")
    assert out["typer"] and out["rc"] == 3
    assert '"kind": "october-error"' in proc.stdout


def test_parse_refuses_what_it_does_not_know() -> None:
    assert parse([]) is None
    assert parse(["s", "--no-such-option"]) is None
    assert parse(["s", "t"]) is None                            # two stacks: typer's usage error
    assert parse(["s", "--recipe"]) is None                     # a missing value
    ns = parse(["s", "-r", "r.toml", "--cache-dir=c", "--locked", "--lock-file", "l.toml", "--allow-dirty"])
    assert ns is not None and (ns.recipe, str(ns.cache_dir), ns.locked, ns.allow_dirty) == ("r.toml", "c", True, True)
    # an empty path is not Path(".") (a no-op or a run with the current directory as the cache): the full
    # command line's usage error (tests/test_conventions.py)
    for option in ("--cache-dir", "--lock-file", "--system-python", "--kit"):
        assert parse(["s", option, ""]) is None and parse(["s", f"{option}= "]) is None, option
        assert parse(["s", option, "x"]) is not None
    assert parse([""]) is None and parse(["  ", "-q"]) is None


def test_an_empty_cache_dir_on_a_finished_stack_is_a_usage_error_not_the_current_directory(
        tmp_path: Path) -> None:
    """The audit's case: ``--cache-dir ""`` on the fast path answered with the current directory as the cache
    (exit 0; a new stack's run made git/, built/ and uv/ there)."""
    world = make_world(tmp_path / "world")
    stack, cwd = tmp_path / "stack", tmp_path / "cwd"
    cwd.mkdir()
    args = (str(stack), "--recipe", str(world.recipe), "--cache-dir", str(tmp_path / "cache"), "-q")
    assert setup_cli(*args)[0]["rc"] == 0
    for again in (args[:3] + ("--cache-dir", "") + args[5:], (str(tmp_path / "new"), *args[1:3], "--cache-dir", "")):
        proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", *again], cwd=cwd,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert "--cache-dir is given an empty path" in proc.stderr and "->" in proc.stderr
        assert list(cwd.iterdir()) == [] and not (tmp_path / "new").exists()


def test_imported_modules_get_their_bytecode_once_under_dontwritebytecode(tmp_path: Path) -> None:
    """PYTHONDONTWRITEBYTECODE=1: Python writes no .pyc; the tool writes those of what it imported,
    once, and a module whose source changed is compiled again."""
    (tmp_path / "fresh_mod.py").write_text("X = 1\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import fresh_mod; "
            "from october.installer.october_setup import compile_imported; print(compile_imported())")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    run = lambda: subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,  # noqa: E731
                                 env=env, check=True, cwd=PROJECT_ROOT).stdout.strip()
    pyc = tmp_path / "__pycache__" / f"fresh_mod.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc"
    assert not pyc.exists()
    assert int(run()) >= 1 and pyc.is_file()
    assert run() == "0"                                         # nothing left to compile
    time.sleep(0.01)
    (tmp_path / "fresh_mod.py").write_text("X = 22\n")
    assert run() == "1"


def test_the_tool_leaves_without_a_collection_over_every_object() -> None:
    """The interpreter's teardown of ~530 modules with the collector on took 60-85 ms of a 1.1 s second stack; the
    entry module's exit handler stops the collector and freezes what is there, and runs last: a handler
    registered after it (the tool's own, a library's) still runs first, with the collector as it was."""
    code = ("import atexit, gc\n"
            "atexit.register(lambda: print('last', gc.isenabled(), gc.get_freeze_count() > 0, flush=True))\n"
            "import october.installer.october_setup\n"
            "atexit.register(lambda: print('first', gc.isenabled(), gc.get_freeze_count() > 0, flush=True))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PROJECT_ROOT,
                         timeout=60).stdout.split()
    assert out == ["first", "True", "False", "last", "False", "True"]


def test_nothing_of_the_tool_waits_for_a_collection_to_do_its_work() -> None:
    """What the exit handler above relies on: no class of the tool (installer/, checks/) does work in ``__del__``
    or a ``weakref.finalize`` callback, which a collection at exit would have run for an object in a cycle."""
    found = [f"{path.relative_to(PROJECT_ROOT)}:{n}" for top in ("installer", "checks")
             for path in sorted((PROJECT_ROOT / top).rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "def __del__" in line or "weakref.finalize" in line or "finalize(" in line and "weakref" in line]
    assert found == []


def test_fork_verify_sees_a_moved_or_unchecked_out_submodule(tmp_path: Path) -> None:
    """The fetch step's verify reads submodule HEADs from their files when the tree is clean (no
    `git submodule status`): a submodule moved to another commit, or not checked out, is caught,
    with and without --allow-dirty."""
    from october.installer.engine import run_pipeline
    from october.installer.git.clonecheck import check_clone
    from october.installer.steps.fetch import FetchStep
    from tests.fixtures.fetchctx import fork_use, make_ctx, make_recipe
    from tests.fixtures.gitrepos import git as fixture_git
    from tests.fixtures.gitrepos import make_repo
    from tests.test_fetch_submodules import _super_with

    sub_url, _ = make_repo(tmp_path, "sub", commits=2)
    url, commit, recorded = _super_with(tmp_path, {"3rdparty/sub": sub_url})
    [rec] = run_pipeline([FetchStep()], make_ctx(tmp_path / "stack", make_recipe([fork_use("fi", url, commit)]),
                                                 tmp_path / "cache"))
    src, subs = tmp_path / "stack" / "src" / "fi", dict(rec.outputs["forks"]["fi"]["submodules"])
    assert subs == recorded
    assert check_clone(src, commit, allow_dirty=False, submodules=subs) is None
    assert check_clone(src, commit, allow_dirty=True, submodules=subs) is None

    fixture_git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "moved",
                cwd=src / "3rdparty" / "sub")
    assert "local changes" in (check_clone(src, commit, allow_dirty=False, submodules=subs) or "")
    assert "3rdparty/sub" in (check_clone(src, commit, allow_dirty=True, submodules=subs) or "")

    fixture_git("checkout", "-q", "--detach", recorded["3rdparty/sub"], cwd=src / "3rdparty" / "sub")
    assert check_clone(src, commit, allow_dirty=False, submodules=subs) is None
    # an edit git status is told not to see, in the fork or its submodule, is a local change too
    for repo in (src, src / "3rdparty" / "sub"):
        tracked = fixture_git("ls-files", cwd=repo).splitlines()[0]
        for bit, undo in (("--skip-worktree", "--no-skip-worktree"), ("--assume-unchanged", "--no-assume-unchanged")):
            fixture_git("update-index", bit, tracked, cwd=repo)
            assert fixture_git("status", "--porcelain", cwd=src) == ""
            found = check_clone(src, commit, allow_dirty=False, submodules=subs) or ""
            assert "local changes" in found and f"{tracked} ({bit[2:]})" in found, found
            fixture_git("update-index", undo, tracked, cwd=repo)
    assert check_clone(src, commit, allow_dirty=False, submodules=subs) is None
    fixture_git("submodule", "deinit", "-q", "-f", "3rdparty/sub", cwd=src)
    for dirty in (False, True):
        assert "not at their recorded commits: 3rdparty/sub" in (
            check_clone(src, commit, allow_dirty=dirty, submodules=subs) or "")


@pytest.mark.slow
def test_a_stack_set_up_from_a_kit_answers_its_no_op_from_the_fast_path(tmp_path: Path) -> None:
    """The H200 run's command (``--kit KIT --system-python ...``) took the full command line on every no-op
    (1.0 s there).  A finished stack reads nothing from its kit: the kit only shapes the recipe's sources,
    so the fast path answers; were anything to run (a changed fork), the full command line verifies the kit."""
    from tests.test_kit import _recipe_copy

    world: World = make_world(tmp_path / "world")
    recipe = _recipe_copy(world, tmp_path / "recipe")
    kit, stack, cache = tmp_path / "kit", tmp_path / "stack", tmp_path / "cache"
    made = subprocess.run([sys.executable, "-m", "october.installer.october_setup", "kit", "--recipe", str(recipe),
                           str(kit), "--cache-dir", str(tmp_path / "cache-kit"), "-q"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    args = (str(stack), "--recipe", str(recipe), "--kit", str(kit), "--cache-dir", str(cache))
    first, proc = setup_cli(*args)
    assert first["rc"] == 0 and not first["noop"], proc.stderr
    again, proc = setup_cli(*args)
    assert again == NOOP, proc.stderr
    # the same stack named without its kit has other sources (other fingerprints): the pipeline runs
    other, proc = setup_cli(str(stack), "--recipe", str(recipe), "--cache-dir", str(cache))
    assert not other["noop"]
    # a changed fork with the kit tampered: the full command line runs and refuses the kit first
    (stack / "src" / "alpha" / "alpha" / "__init__.py").write_text("A = 2\n")
    wheel = next((kit / "wheels").glob("tinydep-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"x")
    tampered, proc = setup_cli(*args)
    assert not tampered["noop"] and tampered["rc"] == 20, proc.stderr


def test_a_second_stack_s_files_are_hashed_by_one_no_op_not_by_every_one(tmp_path: Path) -> None:
    """A second stack ends about a second after its env was copied: its files were too new to keep their
    signatures (core/filetrust.py), and every no-op hashed all of them again (the H200's second stack: 280
    files, 0.08 s of each no-op) while writing nothing.  The first no-op now keeps them; the next reads none."""
    from october.installer.core.filetrust import FileTrust

    world: World = make_world(tmp_path / "world")
    cache = tmp_path / "cache"
    setup_cli(str(tmp_path / "stack1"), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    stack = tmp_path / "stack2"
    args = (str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    first, proc = setup_cli(*args)
    assert first["rc"] == 0 and not first["noop"], proc.stderr
    env_files = {str(p) for p in (stack / "env").rglob("*") if p.is_file() and "site-packages" in p.parts
                 and "__pycache__" not in p.parts and p.suffix != ".pyc"}

    def kept() -> set[str]:
        return set(FileTrust(stack / ".state" / "file-trust.json").entries) & env_files

    time.sleep(1.1)                     # the run's files are now old enough to keep (filetrust.RACY_NS)
    again, proc = setup_cli(*args)
    assert again == NOOP, proc.stderr
    inits = {f for f in env_files if f.endswith("__init__.py")}
    assert inits and kept() >= inits, inits - kept()
    store = (stack / ".state" / "file-trust.json").stat().st_mtime_ns
    again, proc = setup_cli(*args)
    assert again == NOOP and (stack / ".state" / "file-trust.json").stat().st_mtime_ns == store
