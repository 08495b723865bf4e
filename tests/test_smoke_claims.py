"""A smoke receipt never over-claims, and its words say what was expected, found and what to do.

Each test plants what the audit found (an engine-level stack without vLLM, no calibrated scales, a
``--fixtures`` that points nowhere) and reads what the receipt, the log and the errors claim.
The engine-level stand-in stack is made as in ``tests/test_smoke_selection_e2e.py``, but its env has no
vLLM on its path, so every engine check is ``unsupported``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch

import jsonschema
import pytest

from october.checks import contract
from october.checks.receipt import build_receipt
from october.checks.results import (FAILED, PASSED, SKIPPED, UNSUPPORTED, CheckResult, Skipped, Unsupported,
                                    every_check, overall, run_check)
from october.installer.pyenv import stackenv
from october.installer.smoke.launch import SmokeOptions, load_receipt, run_smoke
from tests.test_checks_engine_fake import make_inputs
from tests.test_smoke_selection_e2e import _recipe

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "receipts" / "smoke.schema.json").read_text(encoding="utf-8"))


def _stack_without_vllm(tmp: Path) -> Path:
    """An engine-level stack (the setup receipt names the vLLM fork) whose env cannot import vllm."""
    tmp.mkdir(parents=True, exist_ok=True)
    recipe = _recipe(tmp)
    stack = tmp / "stack"
    (stack / "receipts").mkdir(parents=True)
    (stack / "env" / "bin").mkdir(parents=True)
    py = stack / "env" / "bin" / "python"
    py.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    py.chmod(0o755)
    (stack / "receipts" / "setup.json").write_text(json.dumps(
        {"recipe": {"name": "current", "path": str(recipe), "sha256": None},
         "forks": [{"name": "vllm", "commit": "7" * 40}, {"name": "flashinfer", "commit": "2" * 40}]}))
    stackenv.write(stack, stackenv.runtime_env(stack, "9.0", None))
    return stack


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("FLASHINFER_") and k not in ("FAKE_VLLM_FAULT", "KNLP_KV_FIXTURES", "PYTHONPATH")}


def _smoke(tmp: Path, with_fixtures: bool) -> tuple[int, dict, list[str], str]:
    stack = _stack_without_vllm(tmp)
    manifest, fixtures, _ = make_inputs(tmp / "in")
    out = tmp / "out"
    lines: list[str] = []
    rc = run_smoke(SmokeOptions(install=stack, format="fp16", output=out, level=None,
                                fixtures=fixtures if with_fixtures else None, manifest=manifest, device="cpu"),
                   cwd=tmp, echo=lines.append, base_env=_env())
    receipt = load_receipt(out / "receipt.json")
    jsonschema.validate(receipt, SCHEMA)
    return rc, receipt, lines, (out / "smoke.log").read_text()


# ------------------------------------------------------------------ defect 1: proves only what ran and passed

def test_an_engine_stack_without_vllm_proves_nothing(tmp_path: Path) -> None:
    rc, receipt, _, log = _smoke(tmp_path, with_fixtures=True)
    statuses = {c["name"]: c["status"] for c in receipt["checks"]}
    assert rc == 1 and receipt["passed"] is False and receipt["level"] == receipt["promised_level"] == "engine"
    assert set(statuses[n] for n in contract.CHECK_NAMES) == {UNSUPPORTED}
    assert receipt["proves"] == "nothing"
    assert "proves the stack" not in log
    assert "level engine on cpu proves nothing" in log
    # the receipt names the code that judged the stack (a resumed fleet node believes only its own code's)
    from october.installer.pyenv.builtkey import tool_code

    assert receipt["stack"]["tool_code"] == tool_code()


@pytest.mark.parametrize("level,promised,can", [("engine", "engine", "stack"), ("kernel", "kernel", "stack"),
                                                ("kernel", "engine", "kernel"), ("reference", "engine", "harness"),
                                                ("reference", None, "harness")])
@pytest.mark.parametrize("status", [FAILED, SKIPPED, UNSUPPORTED])
def test_a_check_that_did_not_pass_leaves_the_receipt_proving_nothing(level: str, promised: str | None, can: str,
                                                                      status: str) -> None:
    every = every_check(PASSED, "measured")
    kw = dict(level=level, promised_level=promised, device=torch.device("cpu"), seed=0, stack={}, selection=None,
              model=None, scales={}, timings={}, notes=[], problems=[])
    assert build_receipt(results=every, **kw)["proves"] == can          # all passed: what the level can prove
    for i in range(len(every)):
        planted = [CheckResult(r.name, status, "planted") if j == i else r for j, r in enumerate(every)]
        assert build_receipt(results=planted, **kw)["proves"] == "nothing", (i, status)
    # the extra (JIT) check counts too, and a stack verdict with a run-level problem is no stack proof
    jit = CheckResult("jit_complete", status, "planted")
    assert build_receipt(results=every + [jit], **kw)["proves"] == "nothing"
    if can == "stack":
        assert build_receipt(results=every, **(kw | {"problems": ["token counts override"]}))["proves"] == "nothing"


def test_a_diagnostic_whose_harness_disagreed_says_it_proves_nothing_in_its_reasons_too() -> None:
    """Review finding: the diagnostic's reason said "it proves the engine harness ..." beside ``proves:
    nothing``."""
    every = every_check(PASSED, "measured")
    kw = dict(level="engine", promised_level="engine", device=torch.device("cpu"), seed=0, stack={}, selection=None,
              model=None, scales={}, timings={}, notes=[], problems=[], results=every)
    for ok, says in ((True, "it proves the engine harness"), (False, "it proves nothing")):
        diag = {"caches": ["fp8_e4m3"], "proves": "the engine harness on a real engine", "harness_ok": ok}
        receipt = build_receipt(diagnostic=diag, **kw)
        assert receipt["proves"] == ("harness" if ok else "nothing") and receipt["passed"] is False
        assert any(says in r for r in receipt["reasons"]), receipt["reasons"]


def test_the_contract_says_what_a_run_proved() -> None:
    assert contract.PROOFS[-1] == contract.NOTHING == "nothing"
    assert contract.proved("engine", "engine", checks_ok=False, verdict_ok=False) == "nothing"
    assert contract.proved("engine", "engine", checks_ok=True, verdict_ok=True) == "stack"
    assert contract.proved("reference", "engine", checks_ok=True, verdict_ok=False) == "harness"
    # the scenario hunt: every check passed at the engine level with no promise given (no --stack-info) passed,
    # proving "stack" of no stack
    from october.checks.results import CheckResult as Result, overall
    from october.checks.contract import PASSED, REQUIRED_CHECKS

    all_passed = [Result(name=n, status=PASSED, summary="ok") for n, _ in REQUIRED_CHECKS]
    assert overall(all_passed, "engine", "engine") == (True, [])
    ok, reasons = overall(all_passed, "engine", None)
    assert not ok and "no stack promise was given" in reasons[0], reasons


# ------------------------------------------------------------------ defect 2: no doubled status in a summary

def test_a_summary_never_repeats_its_status(tmp_path: Path) -> None:
    def unsupported() -> CheckResult:
        raise Unsupported("the fork lacks X")

    def skipped() -> CheckResult:
        raise Skipped("no GPU")

    results = [run_check("physical_k16v8", unsupported), run_check("calibrated_scales", skipped)]
    assert [r.summary for r in results] == ["the fork lacks X", "no GPU"]
    _, reasons = overall(results)
    assert "physical K16/V8: unsupported: the fork lacks X" in reasons
    assert "calibrated scales: skipped: no GPU" in reasons
    # end to end: the launch's reasons and log, on both paths the audit saw doubled
    for with_fixtures in (True, False):
        _, receipt, lines, log = _smoke(tmp_path / str(with_fixtures), with_fixtures)
        text = "\n".join(lines + receipt["reasons"] + [c["summary"] for c in receipt["checks"]]) + log
        for status in (SKIPPED, UNSUPPORTED, FAILED, PASSED):
            assert f"{status}: {status}:" not in text
        for c in receipt["checks"]:
            assert not c["summary"].startswith(f"{c['status']}:"), c
    # the kernel level's probe (no FlashInfer here): every check unsupported, the reason said once
    from october.checks import smoke
    out = tmp_path / "kernel"
    assert smoke.main(["--promised-level", "kernel", "--device", "cpu", "--output", str(out)]) == 1
    receipt = json.loads((out / "receipt.json").read_text())
    assert {c["status"] for c in receipt["checks"]} == {UNSUPPORTED}
    assert not any(c["summary"].startswith("unsupported") for c in receipt["checks"])
    assert not any("unsupported: unsupported:" in r for r in receipt["reasons"])


# ------------------------------------------------------------------ defect 3: missing scales say what to do

def test_missing_calibrated_scales_say_what_to_do(tmp_path: Path) -> None:
    rc, receipt, lines, _ = _smoke(tmp_path, with_fixtures=False)
    scales = next(c for c in receipt["checks"] if c["name"] == "calibrated_scales")
    assert rc == 1 and scales["status"] == FAILED
    summary = scales["summary"]
    assert "expected calibrated scales in --fixtures or $KNLP_KV_FIXTURES, found neither" in summary
    # the fix: where the file goes and how to name it, in the summary the receipt and the reasons carry
    assert "pass --fixtures DIR" in summary and "fake-org__Tiny-K16V8.kv_scales.json" in summary
    assert any("pass --fixtures DIR" in r for r in receipt["reasons"])
    assert receipt["scales"]["error"] and "pass --fixtures DIR" in receipt["scales"]["error"]


# ------------------------------------------------------------------ defect 4: a truthful hint for --fixtures nope

@pytest.mark.parametrize("given", ["option", "env"])
def test_a_fixtures_dir_that_is_not_there_has_a_truthful_fix(tmp_path: Path, given: str) -> None:
    from october.installer.core.errors import FileSystemError
    from october.installer.download.plan import fixtures_dir
    nope = tmp_path / "nope"
    with pytest.raises(FileSystemError) as err:
        fixtures_dir(nope if given == "option" else None, {} if given == "option" else {"KNLP_KV_FIXTURES": str(nope)})
    text = str(err.value)
    assert "unset it to run without calibrated scales" not in text      # a smoke without scales never passes
    assert "<org>__<name>.kv_scales.json" in text
    assert "cannot pass" in text


@pytest.mark.parametrize("plant", ["changed", "extra-shard", "gone", "tokenizer-file"])
def test_a_model_copy_changed_since_its_download_is_refused_before_the_engine(tmp_path: Path, plant: str) -> None:
    """The scenario hunt: smoke checked the manifest's schema, repo and revision, never the files: a shard
    changed after ``current download`` verified it was loaded, and the receipt named the pinned model.  Now the
    copy is hashed again against the manifest (and a file it does not list beside them refused) before the
    engine starts; nothing is moved, no receipt is written."""
    from october.installer.core.errors import DownloadError

    stack = _stack_without_vllm(tmp_path)
    manifest, fixtures, model = make_inputs(tmp_path / "in")
    if plant == "changed":
        (model / "config.json").write_text((model / "config.json").read_text() + " ")
    elif plant == "extra-shard":
        doc = json.loads(manifest.read_text())
        doc["patterns"] = ["config.json", "*.safetensors"]
        manifest.write_text(json.dumps(doc))
        (model / "model-00009-of-00009.safetensors").write_bytes(b"\0" * 64)
    elif plant == "tokenizer-file":           # a folder the tool downloaded into holds nothing unlisted
        (model / ".october").mkdir()
        (model / "special_tokens_map.json").write_text("{}")
    else:
        (model / "config.json").unlink()
    out = tmp_path / "out"
    with pytest.raises(DownloadError) as ei:
        run_smoke(SmokeOptions(install=stack, format="fp16", output=out, level=None, fixtures=fixtures,
                               manifest=manifest, device="cpu"), cwd=tmp_path, echo=lambda _: None, base_env=_env())
    words = {"changed": "failed verification", "extra-shard": "model-00009-of-00009.safetensors",
             "gone": "failed verification", "tokenizer-file": "special_tokens_map.json"}[plant]
    extra = plant in ("extra-shard", "tokenizer-file")
    assert words in str(ei.value) and ("move them out" if extra else "current download") in \
        (ei.value.fix or ""), str(ei.value)
    assert not (out / "receipt.json").exists()


def test_a_kernel_smoke_does_not_hash_the_model_it_never_loads(tmp_path: Path) -> None:
    """The review: the model was hashed (16 GB: ~22 s) whenever a manifest was found, at levels that never load
    it, and a kernel smoke failed when the model folder had moved."""
    import shutil

    stack = _stack_without_vllm(tmp_path)
    manifest, fixtures, model = make_inputs(tmp_path / "in")
    shutil.rmtree(model)
    out = tmp_path / "out"
    run_smoke(SmokeOptions(install=stack, format="fp16", output=out, level="kernel", fixtures=fixtures,
                           manifest=manifest, device="cpu"), cwd=tmp_path, echo=lambda _: None, base_env=_env())
    assert load_receipt(out / "receipt.json")["level"] == "kernel"
