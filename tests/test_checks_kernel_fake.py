"""The kernel smoke level end to end against the stand-in FlashInfer, with planted faults.

``tests/fixtures/fake_flashinfer`` is a test stand-in for FlashInfer 0.6.15 with the asymmetric
series (it cannot run its real CUDA kernels here); its signatures are checked against the ones
recorded from the real source (tests/test_asym.py).  Each run is a subprocess: the real jit builder
first builds the stack's modules into a fresh workspace (tests/fixtures/fake_jit.py), then
``python -m october.checks.smoke`` runs at the level the stack promises (kernel), with a short longest
context (the stack info's ``[smoke] prompt_tokens = 256``) so a CPU can run it.  Faults are planted in the stand-in
(``FAKE_FLASHINFER_FAULT``), by the fault driver (``tests.fixtures.kernel_faults``, the same
driver the H200 proof uses), or in the workspace (a stale or a missing module).
"""

from __future__ import annotations

import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import fake_jit
from tests.fixtures.smoke_runs import CHECKS, run_and_read
from tests.fixtures.smoke_runs import check as _check
from tests.fixtures.smoke_runs import show as _show
from tests.fixtures.smoke_runs import statuses as _status

ROOT = Path(__file__).resolve().parent.parent
PASS_CPU = dict.fromkeys(CHECKS, "passed") | {"decode_graphs": "skipped"}
ALL_UNSUPPORTED = dict.fromkeys(CHECKS, "unsupported")

