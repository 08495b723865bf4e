"""The engine-level diagnostic (``--diagnostic-cache``): every engine check on a symmetric cache, against
the stand-in vLLM (which copies what upstream 0.24.0 does with one: ``tests/test_vllm_symmetric_real.py``),
and faults planted into the engine by the harness itself (``--plant-fault``), as they will be on the real
engine on the H200 (``bench/h200_engine_diagnostic.sh``).

A diagnostic proves the harness on a real engine, never the stack: its receipt is never passed, even when
every check passed; ``current smoke`` exits 21 when the harness agreed with the engine on every cache, 1
when it did not.  Each planted fault must make the diagnostic disagree.
"""

from __future__ import annotations

import json
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch

import jsonschema
import pytest

from october.checks.contract import DIAGNOSTIC_AGREED_EXIT, ENGINE_FAULTS
from october.checks.engine.diagnostic import combine
from october.checks.receipt import build_receipt
from october.checks.torch_reference import SLOPE_BOUND
from october.checks.results import CHECK_NAMES, FAILED, PASSED, SKIPPED, CheckResult
from october.installer.core.errors import UsageError
from october.installer.smoke.launch import SmokeOptions, check_choices, exit_code, plan_smoke
from tests.fixtures.smoke_runs import run_and_read
from tests.test_checks_engine_fake import TOKENS, _env, make_inputs, stack_info

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "receipts" / "smoke.schema.json").read_text())
ALL = (*CHECK_NAMES, "jit_complete")
RUNS = ("", *ENGINE_FAULTS)


def _run(inputs: tuple[Path, Path, Path], out: Path, cache: str, fault: str = "", *extra: str) -> dict[str, Any]:
    manifest, fixtures, model = inputs
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "october.checks.smoke", "--level", "engine", "--device", "cpu",
           "--manifest", str(manifest), "--fixtures", str(fixtures), "--output", str(out),
           "--stack-info", str(stack_info(out, model)), "--token-counts", f"{TOKENS[0]},{TOKENS[1]}",
           "--diagnostic-cache", cache, *(["--plant-fault", fault] if fault else []), *extra]
    return run_and_read(cmd, out, _env(""), fault, 400)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_inputs(tmp_path_factory.mktemp("diag_inputs"))


@pytest.fixture(scope="module")
def runs(inputs: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """``--diagnostic-cache both`` on the CPU: healthy, then each planted fault (two at a time)."""
    base = tmp_path_factory.mktemp("diag")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(RUNS, pool.map(lambda f: _run(inputs, base / (f or "none"), "both", f), RUNS)))


def _per_cache(receipt: dict[str, Any], cache: str) -> dict[str, str]:
    return {c["name"]: c["status"] for c in receipt["diagnostic"]["per_cache"][cache]["checks"]}


def _measured(receipt: dict[str, Any], cache: str, name: str) -> dict[str, Any]:
    return next(c for c in receipt["diagnostic"]["per_cache"][cache]["checks"] if c["name"] == name)["measured"]


