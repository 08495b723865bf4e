"""The engine smoke level end to end against the stand-in vLLM fork, with planted faults.

``tests/fixtures/fake_vllm`` is a test stand-in for the mcgrof/vllm fork (which
cannot be installed here): each run puts it on ``PYTHONPATH`` in a subprocess,
so this process never imports ``vllm``.  ``FAKE_VLLM_FAULT`` plants one fault
per run; every engine-level check must fail for its fault, and a fork missing
an attribute the harness touches makes the checks that need it ``unsupported``
with its name.

The "downloaded model" is a tiny model dir (``config.json`` for the stand-in's
random-weight decoder), a download manifest shaped like
``receipts/download.schema.json`` and a scales file written with
``october.checks.scales.write_scales``, calibrated (amax / 448) by the stand-in's own
model code on text other than the harness prompts.  Every run goes through the
CLI: ``python -m october.checks.smoke --level engine --manifest M --fixtures F``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch  # noqa: F401  (the stand-in's model code below needs it)

import pytest

from october.checks.scales import scales_path, write_scales
from tests.fixtures.smoke_runs import CHECKS, run_and_read, stand_in_env
from tests.fixtures.smoke_runs import check as _check
from tests.fixtures.smoke_runs import show as _show
from tests.fixtures.smoke_runs import statuses as _status

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "fake_vllm"
REPO, REVISION = "fake-org/Tiny-K16V8", "0123456789abcdef0123456789abcdef01234567"
MODEL_CONFIG = {"architectures": ["FakeTinyForCausalLM"], "model_type": "fake_tiny", "vocab_size": 320,
                "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 128,
                "max_position_embeddings": 4160, "torch_dtype": "bfloat16", "seed": 1234}
CALIBRATION_TEXT = ("The quick brown fox jumps over the lazy dog.",
                    "Once upon a time, in a land far away, lived a sea captain.",
                    "Numbers: 2, 3, 5, 7, 11, 13; code: for i in range(10): print(i)")

# fault -> (the check it exists to fail, every check's status on a CPU)
_PASS_CPU = dict.fromkeys(CHECKS, "passed") | {"decode_graphs": "skipped", "jit_complete": "passed"}
CPU_EXPECTED: dict[str, tuple[str | None, dict[str, str]]] = {
    "": (None, _PASS_CPU),
    # a 16-bit V cache also breaks the (2 + 1)-byte formula, stores no e4m3 codes, reads other values
    # than the K16/V8 reference, and asks FlashInfer for a module nobody pre-built
    "symmetric_bf16": ("physical_k16v8", _PASS_CPU | dict.fromkeys(
        ("physical_k16v8", "clean_memory", "calibrated_scales", "mixed_prefill", "jit_complete"), "failed")),
    # V stored (and read) with the 1.0 seen at load time: the codes show it, and the decode rows
    "scales_default": ("calibrated_scales", _PASS_CPU | {"calibrated_scales": "failed", "mixed_prefill": "failed"}),
    "mixed_prefill_offset": ("mixed_prefill", _PASS_CPU | {"mixed_prefill": "failed"}),
    # the stale graph also replays into the K16/V8 run the 16-bit oracle judges: they part at a near tie,
    # and at the parting their distributions share no token (compared there since session 8)
    "stale_graph": ("decode_graphs", _PASS_CPU | {"decode_graphs": "failed", "mixed_prefill": "failed"}),
    "leak": ("clean_memory", _PASS_CPU | {"clean_memory": "failed"}),
    # NaN logprobs also fail the comparison with the 16-bit-cache engine
    "nan": ("deterministic_generation", _PASS_CPU | {"deterministic_generation": "failed", "mixed_prefill": "failed",
                                                     "decode_graphs": "failed"}),
    # noisy sampling also breaks every other comparison of two runs
    "nondeterministic": ("deterministic_generation", _PASS_CPU | {"deterministic_generation": "failed",
                                                                  "mixed_prefill": "failed",
                                                                  "decode_graphs": "failed"}),
    "missing_kv_caches": ("*", _PASS_CPU | dict.fromkeys(("physical_k16v8", "clean_memory"), "unsupported")),
    # issue 8's engine-level faults: each gave the healthy result before the outside oracles
    "attn_zero": ("mixed_prefill", _PASS_CPU | {"mixed_prefill": "failed", "calibrated_scales": "failed"}),
    "v_read_scale_one": ("calibrated_scales", _PASS_CPU | {"calibrated_scales": "failed", "mixed_prefill": "failed"}),
    "v_scale_2x": ("calibrated_scales", _PASS_CPU | {"calibrated_scales": "failed"}),
    # K8/V8: also other bytes than the formula, other decode values, and a K8 module nobody pre-built
    "k_fp8": ("physical_k16v8", _PASS_CPU | dict.fromkeys(
        ("physical_k16v8", "clean_memory", "calibrated_scales", "mixed_prefill", "jit_complete"), "failed")),
    "v_upcast_bf16": ("physical_k16v8", _PASS_CPU | dict.fromkeys(
        ("physical_k16v8", "calibrated_scales", "mixed_prefill"), "failed")),
    "no_flashinfer": ("physical_k16v8", _PASS_CPU | {"physical_k16v8": "failed"}),
    # session 18's audit: V pages allocated at 16 bits, half used (the views still read as K16/V8)
    "v_padded_alloc": ("physical_k16v8", _PASS_CPU | {"physical_k16v8": "failed", "clean_memory": "failed"}),
    # the decoding rows' positions shifted only when a fresh prompt shares their step: mixed-c is right
    "mixed_decode_offset": ("mixed_prefill", _PASS_CPU | {"mixed_prefill": "failed"}),
    # upstream vLLM 0.24.0 refuses the (k, v) pair with its own message: physical K16/V8 names the refusal
    "upstream_one_dtype": ("physical_k16v8", {"physical_k16v8": "failed"} | dict.fromkeys(
        ("calibrated_scales", "mixed_prefill", "clean_memory", "decode_graphs", "deterministic_generation"),
        "skipped")),
}


def _load_tiny() -> Any:
    """The stand-in's model code under a private name: this process's ``vllm`` stays unimported."""
    name = "_fake_vllm_tiny_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FAKE / "vllm" / "_tiny.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod            # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


TOKENS = (96, 12)          # the stack info's [smoke]: the protocol scaled down for the tiny model (the faults'
                           # expectations are tuned to it; below the harness's floor, so never a stack verdict)
COMPUTE = "float16"


def selection(model: Path, workspace: Path, compute: str = COMPUTE) -> dict[str, Any]:
    """What `current smoke` tells the stack about a selection: derived from the tiny model's config the
    way installer/recipe/jitmodules.py derives a recipe's (the same function)."""
    from october.installer.recipe.jitmodules import ModelShape, derive_modules, selection_facts
    cfg = MODEL_CONFIG
    shape = ModelShape(cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                       cfg["num_hidden_layers"])
    mods = derive_modules(shape, compute)
    return selection_facts(compute, "fp8_e4m3", mods, {
        "jit_workspace": str(workspace), "setup_command": f"october_setup {model.parent / 'stack'} --recipe test",
        "shape": {"num_attention_heads": shape.num_attention_heads, "num_key_value_heads": shape.num_key_value_heads,
                  "head_dim": shape.head_dim, "num_hidden_layers": shape.num_hidden_layers},
        "smoke": {"prompt_tokens": 8192, "max_new_tokens": 128}})


