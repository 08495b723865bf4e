"""The stand-in vLLM copies what upstream vLLM 0.24.0 does with a symmetric cache (the engine-level
diagnostic, ``--diagnostic-cache``, runs on it), and what it copies is what the real 0.24.0 does.

``tests/fixtures/vllm_fork_api.json`` (``upstream_symmetric``) records the facts, read from the real
0.24.0: one tensor per layer ``[num_blocks, 2, block_size, kv_heads, head_dim]`` bound to the layer, an
fp8 cache stored as ``uint8``, K and V written by ``reshape_and_cache_flash`` with the layer's own device
scales (``e4m3(float(x) / scale)``, saturating), read with the host scales for any cache dtype, a fresh
prompt's rows from the paged cache, and the V2 model runner Qwen3 starts on.  The stand-in test runs
every time (a subprocess: this process never imports ``vllm``); the real-tier test re-reads the facts
from the real wheel and sdist, so a drift on either side fails.
"""

from __future__ import annotations

import ast
import json
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.smoke_runs import stand_in_probe
from tests.test_vllm_api_surface import _class, _func, _wheel

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "fake_vllm"
SYM = json.loads((ROOT / "tests" / "fixtures" / "vllm_fork_api.json").read_text())["upstream_symmetric"]
SDIST = {"filename": "vllm-0.24.0.tar.gz",
         "sha256": "0862453adc1f3339f1a0c9dca1179c34d6ed6e118f87b6e5bddd120af614ac66"}     # forks.toml release-0_24_0


def _probe(tmp: Path, kv: str) -> dict:
    return stand_in_probe("fake_vllm_symmetric_probe.py", tmp, kv)


@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3"])
def test_the_stand_in_stores_a_symmetric_cache_as_vllm_0_24_does(kv: str, tmp_path: Path) -> None:
    got = _probe(tmp_path, kv)
    assert SYM["kv_cache_shape"].startswith("(num_blocks, 2,")
    assert (got["kv_cache_type"], got["ndim"], got["dim1"]) == (SYM["bound_per_layer"], 5, 2)
    assert got["runner_binds_same_tensor"] and got["layer_kv_cache_dtype"] == kv
    assert got["storage_dtype"] == ("torch.bfloat16" if kv == "auto" else SYM["storage_dtype"]["fp8_e4m3"])
    assert got["k_written_as_expected"] and got["v_written_as_expected"]       # x, or e4m3(x / the layer's scale)
    # FlashInfer multiplies by the host V scale whatever the cache dtype: doubling it doubles the output
    assert SYM["flashinfer_applies_v_scale_to_any_cache"] and got["output_follows_v_scale_float"] == pytest.approx(2.0)