def test_every_engine_check_runs_on_each_symmetric_cache(runs: dict[str, dict[str, Any]]) -> None:
    run = runs[""]
    receipt = run["receipt"]
    assert receipt is not None, run["stderr"][-3000:]
    jsonschema.validate(receipt, SCHEMA)
    d = receipt["diagnostic"]
    assert d["caches"] == ["bf16", "fp8_e4m3"] and d["never_a_stack_verdict"] is True and d["fault"] is None
    # on a CPU the graph check cannot pass (no CUDA graphs): everything else does, on both caches
    for cache in d["caches"]:
        assert _per_cache(receipt, cache) == dict.fromkeys(ALL, PASSED) | {"decode_graphs": SKIPPED}, cache
        assert d["per_cache"][cache]["harness_ok"] is False
    # a check skipped on a CPU: the harness did not agree, so the receipt proves nothing (never over-claims)
    assert receipt["passed"] is False and receipt["proves"] == "nothing" and d["harness_ok"] is False
    assert run["rc"] == 1 and exit_code(receipt) == 1
    assert any("can never pass as a stack verdict" in r for r in receipt["reasons"])
    # what each cache holds: the compute dtype on both sides, or e4m3 stored as its uint8 bytes (vLLM 0.24)
    bf16 = _measured(receipt, "bf16", "physical_k16v8")
    fp8 = _measured(receipt, "fp8_e4m3", "physical_k16v8")
    assert (bf16["k_dtype"], bf16["v_dtype"], bf16["layers_declare"]) == ("torch.float16", "torch.float16", ["auto"])
    assert (fp8["k_dtype"], fp8["v_dtype"], fp8["layers_declare"]) == ("torch.uint8", "torch.uint8", ["fp8_e4m3"])
    assert bf16["state_vs_bf16"] == 1.0 and fp8["state_vs_bf16"] == 0.5
    # the stored values against the captured ones: exactly at 16 bits, quant(x, scale) for K and V in e4m3
    lb, lf = (_measured(receipt, c, "calibrated_scales")["layer_oracle"] for c in ("bf16", "fp8_e4m3"))
    assert lb["codes_equal_share"] == 1.0 and lb["k_codes"]["equal_share"] == 1.0 and lb["supplied_scale"] is None
    assert lf["codes_equal_share"] >= 0.98 and lf["k_codes"]["equal_share"] >= 0.98 and lf["k_scale"] == 1.0
    assert lf["supplied_scale"] == receipt["scales"]["v_scales"][lf["layer"]]
    # the scales in effect: 1.0 where nothing is quantized, the calibrated ones on the fp8 cache
    assert _measured(receipt, "bf16", "calibrated_scales")["supplied"] == [1.0] * 3
    assert _measured(receipt, "fp8_e4m3", "calibrated_scales")["supplied"] == receipt["scales"]["v_scales"]
    # no systematic scale on either cache: the slopes of the output against the reference hold their bound
    for cache, lo in (("bf16", lb), ("fp8_e4m3", lf)):
        assert abs(lo["decode_slope_vs_k16v8_reference"] - 1) <= SLOPE_BOUND
        assert abs(lo["prefill_slope_vs_reference"] - 1) <= SLOPE_BOUND
        assert d["per_cache"][cache]["layer_oracle_slope"] == {
            "prefill": lo["prefill_slope_vs_reference"], "decode": lo["decode_slope_vs_k16v8_reference"],
            "bound": SLOPE_BOUND, "rule": f"|slope - 1| <= {SLOPE_BOUND}", "held": True}


def test_the_diagnostic_never_touches_the_stack_workspace(runs: dict[str, dict[str, Any]]) -> None:
    receipt = runs[""]["receipt"]
    out = Path(receipt["diagnostic"]["workspace"])
    assert out.name == "diagnostic-jit"
    stack_ws = Path(json.loads((out.parent / "stack-info.json").read_text())["selection"]["jit_workspace"])
    stack = {p.relative_to(stack_ws) for p in stack_ws.rglob("*.so")}
    copy = {p.relative_to(out) for p in out.rglob("*.so")}
    assert stack < copy                        # the symmetric modules went into the copy alone
    gained = receipt["diagnostic"]["per_cache"]["fp8_e4m3"]["jit_workspace"]["gained"]
    assert gained and all("e4m3" in g for g in gained)


@pytest.mark.parametrize("fault", ENGINE_FAULTS)
def test_each_planted_fault_fails_its_checks_on_both_caches(runs: dict[str, dict[str, Any]], fault: str) -> None:
    run = runs[fault]
    receipt = run["receipt"]
    assert receipt is not None, run["stderr"][-3000:]
    jsonschema.validate(receipt, SCHEMA)
    d = receipt["diagnostic"]
    assert d["fault"]["name"] == fault and d["fault_caught"] is True and d["harness_ok"] is False
    assert run["rc"] == 1 and exit_code(receipt) == 1 and receipt["passed"] is False
    for cache in d["caches"]:
        st = _per_cache(receipt, cache)
        # the captured layer's rows are off (x0, V read at 2x, x1.01, the softmax 2% sharp): both checks it
        # feeds fail
        assert st["calibrated_scales"] == st["mixed_prefill"] == FAILED, (cache, st)
        if fault in SLOPE_FAULTS:
            _caught_by_the_slope(receipt, cache, fault)
            held = d["per_cache"][cache]["layer_oracle_slope"]       # the receipt's short record of it
            assert held["held"] is False and held["bound"] == SLOPE_BOUND
            assert held["decode"] == _measured(receipt, cache, "calibrated_scales")["layer_oracle"][
                "decode_slope_vs_k16v8_reference"]
        events = _measured(receipt, cache, "calibrated_scales")["events"]
        assert any(e.startswith(f"fault_planted: {fault}") for e in events)
        assert d["per_cache"][cache]["engine"]["fault_planted"] == fault
    if fault == "v_read_scale_2x":               # what the layers read with is not what was supplied
        scales = _measured(receipt, "fp8_e4m3", "calibrated_scales")
        assert scales["v_scale_float"] == [2 * s for s in scales["supplied"]]
        assert scales["v_scale"] == pytest.approx(scales["supplied"])      # stored with the right one


