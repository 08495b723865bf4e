"""`current verify --install STACK` on a real stack made by october_setup, with planted faults.

The stack is the K16/V8 stand-in world of tests/test_setup_k16v8_e2e.py (real git repos, real uv,
real wheels, a real base wheel and JIT libraries built by gcc; stand-ins only for what cannot exist
here: GitHub, the vLLM wheel host, CUDA).  It is set up once per module; every test plants one or
more faults, checks that verify reports each of them with exit 13, and puts the stack back (and
checks that verify then passes again).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from october.installer.pyenv.uvcmd import uv_exe
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.findlinks_server import serve_find_links
from tests.fixtures.stack_forks import TORCH
from tests.fixtures.wheels import build_wheel
from tests.test_setup_k16v8_e2e import make_k16v8_world, write_recipe

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Stack:
    root: Path
    links: Path
    cache: Path
    tmp: Path


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("verify")
    w = make_k16v8_world(tmp)
    wheel = w["wheel"]
    assert isinstance(wheel, Path)
    root, cache = tmp / "stack", tmp / "cache"
    with serve_find_links(wheel.parent) as served:
        recipe = write_recipe(tmp, w, served.url + wheel.name)
        proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(root), "--recipe", str(recipe),
                               "--cache-dir", str(cache), "--skip-preflight", "nvcc"], cwd=PROJECT_ROOT,
                              capture_output=True, text=True, env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    yield Stack(root, tmp / "links", cache, tmp)


def verify(stack: Stack, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack.root), *extra],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, env=_env(), timeout=300)


def differences(stack: Stack) -> list[dict[str, str]]:
    """verify --json's differences; the document is held to receipts/verify.schema.json, failing ones too (the
    schema lacked the ``fix`` every difference carries, so no failing document matched it)."""
    from october.installer.core.schemas import validate

    proc = verify(stack, "--json")
    data = json.loads(proc.stdout)
    validate("verify", data, where="verify --json")
    assert proc.returncode == (0 if data["ok"] else 13), proc.stderr
    return list(data["differences"])


def uv_pip(stack: Stack, *args: str) -> None:
    env = dict(os.environ, UV_CACHE_DIR=str(stack.cache / "uv"))
    env.pop("VIRTUAL_ENV", None)
    subprocess.run([uv_exe(), "pip", *args, "--python", str(stack.root / "env" / "bin" / "python")],
                   check=True, capture_output=True, env=env)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def site(stack: Stack) -> Path:
    return next((stack.root / "env" / "lib").glob("python*/site-packages"))


def test_a_fresh_stack_verifies(stack: Stack) -> None:
    proc = verify(stack)
    assert proc.returncode == 0, proc.stderr
    assert "matches its lock" in proc.stdout
    assert "hashing installed files: 100%" in proc.stderr      # the progress, as plain lines in a pipe
    data = json.loads(verify(stack, "--json").stdout)
    assert data["ok"] is True and data["differences"] == []
    c = data["checked"]
    # jit: each of the 2 modules in the workspace and as its AOT copy
    assert c["forks"] == 2 and c["jit"] == 4 and c["wheel"] == 1 and c["distributions"] >= 3 and c["files"] > 5
    assert c["build_outputs"] >= 2          # vllm/_C.abi3.so and vllm/_precompiled.json at least


def test_a_replaced_or_planted_extension_module_in_a_fork_checkout_is_listed(stack: Stack) -> None:
    """vLLM's precompiled setup.py copies vllm/_C.abi3.so (the kernel that writes the KV cache) into the
    checkout, where git ignores it (the stand-in does the same): `git status` stays clean whatever its bytes,
    so the install step's record of it is what holds it."""
    from october.installer.core.hashing import sha256_file

    fork = stack.root / "src" / "vllm"
    so = fork / "vllm" / "_C.abi3.so"
    recorded = "sha256:" + sha256_file(so)
    original = so.read_bytes()
    so.write_bytes(original + b"\0")
    try:
        assert git(fork, "status", "--porcelain") == ""
        diffs = differences(stack)
        assert [(d["check"], d["what"], d["expected"], d["found"]) for d in diffs] == [
            ("forks", f"fork vllm ({fork}) build output vllm/_C.abi3.so", recorded, "sha256:" + sha256_file(so))]
        assert "--locked" in diffs[0]["fix"]
        proc = verify(stack)
        assert proc.returncode == 13 and "vllm/_C.abi3.so" in proc.stderr
    finally:
        so.write_bytes(original)
    planted = so.with_name("_moe_C.abi3.so")
    planted.write_bytes(b"\x7fELF planted")
    try:
        diffs = differences(stack)
        assert [(d["check"], d["found"]) for d in diffs] == [("forks", "1 other file(s): vllm/_moe_C.abi3.so")], diffs
        assert f"rm -f -- {planted}" in diffs[0]["fix"]
    finally:
        planted.unlink()
    assert differences(stack) == []


def test_an_extra_installed_package_is_listed(stack: Stack) -> None:
    extra = build_wheel(stack.tmp / "extra", "sneaky-extra", "1.0", {"sneaky_extra/__init__.py": ""})
    uv_pip(stack, "install", "--no-deps", str(extra))
    try:
        proc = verify(stack)
        assert proc.returncode == 13, proc.stdout + proc.stderr
        assert "sneaky-extra 1.0 installed" in proc.stderr and "not in the lock" in proc.stderr
        assert "october_setup" in proc.stderr and "--locked" in proc.stderr      # says what to do
    finally:
        uv_pip(stack, "uninstall", "sneaky-extra")
    assert differences(stack) == []


def test_a_changed_file_in_site_packages_is_listed(stack: Stack) -> None:
    target = site(stack) / "torch" / "__init__.py"
    original = target.read_bytes()
    target.write_bytes(original + b"\n# patched by hand\n")
    try:
        diffs = differences(stack)
        assert [d["check"] for d in diffs] == ["files"]
        assert diffs[0]["what"] == f"torch {TORCH}" and "torch/__init__.py (changed)" in diffs[0]["found"]
    finally:
        target.write_bytes(original)
    target.unlink()
    try:
        diffs = differences(stack)
        assert "torch/__init__.py (missing)" in diffs[0]["found"]
    finally:
        target.write_bytes(original)
    assert differences(stack) == []


def test_a_file_replaced_by_a_link_to_the_same_bytes_is_listed(stack: Stack) -> None:
    """A review's plant: ``torch/__init__.py`` replaced by a link to an identical file outside the stack passed
    (its bytes hash as recorded), though what runs is then whatever that file becomes.  No install of this tool
    makes a link there (uv's link mode is clone or copy, a wheel holds none): it is named."""
    target = site(stack) / "torch" / "__init__.py"
    original = target.read_bytes()
    outside = stack.tmp / "outside__init__.py"
    outside.write_bytes(original)
    target.unlink()
    target.symlink_to(outside)
    try:
        diffs = differences(stack)
        assert [d["check"] for d in diffs] == ["files"], diffs
        assert f"torch/__init__.py (a link to {outside})" in diffs[0]["found"], diffs
    finally:
        target.unlink()
        target.write_bytes(original)
    assert differences(stack) == []