# name -> (how it is planted, the statuses it must produce on a CPU, words in the targeted check's summary)
CASES: dict[str, tuple[dict[str, str], dict[str, str], tuple[str, str]]] = {
    "": ({}, PASS_CPU, ("", "")),
    # FlashInfer-side faults in the stand-in
    "out_x0": ({"fault": "out_x0"}, PASS_CPU | {"physical_k16v8": "failed", "calibrated_scales": "failed",
                                               "mixed_prefill": "failed", "decode_graphs": "failed"},
               ("physical_k16v8", "differs from the reference")),
    "ignore_v_scale": ({"fault": "ignore_v_scale"}, PASS_CPU | {"physical_k16v8": "failed", "calibrated_scales": "failed",
                                                               "mixed_prefill": "failed", "decode_graphs": "failed"},
                       ("calibrated_scales", "does not follow v_scale")),
    "k_fp8": ({"fault": "k_fp8"}, PASS_CPU | {"physical_k16v8": "failed", "calibrated_scales": "failed",
                                             "mixed_prefill": "failed", "decode_graphs": "failed"},
              ("physical_k16v8", "differs from the reference")),
    "upcast_v": ({"fault": "upcast_v"}, PASS_CPU | {"physical_k16v8": "failed"},
                 ("physical_k16v8", "a symmetric decode module ran")),
    "bf16_v": ({"fault": "bf16_v"}, PASS_CPU | {"physical_k16v8": "failed"}, ("physical_k16v8", "bf16 V cache")),
    "stale_graph": ({"fault": "stale_graph"}, PASS_CPU | {"decode_graphs": "failed"}, ("decode_graphs", "differs")),
    "prefill_offset": ({"fault": "prefill_offset"}, PASS_CPU | {"mixed_prefill": "failed"},
                       ("mixed_prefill", "fresh_prefill_bf16 differs")),
    "leak": ({"fault": "leak"}, PASS_CPU | {"clean_memory": "failed"}, ("clean_memory", "held bytes changed")),
    "nondeterministic": ({"fault": "nondeterministic"}, PASS_CPU | {"deterministic_generation": "failed"},
                         ("deterministic_generation", "identical=False")),
    # a NaN in a graph replay fails the graph check too (its worst ratio was a max() that dropped NaN)
    "nan": ({"fault": "nan"}, PASS_CPU | {"mixed_prefill": "failed", "deterministic_generation": "failed",
                                          "decode_graphs": "failed"},
            ("deterministic_generation", "finite=False")),
    # faults planted by the driver (the same on the real FlashInfer)
    "v_scale_1": ({"driver": "v_scale_1"}, PASS_CPU | {"physical_k16v8": "failed", "calibrated_scales": "failed",
                                                      "mixed_prefill": "failed", "decode_graphs": "failed"},
                  ("calibrated_scales", "does not follow v_scale")),
    "v_stored_2x": ({"driver": "v_stored_2x"}, PASS_CPU | {"physical_k16v8": "failed", "calibrated_scales": "failed",
                                                          "mixed_prefill": "failed", "decode_graphs": "failed"},
                    ("calibrated_scales", "stored with a scale too large")),
    "k8v8": ({"driver": "k8v8"}, PASS_CPU | {"physical_k16v8": "failed", "calibrated_scales": "failed",
                                            "mixed_prefill": "failed", "decode_graphs": "failed"},
             ("physical_k16v8", "no K bf16 / V e4m3 decode module was loaded")),
    "upcast_v_driver": ({"driver": "upcast_v"}, PASS_CPU | {"physical_k16v8": "failed"},
                        ("physical_k16v8", "a symmetric decode module ran")),
    "no_flashinfer": ({"driver": "no_flashinfer"}, ALL_UNSUPPORTED, ("physical_k16v8", "cannot be imported")),
    # systematic errors under the max-abs bound: the slope against the reference catches them (issue 18, item 5)
    "out_x1_01": ({"driver": "out_x1_01"}, PASS_CPU | {"physical_k16v8": "failed", "mixed_prefill": "failed"},
                  ("physical_k16v8", "systematic scale")),
    "sm_scale_x1_02": ({"driver": "sm_scale_x1_02"}, PASS_CPU | {"physical_k16v8": "failed", "mixed_prefill": "failed",
                                                                "decode_graphs": "failed"},
                       ("mixed_prefill", "systematic scale")),
    # API forms
    "symmetric_api": ({"api": "symmetric"}, ALL_UNSUPPORTED, ("physical_k16v8", "symmetric FlashInfer")),
    "explicit_api_asym_prefill": ({"api": "explicit", "asym_prefill": "1"}, PASS_CPU, ("", "")),
    "0615_declared_asym_prefill": ({"asym_prefill": "1"}, PASS_CPU | {"mixed_prefill": "unsupported"},
                                   ("mixed_prefill", "declares an asymmetric paged prefill")),
    # the workspace
    # an e5m2-V library under the e4m3 name: it misreads V everywhere, and its hash is not the jit step's
    "stale_module": ({"workspace": "stale"}, PASS_CPU | {"physical_k16v8": "failed", "calibrated_scales": "failed",
                                                        "mixed_prefill": "failed", "decode_graphs": "failed",
                                                        "deterministic_generation": "failed"},
                     ("physical_k16v8", "a stale or foreign module")),
    "missing_module": ({"workspace": "missing"}, PASS_CPU, ("", "")),
    # the jit step as it was (one combined build): FlashInfer rebuilds every module on first use, as the
    # real 2f3f0f6d did on the H200; the rebuilt decode module is not the one the jit step recorded
    "jit_step_combined_build": ({"workspace": "combined"}, PASS_CPU | {"physical_k16v8": "failed"},
                                ("physical_k16v8", "a stale or foreign module")),
}