SLOPE_FAULTS = ("attn_output_x1_01", "softmax_scale_x1_02")


def _caught_by_the_slope(receipt: dict[str, Any], cache: str, fault: str) -> None:
    """A systematic scale error: the layer oracle's slope of the output against the reference, recorded
    with its bound in each check it fails, is outside 1 +- SLOPE_BOUND, and the summary says so."""
    for name in ("calibrated_scales", "mixed_prefill"):
        check = next(c for c in receipt["diagnostic"]["per_cache"][cache]["checks"] if c["name"] == name)
        m, lim = check["measured"]["layer_oracle"], check["limits"]["layer_oracle"]
        assert lim["slope"].startswith(f"1 +- {SLOPE_BOUND} "), lim
        decode, prefill = m["decode_slope_vs_k16v8_reference"], m["prefill_slope_vs_reference"]
        assert abs(decode - 1) > SLOPE_BOUND and abs(prefill - 1) > SLOPE_BOUND, (cache, name, decode, prefill)
        assert f"slope {decode:.5f} against the reference, outside 1 +- {SLOPE_BOUND}" in check["summary"]
        if fault == "attn_output_x1_01":     # exactly x1.01, and within the max-abs bound: the slope alone
            assert decode == pytest.approx(1.01, abs=2e-4) and prefill == pytest.approx(1.01, abs=2e-4)
            assert m["decode_max_err_vs_k16v8_reference"] <= lim["decode_max_err"]
            assert "(max, within its limit)" in check["summary"]
        else:                                # a sharper softmax weights the larger values up: above 1
            assert decode > 1 + SLOPE_BOUND and prefill > 1 + SLOPE_BOUND