def test_a_moved_fork_head_is_listed(stack: Stack) -> None:
    fork = stack.root / "src" / "flashinfer"
    before = git(fork, "rev-parse", "HEAD")
    git(fork, "commit", "-q", "--allow-empty", "-m", "someone's experiment")
    moved = git(fork, "rev-parse", "HEAD")
    try:
        diffs = differences(stack)
        assert [(d["check"], d["expected"], d["found"]) for d in diffs] == [
            ("forks", f"HEAD at {before}", f"HEAD at {moved}")]
    finally:
        git(fork, "checkout", "-q", "--detach", before)
    assert differences(stack) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the clone to another user")
def test_a_clone_owned_by_another_user_is_not_called_broken(stack: Stack) -> None:
    """The scenario hunt: verify run by another user than the clone's owner (git: "dubious ownership") said git
    cannot read the clone and its fix moved the clone aside and set the stack up again.  It now says whose
    clone it is and how to let git read it."""
    fork = stack.root / "src" / "vllm"
    owner = fork.stat()
    os.chown(fork, 65534, 65534)
    try:
        diffs = differences(stack)
        assert [d["check"] for d in diffs] == ["forks"] and "owned by another user" in diffs[0]["found"], diffs
        assert "safe.directory" in diffs[0]["fix"] and "mv " not in diffs[0]["fix"], diffs[0]["fix"]
        import pwd

        # the folder git named, and its owner (the review: the owner was read from the clone's top folder)
        assert f"{fork} belongs to another user: run current verify as {pwd.getpwuid(65534).pw_name}" in diffs[0]["fix"]
    finally:
        os.chown(fork, owner.st_uid, owner.st_gid)
    assert differences(stack) == []


def test_verify_while_a_setup_holds_the_stack_is_busy_and_names_it(stack: Stack) -> None:
    """The scenario hunt: verify during a setup re-run read a half-written stack and printed fixes (rm, a re-run)
    that raced it.  A stack a run holds is exit 5, naming the holder; free again, it verifies."""
    from october.installer.core.paths import StackPaths
    from october.installer.core.stackmutex import StackLock

    with StackLock(StackPaths(stack.root).lockfile):
        proc = verify(stack)
    assert proc.returncode == 5 and "is being set up by another process" in proc.stderr, proc.stderr
    assert f"pid {os.getpid()}" in proc.stderr and "then run current verify again" in proc.stderr, proc.stderr
    assert verify(stack).returncode == 0


def test_the_busy_probe_of_verify_never_hangs_on_a_fifo_lock_file(tmp_path: Path) -> None:
    """The review: a FIFO in place of STACK/.october.lock made the probe's open wait for a writer for ever."""
    import threading

    from october.installer.core.stackmutex import StackLock

    lock = tmp_path / ".october.lock"
    os.mkfifo(lock)
    probe = threading.Thread(target=StackLock(lock).require_free, args=("verify again",), daemon=True)
    probe.start()
    probe.join(10)
    assert not probe.is_alive()


def test_an_edit_hidden_from_git_status_is_a_local_change(stack: Stack) -> None:
    """``git update-index --skip-worktree`` (or ``--assume-unchanged``) hides an edit from git status: verify
    still names it."""
    fork = stack.root / "src" / "vllm"
    src = fork / "vllm" / "__init__.py"
    original = src.read_bytes()
    for bit, undo in (("--skip-worktree", "--no-skip-worktree"), ("--assume-unchanged", "--no-assume-unchanged")):
        git(fork, "update-index", bit, "vllm/__init__.py")
        src.write_bytes(original + b"DEBUG = True\n")
        try:
            assert git(fork, "status", "--porcelain") == ""
            diffs = differences(stack)
            assert [d["check"] for d in diffs] == ["forks"], diffs
            assert f"vllm/__init__.py ({bit[2:]})" in diffs[0]["found"], diffs
        finally:
            src.write_bytes(original)
            git(fork, "update-index", undo, "vllm/__init__.py")
    assert differences(stack) == []


def test_a_dirty_tree_and_a_changed_jit_library_are_both_listed(stack: Stack) -> None:
    src = stack.root / "src" / "vllm" / "vllm" / "__init__.py"
    so = next((stack.root / "jit").rglob("*.so"))
    src_bytes, so_bytes = src.read_bytes(), so.read_bytes()
    src.write_bytes(src_bytes + b"DEBUG = True\n")
    so.write_bytes(so_bytes + b"\0")
    try:
        diffs = differences(stack)
        checks = sorted(d["check"] for d in diffs)
        assert checks == ["forks", "jit"], diffs
        fork = next(d for d in diffs if d["check"] == "forks")
        assert "local changes" in fork["found"] and "vllm/__init__.py" in fork["found"]
        proc = verify(stack)
        assert proc.returncode == 13 and "2 place(s)" in proc.stderr
    finally:
        src.write_bytes(src_bytes)
        so.write_bytes(so_bytes)
    assert differences(stack) == []


def test_a_changed_base_wheel_is_listed(stack: Stack) -> None:
    wheel = next((stack.root / "wheels").glob("*.whl"))
    original = wheel.read_bytes()
    wheel.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    try:
        diffs = differences(stack)
        assert [d["check"] for d in diffs] == ["wheel"] and "sha256" in diffs[0]["found"]
    finally:
        wheel.write_bytes(original)
    assert differences(stack) == []


def test_another_torch_build_is_listed(stack: Stack) -> None:
    uv_pip(stack, "install", "--no-deps", "--no-index", "--find-links", str(stack.links), "torch==2.11.0")
    try:
        diffs = differences(stack)
        kinds = {d["check"]: d for d in diffs}
        assert kinds["torch"]["expected"].startswith(f"torch {TORCH}") and kinds["torch"]["found"] == "torch 2.11.0"
        assert kinds["distributions"]["found"] == "version 2.11.0"
    finally:
        uv_pip(stack, "install", "--no-deps", "--no-index", "--find-links", str(stack.links), f"torch=={TORCH}")
    assert differences(stack) == []


def test_a_pth_and_a_module_no_record_owns_are_named_pth_first(stack: Stack) -> None:
    """Issue 22, item 3: a .pth runs code at every interpreter start; nothing installed it."""
    pth, mod = site(stack) / "zz.pth", site(stack) / "zz_payload.py"
    pth.write_text("import zz_payload\n")
    mod.write_text("print('ran at startup')\n")
    try:
        diffs = differences(stack)
        assert [(d["check"], d["what"]) for d in diffs] == [
            ("files", f"files in {stack.root / 'env'} that no RECORD owns")], diffs
        found = diffs[0]["found"]
        assert found.startswith("2 other file(s): ") and "zz.pth (a .pth: runs at every interpreter start)" in found
        assert found.index("zz.pth") < found.index("zz_payload.py")
        assert f"rm -f -- {pth} {mod}" in diffs[0]["fix"]
        proc = verify(stack)
        assert proc.returncode == 13 and str(pth) in proc.stderr
    finally:
        pth.unlink()
        mod.unlink()
    # bytecode of an owned source is legitimately unowned; bytecode without its source is not
    cache = site(stack) / "torch" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "__init__.cpython-311.pyc").write_bytes(importlib.util.MAGIC_NUMBER + bytes(12))   # flags 0: held to its source
    assert differences(stack) == []
    (cache / "gone.cpython-311.pyc").write_bytes(b"bytecode")
    try:
        assert "torch/__pycache__/gone.cpython-311.pyc" in differences(stack)[0]["found"]
    finally:
        import shutil

        shutil.rmtree(cache)
    assert differences(stack) == []