def _one(base: Path, name: str) -> dict[str, Any]:
    how = CASES[name][0]
    d = base / (name or "healthy")
    ws = d / "ws"
    d.mkdir(parents=True)
    api = how.get("api", "0.6.15")
    modules = list(fake_jit.MODULES) + ([fake_jit.PREFILL_ASYM] if how.get("api") == "explicit" else [])
    if how.get("workspace") == "missing":
        modules = [fake_jit.DECODE]                        # the jit step left the prefill module out
    if how.get("api") == "symmetric":
        result = {"modules": []}                           # the jit step refuses it (tested in test_jit_step)
    elif how.get("workspace") == "combined":
        # the jit step as it was: FlashInfer's build_jit_specs (one combined ninja run)
        import subprocess

        from tests.fixtures.fake_jit import jit_env
        code = ("from flashinfer.jit import build_jit_specs, gen_batch_decode_module, gen_batch_prefill_module; import torch\n"
                "b=torch.bfloat16; build_jit_specs([gen_batch_decode_module(b,b,b,torch.int32,128,128,0,False,False,"
                "dtype_k=b,dtype_v=torch.float8_e4m3fn), gen_batch_prefill_module('fa2',b,b,b,torch.int32,128,128,0,False,"
                "False,False)], skip_prebuilt=False)")
        ws.mkdir(parents=True)
        subprocess.run([sys.executable, "-c", code], env=jit_env(ws), check=True, timeout=120, capture_output=True)
        from october.installer.core.hashing import sha256_file
        result = {"modules": [{"uri": so.parent.name, "sha256": sha256_file(so), "path": str(so)}
                              for so in sorted(ws.glob(".cache/flashinfer/*/*/cached_ops/*/*.so"))]}
        assert len(result["modules"]) == 2
    else:
        result = fake_jit.build(ws, modules, api)
    if how.get("workspace") == "stale":
        other = fake_jit.build(d / "other", [{**fake_jit.DECODE, "v": "e5m2"}])["modules"][0]["path"]
        asym = next(m["path"] for m in result["modules"] if "dtype_v_e4m3" in m["uri"] and "decode" in m["uri"])
        shutil.copy(other, asym)                           # another dtype's library under the K16/V8 name
    info = fake_jit.stack_info(d / "stack-info.json", result, asym_prefill=bool(how.get("asym_prefill")))
    env = fake_jit.jit_env(ws, api)
    if how.get("fault"):
        env["FAKE_FLASHINFER_FAULT"] = how["fault"]
    smoke = ["--device", "cpu", "--stack-info", str(info), "--output", str(d / "out")]
    cmd = [sys.executable, "-m", "tests.fixtures.kernel_faults", how["driver"], *smoke] if how.get("driver") \
        else [sys.executable, "-m", "october.checks.smoke", *smoke]
    return run_and_read(cmd, d / "out", env, name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.mktemp("kernel")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(CASES, pool.map(lambda n: _one(base, n), CASES)))


def test_healthy_stand_in_passes_all_but_the_cpu_graph_check(runs: dict[str, dict[str, Any]]) -> None:
    import jsonschema
    run = runs[""]
    receipt = run["receipt"]
    assert receipt is not None, _show(run)
    jsonschema.validate(receipt, json.loads((ROOT / "receipts" / "smoke.schema.json").read_text()))
    assert _status(receipt) == PASS_CPU, _show(run)
    assert receipt["level"] == receipt["promised_level"] == "kernel" and receipt["proves"] == "nothing"  # graphs skipped on a CPU
    assert run["rc"] == 1 and receipt["passed"] is False and receipt["checks_passed"] is False
    assert receipt["reasons"] == [r for r in receipt["reasons"] if r.startswith("changing decode graphs: skipped")]
    assert receipt["jit_workspace"]["unchanged"] is True and receipt["jit_workspace"]["modules_before"] == 2
    assert receipt["protocol"] == {"prompt_tokens": 256, "max_new_tokens": 128, "source": "recipe [smoke]"}
    # the scale's source is said where the check is read, not only in the receipt's scales (review, session 8)
    assert receipt["scales"]["source"] == "synthetic"
    assert "no calibrated scales were supplied: the scale is synthetic" in _check(receipt, "calibrated_scales")["summary"]
    physical = _check(receipt, "physical_k16v8")["measured"]
    assert physical["bf16_v_cache"] == "ValueError naming v_data_type" and max(physical["contexts"]) == 256
    assert physical["decode_module"].startswith("batch_decode_with_kv_cache_dtype_q_bf16_dtype_k_bf16_dtype_v_e4m3_")
    assert physical["jit_record"] == "sha256 equals the jit step's record"
    mixed = _check(receipt, "mixed_prefill")["measured"]
    assert len(mixed["routes"]) == 1 and "ragged prefill" in mixed["routes"][0]
    assert mixed["paged_prefill"]["asymmetric"] is False
    assert set(mixed["max_abs_err"]) == {"running_decode", "fresh_prefill_bf16", "decode_after_prefill"}
    assert set(mixed["slope"]) == set(mixed["max_abs_err"])
    assert all(abs(s - 1) <= 0.004 for s in [physical["decode_slope"], *mixed["slope"].values()])
    scales = _check(receipt, "calibrated_scales")["measured"]
    assert scales["stored_amax_over_e4m3_max"] > 0.7 and scales["saturated_fraction"] == 0


