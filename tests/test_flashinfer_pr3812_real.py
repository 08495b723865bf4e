"""Real tier: the FlashInfer-only recipe (flashinfer-pr3812) on the real PR #3812 head.

The recipe's fork is fetched from *upstream* (``refs/pull/3812/head`` = 2f3f0f6d) with only
``3rdparty/cccl``; ``october_setup kit --recipe flashinfer-pr3812 --system-torch`` makes the offline kit
the H200 run uses (real git copies from ../shared/real-forks, real wheels from PyPI): no torch wheel,
the two repositories, the build requirements.  Its size is printed for the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.recipe import ComputeCapability, load_recipe
from tests.fixtures.root import PROJECT_ROOT

pytestmark = pytest.mark.real

FLASHINFER = "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"


def test_the_recipe_pins_the_upstream_pr_head_for_the_kernel_level():
    r = load_recipe("flashinfer-pr3812")
    fork = r.fork("flashinfer")
    assert [f.name for f in r.forks] == ["flashinfer"] and r.wheel is None
    assert fork.pin.commit == FLASHINFER and fork.pin.fetch_from == "upstream"
    assert fork.fetch_url == "https://github.com/flashinfer-ai/flashinfer.git"
    assert fork.submodule_paths == ("3rdparty/cccl",)
    assert fork.sparse == {"3rdparty/cccl": ("cub/cub", "libcudacxx/include", "thrust/thrust")}
    assert r.torch.version == "2.11.0+cu130" and r.torch.allow_system and r.cuda and r.cuda.version == "13.0"
    assert r.cuda.arch_list == (ComputeCapability(9, 0),)
    kinds = {(m.kind, m.k, m.v, m.backend) for m in r.jit}
    assert kinds == {("decode", "bf16", "e4m3", "fa2"), ("prefill", "bf16", "bf16", "fa2")}
    assert r.preflight.min_ram_gb <= 128 and r.preflight.min_disk_gb <= 64 and not r.models


def test_kit_for_a_site_provided_torch_from_the_real_sources(real_mirror: Path, tmp_path: Path):
    env = dict(os.environ, GIT_CONFIG_COUNT="1",
               GIT_CONFIG_KEY_0=f"url.{(real_mirror / 'github.com').as_uri()}/.insteadOf",
               GIT_CONFIG_VALUE_0="https://github.com/")
    kit = tmp_path / "kit"
    done = subprocess.run([sys.executable, "-m", "october.installer.october_setup", "kit", "--recipe", "flashinfer-pr3812",
                           "--system-torch", "--cache-dir", str(tmp_path / "cache"), str(kit)],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((kit / "kit.json").read_text())
    wheels = [w["filename"] for w in doc["wheels"]]
    assert not [w for w in wheels if w.startswith("torch-")], wheels
    names = {w.split("-")[0].lower() for w in wheels}
    assert names >= {"setuptools", "wheel", "packaging", "ninja", "apache_tvm_ffi", "requests", "nvidia_ml_py"}
    assert "numpy" not in names       # declared not needed on the kernel path
    commits = {c for r in doc["repos"] for c in r["commits"]}
    assert FLASHINFER in commits and len(doc["repos"]) == 2
    assert doc["torch"]["from_system"] is True
    cccl = [r for r in doc["repos"] if r["role"] == "submodule"]
    assert [sorted(r.get("sparse", {}).values()) for r in cccl] == [[["cub/cub", "libcudacxx/include", "thrust/thrust"]]]
    print(f"flashinfer-pr3812 kit (system torch): {doc['size_bytes'] / 1e6:.1f} MB, {len(wheels)} wheels")