def test_every_jit_copy_flashinfer_loads_is_checked_aot_included(stack: Stack) -> None:
    """Issue 22, item 3: a zero-byte copy in FlashInfer's AOT folder (the copy it loads first) and a
    library there that no record names."""
    aot = stack.root / "src" / "flashinfer" / "flashinfer" / "data" / "aot"
    recorded = next(aot.glob("*/*.so"))
    original = recorded.read_bytes()
    recorded.write_bytes(b"")
    stray = aot / "stray_module" / "stray_module.so"
    stray.parent.mkdir()
    stray.write_bytes(b"\x7fELF")
    try:
        diffs = {d["what"]: d for d in differences(stack)}
        assert set(diffs) == {f"{recorded.stem} ({recorded})", f"stray_module ({stray})"}, diffs
        assert diffs[f"{recorded.stem} ({recorded})"]["found"].endswith("(0 bytes)")
        assert "a library no record names" in diffs[f"stray_module ({stray})"]["found"]
    finally:
        recorded.write_bytes(original)
        stray.unlink()
        stray.parent.rmdir()
    recorded.unlink()                     # a placed AOT copy that is gone
    try:
        assert [d["found"] for d in differences(stack)] == ["no such file"]
    finally:
        recorded.write_bytes(original)
    assert differences(stack) == []


def test_verify_of_a_directory_that_is_no_stack_says_what_to_run(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(tmp_path)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 18 and "not a finished october stack" in proc.stderr and "october_setup" in proc.stderr


def test_env_report_names_the_stack_and_holds_no_secret(stack: Stack) -> None:
    """`current env --install STACK`: recipe, lock hash, fork commits, torch; planted secrets (a token
    variable, credentials in an endpoint URL) appear nowhere in the text or JSON form."""
    from october.installer.core.hashing import sha256_file

    token, password = "hf_Zq81xxYYzz00aabbccdd", "pa55w0rd-xyz"
    env = dict(_env(), HF_TOKEN=token, HF_ENDPOINT=f"https://me:{password}@hub.example.invalid",
               CUDA_VISIBLE_DEVICES="0")
    outs = []
    for extra in ((), ("--json",)):
        proc = subprocess.run([sys.executable, "-m", "october", "env", "--install", str(stack.root),
                               "--recipe", "current", *extra], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert token not in proc.stdout + proc.stderr and password not in proc.stdout + proc.stderr
        outs.append(proc.stdout)
    text, data = outs[0], json.loads(outs[1])
    s = data["stack"]
    assert s["lock_sha256"] == sha256_file(stack.root / "pylock.toml")
    assert s["recipe"]["name"] == "k16v8-standin" and s["torch"]["version"] == TORCH
    forks = {f["name"]: f for f in s["forks"]}
    assert set(forks) == {"vllm", "flashinfer"}
    assert all(f["head"] == f["locked"] and f["dirty"] is False for f in forks.values())
    assert data["environment"]["HF_TOKEN"] == "set (value not shown)"
    assert data["environment"]["HF_ENDPOINT"] == "https://***@hub.example.invalid"
    assert data["recipe"]["name"] == "current" and len(data["recipe"]["sha256"]) == 64
    assert data["october"]["version"] == "0.1.0"
    assert s["finished"] is True and "not a finished october stack" not in text
    # a directory that is no stack (yet) is said to be one, not shown as an empty stack
    empty = stack.root.parent / "not-a-stack"
    empty.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "october", "env", "--install", str(empty)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and "(not a finished october stack" in proc.stdout, proc.stdout + proc.stderr
    assert "lock sha256:" in text and forks["vllm"]["head"] in text and "torch:" in text
    assert "gpu" in text and "nvcc:" in text


def _world_stack(tmp_path: Path, beta_entry_extra: str = "", *, build_output: bool = False) -> Stack:
    """A stack of the fixture world, whose fork 'beta' carries a git submodule (third_party/gamma);
    ``build_output``: the install of fork 'alpha' leaves a file in its checkout (world.ALPHA_OUTPUT)."""
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world", build_output=build_output)
    if beta_entry_extra:
        text = world.recipe.read_text()
        head = 'name = "beta"\n'
        world.recipe.write_text(text.replace(head, head + beta_entry_extra, 1))
    root = tmp_path / "stack"
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(root), "--recipe", str(world.recipe),
                           "--cache-dir", str(tmp_path / "cache"), "--skip-preflight", "nvcc,gpu,cuda_arch"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return Stack(root, tmp_path, tmp_path / "cache", tmp_path)


def _setup_again(stack: Stack) -> subprocess.CompletedProcess[str]:
    """october_setup on a stack of _world_stack, as it was set up."""
    return subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack.root), "--recipe",
                           str(stack.tmp / "world" / "fixture.toml"), "--cache-dir", str(stack.cache),
                           "--skip-preflight", "nvcc,gpu,cuda_arch"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=600)


def test_a_fork_build_output_replaced_or_planted_is_listed_and_the_noop_installs_the_fork_again(tmp_path: Path) -> None:
    """The install of fork 'alpha' leaves alpha/_native.abi3.so in its checkout, ignored by git and imported at
    run time, as vLLM's leaves vllm/_C.abi3.so.  Untouched: verify passes and a re-run runs no step.  Replaced:
    verify names it and the re-run installs alpha again, whose build writes it again.  Planted beside it: verify
    names it, a re-run's install does not take it as its own, and verify's command removes it."""
    from october.installer.core.hashing import sha256_file
    from tests.fixtures.world import ALPHA_OUTPUT

    stack = _world_stack(tmp_path, build_output=True)
    alpha = stack.root / "src" / "alpha"
    out = alpha / ALPHA_OUTPUT
    digest = "sha256:" + sha256_file(out)
    marker = json.loads((stack.root / ".state" / "install.json").read_text())
    assert marker["outputs"]["build_outputs"] == {"alpha": {ALPHA_OUTPUT: digest}, "beta": {}}
    assert differences(stack) == [] and json.loads(verify(stack, "--json").stdout)["checked"]["build_outputs"] == 1
    assert "(0 step(s) ran, 6 already done)" in _setup_again(stack).stdout

    clean = out.read_bytes()
    out.write_bytes(b"\x7fELF replaced\n")
    assert git(alpha, "status", "--porcelain", "--untracked-files=all") == ""
    diffs = differences(stack)
    assert [(d["check"], d["what"], d["expected"], d["found"]) for d in diffs] == [
        ("forks", f"fork alpha ({alpha}) build output {ALPHA_OUTPUT}", digest, "sha256:" + sha256_file(out))]
    again = _setup_again(stack)
    assert again.returncode == 0, again.stderr
    assert (f"==> install: running again: its outputs no longer verify (fork alpha's build outputs differ from what "
            f"its install left ({ALPHA_OUTPUT} (changed)))") in again.stderr
    assert out.read_bytes() == clean and differences(stack) == []
    assert "(0 step(s) ran, 6 already done)" in _setup_again(stack).stdout
    out.unlink()
    assert [(d["expected"], d["found"]) for d in differences(stack)] == [(digest, "missing")]
    out.write_bytes(clean)
    assert differences(stack) == []

    planted = alpha / "alpha" / "_planted.abi3.so"
    planted.write_bytes(b"\x7fELF planted\n")
    assert [(d["check"], d["found"]) for d in differences(stack)] == [("forks", "1 other file(s): alpha/_planted.abi3.so")]
    out.write_bytes(b"\x7fELF replaced\n")           # the install runs again, next to the planted file
    again = _setup_again(stack)
    assert again.returncode == 0 and "which did not make them (alpha/_planted.abi3.so)" in again.stderr, again.stderr
    diffs = differences(stack)
    assert [(d["check"], d["found"]) for d in diffs] == [("forks", "1 other file(s): alpha/_planted.abi3.so")]
    run_fix(diffs[0]["fix"])
    assert not planted.exists() and out.read_bytes() == clean and differences(stack) == []