def _sdist() -> Path:
    import hashlib

    import httpx

    from tests.conftest import real_cache_dir
    path = real_cache_dir() / "wheels" / "sha256" / SDIST["sha256"] / SDIST["filename"]
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        url = next(line.split('sdist = "')[1].split('"')[0] for line in (ROOT / "forks.toml").read_text().splitlines()
                   if line.startswith("release-0_24_0"))
        tmp = path.with_suffix(".part")
        with httpx.stream("GET", url, follow_redirects=True, timeout=600) as resp, tmp.open("wb") as fh:
            resp.raise_for_status()
            for chunk in resp.iter_bytes(1 << 20):
                fh.write(chunk)
        tmp.replace(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SDIST["sha256"], path
    return path


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.real
def test_the_recorded_symmetric_facts_are_the_real_vllm_0_24() -> None:
    with zipfile.ZipFile(_wheel()) as zf:
        src = {n: zf.read(n).decode() for n in (
            "vllm/v1/attention/backends/flashinfer.py", "vllm/utils/torch_utils.py", "vllm/v1/worker/utils.py",
            "vllm/model_executor/layers/attention/attention.py", SYM["v2_runner"], "vllm/config/vllm.py")}
    fi = src["vllm/v1/attention/backends/flashinfer.py"]
    tree = ast.parse(fi)
    shape = _func(_class(tree, "FlashInferBackend"), "get_kv_cache_shape")
    assert f"return {SYM['kv_cache_shape']}" in ast.unparse(shape)
    assert re.search(r'"fp8_e4m3":\s*torch\.uint8', src["vllm/utils/torch_utils.py"])
    update = _flat(ast.unparse(_func(_class(tree, "FlashInferImpl"), "do_kv_cache_update")))
    assert "k_cache = kv_cache[:, 0]" in update and "v_cache = kv_cache[:, 1]" in update
    assert _flat(SYM["write"]).replace("reshape_and_cache_flash(", "reshape_and_cache_flash(") in update.replace(
        "torch.ops._C_cache_ops.", "")
    forward = ast.unparse(_func(_class(tree, "FlashInferImpl"), "forward"))
    for arg in SYM["read_scales"]:                 # prefill and decode, whatever the cache dtype
        assert forward.count(arg) >= 2, arg
    assert f"isinstance(prefill_wrapper, {SYM['prefill_wrapper']})" in _flat(forward)
    assert "forward_context[layer_name].kv_cache = kv_cache" in src["vllm/v1/worker/utils.py"]
    assert SYM["impl_called_as"] in src["vllm/model_executor/layers/attention/attention.py"]
    v2 = _class(ast.parse(src[SYM["v2_runner"]]), "GPUModelRunner")
    assert {"load_model", "capture_model"} <= {n.name for n in v2.body if isinstance(n, ast.FunctionDef)}
    assert "self.kv_caches" in src[SYM["v2_runner"]]
    arches = src["vllm/config/vllm.py"].split("DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES", 1)[1].split(")", 1)[0]
    assert f'"{SYM["v2_default_architectures_include"]}"' in arches
    with tarfile.open(_sdist()) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh"))
        cuh = tf.extractfile(member).read().decode()     # type: ignore[union-attr]
    assert _flat(SYM["write_fp8"]) in _flat(cuh)


def _observed_from_receipts() -> dict:
    ex = ROOT / "receipts" / "examples" / "h200-vllm-diagnostic"
    out: dict = {"found_dtypes": {}, "layer_side_shape": {}, "prefill_route": {}}
    for cache, name in (("bf16", "diag-bf16"), ("fp8_e4m3", "diag-fp8")):
        r = json.loads((ex / f"{name}.receipt.json").read_text())
        checks = {c["name"]: c for c in r["diagnostic"]["per_cache"][cache]["checks"]}
        m = checks["physical_k16v8"]["measured"]
        out["model_runner"], out["attention_backends"] = r["engine"]["model_runner"], m["attention_backends"]
        out["found_dtypes"][cache] = [m["k_dtype"], m["v_dtype"]]
        out["layer_side_shape"][cache] = ["num_blocks", *m["layer_shape"][1:]]
        out["prefill_route"][cache] = checks["mixed_prefill"]["measured"]["prefill_route_observed"]
    return out


def test_the_recorded_real_run_is_what_the_h200_receipts_say_and_the_stand_in_agrees(tmp_path: Path) -> None:
    """tests/fixtures/vllm_fork_api.json ``observed_h200`` is re-recorded from what ran on the H200 (the
    diagnostic's example receipts); the stand-in stores an fp8 cache as the real engine did and has the V2
    runner class at the dotted path the real engine reported."""
    obs = json.loads((ROOT / "tests" / "fixtures" / "vllm_fork_api.json").read_text())["observed_h200"]
    assert {k: v for k, v in obs.items() if k not in ("about", "receipts")} == _observed_from_receipts()
    assert obs["found_dtypes"]["fp8_e4m3"] == [SYM["storage_dtype"]["fp8_e4m3"]] * 2
    module, _, cls = obs["model_runner"].rpartition(".")
    fake = FAKE / (module.replace(".", "/") + ".py")
    assert fake.is_file() and f"class {cls}" in fake.read_text(encoding="utf-8")
    assert _probe(tmp_path, "fp8_e4m3")["storage_dtype"] == obs["found_dtypes"]["fp8_e4m3"][0]
