"""The committed example receipts (receipts/examples/) still match their schemas and carry no machine path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "receipts" / "examples"
MACHINE = re.compile(r"(/tmp/|/root/|/home/|/work/|/opt/|/usr/)")


@pytest.mark.parametrize("name,schema", [("setup.json", "setup.schema.json"), ("smoke.json", "smoke.schema.json")])
def test_examples_match_their_schema(name: str, schema: str) -> None:
    found = sorted(EXAMPLES.glob(f"*/{name}"))
    assert found
    for path in found:
        jsonschema.validate(json.loads(path.read_text()), json.loads((ROOT / "receipts" / schema).read_text()))


def test_examples_name_no_machine_path() -> None:
    """The run's files (the README may name the image's paths to explain the placeholders)."""
    for path in (EXAMPLES / "flashinfer-pr3812-h200").iterdir():
        if path.name != "README.md":
            hits = MACHINE.findall(path.read_text(encoding="utf-8"))
            assert not hits, f"{path}: {hits[:3]}"


def test_the_h200_example_is_a_kernel_level_stack_verdict_with_a_system_torch() -> None:
    d = EXAMPLES / "flashinfer-pr3812-h200"
    setup, smoke = json.loads((d / "setup.json").read_text()), json.loads((d / "smoke.json").read_text())
    assert setup["promises"] == "kernel" and setup["torch"]["source"] == "system"
    assert setup["torch"]["version"] == "2.11.0+cu130" and setup["torch"]["cuda"] == "13.0"
    assert [s["name"] for s in setup["steps"]] == ["preflight", "fetch", "env", "install", "jit", "lock"]
    assert {s["status"] for s in setup["steps"]} == {"ran"} and setup["preflight"]["skipped"] == []
    assert smoke["passed"] is True and smoke["level"] == "kernel" and smoke["proves"] == "stack"
    assert {c["status"] for c in smoke["checks"]} == {"passed"} and len(smoke["checks"]) == 6
    lock = (d / "pylock.toml").read_text()
    assert 'version = "2.11.0+cu130"' in lock and "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55" in lock


def test_the_h200_fleet_example_passed_on_every_node_with_one_lock_and_one_jit_set() -> None:
    """A real 2-node Ray fleet on the H200 (receipts/examples/fleet-h200): the recorded receipts still
    match the fleet schema, and what they record is a pass by the fleet's own rules."""
    d = EXAMPLES / "fleet-h200"
    schema = json.loads((ROOT / "receipts" / "fleet.schema.json").read_text())
    for name in ("fleet.json", "fleet-rerun.json"):
        doc = json.loads((d / name).read_text())
        jsonschema.validate(doc, schema)
        assert doc["passed"] is True and doc["consistent"] is True and doc["reasons"] == []
        nodes = doc["nodes"]
        assert [n["name"] for n in nodes] == ["n0", "n1"] and len({n["node_id"] for n in nodes}) == 2
        assert {n["status"] for n in nodes} == {"passed"}
        assert len({n["lock_sha256"] for n in nodes}) == 1
        assert len({tuple(sorted((m["uri"], m["sha256"]) for m in n["jit"])) for n in nodes}) == 1
        assert all(n["smoke"]["level"] == "kernel" and n["smoke"]["proves"] == "stack" for n in nodes)
        assert all(n["gpu"]["name"] == "NVIDIA H200" for n in nodes)
    for path in d.iterdir():
        if path.name != "README.md":
            assert not MACHINE.findall(path.read_text(encoding="utf-8")), path


def test_the_real_vllm_engine_example_is_a_named_refusal_never_a_pass() -> None:
    """Upstream vLLM 0.24.0 on the H200 (receipts/examples/h200-vllm-engine): the engine level's receipt
    matches the smoke schema, says passed: false, and physical K16/V8 names the real engine's refusal with
    the same message the stand-in and the real tier hold (tests/fixtures/vllm_0_24_0_cache_dtype_refusal.txt)."""
    d = EXAMPLES / "h200-vllm-engine"
    receipt = json.loads((d / "engine-receipt.json").read_text())
    jsonschema.validate(receipt, json.loads((ROOT / "receipts" / "smoke.schema.json").read_text()))
    assert receipt["passed"] is False and receipt["level"] == "engine"
    checks = {c["name"]: c for c in receipt["checks"]}
    refused = checks["physical_k16v8"]["measured"]["engine_refused"]
    assert checks["physical_k16v8"]["status"] == "failed" and refused["kv_cache_dtype_asked"] == ["auto", "fp8_e4m3"]
    recorded = (ROOT / "tests" / "fixtures" / "vllm_0_24_0_cache_dtype_refusal.txt").read_text()
    assert all(f"'{a}'" in recorded for a in refused["accepts"]) and len(refused["accepts"]) == 15
    assert {c["status"] for n, c in checks.items() if n != "physical_k16v8"} == {"skipped"}


def test_the_real_engine_diagnostics_never_pass_and_agree_only_where_no_fault_was_planted() -> None:
    """receipts/examples/h200-vllm-diagnostic: the engine-level diagnostic on the real vLLM 0.24.0 on the H200
    (issue 18).  Each receipt matches the smoke schema, none is a stack verdict, the healthy runs agreed on
    every check and each planted fault was caught by the checks its README names."""
    d = EXAMPLES / "h200-vllm-diagnostic"
    schema = json.loads((ROOT / "receipts" / "smoke.schema.json").read_text())
    want = {"diag-bf16": ("bf16", None), "diag-fp8": ("fp8_e4m3", None),
            "fault-attn-x0": ("bf16", "attn_output_zero"), "fault-v-2x": ("fp8_e4m3", "v_read_scale_2x")}
    for name, (cache, fault) in want.items():
        r = json.loads((d / f"{name}.receipt.json").read_text())
        jsonschema.validate(r, schema)
        diag = r["diagnostic"]
        assert r["passed"] is False and r["proves"] == "harness" and list(diag["per_cache"]) == [cache]
        status = {c["name"]: c["status"] for c in r["checks"]}
        assert r["engine"]["model_runner"] == "vllm.v1.worker.gpu.model_runner.GPUModelRunner"   # vLLM's V2 runner
        if fault is None:
            assert diag["harness_ok"] is True and set(status.values()) == {"passed"}, status
        else:
            assert diag["fault"]["name"] == fault and diag["fault_caught"] is True and diag["harness_ok"] is False
            assert status["calibrated_scales"] == status["mixed_prefill"] == "failed", status
    verdict = json.loads((d / "k16v8-verdict.receipt.json").read_text())
    assert verdict["passed"] is False and "refused" in verdict["checks"][0]["summary"]
    assert not MACHINE.findall("".join(p.read_text(encoding="utf-8") for p in d.glob("*.receipt.json"))), \
        "a machine path in the example receipts"