def run_fix(fix: str) -> None:
    """Run the commands of a fix line, in order (of alternatives joined by ", or ", the first)."""
    from tests.test_verify_fix import run_commands

    run_commands(fix.split(", or ")[0])


def test_a_moved_submodule_is_listed(tmp_path: Path) -> None:
    stack = _world_stack(tmp_path)
    root = stack.root
    assert differences(stack) == []
    sub = root / "src" / "beta" / "third_party" / "gamma"
    before = git(sub, "rev-parse", "HEAD")
    git(sub, "commit", "-q", "--allow-empty", "-m", "local experiment")
    moved = git(sub, "rev-parse", "HEAD")
    diffs = differences(stack)
    mine = [d for d in diffs if d["what"] == f"fork beta ({root / 'src' / 'beta'}) submodule third_party/gamma"]
    assert [(d["check"], d["expected"], d["found"]) for d in mine] == [
        ("forks", f"commit {before}", f"commit {moved}")]
    run_fix(mine[0]["fix"])                    # its what-to-do line puts it back
    assert differences(stack) == []


def test_an_unselected_submodule_is_a_gitlink_and_a_checkout_of_it_is_listed(tmp_path: Path) -> None:
    """Issue 22, item 2: submodules the recipe does not select are gitlinks, not checkouts; verify
    passes on such a stack, and names one that someone checked out (then its fix works)."""
    stack = _world_stack(tmp_path, "submodules = false\n")
    fork = stack.root / "src" / "beta"
    assert differences(stack) == []
    git(fork, "-c", "protocol.file.allow=always", "submodule", "update", "--init", "--", "third_party/gamma")
    diffs = differences(stack)
    assert [(d["check"], d["expected"]) for d in diffs] == [
        ("forks", "not checked out (the recipe does not select it)")], diffs
    assert "submodule deinit" in diffs[0]["fix"]
    run_fix(diffs[0]["fix"])
    assert differences(stack) == []


def test_a_changed_env_file_names_the_stacks_own_cache_and_the_rerun_repairs_it(tmp_path: Path) -> None:
    """The audit's case: a stack set up with a non-default --cache-dir and no JIT (so no JIT marker names
    that cache), one file of an installed distribution edited in place.  Its link count is 1 (installs are
    reflinked or copied, never hard-linked): the fix line claims no hard link into uv's cache; it is the
    setup command with the stack's own --cache-dir and --locked, and running it puts the file back.  A
    changed file that does have another hard link is told apart: uv's cache entry is cleaned first, in the
    cache the stack was set up with."""
    stack = _world_stack(tmp_path)
    site_dir = site(stack)
    changed = site_dir / "tinydep" / "__init__.py"
    with open(changed, "a") as fh:
        fh.write("x=1\n")
    assert changed.stat().st_nlink == 1
    diffs = differences(stack)
    assert [(d["check"], d["what"]) for d in diffs] == [("files", "tinydep 1.0")], diffs
    fix = diffs[0]["fix"]
    assert "hard link" not in fix and "uv cache clean" not in fix and ".cache/october" not in fix, fix
    assert f"--cache-dir {stack.cache}" in fix and fix.count("`") == 2 and "--locked`" in fix, fix
    run_fix(fix)
    assert differences(stack) == []

    changed = site_dir / "tinydep" / "__init__.py"
    os.link(changed, tmp_path / "second-name.py")
    changed.write_text(changed.read_text() + "y=2\n")     # in place: both names see it
    diffs = differences(stack)
    assert [(d["check"], d["what"]) for d in diffs] == [("files", "tinydep 1.0")], diffs
    fix = diffs[0]["fix"]
    assert f"{changed} has other hard links" in fix, fix
    assert f"UV_CACHE_DIR={stack.cache / 'uv'} uv cache clean tinydep" in fix
    assert f"--cache-dir {stack.cache} --locked`" in fix, fix
    run_fix(fix)
    assert differences(stack) == []