def prebuild(workspace: Path, uris: list[str]) -> None:
    """A workspace as the jit step leaves it (FlashInfer's layout; the stand-in finds modules there)."""
    for uri in uris:
        lib = workspace / ".cache" / "flashinfer" / "0.6.15" / "90a" / "cached_ops" / uri / f"{uri}.so"
        lib.parent.mkdir(parents=True, exist_ok=True)
        lib.write_bytes(b"prebuilt " + uri.encode())


def stack_info(base: Path, model: Path, skip: int = 0, smoke: tuple[int, int] = TOKENS) -> Path:
    """stack-info.json with the selection; its workspace pre-built except the first ``skip`` modules."""
    workspace = base / "jit"
    sel = selection(model, workspace)
    prebuild(workspace, [m["uri"] for m in sel["jit_modules"]][skip:])
    info = base / "stack-info.json"
    info.write_text(json.dumps({"recipe": {"name": "test", "sha256": None}, "lock_sha256": None, "forks": {},
                                "promised_level": "engine", "setup_receipt": None, "selection": sel,
                                "smoke": {"prompt_tokens": smoke[0], "max_new_tokens": smoke[1]}}), encoding="utf-8")
    return info


def make_inputs(base: Path, layers_in_scales: int | None = None) -> tuple[Path, Path, Path]:
    """(manifest, fixtures dir, model dir) for the tiny model."""
    model = base / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG), encoding="utf-8")
    scales = _load_tiny().calibrate_v_scales(model, CALIBRATION_TEXT)
    if layers_in_scales is not None:
        scales = (scales * layers_in_scales)[:layers_in_scales]
    fixtures = base / "fixtures"
    write_scales(scales_path(fixtures, REPO), repo=REPO, revision=REVISION, v_scales=scales,
                 method={"statistic": "amax / 448", "calibration_tokens": sum(map(len, CALIBRATION_TEXT)),
                         "dataset": "tests/test_checks_engine_fake.py CALIBRATION_TEXT",
                         "dtype": "float8_e4m3fn"})
    manifest = base / "download.json"
    manifest.write_text(json.dumps({
        "format_version": 1, "kind": "october-download-manifest",
        "recipe": {"name": "test-k16v8", "sha256": "0" * 64, "path": "recipes/test.toml"},
        "selection": "fp16", "repo": REPO, "revision": REVISION, "resolved_revision": REVISION,
        "patterns": ["config.json"], "local_path": str(model), "endpoint": "https://hub.invalid",
        "offline": True,
        "files": [{"path": "config.json", "size": (model / "config.json").stat().st_size, "sha256": hashlib.sha256((model / "config.json").read_bytes()).hexdigest(),
                   "verified_against": "record"}],
        "tool": {"name": "october", "version": "0.1.0"}, "created_at": "2025-01-01T00:00:00Z",
        "scales": None}, indent=2), encoding="utf-8")
    return manifest, fixtures, model


