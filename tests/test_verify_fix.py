"""Issue 22, item 8: every what-to-do line `current verify` prints is one that works.

On the K16/V8 stand-in stack of tests/test_verify.py (real git, uv, wheels, gcc-built JIT libraries;
stand-ins only for GitHub, the vLLM wheel host and CUDA), faults of every kind verify reports are
planted together; each command its error suggests is then run as printed (through bash, with the
tool's own ``october_setup`` and uv on PATH), and verify must pass afterwards.  The submodule lines
are run in tests/test_verify.py (the fixture world has a submodule), the real stack's in
tests/test_verify_real.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.pyenv.uvcmd import uv_exe
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.wheels import build_wheel
from tests.test_verify import Stack, differences, git, site, stack, uv_pip, verify  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

COMMAND = re.compile(r"`([^`]+)`")


def run_commands(fix: str) -> list[str]:
    """Run every `command` of a fix line in order, as a user would paste it; -> the commands."""
    commands = COMMAND.findall(fix)
    assert commands, f"no command in the fix line: {fix}"
    tools = os.pathsep.join(dict.fromkeys([str(Path(sys.executable).parent), str(Path(uv_exe()).parent)]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_") and k != "VIRTUAL_ENV"}
    env["PATH"] = tools + os.pathsep + env.get("PATH", "")
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"`{command}` failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return commands


def test_every_suggested_command_puts_the_stack_back(stack: Stack) -> None:
    fi, vllm = stack.root / "src" / "flashinfer", stack.root / "src" / "vllm"
    # an extra distribution, a file changed in place (a copy or reflink: no other hard link), a .pth, a
    # moved fork HEAD, local changes in the other fork, a zero-byte AOT copy, an AOT library no record names,
    # a changed and a planted build output in a fork checkout
    extra = build_wheel(stack.tmp / "extra-fix", "sneaky-fix", "1.0", {"sneaky_fix/__init__.py": ""})
    uv_pip(stack, "install", "--no-deps", str(extra))
    with open(site(stack) / "torch" / "__init__.py", "ab") as fh:
        fh.write(b"\n# patched by hand\n")
    (site(stack) / "zz.pth").write_text("import zz_payload\n")
    (site(stack) / "zz_payload.py").write_text("print('ran')\n")
    git(vllm, "commit", "-q", "--allow-empty", "-m", "someone's experiment")
    (fi / "flashinfer" / "__init__.py").write_text("# edited\n")
    (fi / "notes.txt").write_text("scratch\n")
    aot = fi / "flashinfer" / "data" / "aot"
    next(aot.glob("*/*.so")).write_bytes(b"")
    (aot / "stray" ).mkdir()
    (aot / "stray" / "stray.so").write_bytes(b"\x7fELF")
    # a replaced build output of the fork's install (git ignores it) and a planted one
    with open(vllm / "vllm" / "_C.abi3.so", "ab") as fh:
        fh.write(b"\0")
    (vllm / "vllm" / "_planted.abi3.so").write_bytes(b"\x7fELF planted")

    diffs = differences(stack)
    kinds = {(d["check"], d["what"].split(" (")[0]) for d in diffs}
    assert {c for c, _w in kinds} == {"distributions", "files", "forks", "jit"}, diffs
    assert {d["what"].rsplit(" ", 1)[1] for d in diffs if " build output " in d["what"]} == {"vllm/_C.abi3.so"}
    assert any(d["found"] == "1 other file(s): vllm/_planted.abi3.so" for d in diffs), diffs
    fixes = list(dict.fromkeys(d["fix"] for d in diffs))
    assert all(fixes), diffs
    proc = verify(stack)
    assert proc.returncode == 13
    for i, fix in enumerate(fixes, 1):
        assert f"{i}. {fix}" in proc.stderr.replace("\n     ", " ") or fix in proc.stderr
    ran = [c for fix in fixes for c in run_commands(fix.split(", or ")[0])]
    assert any("--locked" in c for c in ran) and any("stash push" in c for c in ran)
    files_fix = next(d["fix"] for d in diffs if d["check"] == "files")
    assert "hard link" not in files_fix and f"--cache-dir {stack.cache}" in files_fix, files_fix
    assert not any("uv cache clean" in c for c in ran) and any(c.startswith("rm -f -- ") for c in ran)
    assert differences(stack) == []
    proc = verify(stack)
    assert proc.returncode == 0, proc.stderr


def test_keeping_local_changes_on_record_works_too(stack: Stack) -> None:
    """The other half of the dirty-fork line: re-run with --allow-dirty; the receipt records the tree as
    dirty and verify accepts it.  (Then the changes are stashed and the stack set up clean again.)"""
    fi = stack.root / "src" / "flashinfer"
    (fi / "notes.txt").write_text("kept on purpose\n")
    diffs = differences(stack)
    assert [d["check"] for d in diffs] == ["forks"]
    keep = diffs[0]["fix"].split(", or ")[1]
    assert "--allow-dirty" in keep
    run_commands(keep)
    assert differences(stack) == []
    git(fi, "stash", "push", "-q", "--include-untracked")
    back = re.sub(r" --allow-dirty$", "", COMMAND.findall(keep)[0])
    run_commands(f"`{back}`")
    assert differences(stack) == []
    shutil.rmtree(stack.tmp / "extra-fix", ignore_errors=True)


def test_a_changed_lock_file_is_written_again_by_the_suggested_command(stack: Stack) -> None:
    lock = stack.root / "pylock.toml"
    original = lock.read_bytes()
    lock.write_bytes(original + b"# edited by hand\n")
    diffs = differences(stack)
    assert [d["check"] for d in diffs] == ["lock"] and "--locked" not in diffs[0]["fix"]
    run_commands(diffs[0]["fix"])
    assert b"# edited by hand" not in lock.read_bytes() and differences(stack) == []


def test_an_unreadable_receipt_names_the_recipe_and_the_rerun_rewrites_it(stack: Stack) -> None:
    """The recipe here is a file of the test, not a shipped one.  The stack records the command its last run
    began with (``.state/recipe-used.json``): verify names it whole, and run as printed it rewrites the
    receipt.  A record by an earlier version (the recipe alone): verify names the recipe (from the lock) and
    asks for its path; the command with the path filled in (and the stack's options) rewrites it."""
    receipt = stack.root / "receipts" / "setup.json"
    original = receipt.read_text()
    recipe = json.loads(original)["recipe"]["path"]
    receipt.write_text("{ not json")
    proc = verify(stack)
    assert proc.returncode == 18, proc.stderr
    command = COMMAND.search(proc.stderr.split("->", 1)[1])
    assert command is not None and shlex.split(command.group(1))[2:] == [
        "--recipe", recipe, "--skip-preflight", "nvcc", "--cache-dir", str(stack.cache)], command.group(1)
    run_commands(f"`{command.group(1)}`")
    assert json.loads(receipt.read_text())["recipe"]["name"] == "k16v8-standin" and differences(stack) == []

    record = stack.root / ".state" / "recipe-used.json"
    began = record.read_text()
    record.write_text(json.dumps({k: v for k, v in json.loads(began).items() if k != "options"}))
    receipt.write_text("{ not json")
    proc = verify(stack)
    assert proc.returncode == 18 and "k16v8-standin" in proc.stderr, proc.stderr
    command = COMMAND.search(proc.stderr.split("->", 1)[1])
    assert command is not None and command.group(1).endswith("--recipe RECIPE")
    run_commands(f"`{command.group(1).replace('RECIPE', recipe)} --skip-preflight nvcc --cache-dir {stack.cache}`")
    assert json.loads(receipt.read_text())["recipe"]["name"] == "k16v8-standin" and differences(stack) == []
    assert record.read_text() == began         # the re-run recorded its whole command again


def test_an_edited_receipt_is_named_and_the_rerun_writes_it_again(stack: Stack) -> None:
    """The review's false pass: setup.json edited to promise less than the stack's forks (the smoke reads
    the promise from it).  verify names the receipt by the sha256 its step recorded; the suggested re-run
    (the command the stack's last run began with, as above) writes it again."""
    receipt = stack.root / "receipts" / "setup.json"
    data = json.loads(receipt.read_text())
    assert data["promises"] == "engine"
    receipt.write_text(json.dumps({**data, "promises": "kernel"}, indent=2))
    diffs = differences(stack)
    assert [d["check"] for d in diffs] == ["receipt"], diffs
    assert "changed since" in diffs[0]["found"]
    command = COMMAND.search(diffs[0]["fix"])
    assert command is not None and "RECIPE" not in command.group(1)        # the command the last run began with
    run_commands(f"`{command.group(1)}`")
    assert json.loads(receipt.read_text())["promises"] == "engine" and differences(stack) == []


def test_a_changed_stack_env_and_activate_are_named_and_the_rerun_writes_both_again(stack: Stack) -> None:
    """The audit's false pass: FLASHINFER_WORKSPACE_BASE changed in stack-env.json and `export EVIL=1` appended
    to activate verified as "matches its lock", and a plain re-run left both.  verify names each (exit 13); the
    suggested re-run (the options it was set up with) writes both again, byte for byte, and the next re-run is
    a no-op."""
    env_file, activate = stack.root / "stack-env.json", stack.root / "activate"
    originals = env_file.read_bytes(), activate.read_bytes()
    doc = json.loads(originals[0])
    doc["env"]["FLASHINFER_WORKSPACE_BASE"] = str(stack.tmp / "elsewhere")
    env_file.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    with open(activate, "a") as fh:
        fh.write("export EVIL=1\n")
    proc = verify(stack)
    assert proc.returncode == 13 and "matches its lock" not in proc.stdout, proc.stdout + proc.stderr
    diffs = differences(stack)
    assert [(d["check"], d["what"]) for d in diffs] == [("stack-env", str(env_file)), ("stack-env", str(activate))]
    assert all("changed since" in d["found"] for d in diffs) and diffs[0]["fix"] == diffs[1]["fix"]
    assert "--locked" not in diffs[0]["fix"]
    (command,) = run_commands(diffs[0]["fix"])
    assert (env_file.read_bytes(), activate.read_bytes()) == originals
    assert differences(stack) == []
    again = subprocess.run(["bash", "-c", command.replace("october_setup", f"{shlex.quote(sys.executable)} -m "
                                                          "october.installer.october_setup", 1)],
                           cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                           env={k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")})
    assert again.returncode == 0 and "(0 step(s) ran, 8 already done)" in again.stdout, again.stderr


@pytest.mark.parametrize("environ, expected", [
    ({"XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/xdg/october/uv"),
    ({"OCTOBER_CACHE_DIR": "~/oc", "HOME": "{tmp}/home"}, "{tmp}/home/oc/uv"),
])
def test_the_uv_cache_of_a_fix_line_is_the_default_cache_setup_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    environ: dict[str, str], expected: str) -> None:
    """With no cache recorded in the stack, the fix line's UV_CACHE_DIR is the cache setup chose by default
    (core.paths.default_cache_dir: $OCTOBER_CACHE_DIR with ~ expanded, else platformdirs, which honours
    XDG_CACHE_HOME), not a second guess at it ("~/.cache/october" or an unexpanded "~/oc")."""
    from october.installer.core.paths import StackPaths
    from october.installer.verify.fix import uv_cache

    monkeypatch.delenv("OCTOBER_CACHE_DIR", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value.format(tmp=tmp_path))
    assert uv_cache(StackPaths(tmp_path / "stack")) == Path(expected.format(tmp=tmp_path))


@pytest.mark.parametrize("where", ["submodule", "hidden"])
def test_the_fix_for_changes_no_fork_stash_takes_puts_the_stack_back(tmp_path: Path, where: str) -> None:
    """The scenario hunt: a file deleted or added inside a checked-out submodule was reported as
    ``M third_party/gamma`` only, and the fix (`git -C FORK stash push`) saved nothing.  Now the changes inside
    it are named and the fix stashes them there; an edit git status is told not to see (skip-worktree), which
    no stash takes, gets the clone moved aside and cloned again.  Each fix is run as pasted."""
    from tests.fixtures.world import make_world
    from tests.test_setup_e2e import setup

    world = make_world(tmp_path / "world")
    stack = Stack(root=tmp_path / "stack", links=tmp_path, cache=tmp_path / "cache", tmp=tmp_path)
    setup(world, stack.root, stack.cache)
    beta = stack.root / "src" / "beta"
    gamma = beta / "third_party" / "gamma"
    if where == "submodule":
        (gamma / "pyproject.toml").unlink()
        (gamma / "scratch.txt").write_text("mine\n")
    else:
        git(beta, "update-index", "--skip-worktree", "pyproject.toml")
        with open(beta / "pyproject.toml", "a") as fh:
            fh.write("# mine\n")
    (diff,) = differences(stack)
    if where == "submodule":
        assert "D third_party/gamma/pyproject.toml" in diff["found"] and "?? third_party/gamma/scratch.txt" in \
            diff["found"], diff
    ran = run_commands(diff["fix"].split(", or ")[0])
    if where == "hidden":
        assert ran[0].startswith("mv ") and ran[1].startswith("october_setup ")
    assert differences(stack) == []