@pytest.mark.parametrize("name", [n for n in CASES if n])
def test_each_planted_fault_fails_its_check(runs: dict[str, dict[str, Any]], name: str) -> None:
    run = runs[name]
    receipt = run["receipt"]
    assert receipt is not None, _show(run)
    _, expected, (target, words) = CASES[name]
    assert _status(receipt) == expected, _show(run)
    assert run["rc"] == 1 and receipt["passed"] is False
    if target:
        assert words in _check(receipt, target)["summary"], _show(run)


def _with_scales(d: Path, v_scales: list[float], fault: str) -> dict[str, Any]:
    """A kernel-level run whose fixtures supply ``v_scales`` (a model manifest and a scales file as
    ``current download`` writes them), with ``fault`` planted in the stand-in."""
    from october.checks.scales import scales_path, write_scales

    repo, rev = "fake-org/Tiny", "0123456789abcdef0123456789abcdef01234567"
    ws, model, fixtures = d / "ws", d / "model", d / "fixtures"
    model.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"kind": "october-download-manifest", "selection": "awq", "repo": repo,
                                                 "revision": rev, "local_path": str(model)}))
    write_scales(scales_path(fixtures, repo), repo=repo, revision=rev, v_scales=v_scales)
    info = fake_jit.stack_info(d / "stack-info.json", fake_jit.build(ws))
    env = fake_jit.jit_env(ws) | ({"FAKE_FLASHINFER_FAULT": fault} if fault else {})
    return run_and_read([sys.executable, "-m", "october.checks.smoke", "--device", "cpu", "--stack-info", str(info),
                         "--output", str(d / "out"), "--manifest", str(d / "manifest.json"), "--fixtures",
                         str(fixtures)], d / "out", env, fault)


def test_the_scale_checked_is_the_layer_s_furthest_from_1(tmp_path: Path) -> None:
    """A review's plants: the kernel level took layer 0's calibrated V scale, and a kernel that ignores the scale
    passed every check when that scale was 1.0 (the check's guard skipped it), while a healthy one failed at 0.99
    (its output then also matches V read with 1.0).  It now takes the layer's scale furthest from 1.0, and where
    every layer's is within 5% of 1.0 the check is unsupported (not passed, and no stack blamed)."""
    cases = {"ignored at 1.0": ([1.0, 0.02], "ignore_v_scale"), "healthy at 0.99": ([0.99, 0.02], ""),
             "none telling": ([1.0, 1.02, 0.99], "")}
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(cases, pool.map(lambda c: _with_scales(tmp_path / c.replace(" ", "-"), *cases[c]), cases)))
    ignored, healthy, blind = (runs[c]["receipt"] for c in cases)
    assert _status(ignored)["calibrated_scales"] == "failed", _show(runs["ignored at 1.0"])
    assert ignored["scales"]["v_scales"] == [0.02]
    assert _status(healthy) == PASS_CPU, _show(runs["healthy at 0.99"])
    assert _status(blind)["calibrated_scales"] == "unsupported" and blind["passed"] is False, _show(runs["none telling"])
    assert "within 5% of 1.0" in _check(blind, "calibrated_scales")["summary"]


def test_explicit_api_with_a_declared_asymmetric_prefill_checks_that_route(runs: dict[str, dict[str, Any]]) -> None:
    mixed = _check(runs["explicit_api_asym_prefill"]["receipt"], "mixed_prefill")["measured"]
    assert len(mixed["routes"]) == 2 and "asymmetric paged prefill" in mixed["routes"][1]
    assert "asymmetric_paged_prefill" in mixed["max_abs_err"]


def test_a_module_the_jit_step_did_not_build_fails_the_run(runs: dict[str, dict[str, Any]]) -> None:
    """Every check passes, but FlashInfer had to build the prefill module during the smoke: passed is false."""
    for name in ("missing_module", "jit_step_combined_build"):
        receipt = runs[name]["receipt"]
        watched = receipt["jit_workspace"]
        assert watched["unchanged"] is False, name
        assert (watched["gained"] if name == "missing_module" else watched["changed"]), name
        assert any("JIT workspace gained" in r or "changed during the smoke" in r for r in receipt["reasons"]), name


