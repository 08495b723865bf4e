"""`python -m october.checks.smoke` at reference level, in-process, and the receipt schema."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch  # noqa: F401

import jsonschema
import pytest

from october.checks import smoke
from october.checks.scales import write_scales

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "receipts" / "smoke.schema.json").read_text())
REPO, REV = "Qwen/Qwen3-8B-AWQ", "4da05a8edb55c6046cce958586c33b61da07bb79"


def _manifest(tmp: Path, selection: str = "awq") -> Path:
    path = tmp / f"{selection}-download.json"
    path.write_text(json.dumps({
        "format_version": 1, "kind": "october-download-manifest",
        "recipe": {"name": "current", "sha256": "0" * 64}, "selection": selection,
        "repo": REPO, "revision": REV, "local_path": str(tmp / "model"), "files": [],
        "tool": {"name": "october", "version": "0.1.0"}, "created_at": "2026-01-01T00:00:00Z"}))
    return path


def _smoke(tmp: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp / "out"
    rc = smoke.main(["--level", "reference", "--device", "cpu", "--output", str(out), *extra])
    receipt = json.loads((out / "receipt.json").read_text())
    jsonschema.validate(receipt, SCHEMA)
    return rc, receipt


def _status(receipt: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in receipt["checks"]}


def test_cpu_reference_receipt_fails_only_for_skipped_graphs(tmp_path: Path, capsys) -> None:
    rc, receipt = _smoke(tmp_path)
    assert rc == 1 and receipt["passed"] is False and receipt["checks_passed"] is False
    assert _status(receipt)["decode_graphs"] == "skipped"
    assert [s for n, s in _status(receipt).items() if n != "decode_graphs"] == ["passed"] * 5
    assert receipt["reasons"][0].startswith("changing decode graphs: skipped")
    # a reference run proves at most the harness, never the stack; with a check skipped it proves nothing
    assert receipt["proves"] == "nothing" and receipt["promised_level"] is None
    assert receipt["reasons"][1:] == [r for r in receipt["reasons"] if "proves the harness only" in r]
    assert receipt["scales"]["source"] == "calibrated" and "no download manifest" in receipt["scales"]["note"]
    assert receipt["machine"]["device"] == "cpu" and receipt["level"] == "reference"
    table = capsys.readouterr().out
    assert "changing decode graphs" in table and "passed: false" in table


def test_the_telling_scale_is_the_one_furthest_from_1() -> None:
    """The layer the scale checks exercise: furthest from 1.0 as a ratio (0.5 as far as 2.0), none when every
    one is within 5% of 1.0 (a check could not tell it from a scale left at 1.0), never one that is not > 0."""
    from october.checks.scales import telling_scale

    assert telling_scale([1.0, 0.02, 0.05]) == 1
    assert telling_scale([0.9, 1.5]) == 1 and telling_scale([0.5, 2.0]) == 0
    assert telling_scale([1.0, 1.04, 0.97]) is None and telling_scale([]) is None
    assert telling_scale([0.0, -3.0, float("nan"), 1.0]) is None
    assert telling_scale([1.0, 1.06]) == 1 and telling_scale([1.0, 1 / 1.06]) == 1


def test_fixture_scales_for_the_model_are_used(tmp_path: Path) -> None:
    fixtures = tmp_path / "fixtures"
    write_scales(fixtures / "Qwen__Qwen3-8B-AWQ.kv_scales.json", repo=REPO, revision=REV,
                 v_scales=[0.02, 0.05])
    rc, receipt = _smoke(tmp_path, "--manifest", str(_manifest(tmp_path)), "--fixtures", str(fixtures),
                         "--format", "awq")
    assert receipt["scales"]["source"] == "fixtures"
    scales_check = next(c for c in receipt["checks"] if c["name"] == "calibrated_scales")
    assert scales_check["status"] == "passed"
    assert scales_check["measured"]["in_effect"] == pytest.approx([0.02, 0.05], rel=1e-6)
    assert receipt["model"]["repo"] == REPO and receipt["selection"] == "awq"


def test_scales_that_are_all_the_engines_default_fail_the_scales_check(tmp_path: Path) -> None:
    """The scenario hunt: V scales of 1.0 (the engine's default) passed "calibrated scales" on an engine that
    ignores the scales it is given: the supplied and the default were the same, so nothing was proved."""
    fixtures = tmp_path / "fixtures"
    write_scales(fixtures / "Qwen__Qwen3-8B-AWQ.kv_scales.json", repo=REPO, revision=REV, v_scales=[1.0, 1.0])
    _, receipt = _smoke(tmp_path, "--manifest", str(_manifest(tmp_path)), "--fixtures", str(fixtures),
                        "--format", "awq")
    assert _status(receipt)["calibrated_scales"] == "failed" and not receipt["passed"]
    assert "the engine's default scale" in receipt["scales"]["error"], receipt["scales"]


def test_the_kernel_level_never_takes_a_synthetic_scale_for_fixtures_that_lack_the_file(tmp_path: Path) -> None:
    """The scenario hunt: fixtures given for the model but without its scales file: the kernel level ran on its
    synthetic scale and "calibrated scales" passed, the missing file unnamed (the engine level failed it)."""
    from october.checks.inputs import load_manifest
    from october.checks.kernel.checks import kernel_scales

    manifest = load_manifest(_manifest(tmp_path))
    empty = tmp_path / "fixtures"
    empty.mkdir()
    choice = kernel_scales(manifest, empty)
    assert choice.source == "synthetic" and choice.error and "Qwen__Qwen3-8B-AWQ.kv_scales.json" in choice.error
    assert kernel_scales(manifest, None).error is None        # none asked for: the synthetic scale, said so
    assert kernel_scales(None, None).error is None


def test_real_model_scales_are_validated_then_tiny_model_calibrated(tmp_path: Path) -> None:
    fixtures = tmp_path / "fixtures"
    write_scales(fixtures / "Qwen__Qwen3-8B-AWQ.kv_scales.json", repo=REPO, revision=REV,
                 v_scales=[0.01] * 36)
    _, receipt = _smoke(tmp_path, "--manifest", str(_manifest(tmp_path)), "--fixtures", str(fixtures))
    assert receipt["scales"]["source"] == "calibrated"
    assert "36 layers" in receipt["scales"]["note"]
    assert _status(receipt)["calibrated_scales"] == "passed"


def test_scales_for_another_revision_fail_the_scales_check(tmp_path: Path) -> None:
    fixtures = tmp_path / "fixtures"
    write_scales(fixtures / "Qwen__Qwen3-8B-AWQ.kv_scales.json", repo=REPO, revision="1" * 40,
                 v_scales=[0.02, 0.05])
    _, receipt = _smoke(tmp_path, "--manifest", str(_manifest(tmp_path)), "--fixtures", str(fixtures))
    assert _status(receipt)["calibrated_scales"] == "failed"
    assert "model.revision" in receipt["scales"]["error"]


def test_usage_errors_exit_2_and_write_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert smoke.main(["--level", "reference", "--device", "cpu", "--output", str(out),
                       "--manifest", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert "expected an existing JSON file" in err and "current download" in err
    assert smoke.main(["--level", "reference", "--device", "cpu", "--output", str(out),
                       "--manifest", str(_manifest(tmp_path, "fp16")), "--format", "awq"]) == 2
    assert smoke.main(["--level", "engine", "--device", "cpu", "--output", str(out)]) == 2
    assert not (out / "receipt.json").exists()


def test_kernel_level_without_the_fork_is_unsupported(tmp_path: Path) -> None:
    """No FlashInfer here: a stack that promises the kernel level gets every check unsupported, exit 1
    (never a crash, never a silent fall back to the reference level)."""
    out = tmp_path / "out"
    rc = smoke.main(["--promised-level", "kernel", "--device", "cpu", "--output", str(out)])
    receipt = json.loads((out / "receipt.json").read_text())
    jsonschema.validate(receipt, SCHEMA)
    assert rc == 1 and set(_status(receipt).values()) == {"unsupported"} and receipt["level"] == "kernel"
    assert len(receipt["reasons"]) == 8 and receipt["proves"] == "nothing"       # nothing ran: no stack claim
    # the scenario hunt: a promise given without --stack-info (no JIT record to hold the modules to) could pass
    assert any(r.startswith("no --stack-info: the run is tied to no stack") for r in receipt["reasons"])
    assert "cannot be imported" in receipt["checks"][0]["summary"]
    assert any("JIT workspace was not watched" in r for r in receipt["reasons"])


@pytest.mark.parametrize("promised", ["kernel", "engine"])
def test_a_lower_level_runs_only_when_named_and_never_passes(tmp_path: Path, promised: str) -> None:
    """The promise decides the level; --level reference on such a stack proves the harness only."""
    out = tmp_path / "out"
    rc = smoke.main(["--promised-level", promised, "--level", "reference", "--device", "cpu", "--output", str(out)])
    receipt = json.loads((out / "receipt.json").read_text())
    jsonschema.validate(receipt, SCHEMA)
    assert rc == 1 and receipt["passed"] is False and receipt["proves"] == "nothing"    # graphs skipped on a CPU
    assert receipt["level"] == "reference" and receipt["promised_level"] == promised
    assert any(f"the stack promises level {promised}" in r for r in receipt["reasons"])


def test_no_level_and_no_promise_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert smoke.main(["--device", "cpu", "--output", str(tmp_path / "o")]) == 2
    assert "expected --level or the stack's promise" in capsys.readouterr().err
    assert smoke.main(["--promised-level", "kernel", "--level", "engine", "--device", "cpu",
                       "--output", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o" / "receipt.json").exists()


def test_schema_refuses_a_pass_that_is_not_a_stack_verdict(tmp_path: Path) -> None:
    example = json.loads((ROOT / "receipts" / "examples" / "kernel-smoke-flashinfer-2f3f0f6d-h200.json").read_text())
    jsonschema.validate(example, SCHEMA)
    assert example["passed"] is True and example["proves"] == "stack"
    for forged in (dict(example, proves="harness"), dict(example, checks_passed=False),
                   dict(example, jit_workspace=dict(example["jit_workspace"], gained=["x"]))):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(forged, SCHEMA)


def test_kernel_probe_names_what_is_missing() -> None:
    from october.checks.kernel.checks import probe
    fi, why = probe()
    if fi is None:
        assert why and ("flashinfer" in why)


def test_schema_rejects_a_pass_with_a_skipped_check(tmp_path: Path) -> None:
    _, receipt = _smoke(tmp_path)
    forged = dict(receipt, passed=True, reasons=[])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(forged, SCHEMA)
    missing = dict(receipt, checks=receipt["checks"][:5])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(missing, SCHEMA)
    bad_status = json.loads(json.dumps(receipt))
    bad_status["checks"][0]["status"] = "ok"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad_status, SCHEMA)