def _env(fault: str) -> dict[str, str]:
    return stand_in_env(FAKE, "FAKE_VLLM_FAULT", fault,
                        drop=("KNLP_KV_FIXTURES", "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST"))


def _run(inputs: tuple[Path, Path, Path], out: Path, fault: str, device: str = "cpu",
         timeout: int = 300, skip_modules: int = 0, tokens: tuple[int, int] | None = None,
         smoke: tuple[int, int] = TOKENS) -> dict[str, Any]:
    """One engine-level CLI run with its own stack info and pre-built JIT workspace under ``out``."""
    manifest, fixtures, model = inputs
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "october.checks.smoke", "--level", "engine", "--device", device,
           "--manifest", str(manifest), "--fixtures", str(fixtures), "--output", str(out),
           "--stack-info", str(stack_info(out, model, skip_modules, smoke))]
    if tokens:
        cmd += ["--token-counts", f"{tokens[0]},{tokens[1]}"]
    return run_and_read(cmd, out, _env(fault), fault, timeout)





@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_inputs(tmp_path_factory.mktemp("engine_inputs"))


@pytest.fixture(scope="module")
def cpu_runs(inputs: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One engine-level CLI run on the CPU per fault (two at a time: each is a torch process)."""
    base = tmp_path_factory.mktemp("engine_cpu")

    def one(fault: str) -> dict[str, Any]:
        return _run(inputs, base / (fault or "none"), fault)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(CPU_EXPECTED, pool.map(one, CPU_EXPECTED)))


def test_inputs_are_what_current_download_writes(inputs: tuple[Path, Path, Path]) -> None:
    from october.checks.inputs import engine_scales, load_manifest
    from october.installer.download.manifest import validate_manifest
    manifest, fixtures, _ = inputs
    validate_manifest(json.loads(manifest.read_text()))
    choice = engine_scales(load_manifest(manifest), fixtures, MODEL_CONFIG["num_hidden_layers"])
    assert choice.error is None and len(choice.v_scales) == 3


def test_no_fault_passes_everything_but_the_cpu_graph_check(cpu_runs: dict[str, dict[str, Any]]) -> None:
    import jsonschema
    run = cpu_runs[""]
    receipt = run["receipt"]
    assert receipt is not None, _show(run)
    jsonschema.validate(receipt, json.loads((ROOT / "receipts" / "smoke.schema.json").read_text()))
    assert _status(receipt) == _PASS_CPU, _show(run)
    assert run["rc"] == 1 and receipt["passed"] is False and receipt["level"] == "engine"
    assert len(receipt["reasons"]) == 2 and receipt["reasons"][0].startswith("changing decode graphs: skipped")
    assert receipt["reasons"][1].startswith("the protocol's longest context is 96 tokens (recipe [smoke])")
    assert any("engine level on a CPU" in n for n in receipt["notes"])
    assert receipt["model"]["repo"] == REPO and receipt["scales"]["source"] == "fixtures"
    engine = receipt["engine"]
    assert engine["compute_dtype"] == engine["k_cache_dtype"] == COMPUTE and engine["v_cache_dtype"] == "fp8_e4m3"
    assert engine["k_cache_dtype_found"] == "torch.float16" and engine["v_cache_dtype_found"] == "torch.float8_e4m3fn"
    assert (engine["prompt_tokens"], engine["max_new_tokens"]) == TOKENS
    assert engine["tokens_from"] == "recipe [smoke]" == receipt["protocol"]["source"]
    graphs = _check(receipt, "decode_graphs")["measured"]
    assert graphs["graphs_captured"] is True and graphs["eager_engine_captured"] is False
    assert graphs["cuda_graphs"] is False and graphs["match"] == [True, True, True]
    physical = _check(receipt, "physical_k16v8")
    assert physical["measured"]["v_dtype"] == "torch.float8_e4m3fn" and physical["measured"]["state_vs_bf16"] == 0.75
    assert physical["measured"]["live"] == "K and V changed" and physical["measured"]["layers"] == 3
    assert physical["limits"]["k_dtype"] == "torch.float16" and physical["measured"]["attention_backends"] == ["FLASHINFER"]
    scales = _check(receipt, "calibrated_scales")["measured"]
    assert scales["v_scale_float"] == receipt["scales"]["v_scales"]
    assert scales["events"] == ["scales_loaded", "graphs_captured"]
    layer = scales["layer_oracle"]
    assert layer["codes_equal_share"] >= 0.98 and layer["stored_over_predicted_amax"] == 1.0
    assert layer["stored_v_codes"] == layer["predicted_v_codes"] > 0
    assert layer["tokens"] == [64] + [1] * 7
    assert layer["decode_rel_l2_vs_k16v8_reference"] < layer["decode_rel_l2_vs_16bit_v_reference"] / 10
    memory = _check(receipt, "clean_memory")
    assert memory["measured"]["kv_bytes"] == memory["limits"]["kv_bytes"] == 128 * 16 * 3 * 2 * 64 * 3
    assert len(set(memory["measured"]["free_blocks_after_rounds"])) == 1
    assert len(set(memory["measured"]["held_after_rounds"])) == 1
    mixed = _check(receipt, "mixed_prefill")["measured"]
    assert mixed["first_step_outputs"]["mixed-c"] == 1 and len(set(mixed["solo"])) > 3
    assert mixed["prefill_route_observed"] == "in-flight K/V at full precision (fresh prefill)"
    oracle = mixed["sixteen_bit_oracle"]
    assert oracle["tokens"] == TOKENS[1] and oracle["agree_until"] == TOKENS[1]
    assert oracle["logprob_diff_max"] < 0.5
    jit = _check(receipt, "jit_complete")
    assert jit["title"] == "JIT modules pre-built" and jit["measured"]["missing"] == jit["measured"]["gained"] == []
    assert len(jit["measured"]["present"]) == 2


@pytest.mark.parametrize("fault", [f for f in CPU_EXPECTED if f])
def test_each_planted_fault_fails_its_check(cpu_runs: dict[str, dict[str, Any]], fault: str) -> None:
    run = cpu_runs[fault]
    receipt = run["receipt"]
    assert receipt is not None, _show(run)
    target, expected = CPU_EXPECTED[fault]
    assert _status(receipt) == expected, _show(run)
    assert run["rc"] == 1 and receipt["passed"] is False
    if target != "*":
        assert expected[target] == "failed"
        assert any(r.startswith(_check(receipt, target)["title"] + ": failed") for r in receipt["reasons"])


def test_fault_measurements_name_the_fault(cpu_runs: dict[str, dict[str, Any]]) -> None:
    def check(fault: str, name: str) -> dict[str, Any]:
        return _check(cpu_runs[fault]["receipt"], name)

    def measured(fault: str, name: str) -> dict[str, Any]:
        return check(fault, name)["measured"]

    bf16 = measured("symmetric_bf16", "physical_k16v8")
    assert bf16["v_dtype"] == "torch.bfloat16" and bf16["state_vs_bf16"] == 1.0
    # the layers hold the supplied scales (the harness wrote them), yet V was stored with 1.0:
    # the stored codes are the supplied scale's times smaller than quant(v, s) predicts
    default = measured("scales_default", "calibrated_scales")
    assert default["v_scale_float"] == cpu_runs[""]["receipt"]["scales"]["v_scales"]
    layer = default["layer_oracle"]
    assert layer["stored_over_predicted_amax"] == pytest.approx(layer["supplied_scale"], rel=0.07)
    two = measured("v_scale_2x", "calibrated_scales")["layer_oracle"]
    assert two["stored_over_predicted_amax"] == pytest.approx(0.5, rel=0.07) and two["codes_equal_share"] < 0.5
    one = check("v_read_scale_one", "calibrated_scales")
    assert one["measured"]["layer_oracle"]["codes_equal_share"] == 1.0        # stored right, read wrong
    assert "decode differs from the reference dequantized with the supplied scale" in one["summary"]
    zero = check("attn_zero", "mixed_prefill")
    assert "prefill rows differ from the torch reference" in zero["summary"]
    assert "against the 16-bit-cache engine" in zero["summary"]
    assert "reads a 16-bit V underneath" in check("v_upcast_bf16", "physical_k16v8")["summary"]
    assert "K torch.float8_e4m3fn" in check("k_fp8", "physical_k16v8")["summary"]
    assert "attention backends ['TRITON_ATTN'], expected FLASHINFER" in check("no_flashinfer", "physical_k16v8")["summary"]
    offset = measured("mixed_prefill_offset", "mixed_prefill")
    assert offset["first_step_outputs"]["mixed-c"] == 1 and offset["mixed"] != offset["solo"]
    stale = check("stale_graph", "decode_graphs")
    assert stale["measured"]["graphs_captured"] is True and "graph-path decode differs" in stale["summary"]
    leak = measured("leak", "clean_memory")
    start, after = leak["free_blocks_start"], leak["free_blocks_after_rounds"]
    assert after == [start - 1 - i for i in range(len(after))]
    assert len(set(leak["held_after_rounds"])) == 1          # a leaked block shows in no byte count
    assert measured("nan", "deterministic_generation")["nonfinite_logprobs"] == 32
    noisy = measured("nondeterministic", "deterministic_generation")
    assert noisy["tokens"] != noisy["tokens_second_run"] and noisy["nonfinite_logprobs"] == 0
    for name in ("physical_k16v8", "clean_memory"):
        summary = check("missing_kv_caches", name)["summary"]
        assert "'kv_caches'" in summary and not summary.startswith("unsupported"), summary  # the status says it


def test_a_module_that_was_not_pre_built_fails_the_jit_check(inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The decode module missing from the workspace: named, with the october_setup command that builds it."""
    run = _run(inputs, tmp_path / "out", "", skip_modules=1)
    receipt = run["receipt"]
    assert receipt is not None, _show(run)
    jit = _check(receipt, "jit_complete")
    assert jit["status"] == "failed" and run["rc"] == 1
    uri = ("batch_decode_with_kv_cache_dtype_q_f16_dtype_k_f16_dtype_v_e4m3_dtype_o_f16_dtype_idx_i32_"
           "head_dim_qk_64_head_dim_vo_64_posenc_0_use_swa_False_use_logits_cap_False")
    assert jit["measured"]["missing"] == [uri] and jit["measured"]["gained"] == [uri]
    assert f"module {uri} is not pre-built" in jit["summary"]
    assert f"run `october_setup {inputs[2].parent / 'stack'} --recipe test`" in jit["summary"]
    assert any(r.startswith("JIT modules pre-built: failed") for r in receipt["reasons"])


def test_token_counts_given_by_hand_are_recorded_and_never_a_stack_verdict(inputs: tuple[Path, Path, Path],
                                                                          tmp_path: Path) -> None:
    """The review's finding: ``--token-counts`` replaced the stack's protocol with nothing in the receipt to
    say so.  Now the receipt's protocol names its source and a run-level reason keeps it from passing (a
    short context also hides a 2% softmax-scale error from the layer oracle's slope)."""
    run = _run(inputs, tmp_path / "out", "", tokens=(64, 8))
    receipt = run["receipt"]
    assert receipt is not None, _show(run)
    assert receipt["protocol"] == {"prompt_tokens": 64, "max_new_tokens": 8,
                                   "source": "override --token-counts 64,8 (not the recipe's 96 + 12)"}
    assert any(r.startswith("token counts override --token-counts 64,8") and "no stack verdict" in r
               for r in receipt["reasons"]), receipt["reasons"]
    assert any(r.startswith("the protocol's longest context is 64 tokens") and ">= 256" in r
               for r in receipt["reasons"]), receipt["reasons"]
    assert receipt["passed"] is False and run["rc"] == 1


def test_without_a_selection_the_k_dtype_and_jit_checks_are_unsupported(inputs: tuple[Path, Path, Path],
                                                                         tmp_path: Path) -> None:
    manifest, fixtures, _ = inputs
    cmd = [sys.executable, "-m", "october.checks.smoke", "--level", "engine", "--device", "cpu", "--manifest", str(manifest),
           "--fixtures", str(fixtures), "--output", str(tmp_path), "--token-counts", "96,12"]
    run = run_and_read(cmd, tmp_path, _env(""), "", 300)
    receipt = run["receipt"]
    assert receipt is not None, _show(run)
    st = _status(receipt)
    assert st["physical_k16v8"] == st["jit_complete"] == "unsupported" and run["rc"] == 1
    assert "no recipe K cache dtype" in _check(receipt, "physical_k16v8")["summary"]


def test_without_vllm_every_engine_check_is_unsupported(inputs: tuple[Path, Path, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("a vllm is importable in this environment")
    from october.checks import smoke
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")      # restored after the test
    manifest, fixtures, _ = inputs
    rc = smoke.main(["--level", "engine", "--device", "cpu", "--manifest", str(manifest),
                     "--fixtures", str(fixtures), "--output", str(tmp_path)])
    receipt = json.loads((tmp_path / "receipt.json").read_text())
    assert rc == 1 and set(_status(receipt).values()) == {"unsupported"}
    assert len(receipt["checks"]) == 6
    assert "vllm.v1.worker.gpu_model_runner cannot be imported" in receipt["checks"][0]["summary"]


def test_a_scale_left_at_1_is_caught_whichever_layer_holds_1(tmp_path: Path) -> None:
    """A review's plant: with the middle layer's calibrated V scale 1.0 (the engine's default) the layer oracle
    captured that layer, so an engine that keeps every scale at 1.0 (``scales_default``) passed every check a CPU
    runs.  The oracle now captures the layer whose scale is furthest from 1.0: the fault fails, a healthy engine
    with the same scales passes."""
    inputs = make_inputs(tmp_path / "in")
    path = scales_path(inputs[1], REPO)
    data = json.loads(path.read_text())
    data["v_scales"][len(data["v_scales"]) // 2] = 1.0
    path.write_text(json.dumps(data))
    with ThreadPoolExecutor(max_workers=2) as pool:
        healthy, faulty = pool.map(lambda f: _run(inputs, tmp_path / (f or "none"), f), ["", "scales_default"])
    assert _status(healthy["receipt"]) == _PASS_CPU, _show(healthy)
    assert _status(faulty["receipt"])["calibrated_scales"] == "failed", _show(faulty)


def test_scales_all_near_1_leave_the_scale_check_unsupported_not_passed(tmp_path: Path) -> None:
    """Every layer's calibrated V scale within 5% of 1.0: no layer can show a scale applied rather than left at
    its default, so ``calibrated_scales`` is unsupported (the run does not pass), while the layer oracle still
    proves what does not hinge on the scale (the 8-bit V read, the prefill route)."""
    inputs = make_inputs(tmp_path / "in")
    path = scales_path(inputs[1], REPO)
    data = json.loads(path.read_text())
    data["v_scales"] = [(1.0, 1.02, 0.99)[i % 3] for i in range(len(data["v_scales"]))]
    path.write_text(json.dumps(data))
    run = _run(inputs, tmp_path / "out", "")
    receipt = run["receipt"]
    assert _status(receipt) == _PASS_CPU | {"calibrated_scales": "unsupported"}, _show(run)
    assert "within 5% of 1.0" in _check(receipt, "calibrated_scales")["summary"] and receipt["passed"] is False


def test_scales_for_another_layer_count_fail_before_the_engine_starts(tmp_path: Path) -> None:
    from october.checks import smoke
    manifest, fixtures, _ = make_inputs(tmp_path / "in", layers_in_scales=5)
    rc = smoke.main(["--level", "engine", "--device", "cpu", "--manifest", str(manifest),
                     "--fixtures", str(fixtures), "--output", str(tmp_path / "out")])
    receipt = json.loads((tmp_path / "out" / "receipt.json").read_text())
    assert rc == 1 and _status(receipt) == dict.fromkeys(CHECKS, "skipped") | {"calibrated_scales": "failed"}
    assert "num_layers" in _check(receipt, "calibrated_scales")["summary"]


def test_a_model_dir_without_config_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from october.checks import smoke
    manifest, fixtures, model = make_inputs(tmp_path / "in")
    (model / "config.json").unlink()
    assert smoke.main(["--level", "engine", "--device", "cpu", "--manifest", str(manifest),
                       "--fixtures", str(fixtures), "--output", str(tmp_path / "out")]) == 2
    assert "config.json" in capsys.readouterr().err and not (tmp_path / "out" / "receipt.json").exists()


def test_the_stand_in_is_not_the_reference() -> None:
    """No ``checks`` import in the stand-in: the engine runs are not compared with the harness's own code."""
    for path in (FAKE / "vllm").rglob("*.py"):
        source = path.read_text()
        assert "from checks" not in source and "import checks" not in source, path
    from october.checks.engine.driver import TOUCHED
    for name in ("load_model", "capture_model", "kv_caches", "static_forward_context", "_v_scale_float",
                 "add_request", "get_num_free_blocks", "num_gpu_blocks"):
        assert any(name in entry for entry in TOUCHED), name


# ---------------------------------------------------------------- CUDA


def _cuda_receipt(tmp_path: Path, fault: str, rc: int, smoke: tuple[int, int] = TOKENS) -> dict:
    """The engine level on CUDA with the stand-in and ``fault`` planted; it must exit ``rc``."""
    run = _run(make_inputs(tmp_path / "in"), tmp_path / "out", fault, device="cuda", smoke=smoke)
    print(_show(run))
    receipt = run["receipt"]
    assert receipt is not None and run["rc"] == rc, _show(run)
    return receipt


@pytest.mark.gpu
def test_engine_level_passes_on_cuda_with_the_stand_in(tmp_path: Path) -> None:
    from october.checks.inputs import MIN_PROMPT_TOKENS
    receipt = _cuda_receipt(tmp_path, "", 0, smoke=(MIN_PROMPT_TOKENS, TOKENS[1]))   # a stack verdict needs the floor
    assert receipt["passed"] is True and _status(receipt) == dict.fromkeys(CHECKS + ("jit_complete",), "passed")
    graphs = _check(receipt, "decode_graphs")["measured"]
    assert graphs["cuda_graphs"] is True and graphs["match"] == [True, True, True]
    assert graphs["cuda_graphs_captured"] >= 4         # the stand-in's four decode sizes
    assert _check(receipt, "clean_memory")["measured"]["held_measure"] == "allocated GPU bytes"
    assert receipt["machine"]["device"].startswith("cuda") and receipt["machine"]["gpu"]


@pytest.mark.gpu
def test_a_capture_model_that_captures_nothing_fails_the_graph_check_on_cuda(tmp_path: Path) -> None:
    """vLLM's capture_model returns 0 at once under cudagraph_mode NONE: the "graph" engine then decodes
    eagerly, and eager matches eager.  The CUDA graphs torch began are counted, not the call."""
    receipt = _cuda_receipt(tmp_path, "no_capture", 1)
    graphs = _check(receipt, "decode_graphs")
    assert graphs["status"] == "failed" and "captured no CUDA graph" in graphs["summary"], graphs
    assert graphs["measured"]["graphs_captured"] is True and graphs["measured"]["cuda_graphs_captured"] == 0


@pytest.mark.gpu
def test_stale_graph_inputs_fail_the_engine_level_on_cuda(tmp_path: Path) -> None:
    receipt = _cuda_receipt(tmp_path, "stale_graph", 1)
    # the decoding requests of the mixed step replay stale graphs too (measured on the H200, session 18)
    expected = dict.fromkeys(CHECKS + ("jit_complete",), "passed") | {"decode_graphs": "failed",
                                                                      "mixed_prefill": "failed"}
    assert receipt["passed"] is False and _status(receipt) == expected
    graphs = _check(receipt, "decode_graphs")
    assert graphs["measured"]["cuda_graphs"] is True and "CUDA graph decode differs" in graphs["summary"]


def test_an_engine_that_refuses_the_pair_is_a_named_failure_not_a_crash(cpu_runs: dict[str, dict[str, Any]]) -> None:
    """Upstream vLLM (the stand-in raising the real 0.24.0 message): physical K16/V8 names what was
    refused and what the engine accepts instead; nothing else ran, and the receipt says so."""
    run = cpu_runs["upstream_one_dtype"]
    receipt = run["receipt"]
    physical = _check(receipt, "physical_k16v8")
    assert "refused kv_cache_dtype=('auto', 'fp8_e4m3')" in physical["summary"], _show(run)
    assert "one cache dtype for K and V (auto, float16, bfloat16, fp8, fp8_e4m3" in physical["summary"]
    refused = physical["measured"]["engine_refused"]
    assert refused["error"].startswith("ValidationError: 1 validation error for CacheConfig")
    assert "fp8_e4m3" in refused["accepts"] and "nvfp4" in refused["accepts"] and len(refused["accepts"]) == 15
    assert refused["cache_holds"].startswith("nothing")
    assert all(c["summary"].startswith("not run: the engine refused") for c in receipt["checks"]
               if c["name"] not in ("physical_k16v8", "jit_complete"))
    assert receipt["passed"] is False and run["rc"] == 1