def test_verify_of_a_directory_with_other_files_suggests_a_setup_that_works(tmp_path: Path) -> None:
    """A non-empty directory that is no stack (exit 18): october_setup refuses such a directory (exit 2), so
    the hint is a setup in a new or empty directory; that command, its placeholders filled in, runs.  An
    empty directory's hint is a setup there."""
    import shlex

    from tests.fixtures.world import make_world

    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine\n")
    proc = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(home)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 18 and "not a finished october stack" in proc.stderr, proc.stderr
    text = " ".join(proc.stderr.split())
    assert f"october_setup {home}" not in text and "notes.txt" in text and "new or empty directory" in text, text
    from tests.test_verify_fix import COMMAND

    (command,) = COMMAND.findall(text)
    argv = shlex.split(command)
    assert argv == ["october_setup", "NEW_DIR", "--recipe", "NAME"], argv
    world = make_world(tmp_path / "world")
    new = tmp_path / "new-stack"
    filled = [str(new) if a == "NEW_DIR" else str(world.recipe) if a == "NAME" else a for a in argv[1:]]
    done = subprocess.run([sys.executable, "-m", "october.installer.october_setup", *filled,
                           "--cache-dir", str(tmp_path / "cache")],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert differences(Stack(new, tmp_path, tmp_path / "cache", tmp_path)) == []

    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(empty)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 18 and f"`october_setup {empty} --recipe NAME`" in " ".join(proc.stderr.split())


def test_an_unreadable_lock_is_written_again_by_the_suggested_rerun(tmp_path: Path) -> None:
    """STACK/pylock.toml is under no version control: the hint for a lock that is no TOML (or no PEP 751) is
    the setup command without --locked, whose lock step writes it again; run as printed, it does."""
    stack = _world_stack(tmp_path)
    lock = stack.root / "pylock.toml"
    for broken in ("[[[\n", "[x]\n"):
        lock.write_text(broken)
        proc = verify(stack)
        text = " ".join(proc.stderr.split())
        assert proc.returncode == 13 and "version control" in text, text
        assert "from version control" not in text and "no version control holds it" in text, text
        from tests.test_verify_fix import COMMAND

        (command,) = COMMAND.findall(text)
        assert command.startswith(f"october_setup {stack.root} --recipe ") and "--locked" not in command
        assert f"--cache-dir {stack.cache}" in command
        run_fix(f"`{command}`")
        assert differences(stack) == []
    # the reader every command shares says the same of a stack's own lock (setup --locked falls back to it)
    from october.installer.core.errors import LockError
    from october.installer.lock.pylock import read_lock

    for path in (lock, tmp_path / "project" / "locks" / "x.pylock.toml"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("[[[\n")
        with pytest.raises(LockError) as info:
            read_lock(path)
        assert ("no version control holds it" in str(info.value)) == (path == lock), info.value


@pytest.mark.parametrize("plant", ["relinked", "removed", "a file", "pyvenv.cfg edited", "another python"])
def test_the_envs_interpreter_and_pyvenv_cfg_are_held_to_what_the_env_step_left(tmp_path: Path, plant: str) -> None:
    """The scenario hunt: ``env/bin/python`` pointed at a shim, or removed, or ``pyvenv.cfg`` edited
    (``include-system-site-packages = true``), passed verify (rc 0) and the no-op re-run ran nothing; a
    regular file there was named with ``rm -f`` as its fix, which broke the stack.  Now each is named against
    the env step's record, the fix is the re-run, and the re-run makes the env again."""
    import shutil

    from tests.test_setup_e2e import setup
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    python, cfg = stack / "env" / "bin" / "python", stack / "env" / "pyvenv.cfg"
    target = os.readlink(python)
    shim = tmp_path / "shim"
    shim.write_text("#!/bin/sh\nexec python3 \"$@\"\n")
    shim.chmod(0o755)
    if plant == "relinked":
        python.unlink()
        python.symlink_to(shim)
    elif plant == "removed":
        python.unlink()
    elif plant == "a file":
        python.unlink()
        shutil.copy(shim, python)
    elif plant == "pyvenv.cfg edited":
        cfg.write_text(cfg.read_text().replace("include-system-site-packages = false",
                                               "include-system-site-packages = true"))
        assert "include-system-site-packages = true" in cfg.read_text()
    else:
        (stack / "env" / "bin" / "python3.99").symlink_to(shim)
    where = {"pyvenv.cfg edited": cfg, "another python": stack / "env" / "bin" / "python3.99"}.get(plant, python)
    done = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 13 and f"[env] {where}: expected" in out, out
    assert "rm -f" not in out, out
    res = setup(world, stack, cache)
    assert {r.name: r.status for r in res.records}["env"] == "ran"
    assert os.readlink(python) == target and not (stack / "env" / "bin" / "python3.99").exists()
    assert "include-system-site-packages = false" in cfg.read_text()
    assert subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300).returncode == 0


@pytest.mark.parametrize("plant", ["env record removed", "receipt record of another version", "install record torn"])
def test_a_step_s_record_gone_is_named_not_taken_as_nothing_to_compare(tmp_path: Path, plant: str) -> None:
    """A review's plants: with ``.state/env.json`` removed and ``pyvenv.cfg`` edited (the system site packages on
    ``sys.path``), or the receipt step's marker rewritten as another version's and ``setup.json``'s promise edited,
    verify exited 0: its checks compare with the step's record and, without one, compared with nothing.  Now a
    step the receipt names (and the receipt step) without a readable record is named, with the re-run as its fix;
    the re-run makes the step again and verify passes."""
    from tests.test_setup_e2e import setup
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    state, cfg, receipt = stack / ".state", stack / "env" / "pyvenv.cfg", stack / "receipts" / "setup.json"
    if plant == "env record removed":
        marker = state / "env.json"
        marker.unlink()
        cfg.write_text(cfg.read_text().replace("include-system-site-packages = false",
                                               "include-system-site-packages = true"))
    elif plant == "receipt record of another version":
        marker = state / "receipt.json"
        marker.write_text(marker.read_text().replace('"format_version": 2', '"format_version": 1'))
        receipt.write_text(receipt.read_text().replace('"promises": "', '"promises": "engine-'))
    else:
        marker = state / "install.json"
        marker.write_text(marker.read_text()[:40])
    found = differences(Stack(stack, tmp_path, cache, tmp_path))
    named = [d for d in found if d["check"] == "steps"]
    assert [d["what"] for d in named] == [str(marker)], found
    assert "another version of october" in named[0]["found"] and "re-run `october_setup" in named[0]["fix"]
    setup(world, stack, cache)
    assert differences(Stack(stack, tmp_path, cache, tmp_path)) == []


def _edit_in_the_index_s_second(repo: Path, rel: str) -> bytes:
    """Edit ``repo/rel`` keeping its size and mtime (``touch -r``) in the second its index entry's ctime was
    recorded in, until a plain ``git status`` calls the clone clean (git compares ctime by the whole second);
    -> the file's bytes before (git itself would not put them back: to it the file is unchanged)."""
    import time

    path, ref = repo / rel, repo.parent / f".{rel.replace('/', '_')}.ref"
    original = path.read_bytes()
    ref.write_bytes(original)
    os.utime(ref, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
    edited = original[:-2] + (b"8\n" if original[-2:-1] != b"8" else b"9\n")
    for _ in range(10):
        time.sleep(1.0 - time.time() % 1.0 + 0.05)          # early in a second: the rest fits in it
        path.write_bytes(original)
        os.utime(path, ns=(ref.stat().st_atime_ns, ref.stat().st_mtime_ns))    # ctime: this second
        subprocess.run(["git", "-C", str(repo), "status"], check=True, capture_output=True)      # ctime recorded
        path.write_bytes(edited)
        os.utime(path, ns=(ref.stat().st_atime_ns, ref.stat().st_mtime_ns))
        plain = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               env=dict(os.environ, GIT_OPTIONAL_LOCKS="0"), capture_output=True, text=True)
        if not plain.stdout.strip():
            return original
    pytest.skip("git here compares ctime to the nanosecond: the edit is seen by a plain status")


def test_an_edit_in_the_index_entry_s_own_second_is_a_local_change(tmp_path: Path) -> None:
    """A review's plant: an edit of a tracked fork file made in the second git recorded its ctime, with size and
    mtime kept, passed verify (git, built without nanosecond stat data, compares ctime by the whole second).
    verify now has git hash every tracked file (a copy of the index that git takes as older than every entry),
    in the fork and in its submodules."""
    from tests.test_setup_e2e import setup
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    st = Stack(stack, tmp_path, cache, tmp_path)
    assert differences(st) == []
    alpha = stack / "src" / "alpha"
    original = _edit_in_the_index_s_second(alpha, "alpha/__init__.py")
    found = differences(st)
    assert [d["check"] for d in found] == ["forks"] and "alpha/__init__.py" in found[0]["found"], found
    (alpha / "alpha" / "__init__.py").write_bytes(original)
    assert differences(st) == []
    gamma = stack / "src" / "beta" / "third_party" / "gamma"
    rel = next(p.relative_to(gamma).as_posix() for p in sorted(gamma.rglob("*.py")))
    _edit_in_the_index_s_second(gamma, rel)
    found = differences(st)
    assert [d["check"] for d in found] == ["forks"] and f"third_party/gamma/{rel}" in found[0]["found"], found


def test_a_clone_git_cannot_read_is_named_and_the_fix_repairs_it(tmp_path: Path) -> None:
    """The scenario hunt: with a submodule's git directory (``.git/modules/...``) removed, ``current verify``
    ended in a traceback (exit 1).  Now it is a difference (exit 13) whose fix, followed, repairs the stack."""
    import shlex
    import shutil

    from tests.test_setup_e2e import setup
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    beta = stack / "src" / "beta"
    shutil.rmtree(beta / ".git" / "modules")
    done = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 13 and "Traceback" not in out, out
    assert f"[forks] fork beta ({beta}): expected a clone git can read" in out and "git cannot read it" in out, out
    fix = next(ln for ln in out.splitlines() if "-> move the clone aside" in ln)
    mv = shlex.split(fix.split("`")[1])
    assert mv[:2] == ["mv", str(beta)] and "october_setup" in fix.split("`")[3]
    subprocess.run(mv, check=True)
    setup(world, stack, cache)
    assert subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300).returncode == 0