def test_the_healthy_run_gained_nothing_and_the_upcast_gained_the_symmetric_module(
        runs: dict[str, dict[str, Any]]) -> None:
    gained = runs["upcast_v"]["receipt"]["jit_workspace"]["gained"]
    assert len(gained) == 1 and "_dtype_kv_bf16_" in gained[0]
    assert runs[""]["receipt"]["jit_workspace"]["gained"] == []


F16_MODULES = ({**fake_jit.DECODE, "q": "f16", "k": "f16", "o": "f16"},
               {**fake_jit.PREFILL_BF16, "q": "f16", "k": "f16", "v": "f16", "o": "f16"})


def _f16_run(base: Path, fault: str = "") -> dict[str, Any]:
    """A stack whose selection computes in float16: the jit step built the f16 modules."""
    result = fake_jit.build(base / "ws", F16_MODULES)
    info = fake_jit.stack_info(base / "stack-info.json", result, compute_dtype="float16")
    env = fake_jit.jit_env(base / "ws")
    if fault:
        env["FAKE_FLASHINFER_FAULT"] = fault
    return run_and_read([sys.executable, "-m", "october.checks.smoke", "--device", "cpu", "--stack-info", str(info),
                         "--output", str(base / "out")], base / "out", env, fault)


def test_a_float16_selection_runs_the_kernel_level_in_float16(tmp_path: Path) -> None:
    """The kernel level follows the selection's compute dtype: q, K16 and the output in float16, the
    f16 decode module the jit step built (hash compared), nothing JIT-built during the run.  (Run in
    bfloat16, it would load modules the jit step never built: the workspace gains them and the
    physical check finds no recorded K f16 / V e4m3 module.)  A planted fault still fails in float16."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        healthy, faulty = pool.map(lambda a: _f16_run(tmp_path / (a or "healthy"), a), ["", "ignore_v_scale"])
    receipt = healthy["receipt"]
    assert receipt is not None, _show(healthy)
    assert _status(receipt) == PASS_CPU, _show(healthy)
    physical = _check(receipt, "physical_k16v8")["measured"]
    assert physical["compute_dtype"] == "float16"
    assert physical["decode_module"].startswith("batch_decode_with_kv_cache_dtype_q_f16_dtype_k_f16_dtype_v_e4m3_")
    assert physical["jit_record"] == "sha256 equals the jit step's record"
    assert physical["f16_v_cache"] == "ValueError naming v_data_type"
    assert "fresh_prefill_f16" in _check(receipt, "mixed_prefill")["measured"]["max_abs_err"]
    assert receipt["jit_workspace"]["unchanged"] is True and receipt["jit_workspace"]["gained"] == []
    assert not any("ran in bfloat16" in n for n in receipt["notes"])
    bad = faulty["receipt"]
    assert bad is not None, _show(faulty)
    assert _status(bad)["calibrated_scales"] == "failed" and bad["passed"] is False, _show(faulty)
    assert "does not follow v_scale" in _check(bad, "calibrated_scales")["summary"]


def test_without_a_selection_the_kernel_level_says_it_ran_in_bfloat16(runs: dict[str, dict[str, Any]]) -> None:
    receipt = runs[""]["receipt"]
    assert _check(receipt, "physical_k16v8")["measured"]["compute_dtype"] == "bfloat16"
    assert any("ran in bfloat16" in n for n in receipt["notes"])


@pytest.mark.gpu
def test_kernel_level_passes_on_cuda_with_the_stand_in(tmp_path: Path) -> None:
    result = fake_jit.build(tmp_path / "ws")
    info = fake_jit.stack_info(tmp_path / "stack-info.json", result)
    run = run_and_read([sys.executable, "-m", "october.checks.smoke", "--device", "cuda", "--stack-info", str(info),
                        "--output", str(tmp_path / "out")], tmp_path / "out", fake_jit.jit_env(tmp_path / "ws"), "")
    assert run["receipt"] is not None and run["rc"] == 0, _show(run)
    assert run["receipt"]["passed"] is True and _status(run["receipt"]) == dict.fromkeys(CHECKS, "passed")