def test_a_model_vllm_starts_on_its_v2_runner_is_hooked_too(inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """vLLM 0.24 runs Qwen3 (the H200's tiny model) on ``vllm.v1.worker.gpu.model_runner.GPUModelRunner``,
    a class of its own: the scales, the order and the faults reach it as they reach the V1 runner."""
    manifest, fixtures, model = inputs
    qwen = tmp_path / "qwen3"
    qwen.mkdir()
    config = json.loads((model / "config.json").read_text())
    (qwen / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen3ForCausalLM"]}))
    data = json.loads(manifest.read_text())
    (tmp_path / "m.json").write_text(json.dumps({**data, "local_path": str(qwen)}))
    run = _run((tmp_path / "m.json", fixtures, qwen), tmp_path / "out", "fp8_e4m3", "v_read_scale_2x")
    receipt = run["receipt"]
    assert receipt is not None, run["stderr"][-3000:]
    engine = receipt["diagnostic"]["per_cache"]["fp8_e4m3"]["engine"]
    assert engine["model_runner"] == "vllm.v1.worker.gpu.model_runner.GPUModelRunner"
    st = _per_cache(receipt, "fp8_e4m3")
    assert st["physical_k16v8"] == st["clean_memory"] == PASSED and st["calibrated_scales"] == FAILED
    events = _measured(receipt, "fp8_e4m3", "calibrated_scales")["events"]
    assert events[:2] == ["scales_loaded", "fault_planted: v_read_scale_2x on 3 layers"], events


def _results(status: str = PASSED) -> list[CheckResult]:
    return [CheckResult(n, status, "ok") for n in ALL]


def test_a_diagnostic_receipt_is_never_passed_even_when_every_check_passes() -> None:
    diagnostic = {"caches": ["bf16", "fp8_e4m3"], "proves": "the engine harness on a real engine, not the stack",
                  "never_a_stack_verdict": True, "harness_ok": True, "fault": None, "fault_caught": None,
                  "workspace": None, "exit_codes": {"harness agreed": 21, "harness disagreed": 1},
                  "per_cache": {c: {"kv_cache_dtype": c, "harness_ok": True, "checks": [r.as_json() for r in _results()]}
                                for c in ("bf16", "fp8_e4m3")}}
    kw: dict[str, Any] = {"level": "engine", "promised_level": "engine", "device": torch.device("cpu"), "seed": 0,
                          "stack": {"recipe": None, "lock_sha256": None, "forks": {}}, "selection": "fp16",
                          "model": None, "scales": {"source": "none", "path": None, "v_scales": [], "note": None,
                                                    "error": None},
                          "results": _results(), "timings": {"total_seconds": 1.0}, "notes": [],
                          "extra": {"protocol": {"prompt_tokens": 96, "max_new_tokens": 12}, "jit_workspace": None}}
    stack_verdict = build_receipt(**kw)
    assert stack_verdict["passed"] is True and exit_code(stack_verdict) == 0      # the same checks, K16/V8
    receipt = build_receipt(**kw, diagnostic=diagnostic)
    jsonschema.validate(receipt, SCHEMA)
    assert receipt["passed"] is False and receipt["checks_passed"] is True and receipt["proves"] == "harness"
    assert exit_code(receipt) == DIAGNOSTIC_AGREED_EXIT == 21
    assert exit_code({**receipt, "diagnostic": {**diagnostic, "harness_ok": False}}) == 1
    # the schema refuses a forged pass of a diagnostic receipt, whatever else it says
    forged = {**receipt, "passed": True, "proves": "stack", "reasons": []}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(forged, SCHEMA)
    jsonschema.validate({k: v for k, v in forged.items() if k != "diagnostic"}, SCHEMA)


def test_the_folded_checks_pass_only_where_every_cache_passed() -> None:
    bad = _results()
    bad[1] = CheckResult(CHECK_NAMES[1], FAILED, "codes differ")
    folded = {r.name: r for r in combine({"bf16": _results(), "fp8_e4m3": bad})}
    assert folded[CHECK_NAMES[0]].status == PASSED and folded[CHECK_NAMES[1]].status == FAILED
    assert folded[CHECK_NAMES[1]].summary == "bf16: passed: ok; fp8_e4m3: failed: codes differ"
    assert set(folded[CHECK_NAMES[1]].measured) == {"bf16", "fp8_e4m3"}


@pytest.mark.parametrize("args,message", [
    (("--diagnostic-cache", "bf16", "--level", "kernel"), "--diagnostic-cache: expected the engine level"),
    (("--plant-fault", "attn_output_zero"), "--plant-fault: a fault is planted only into a diagnostic run"),
])
def test_a_fault_or_a_diagnostic_out_of_place_is_a_usage_error(args: tuple[str, ...], message: str,
                                                                inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    manifest, fixtures, model = inputs
    level = [] if "--level" in args else ["--level", "engine"]
    cmd = [sys.executable, "-m", "october.checks.smoke", *level, "--device", "cpu", "--manifest", str(manifest),
           "--fixtures", str(fixtures), "--output", str(tmp_path), "--stack-info", str(stack_info(tmp_path, model)),
           "--promised-level", "engine", *args]
    run = run_and_read(cmd, tmp_path, _env(""), "", 120)
    assert run["rc"] == 2 and message in run["stderr"] and run["receipt"] is None, run["stderr"][-2000:]


def test_current_smoke_passes_the_diagnostic_on_and_refuses_a_fault_without_one(tmp_path: Path) -> None:
    opts = SmokeOptions(install=tmp_path, format="fp16", output=tmp_path / "o", diagnostic_cache="both",
                        plant_fault="v_read_scale_2x")
    argv = plan_smoke(opts, Path("py"), None, tmp_path / "info.json", {}).argv
    assert argv[argv.index("--diagnostic-cache") + 1] == "both" and argv[argv.index("--plant-fault") + 1] == "v_read_scale_2x"
    plain = plan_smoke(SmokeOptions(install=tmp_path, format="fp16", output=tmp_path / "o"), Path("py"), None,
                       tmp_path / "info.json", {}).argv
    assert "--plant-fault" not in plain and "--diagnostic-cache" not in plain      # never in a normal run
    for bad in (SmokeOptions(install=tmp_path, format="fp16", output=tmp_path / "o", plant_fault="attn_output_zero"),
                SmokeOptions(install=tmp_path, format="fp16", output=tmp_path / "o", diagnostic_cache="bf16",
                             level="kernel"),
                SmokeOptions(install=tmp_path, format="fp16", output=tmp_path / "o", diagnostic_cache="bf16",
                             plant_fault="softmax_2x")):
        with pytest.raises(UsageError):
            check_choices(bad)


def test_current_smoke_runs_a_diagnostic_with_a_planted_fault_end_to_end(tmp_path: Path) -> None:
    """Through `current smoke` (run_smoke: the plan, the stack env, the receipt check): the fault is planted,
    caught, said so, recorded; the exit code is 1 (the harness did not agree); STACK/jit is left as it was."""
    import os

    from october.installer.pyenv import stackenv
    from october.installer.recipe import load_recipe
    from october.installer.smoke.launch import load_receipt, run_smoke
    from tests.test_checks_engine_fake import FAKE, prebuild
    from tests.test_smoke_selection_e2e import _recipe

    recipe = _recipe(tmp_path)
    stack = tmp_path / "stack"
    (stack / "receipts").mkdir(parents=True)
    (stack / "env" / "bin").mkdir(parents=True)
    (stack / "env" / "bin" / "python").write_text(
        f'#!/bin/sh\nPYTHONPATH="{FAKE}:$PYTHONPATH" exec {sys.executable} "$@"\n')
    (stack / "env" / "bin" / "python").chmod(0o755)
    (stack / "receipts" / "setup.json").write_text(json.dumps({
        "recipe": {"name": "current", "path": str(recipe), "sha256": None},
        "forks": [{"name": "vllm", "commit": "7" * 40}, {"name": "flashinfer", "commit": "2" * 40}]}))
    stackenv.write(stack, stackenv.runtime_env(stack, "9.0", None))
    prebuild(stack / "jit", list(load_recipe(str(recipe)).models["fp16"].jit_modules))
    before = sorted(str(p.relative_to(stack / "jit")) for p in (stack / "jit").rglob("*"))
    manifest, fixtures, _ = make_inputs(tmp_path / "in")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_") and k != "FAKE_VLLM_FAULT"}
    env["PYTHONPATH"] = str(FAKE)
    out = tmp_path / "out"
    said: list[str] = []
    opts = SmokeOptions(install=stack, format="fp16", output=out, fixtures=fixtures, manifest=manifest, device="cpu",
                        diagnostic_cache="fp8_e4m3", plant_fault="v_read_scale_2x")
    assert run_smoke(opts, cwd=tmp_path, echo=said.append, base_env=env) == 1
    receipt = load_receipt(out / "receipt.json")            # schema-checked
    d = receipt["diagnostic"]
    assert d["caches"] == ["fp8_e4m3"] and d["fault"]["name"] == "v_read_scale_2x" and d["fault_caught"] is True
    assert receipt["passed"] is False and receipt["proves"] == "nothing" and receipt["level"] == "engine"
    assert any("planted fault v_read_scale_2x caught" in line and "exit 1" in line for line in said), said
    assert sorted(str(p.relative_to(stack / "jit")) for p in (stack / "jit").rglob("*")) == before
    assert (out / "diagnostic-jit").is_dir()


def test_a_kept_diagnostic_workspace_is_made_once_from_the_stack_s_and_then_reused(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """$OCTOBER_DIAGNOSTIC_JIT (the H200 benches): the modules one diagnostic built stay for the next; the stack's
    own workspace is copied, never used."""
    from october.checks.engine.diagnostic import REUSE_ENV, own_workspace
    stack_ws = tmp_path / "stack" / "jit"
    (stack_ws / "cached_ops").mkdir(parents=True)
    (stack_ws / "cached_ops" / "k16v8.so").write_bytes(b"prebuilt")
    kept = tmp_path / "kept"
    monkeypatch.setenv(REUSE_ENV, str(kept))
    first = own_workspace(stack_ws, tmp_path / "out1")
    assert first == kept and (kept / "cached_ops" / "k16v8.so").read_bytes() == b"prebuilt"
    (kept / "cached_ops" / "symmetric.so").write_bytes(b"built by run 1")
    assert own_workspace(stack_ws, tmp_path / "out2") == kept
    assert (kept / "cached_ops" / "symmetric.so").is_file()               # not built again
    assert not (stack_ws / "cached_ops" / "symmetric.so").exists()       # the stack's own never touched
    monkeypatch.delenv(REUSE_ENV)
    fresh = own_workspace(stack_ws, tmp_path / "out3")
    assert fresh == tmp_path / "out3" / "diagnostic-jit" and not (fresh / "cached_ops" / "symmetric.so").exists()