def test_a_half_built_stack_is_told_to_finish_with_the_recipe_it_began_with(tmp_path: Path) -> None:
    """The scenario hunt: verify of a stack whose run did not finish asked for ``--recipe NAME``, though the
    stack records the recipe its last run began with.  Now the fix names it; run as printed (with the test's
    cache), it finishes the stack."""
    import shlex

    from tests.test_setup_e2e import setup
    from tests.test_verify_fix import COMMAND
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    (stack / "pylock.toml").unlink()
    (stack / "receipts" / "setup.json").unlink()          # as a run stopped before its lock step leaves it
    proc = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 18 and "--recipe NAME" not in text, text
    (command,) = COMMAND.findall(text.split("->", 1)[1])
    argv = shlex.split(command)
    # the whole command its last run began with (the cache too): run exactly as printed
    assert argv == ["october_setup", str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache)], argv
    assert "add the other options" not in text
    done = subprocess.run([sys.executable, "-m", "october.installer.october_setup", *argv[1:]], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert differences(Stack(stack, tmp_path, cache, tmp_path)) == []
    # a record by an earlier version (the recipe alone): its recipe, and the other options asked for
    record = stack / ".state" / "recipe-used.json"
    doc = json.loads(record.read_text())
    record.write_text(json.dumps({k: doc[k] for k in ("name", "path", "sha256")}))
    (stack / "receipts" / "setup.json").unlink()
    proc = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 18 and "add the other options it was set up with" in text, text
    (command,) = COMMAND.findall(text.split("->", 1)[1])
    assert shlex.split(command) == ["october_setup", str(stack), "--recipe", str(world.recipe)]


def test_the_same_version_installed_from_another_file_is_named(tmp_path: Path) -> None:
    """The review's false pass: `uv pip install --reinstall /elsewhere/tinydep-1.0.whl` (other code, the same
    version) passed verify: name and version matched the lock and the new RECORD matched its own files.  A
    locked index package installed from a file (direct_url.json, PEP 610) is a difference; the fix as printed
    (the setup command with --locked) puts the index file back."""
    from tests.fixtures.wheels import build_wheel
    from tests.test_setup_e2e import setup
    from tests.test_verify_fix import run_commands
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    other = build_wheel(tmp_path / "elsewhere", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 666\n"})
    s = Stack(stack, tmp_path, cache, tmp_path)
    uv_pip(s, "install", "--reinstall", str(other))
    diffs = differences(s)
    # its RECORD is another one too (the install step's record of each RECORD says so)
    assert [(d["check"], d["what"]) for d in diffs] == [("distributions", "tinydep"), ("files", "tinydep 1.0 RECORD")], \
        diffs
    assert "installed from file://" in diffs[0]["found"] and "--locked" in diffs[0]["fix"]
    run_commands(diffs[0]["fix"])
    assert differences(s) == []
    value = subprocess.run([str(stack / "env" / "bin" / "python"), "-c", "import tinydep; print(tinydep.VALUE)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert value == "1"


FORGE = r"""
import importlib.util, marshal, py_compile, sys
src, pyc, mode = sys.argv[1:4]
py_compile.compile(src, cfile=pyc, invalidation_mode=py_compile.PycInvalidationMode[mode])
header = open(pyc, "rb").read()[:16]
open(pyc, "wb").write(header + marshal.dumps(compile("FORGED = 'forged'\n", src, "exec", dont_inherit=True)))
"""


def _python(stack: Stack, *args: str) -> str:
    return subprocess.run([str(stack.root / "env" / "bin" / "python"), *args], check=True, capture_output=True,
                          text=True, env=_env()).stdout.strip()


def test_bytecode_python_loads_in_place_of_its_source_is_held_to_that_source(stack: Stack) -> None:
    """The last session's open item: a ``__pycache__`` file whose header matches its source's mtime and size
    (or an unchecked hash-based one) is run without the source being read, so a forged one ran other code
    under files verify held to be right.  Each one Python would load is now compiled from its source in the
    stack's Python and compared; the right one (py_compile's own) is no difference, a stale one is not read."""
    tag = _python(stack, "-c", "import sys; print(sys.implementation.cache_tag)")
    torch_src = site(stack) / "torch" / "__init__.py"
    fork_src = next(p for p in sorted((stack.root / "src").glob("*/*/__init__.py")) if ".git" not in p.parts)
    made: list[Path] = []
    try:
        for src in (torch_src, fork_src):           # what Python itself writes: no difference
            pyc = src.parent / "__pycache__" / f"__init__.{tag}.pyc"
            _python(stack, "-c", f"import py_compile; py_compile.compile({str(src)!r}, cfile={str(pyc)!r})")
            made.append(pyc)
        data = json.loads(verify(stack, "--json").stdout)
        assert data["ok"] is True and data["checked"]["bytecode"] >= 2, data
        forged = site(stack) / "torch" / "__pycache__" / f"__init__.{tag}.pyc"
        _python(stack, "-c", FORGE, str(torch_src), str(forged), "TIMESTAMP")
        assert _python(stack, "-c", "import torch; print(torch.FORGED)") == "forged"    # it runs
        unchecked = fork_src.parent / "__pycache__" / f"__init__.{tag}.pyc"
        _python(stack, "-c", FORGE, str(fork_src), str(unchecked), "UNCHECKED_HASH")
        diffs = differences(stack)
        assert [(d["check"], d["what"]) for d in diffs] == [("files", "bytecode in the env and the fork clones")], diffs
        found = diffs[0]["found"]
        assert found.startswith("2 file(s) are other code than the stack's Python compiles from their sources")
        assert str(forged) in found and str(unchecked) in found
        assert "(not the code of __init__.py)" in found
        proc = verify(stack)
        assert proc.returncode == 13 and str(forged) in proc.stderr
        subprocess.run(diffs[0]["fix"].split("`")[1], shell=True, check=True)         # the fix it prints
        assert differences(stack) == []
        # a forged file Python would not load (its header does not match the source) is not read
        _python(stack, "-c", FORGE, str(torch_src), str(forged), "TIMESTAMP")
        os.utime(torch_src, ns=(torch_src.stat().st_atime_ns, torch_src.stat().st_mtime_ns + 5_000_000_000))
        assert _python(stack, "-B", "-c", "import torch; print(hasattr(torch, 'FORGED'))") == "False"
        assert differences(stack) == []
    finally:
        for pyc in made:
            pyc.unlink(missing_ok=True)
    assert differences(stack) == []


def test_git_settings_of_the_clone_that_hide_an_edit_are_local_changes_and_run_nothing(tmp_path: Path) -> None:
    """The scenario hunt: an edit put back to its size and mtime (``touch -r``) passed verify and the re-run
    under the user's ``core.trustctime=false``; a clean filter in the clone's own config (git compares its
    output, not the file) passed them too, and verify ran the filter's program.  Now ctime is always compared,
    and a filter, an include or attributes of the clone's own are local changes whose programs never run."""
    stack = _world_stack(tmp_path)
    fork = stack.root / "src" / "alpha"
    src = fork / "alpha" / "__init__.py"
    original = src.read_bytes()
    ref = tmp_path / "ref"
    ref.write_bytes(original)
    os.utime(ref, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns))
    edited = original[:-2] + b"7\n" if original.endswith(b"\n") else original[:-1] + b"7"
    assert len(edited) == len(original) and edited != original
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[core]\n\ttrustctime = false\n")
    env = dict(_env(), GIT_CONFIG_GLOBAL=str(gitconfig))

    def verify_with(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack.root)],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, env=env, timeout=300)

    assert verify_with(env).returncode == 0
    subprocess.run(["git", "-C", str(fork), "status"], env=env, check=True, capture_output=True)  # index fresh
    src.write_bytes(edited)
    os.utime(src, ns=(ref.stat().st_atime_ns, ref.stat().st_mtime_ns))
    found = verify_with(env)
    assert found.returncode == 13 and "alpha/__init__.py" in found.stderr, found.stderr
    src.write_bytes(original)
    assert verify_with(env).returncode == 0
    # a clean filter in the clone's own config that shows git HEAD's bytes in place of the file's
    ran = tmp_path / "RAN"
    (fork / ".git" / "info" / "attributes").write_text("* filter=hide\n")
    git(fork, "config", "filter.hide.clean", f"sh -c 'touch {ran}; git show HEAD:\"$1\"' -- %f")
    src.write_bytes(edited)
    found = verify_with(_env())
    assert found.returncode == 13, found.stderr
    assert "alpha/__init__.py" in found.stderr and '[filter "hide"] clean' in found.stderr, found.stderr
    assert "info/attributes" in found.stderr and "mv " in found.stderr
    again = _setup_again(stack)
    assert again.returncode != 0 and "local changes" in again.stderr and "git config or attributes" in again.stderr
    assert not ran.exists()                       # neither verify nor the re-run ran the clone's program
    src.write_bytes(original)
    (fork / ".git" / "info" / "attributes").unlink()
    git(fork, "config", "--remove-section", "filter.hide")
    assert verify_with(_env()).returncode == 13       # the refused re-run began the fetch again: not done
    assert _setup_again(stack).returncode == 0        # the re-run finishes it
    # the review: a filter defined in an included file (named by attributes this tool does not read: an
    # untracked .gitattributes git reads all the same) would still run on git status; none is started
    included = tmp_path / "included"
    included.write_text(f"[filter \"inc\"]\n\tclean = \"sh -c 'touch {ran}; cat'\"\n")
    git(fork, "config", "include.path", str(included))
    (fork / "alpha" / ".gitattributes").write_text("* filter=inc\n")
    os.utime(src)                           # its stat changed: git status would clean it through the filter
    found = verify_with(_env())
    assert found.returncode == 13 and "[include] path (another config file git reads)" in found.stderr, found.stderr
    assert not ran.exists()
    (fork / "alpha" / ".gitattributes").unlink()
    git(fork, "config", "--remove-section", "include")
    assert verify_with(_env()).returncode == 0
    # the review: core.worktree naming another folder (a pristine copy): git status compared that one
    pristine = tmp_path / "pristine"
    shutil.copytree(fork, pristine, ignore=shutil.ignore_patterns(".git"))
    src.write_bytes(edited)
    git(fork, "config", "core.worktree", str(pristine))
    found = verify_with(_env())
    assert found.returncode == 13, found.stderr      # git submodule status refuses it; git status alone did not
    from october.installer.git.clonecheck import dirty_entries

    assert any(f"core.worktree = {pristine}" in d for d in dirty_entries(fork)), dirty_entries(fork)
    git(fork, "config", "--unset", "core.worktree")
    src.write_bytes(original)
    # and core.checkStat=minimal in the user's config hid a `touch -r` edit as trustctime=false did
    gitconfig.write_text("[core]\n\tcheckStat = minimal\n")
    subprocess.run(["git", "-C", str(fork), "status"], env=env, check=True, capture_output=True)
    src.write_bytes(edited)
    os.utime(src, ns=(ref.stat().st_atime_ns, ref.stat().st_mtime_ns))
    found = verify_with(env)
    assert found.returncode == 13 and "alpha/__init__.py" in found.stderr, found.stderr
    src.write_bytes(original)
    assert verify_with(_env()).returncode == 0
    assert _setup_again(stack).returncode == 0


def test_an_aot_module_folder_linked_elsewhere_is_named_and_the_rerun_places_a_file_not_through_the_link(
        tmp_path: Path) -> None:
    """The scenario hunt: FlashInfer's AOT module folder replaced by a link to a copy outside the stack with a
    changed library (FlashInfer loads the AOT copy first): verify passed (its walk did not enter linked
    folders) and the re-run wrote the verified library through the link, leaving the link.  Now the walk
    follows links, a placed copy reached through one is named, and the jit step replaces the link."""
    w = make_k16v8_world(tmp_path)
    wheel = w["wheel"]
    assert isinstance(wheel, Path)
    root, cache = tmp_path / "stack", tmp_path / "cache"

    def setup() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(root), "--recipe", str(recipe),
                               "--cache-dir", str(cache), "--skip-preflight", "nvcc"], cwd=PROJECT_ROOT,
                              capture_output=True, text=True, env=_env(), timeout=600)

    with serve_find_links(wheel.parent) as served:
        recipe = write_recipe(tmp_path, w, served.url + wheel.name)
        assert setup().returncode == 0
        stack = Stack(root, tmp_path / "links", cache, tmp_path)
        aot = root / "src" / "flashinfer" / "flashinfer" / "data" / "aot"
        module = next(p for p in sorted(aot.iterdir()) if p.is_dir())
        outside = tmp_path / "elsewhere" / module.name
        outside.parent.mkdir()
        shutil.copytree(module, outside)
        lib = outside / f"{module.name}.so"
        lib.write_bytes(lib.read_bytes() + b"ALTERED")
        shutil.rmtree(module)
        module.symlink_to(outside, target_is_directory=True)
        diffs = differences(stack)
        assert any(d["check"] == "jit" and str(module) in d["what"] and d["found"] == f"a link to {outside}"
                   for d in diffs), diffs
        assert any(d["check"] == "jit" and str(lib) in d["what"] and "sha256" in d["found"] for d in diffs), diffs
        altered = lib.read_bytes()
        assert setup().returncode == 0
        assert not module.is_symlink() and module.is_dir()
        assert lib.read_bytes() == altered                 # nothing written through the link
        assert differences(stack) == []
        # the review: a library no record names, reached through a link in the stack to a folder elsewhere, is
        # named by the link, and the fix removes the link, not what it points at (the user's own files)
        mine = tmp_path / "my-flashinfer-cache"
        (mine / "x").mkdir(parents=True)
        (mine / "x" / "x.so").write_bytes(b"\x7fELF mine\n")
        link = root / "jit" / "linked-extra"
        link.symlink_to(mine, target_is_directory=True)
        diffs = differences(stack)
        assert [(d["what"], d["found"]) for d in diffs] == [
            (f"x ({link})", f"a link to {mine}, which holds a library no record names (x.so)")], diffs
        assert f"rm -f -- {link}" in diffs[0]["fix"]
        subprocess.run(diffs[0]["fix"].split("`")[1], shell=True, check=True)
        assert (mine / "x" / "x.so").is_file() and not link.exists() and differences(stack) == []
        # the upgrade hunt: the whole AOT folder linked elsewhere, a library there changed and a note of the
        # user's beside it: the re-run's discard of the untrusted library removed that folder, note and all
        moved = tmp_path / "x"
        shutil.copytree(aot, moved)
        shutil.rmtree(aot)
        aot.symlink_to(moved, target_is_directory=True)
        there = next(p for p in sorted(moved.iterdir()) if p.is_dir())
        (there / f"{there.name}.so").write_bytes((there / f"{there.name}.so").read_bytes() + b"x")
        (there / "NOTES.txt").write_text("mine\n")
        assert setup().returncode == 0
        assert (there / "NOTES.txt").read_text() == "mine\n" and not aot.is_symlink() and aot.is_dir()
        assert differences(stack) == []


