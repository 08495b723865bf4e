"""The stand-in vLLM follows the recorded fork API, the engine level touches only that API, and the
JIT modules derived for every shipped recipe selection are exactly the ones the stand-in engine asks
FlashInfer for.

``tests/fixtures/vllm_fork_api.json`` records the surface (fork facts from forks.md; upstream facts
read from the real vLLM 0.24.0 wheel, re-read by the real-tier test below).  The stand-in runs in a
subprocess (``tests/fixtures/fake_vllm_probe.py``) so this process never imports ``vllm``.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

with warnings.catch_warnings():  # torch warns at import when numpy is absent (october.checks.engine.vllm_surface imports it)
    warnings.simplefilter("ignore", UserWarning)
    import torch  # noqa: F401

import pytest

from october.installer.recipe import load_recipe
from tests.fixtures.smoke_runs import stand_in_env

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "fake_vllm"
API = json.loads((ROOT / "tests" / "fixtures" / "vllm_fork_api.json").read_text())


def _model(tmp: Path, heads: int, kv_heads: int, head_dim: int, layers: int, dtype: str = "bfloat16") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text(json.dumps({
        "vocab_size": 320, "hidden_size": 64, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "intermediate_size": 64,
        "max_position_embeddings": 4160, "torch_dtype": dtype, "seed": 1}))
    return tmp


def _probe(model: Path, compute: str, workspace: Path | None = None) -> dict[str, Any]:
    env = stand_in_env(FAKE, "FAKE_VLLM_FAULT", "", drop=("FLASHINFER_WORKSPACE_BASE",))
    if workspace is not None:
        env["FLASHINFER_WORKSPACE_BASE"] = str(workspace)
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "fake_vllm_probe.py"), str(model), compute],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _probe(_model(tmp_path_factory.mktemp("api"), 4, 2, 64, 2), "float16")


def test_the_stand_in_has_the_recorded_surface(probed: dict[str, Any]) -> None:
    kwargs = API["llm_kwargs"]["explicit"] + API["llm_kwargs"]["engine_args"]
    assert set(kwargs) <= set(probed["llm_kwargs"])
    assert set(API["llm_methods"]) <= set(probed["llm_methods"])
    assert set(API["sampling_params"]) <= set(probed["sampling_params"])
    assert probed["runner_methods"] == sorted(API["runner_methods"])
    assert probed["runner_attributes"] == sorted(API["runner_attributes"])
    assert set(API["layer_attributes"]) <= set(probed["layer_attributes"])
    assert probed["impl_forward_params"][:len(API["impl_forward_params"])] == API["impl_forward_params"]
    assert probed["backend_name"] == API["flashinfer_backend_name"]
    fork = API["fork"]
    assert probed["cache_config"] == fork["cache_config"]
    per_layer = probed["kv_cache_per_layer"]
    assert per_layer["kind"] == fork["kv_cache_per_layer"]["kind"] and per_layer["ndim"] == 4
    assert per_layer["k_dtype"] == "torch.float16"                       # the compute dtype asked for
    assert per_layer["v_dtype"] == fork["kv_cache_per_layer"]["v_dtype"]
    assert per_layer["v_bytes_over_k_bytes"] == fork["kv_cache_per_layer"]["v_bytes_over_k_bytes"]
    assert per_layer["shape"][2:] == [2, 64]                             # NHD: kv heads, head dim last
    assert probed["scale_defaults"] == fork["scale_defaults"]
    assert probed["asymmetric_without_flashinfer"] == fork["asymmetric_without_flashinfer"]


def _call_args(entry: str) -> set[str]:
    m = re.search(r"\(([^)]*)\)", entry)
    return {a.strip() for a in m.group(1).split(",")} if m else set()


def test_the_engine_level_touches_only_the_recorded_surface() -> None:
    from october.checks.engine.vllm_surface import ATTENTION_CONFIG, KV_CACHE_DTYPE, TOUCHED
    llm = next(t for t in TOUCHED if t.startswith("vllm.LLM("))
    assert _call_args(llm) == set(API["llm_kwargs"]["explicit"] + API["llm_kwargs"]["engine_args"])
    sp = next(t for t in TOUCHED if t.startswith("vllm.SamplingParams("))
    assert _call_args(sp) == set(API["sampling_params"])
    impl = next(t for t in TOUCHED if "impl.forward" in t)
    assert [a for a in _call_args(impl)] and _call_args(impl) == set(API["impl_forward_params"])
    text = " ".join(TOUCHED)
    for name in API["runner_methods"] + API["runner_attributes"] + ["_v_scale", "_v_scale_float", "kv_cache",
                                                                    "attn_backend", "get_tokenizer"]:
        assert name in text, name
    assert list(KV_CACHE_DTYPE) == API["fork"]["kv_cache_dtype"] and ATTENTION_CONFIG == API["fork"]["attention_config"]


def _string_constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
            for t in n.targets if isinstance(t, ast.Name)}


def _needed(name: str, tree: ast.Module, consts: dict[str, str]) -> set[str]:
    """The dotted names one engine-level module reaches through ``_need`` (or an oracle's ``need``)."""
    found = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("_need", "need") \
                and len(n.args) == 2:
            arg = n.args[1]
            value = arg.value if isinstance(arg, ast.Constant) else consts.get(arg.id) if isinstance(arg, ast.Name) \
                else None
            assert isinstance(value, str), f"{name}: _need with a computed name ({ast.unparse(arg)})"
            found.add(value)
    return found


def test_every_name_the_engine_modules_need_is_in_touched() -> None:
    """The engine level is split over modules (the vLLM side, the checks, the driver, the layer oracle):
    every vLLM attribute any of them reaches through ``_need`` is listed in ``TOUCHED``, so the surface
    checked above is the whole surface."""
    from october.checks.engine.vllm_surface import TOUCHED
    words = set(re.findall(r"\w+", " ".join(TOUCHED)))
    trees = {p.name: ast.parse(p.read_text(encoding="utf-8")) for p in sorted((ROOT / "checks" / "engine").glob("*.py"))}
    assert set(trees) >= {"driver.py", "vllm_surface.py", "checks.py", "oracles.py"}
    consts = {k: v for tree in trees.values() for k, v in _string_constants(tree).items()}
    needed = {name for n, tree in trees.items() for name in _needed(n, tree, consts)}
    assert {"load_model", "impl", "forward", "llm_engine.vllm_config.cache_config"} <= needed
    missing = sorted(name for name in needed if not set(name.split(".")) <= words)
    assert missing == [], missing


def _built(workspace: Path) -> set[str]:
    return {p.parent.name for p in workspace.glob(".cache/flashinfer/*/*/cached_ops/*/*.so")}


@pytest.mark.parametrize("recipe", ["current", "20260702"])
def test_derived_modules_are_what_the_stand_in_engine_requests(recipe: str, tmp_path: Path) -> None:
    """For every selection: the stand-in started as checks/engine/vllm_surface.py starts it (the selection's compute
    dtype, K16/V8, FlashInfer) JIT-builds exactly the recipe's derived modules into an empty workspace.
    The model keeps the recipe's heads and head dim; layers and hidden size are cut to 2 and 64 (no
    module name depends on them)."""
    r = load_recipe(recipe)
    assert r.models
    for fmt, sel in r.models.items():
        assert sel.shape is not None and sel.compute_dtype is not None
        ws = tmp_path / fmt / "jit"
        model = _model(tmp_path / fmt / "model", sel.shape.num_attention_heads, sel.shape.num_key_value_heads,
                       sel.shape.head_dim, 2)
        _probe(model, sel.compute_dtype, ws)
        assert _built(ws) == set(sel.jit_modules), fmt


# ---------------------------------------------------------------------------------------- real


def _wheel() -> Path:
    """The real vLLM 0.24.0 wheel from the persistent real-tier cache, downloaded from PyPI when absent."""
    import hashlib

    import httpx

    from tests.conftest import real_cache_dir
    w = API["upstream_wheel"]
    path = real_cache_dir() / "wheels" / "sha256" / w["sha256"] / w["filename"]
    if not path.is_file():
        url = load_recipe("20260702").wheel.url  # type: ignore[union-attr]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        with httpx.stream("GET", url, follow_redirects=True, timeout=600) as resp, tmp.open("wb") as fh:
            resp.raise_for_status()
            for chunk in resp.iter_bytes(1 << 20):
                fh.write(chunk)
        tmp.replace(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == w["sha256"], f"{path}: sha256 {digest}"
    return path


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)


def _func(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.real
def test_the_recorded_upstream_surface_is_the_real_vllm_0_24_wheels() -> None:
    with zipfile.ZipFile(_wheel()) as zf:
        src = {n: zf.read(n).decode() for n in (
            "vllm/entrypoints/llm.py", "vllm/engine/arg_utils.py", "vllm/sampling_params.py",
            "vllm/v1/worker/gpu_model_runner.py", "vllm/model_executor/layers/attention/attention.py",
            "vllm/v1/attention/backends/flashinfer.py")}
    tree = {n: ast.parse(s) for n, s in src.items()}
    init = _func(_class(tree["vllm/entrypoints/llm.py"], "LLM"), "__init__")
    assert set(API["llm_kwargs"]["explicit"]) <= {a.arg for a in init.args.args + init.args.kwonlyargs}
    assert init.args.kwarg is not None                       # the rest goes to EngineArgs
    fields = {n.target.id for n in _class(tree["vllm/engine/arg_utils.py"], "EngineArgs").body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert set(API["llm_kwargs"]["engine_args"]) <= fields
    llm_defs = {n.name for n in _class(tree["vllm/entrypoints/llm.py"], "LLM").body if isinstance(n, ast.FunctionDef)}
    assert set(API["llm_methods"]) <= llm_defs
    sp = {n.target.id for n in _class(tree["vllm/sampling_params.py"], "SamplingParams").body
          if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert set(API["sampling_params"]) <= sp
    runner = _class(tree["vllm/v1/worker/gpu_model_runner.py"], "GPUModelRunner")
    assert set(API["runner_methods"]) <= {n.name for n in runner.body if isinstance(n, ast.FunctionDef)}
    assert "self.kv_caches" in src["vllm/v1/worker/gpu_model_runner.py"]
    attn = src["vllm/model_executor/layers/attention/attention.py"]
    for name in API["layer_attributes"]:
        assert re.search(rf"(self|layer)\.{name}\s*[:=]|register_buffer\(\s*\"{name}\"", attn), name
    fi = tree["vllm/v1/attention/backends/flashinfer.py"]
    fwd = _func(_class(fi, "FlashInferImpl"), "forward")
    assert [a.arg for a in fwd.args.args][1:1 + len(API["impl_forward_params"])] == API["impl_forward_params"]
    get_name = _func(_class(fi, "FlashInferBackend"), "get_name")
    assert any(isinstance(n, ast.Return) and isinstance(n.value, ast.Constant)
               and n.value.value == API["flashinfer_backend_name"] for n in ast.walk(get_name))
