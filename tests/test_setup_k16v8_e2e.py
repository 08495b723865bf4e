"""The whole K16/V8 install path through the CLI, on stand-ins: base wheel, vLLM fork, FlashInfer fork, JIT.

Stand-ins (what cannot exist here: GitHub, the vLLM wheel host, CUDA): the vLLM and FlashInfer
forks are tiny real projects in real bare git repos (tests/fixtures/stack_forks.py); the vLLM
stand-in's build takes ``vllm/_C.abi3.so`` out of the wheel named by
``VLLM_PRECOMPILED_WHEEL_LOCATION`` as the real setup.py does; the base wheel is a real wheel
shaped like vLLM's (tests/fixtures/base_wheels.py) served from a loopback HTTP server; the JIT
builder is tests/fixtures/jit_standin.py, which compiles real small C libraries with gcc into
FlashInfer's cache layout.  uv, git, the pipeline and every check are the real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import sys
from pathlib import Path

import pytest

from october.installer.core.hashing import sha256_file
from october.installer.lock.pylock import read_lock
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.base_wheels import VLLM_TREE, vllm_wheel
from tests.fixtures.findlinks_server import serve_find_links
from tests.fixtures.gitrepos import git
from tests.fixtures.stack_forks import FLASHINFER_ASYM, TORCH, make_links, write_project
from tests.fixtures.world import fork_entry, recipe_head, snapshot, write_forks_file

pytestmark = pytest.mark.slow


def bare_from(work: Path, bare: Path) -> str:
    git("init", "-q", "--bare", "-b", "main", str(bare))
    git("push", "-q", bare.as_uri(), "HEAD:refs/heads/main", cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


def make_k16v8_world(root: Path) -> dict[str, object]:
    links = make_links(root)
    # upstream vLLM, then the fork = upstream + one commit; the base wheel comes from upstream
    up = root / "work" / "vllm-upstream"
    write_project(up, "vllm", "0.18.0", "vllm", '__version__ = "0.18.0"\n', deps=["flashinfer-python==0.6.6"],
                  precompiled=True)
    for rel in ("CMakeLists.txt", "cmake/utils.cmake", "csrc/cache_kernels.cu"):  # what the wheel step compares
        (up / rel).parent.mkdir(parents=True, exist_ok=True)
        (up / rel).write_text(VLLM_TREE[rel])
    git("init", "-q", "-b", "main", cwd=up)
    git("add", "-A", cwd=up)
    git("commit", "-q", "-m", "upstream v0.18.0", cwd=up)
    up_commit = bare_from(up, root / "git" / "vllm-upstream.git")
    (up / "vllm" / "asym.py").write_text("KV_CACHE_DTYPE = ('auto', 'fp8_e4m3')\n")
    git("add", "-A", cwd=up)
    git("commit", "-q", "-m", "fork: asymmetric kv", cwd=up)
    vllm_commit = bare_from(up, root / "git" / "vllm.git")
    fi = root / "work" / "flashinfer"
    write_project(fi, "flashinfer-python", "0.6.7", "flashinfer", FLASHINFER_ASYM)
    git("init", "-q", "-b", "main", cwd=fi)
    git("add", "-A", cwd=fi)
    git("commit", "-q", "-m", "fork: asymmetric plan", cwd=fi)
    fi_commit = bare_from(fi, root / "git" / "flashinfer.git")
    wheel = vllm_wheel(root / "served", commit_id="g" + up_commit[:9], torch=TORCH.split("+")[0], requires=[
        f"torch=={TORCH.split('+')[0]}"], so=None, cudart="12")
    return {"links": links, "up_commit": up_commit, "vllm": vllm_commit, "flashinfer": fi_commit, "wheel": wheel}


def write_recipe(root: Path, w: dict[str, object], wheel_url: str) -> Path:
    wheel = w["wheel"]
    assert isinstance(wheel, Path)
    write_forks_file(root / "forks.toml", {
        "vllm": {"url": (root / "git" / "vllm.git").as_uri(), "commit": str(w["vllm"]),
                 "upstream": (root / "git" / "vllm-upstream.git").as_uri()},
        "flashinfer": {"url": (root / "git" / "flashinfer.git").as_uri(), "commit": str(w["flashinfer"])}}, pin="k16v8")
    recipe = root / "k16v8.toml"
    recipe.write_text(recipe_head("k16v8-standin", TORCH, "links")
                      + fork_entry("vllm", "k16v8", "vllm-precompiled", deps=True, build_isolation=False)
                      + fork_entry("flashinfer", "k16v8", "flashinfer", deps=False, build_isolation=False) + f"""\