def test_a_pth_added_after_setup_is_not_a_noop_and_the_rerun_names_it(tmp_path: Path) -> None:
    """The scenario hunt: a ``.pth`` added to the env's site-packages (it runs at every interpreter start) was
    named by verify, but a re-run answered "stack ready" without looking.  The install step's result now
    records the env's .pth files, the no-op holds the env to them, and the install's full check names the
    stray one (exit 11, remove it); removed, the re-run is a no-op again."""
    stack = _world_stack(tmp_path)
    site_dir = next((stack.root / "env" / "lib").glob("python*/site-packages"))
    pth = site_dir / "zz-hook.pth"
    pth.write_text("import os\n")
    again = _setup_again(stack)
    assert again.returncode == 11, again.stderr
    assert "install: running again" in again.stderr and "zz-hook.pth" in again.stderr and "remove them" in again.stderr
    pth.unlink()
    again = _setup_again(stack)
    assert again.returncode == 0 and "==> install: starting" in again.stderr, again.stderr
    # the review: sitecustomize.py runs at every start as well
    custom = site_dir / "sitecustomize.py"
    custom.write_text("import os\n")
    again = _setup_again(stack)
    assert again.returncode == 11 and "sitecustomize.py" in again.stderr, again.stderr
    custom.unlink()
    assert _setup_again(stack).returncode == 0
    again = _setup_again(stack)
    assert again.returncode == 0 and "running again" not in again.stderr, again.stderr
    assert differences(stack) == []


