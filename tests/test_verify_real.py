"""Real tier: `current verify` on a stack october_setup built from the real FlashInfer fork.

The stack is the shipped flashinfer-pr3812 recipe's: the real PR #3812 head (../shared/real-forks, read
through git's insteadOf as the H200 run reads GitHub), only ``3rdparty/cccl`` of its submodules
(cutlass, spdlog, nixl stay gitlinks), a site-provided torch (``--system-python``) and the real
editable install of the fork with its real build backend, apache-tvm-ffi and the other supplied
requirements from PyPI.  Changed to run here, on CPU: the system interpreter is this project's dev
env with its real torch (2.15.0+cu132; the recipe's torch and CUDA pins follow it, the H200 image has
2.11.0+cu130), its Python version, and the recipe's JIT modules are left out (no nvcc or GPU here);
the preflight checks that need CUDA are skipped.

Shown: a fresh stack verifies (exit 0): no false "submodule expected (none)", no false "found no
torch" (issue 22, item 2).  Planted, each named with exit 13 and then put back: a ``.pth`` with the
module it imports, a zero-byte library in FlashInfer's AOT folder, the selected submodule moved, a
torch installed into the env over the system's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.pyenv.uvcmd import uv_exe
from tests.fixtures.root import PROJECT_ROOT
from tests.conftest import real_cache_dir
from tests.fixtures.realstack import SKIP_PREFLIGHT, dev_torch, git_env, here_recipe

pytestmark = pytest.mark.real

SUBMODULES = {"3rdparty/cccl", "3rdparty/cutlass", "3rdparty/nixl", "3rdparty/spdlog"}


def _setup(stack: Path, tmp: Path, real_mirror: Path) -> None:
    """`october_setup` as a user runs it on the real fork: the shipped recipe made to run here, the dev
    env as the system interpreter, the shared cache under ``tmp``."""
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe",
                           str(here_recipe(tmp)), "--system-python", sys.executable, "--cache-dir", str(tmp / "cache"),
                           "--skip-preflight", SKIP_PREFLIGHT],
                          cwd=PROJECT_ROOT, env=git_env(real_mirror), capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def real_stack(real_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("verify-real")
    stack = tmp / "stack"
    _setup(stack, tmp, real_mirror)
    return stack


def _verify(stack: Path) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack), "--json"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    text = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert text.returncode == proc.returncode
    return proc.returncode, json.loads(proc.stdout), text.stderr


def test_the_real_stack_is_what_the_h200_run_had(real_stack: Path) -> None:
    src = real_stack / "src" / "flashinfer"
    status = subprocess.run(["git", "-C", str(src), "submodule", "status"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    flags = {line[1:].split()[1]: line[0] for line in status}
    assert set(flags) == SUBMODULES
    assert flags["3rdparty/cccl"] == " " and {flags[s] for s in SUBMODULES - {"3rdparty/cccl"}} == {"-"}
    # CCCL is sparse: every include folder FlashInfer's JIT names (its own env.py, read here) is checked out
    # with its headers, and what the JIT does not read is not
    block = re.search(r"CCCL_INCLUDE_DIRS[^=]*=\s*\[(.*?)\]", (src / "flashinfer" / "jit" / "env.py").read_text(), re.S)
    assert block, "FlashInfer's env.py no longer names CCCL_INCLUDE_DIRS"
    dirs = [re.findall(r'"([^"]+)"', line)[2:] for line in block.group(1).splitlines() if '"cccl"' in line]
    assert len(dirs) == 3, block.group(1)
    for parts in dirs:
        folder = src / "flashinfer" / "data" / "cccl" / Path(*parts)
        assert folder.is_dir() and any(f.is_file() for f in folder.rglob("*")), folder
    cccl = src / "3rdparty" / "cccl"
    assert (cccl / "cub" / "cub" / "cub.cuh").is_file() and (cccl / "thrust" / "thrust" / "version.h").is_file()
    assert not (cccl / "test").exists() and not (cccl / "libcudacxx" / "test").exists()
    lock = (real_stack / "pylock.toml").read_text()
    assert "[tool.october.system" in lock and not re.search(r'(?m)^name = "torch"$', lock)
    assert not list((real_stack / "env").glob("lib/python*/site-packages/torch"))
    assert list((real_stack / "env").glob("lib/python*/site-packages/_october_system_site.pth"))


def test_a_fresh_real_stack_verifies(real_stack: Path) -> None:
    rc, data, err = _verify(real_stack)
    assert rc == 0 and data["ok"] and data["differences"] == [], err
    assert data["checked"]["forks"] == 1 and data["checked"]["files"] > 100


def test_a_pth_and_its_module_are_named(real_stack: Path) -> None:
    site = next((real_stack / "env").glob("lib/python*/site-packages"))
    pth, mod = site / "zz.pth", site / "zz_payload.py"
    pth.write_text("import zz_payload\n")
    mod.write_text("print('ran at startup')\n")
    try:
        rc, data, err = _verify(real_stack)
        assert rc == 13 and [d["check"] for d in data["differences"]] == ["files"]
        found = data["differences"][0]["found"]
        assert found.index("zz.pth (a .pth: runs at every interpreter start)") < found.index("zz_payload.py")
        assert f"rm -f -- {pth} {mod}" in err
    finally:
        pth.unlink()
        mod.unlink()
    assert _verify(real_stack)[0] == 0


def test_a_zero_byte_aot_copy_is_named(real_stack: Path) -> None:
    uri = "batch_decode_with_kv_cache_dtype_q_bf16_dtype_k_bf16_dtype_v_e4m3_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128"
    aot = real_stack / "src" / "flashinfer" / "flashinfer" / "data" / "aot" / uri
    aot.mkdir(parents=True)
    (aot / f"{uri}.so").write_bytes(b"")
    try:
        rc, data, _err = _verify(real_stack)
        assert rc == 13 and [(d["check"], d["what"]) for d in data["differences"]] == [
            ("jit", f"{uri} ({aot / f'{uri}.so'})")]
        assert "a library no record names (0 bytes)" in data["differences"][0]["found"]
    finally:
        (aot / f"{uri}.so").unlink()
        aot.rmdir()
    assert _verify(real_stack)[0] == 0


def test_a_moved_selected_submodule_is_named_and_its_fix_works(real_stack: Path) -> None:
    src = real_stack / "src" / "flashinfer"
    cccl = src / "3rdparty" / "cccl"
    before = subprocess.run(["git", "-C", str(cccl), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    subprocess.run(["git", "-C", str(cccl), "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q",
                    "--allow-empty", "-m", "local"], check=True)
    rc, data, _err = _verify(real_stack)
    assert rc == 13
    sub = [d for d in data["differences"] if d["what"].endswith("submodule 3rdparty/cccl")]
    assert len(sub) == 1 and sub[0]["expected"] == f"commit {before}", data
    fix = re.search(r"`(git -C \S+ submodule update [^`]+)`", sub[0]["fix"])
    assert fix is not None
    subprocess.run(fix.group(1), shell=True, check=True, capture_output=True)
    assert _verify(real_stack)[0] == 0


def test_a_torch_over_the_system_one_is_named(real_stack: Path, tmp_path: Path) -> None:
    from tests.fixtures.wheels import build_wheel

    torch, _cuda, _py = dev_torch()
    wheel = build_wheel(tmp_path, "torch", torch.partition("+")[0], {"torch/__init__.py": ""})
    env = dict(os.environ, UV_CACHE_DIR=str(real_cache_dir() / "uv"))
    env.pop("VIRTUAL_ENV", None)
    python = str(real_stack / "env" / "bin" / "python")
    subprocess.run([uv_exe(), "pip", "install", "-q", "--no-deps", "--python", python, str(wheel)], env=env, check=True)
    try:
        rc, data, _err = _verify(real_stack)
        torch_diffs = [d for d in data["differences"] if d["check"] == "torch"]
        assert rc == 13 and len(torch_diffs) == 1 and "no torch in the env" in torch_diffs[0]["expected"]
    finally:
        subprocess.run([uv_exe(), "pip", "uninstall", "-q", "--python", python, "torch"], env=env, check=True)
    assert _verify(real_stack)[0] == 0


def test_a_real_stack_built_from_a_kit_verifies(real_mirror: Path, tmp_path: Path) -> None:
    """The H200's path: `october_setup kit --system-torch` on a machine with network, then the stack from
    the kit alone (offline) on the site-provided torch; verify passes, and a planted AOT copy is named."""
    recipe = here_recipe(tmp_path)
    kit = tmp_path / "kit"
    made = subprocess.run([sys.executable, "-m", "october.installer.october_setup", "kit", "--recipe", str(recipe),
                           "--system-torch", "--cache-dir", str(tmp_path / "cache-kit"), str(kit)],
                          cwd=PROJECT_ROOT, env=git_env(real_mirror), capture_output=True, text=True, timeout=1500)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    stack = tmp_path / "stack"
    plain = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    done = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe", str(recipe),
                           "--kit", str(kit), "--system-python", sys.executable, "--cache-dir", str(tmp_path / "cache"),
                           "--skip-preflight", SKIP_PREFLIGHT],
                          cwd=PROJECT_ROOT, env=plain, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "offline: installing from the kit" in done.stdout + done.stderr
    rc, data, err = _verify(stack)
    assert rc == 0 and data["differences"] == [], err
    uri = "single_decode_planted"
    aot = stack / "src" / "flashinfer" / "flashinfer" / "data" / "aot" / uri
    aot.mkdir(parents=True)
    (aot / f"{uri}.so").write_bytes(b"")
    rc, data, _err = _verify(stack)
    assert rc == 13 and [d["what"] for d in data["differences"]] == [f"{uri} ({aot / f'{uri}.so'})"]


def test_a_second_real_stack_is_copied_from_the_built_stack_and_verifies(real_stack: Path, real_mirror: Path) -> None:
    """Issue 20 item 2 on the real fork: a second stack from the same cache takes the first one's env and
    FlashInfer's build outputs (``_build_meta.py``, the ``data/`` links) as private copies relocated to
    itself, skips the fork build, and `current verify` passes on it."""
    tmp = real_stack.parent
    stack2 = tmp / "stack2"
    _setup(stack2, tmp, real_mirror)
    assert json.loads((stack2 / ".state" / "env.json").read_text())["outputs"].get("built_from")
    assert "uv pip install" not in (stack2 / "logs" / "install.log").read_text()    # no fork build
    src = stack2 / "src" / "flashinfer"
    assert os.readlink(src / "flashinfer" / "data" / "csrc") == str(src / "csrc")
    assert (src / "flashinfer" / "_build_meta.py").is_file()
    site = next((stack2 / "env").glob("lib/python*/site-packages"))
    (direct,) = site.glob("flashinfer_python-*.dist-info/direct_url.json")
    assert json.loads(direct.read_text())["url"] == src.as_uri()
    files = [p for p in (stack2 / "env").rglob("*") if p.is_file() and not p.is_symlink()]
    first = {(st.st_dev, st.st_ino) for p in (real_stack / "env").rglob("*") if p.is_file() and not p.is_symlink()
             for st in [p.stat()]}
    assert not {(p.stat().st_dev, p.stat().st_ino) for p in files} & first
    rc, data, err = _verify(stack2)
    assert rc == 0 and data["differences"] == [], err