[forks.build_env]
BUILD_NVEP = "0"
[forks.nested_installs]
nvidia-cuda-nvcc = "cuTile compile chain; not on the decode path"
[install]
[[install.exceptions]]
package = "vllm"
requires = "flashinfer-python"
why = "the FlashInfer fork supersedes vLLM's pin"
[cuda]
version = "12.9"
arch_list = "9.0"
variant = "cu129"
[wheel]
url = "{wheel_url}"
filename = "{wheel.name}"
name = "vllm"
version = "0.18.0"
sha256 = "{sha256_file(wheel)}"
cuda_variant = "cu129"
cudart_major = "12"
[preflight]
need_compiler = true
[jit]
builder = "tests.fixtures.jit_standin"
[[jit.modules]]
kind = "decode"
q = "bf16"
k = "bf16"
v = "e4m3"
o = "bf16"
head_dim = 128
[[jit.modules]]
kind = "prefill"
q = "bf16"
k = "bf16"
v = "e4m3"
o = "bf16"
head_dim = 128
""")
    return recipe


def test_k16v8_install_path_end_to_end(tmp_path: Path) -> None:
    w = make_k16v8_world(tmp_path)
    wheel = w["wheel"]
    assert isinstance(wheel, Path)
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    with serve_find_links(wheel.parent) as served:
        # credentials in the wheel URL must reach the server, never a log, marker, lock or receipt
        secret = "s3cr3t-t0ken-xyz"
        recipe = write_recipe(tmp_path, w, served.url.replace("http://", f"http://october:{secret}@") + wheel.name)
        cmd = [sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe", str(recipe),
               "--cache-dir", str(cache), "--skip-preflight", "nvcc"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
        proc = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "jit: ok" in proc.stderr and "wheel: ok" in proc.stderr

        receipt = json.loads((stack / "receipts" / "setup.json").read_text())
        assert receipt["wheel"]["trust"] == "pinned" and receipt["wheel"]["wheel_sha256"] == sha256_file(wheel)
        assert receipt["wheel"]["source_commit"] == w["up_commit"]
        assert receipt["install"]["vllm_base_commit"] == w["up_commit"]
        assert receipt["install"]["checks"]["import vllm._C"].startswith("not verifiable here")
        assert receipt["options"]["skip_preflight"] == ["nvcc"]
        # the declared exception is listed, with its reason; the stack environment is recorded by hash
        declared = receipt["install"]["consistency"]["declared"]
        assert [(d["package"], d["requirement"]) for d in declared] == [("vllm", "flashinfer-python==0.6.6")]
        assert declared[0]["why"] and receipt["install"]["consistency"]["undeclared"] == []
        assert receipt["install"]["imports_with_stack_env"] == {"flashinfer": "0.6.7"}
        assert receipt["stack_env"]["sha256"] == sha256_file(stack / "stack-env.json")
        assert receipt["stack_env"]["env"]["FLASHINFER_WORKSPACE_BASE"] == str(stack / "jit")
        assert {m["uri"] for m in receipt["jit"]} and all(len(m["sha256"]) == 64 for m in receipt["jit"])
        assert any("dtype_k_bf16_dtype_v_e4m3" in m["uri"] for m in receipt["jit"])

        # the vLLM build consumed exactly the verified wheel from STACK/wheels
        consumed = json.loads((stack / "src" / "vllm" / "vllm" / "_precompiled.json").read_text())
        assert consumed["location"] == str(stack / "wheels" / wheel.name)
        import zipfile
        with zipfile.ZipFile(wheel) as zf:
            assert (stack / "src" / "vllm" / "vllm" / "_C.abi3.so").read_bytes() == zf.read("vllm/_C.abi3.so")

        # flashinfer is the editable fork, not the PyPI copy vLLM asked for
        out = subprocess.run([str(stack / "env" / "bin" / "python"), "-c",
                              "import flashinfer, torch; print(flashinfer.__file__); print(torch.__version__)"],
                             capture_output=True, text=True, check=True).stdout.split()
        assert out[0].startswith(str(stack / "src" / "flashinfer")) and out[1] == TORCH

        lock = read_lock(stack / "pylock.toml")
        tool = lock["tool"]["october"]
        assert tool["wheel"]["sha256"] == sha256_file(wheel)
        assert [m["uri"] for m in tool["jit"]] == [m["uri"] for m in receipt["jit"]]
        assert tool["forks"]["vllm"]["upstream-base"] == w["up_commit"]
        for m in receipt["jit"]:
            so = next((stack / "jit").rglob(f"{m['uri']}.so"))
            assert sha256_file(so) == m["sha256"]

        # a no-op re-run changes no file (wheel, jit included) but the file-trust store, once: the signatures
        # of files too new to keep when the run ended (engine.verify_pipeline); the next changes nothing
        trust = ".state/file-trust.json"
        time.sleep(1.1)         # the run's files old enough to keep (filetrust.RACY_NS): the first no-op keeps them
        for first in (True, False):
            before = snapshot(stack)
            again = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, env=env, timeout=300)
            assert again.returncode == 0 and "0 step(s) ran" in again.stdout
            after = snapshot(stack)
            if first:
                before, after = ({k: v for k, v in d.items() if k != trust} for d in (before, after))
            assert after == before, "a no-op re-run must change no file (wheel, jit included)"

    leaks = [p for root in (stack, cache) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size < 50_000_000
             and secret.encode() in p.read_bytes()]
    assert leaks == [], f"the URL credential leaked into {leaks}"
    assert secret not in proc.stdout + proc.stderr + again.stdout + again.stderr