def test_a_package_added_beside_the_installed_ones_is_not_a_noop_and_the_rerun_names_it(tmp_path: Path) -> None:
    """Session 34's review: a package folder planted in the env's site-packages that shadows an editable fork
    (``alpha/``, found before the editable finder), or a plain module beside the installed ones, passed the
    no-op ("stack ready"); only verify named it.  The install step now records the site-packages entries (one
    scan), the no-op holds the env to them, and the install's full check names what no RECORD owns (exit 11);
    removed, the re-run is a no-op again.  A user's own bytecode folder there is not an entry."""
    stack = _world_stack(tmp_path)
    site_dir = next((stack.root / "env" / "lib").glob("python*/site-packages"))
    (site_dir / "__pycache__").mkdir()         # where a user's run writes the top-level modules' bytecode
    again = _setup_again(stack)
    assert again.returncode == 0 and "running again" not in again.stderr, again.stderr
    for planted in (site_dir / "alpha" / "__init__.py", site_dir / "zz_mod.py"):
        planted.parent.mkdir(exist_ok=True)
        planted.write_text("SHADOW = True\n")
        again = _setup_again(stack)
        assert again.returncode == 11, again.stderr
        assert "install: running again" in again.stderr and "site-packages entries" in again.stderr, again.stderr
        assert planted.name in again.stderr and "remove them" in again.stderr, again.stderr
        shutil.rmtree(planted.parent) if planted.name == "__init__.py" else planted.unlink()
        assert _setup_again(stack).returncode == 0
    again = _setup_again(stack)
    assert again.returncode == 0 and "running again" not in again.stderr, again.stderr


def test_the_same_version_reinstalled_from_another_index_is_named_and_the_rerun_puts_it_back(tmp_path: Path) -> None:
    """A false pass left by the earlier fix (which names a reinstall from a file, by its direct_url.json): the
    same version of an index package reinstalled from another index or find-links folder (other bytes, no
    direct_url.json) comes with its own RECORD, which hashes its own files, so verify and the no-op passed.
    The install step records each RECORD's sha256; verify names a rewritten one, the no-op sees it, and the
    re-run re-installs the locked file from the recipe's sources."""
    from tests.fixtures.wheels import build_wheel

    stack = _world_stack(tmp_path)
    other = tmp_path / "other-index"
    build_wheel(other, "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 666\n"})
    env = dict(os.environ, UV_CACHE_DIR=str(tmp_path / "uvc-other"))
    env.pop("VIRTUAL_ENV", None)
    subprocess.run([uv_exe(), "pip", "install", "--reinstall", "--no-index", "--find-links", str(other),
                    "tinydep==1.0", "--python", str(stack.root / "env" / "bin" / "python")],
                   check=True, capture_output=True, env=env)

    def value() -> str:
        return subprocess.run([str(stack.root / "env" / "bin" / "python"), "-c", "import tinydep; print(tinydep.VALUE)"],
                              capture_output=True, text=True, check=True).stdout.strip()

    assert value() == "666"
    diffs = differences(stack)
    assert [(d["check"], d["what"]) for d in diffs] == [("files", "tinydep 1.0 RECORD")], diffs
    assert "reinstalled from elsewhere or edited since" in diffs[0]["found"]
    again = _setup_again(stack)
    assert again.returncode == 0 and "install: running again" in again.stderr, again.stderr
    assert "re-installing what no longer matches its RECORD: tinydep: RECORD (rewritten since its install)" in again.stderr
    assert value() == "1" and differences(stack) == []
    assert "running again" not in _setup_again(stack).stderr


def test_a_stack_whose_install_record_predates_the_startup_files_is_checked_once_in_full(tmp_path: Path) -> None:
    """The upgrade hunt: a stack set up by the earlier october (its install result records no .pth files and no
    RECORD digests) answered "stack ready" with a .pth planted in its env.  Such a result is not trusted: the
    install step runs once, its full check names the stray file, and afterwards the record holds."""
    stack = _world_stack(tmp_path)
    marker = stack.root / ".state" / "install.json"
    doc = json.loads(marker.read_text())
    for key in ("pth", "records"):
        doc["outputs"].pop(key)
    marker.write_text(json.dumps(doc))
    site_dir = next((stack.root / "env" / "lib").glob("python*/site-packages"))
    (site_dir / "zz-old.pth").write_text("import os\n")
    again = _setup_again(stack)
    assert again.returncode == 11 and "not recorded (installed by an earlier october)" in again.stderr, again.stderr
    assert "zz-old.pth" in again.stderr
    (site_dir / "zz-old.pth").unlink()
    assert _setup_again(stack).returncode == 0
    assert {"pth", "records"} <= set(json.loads(marker.read_text())["outputs"])
    assert "running again" not in _setup_again(stack).stderr
    # the review: a record with the startup files but no RECORD digests (made between the two) is no reason to
    # install the forks again (verify holds nothing to a RECORD digest it lacks either)
    doc = json.loads(marker.read_text())
    doc["outputs"].pop("records")
    marker.write_text(json.dumps(doc))
    assert "install: running again" not in _setup_again(stack).stderr
