"""The kernel smoke level end to end against the stand-in FlashInfer fork, with planted faults.

``tests/fixtures/fake_flashinfer`` is a test stand-in for the mcgrof/flashinfer
fork (which cannot be installed here): each run puts it on ``PYTHONPATH`` in a
subprocess, so this process never imports ``flashinfer``.  ``FAKE_FLASHINFER_FAULT``
plants one fault per run; every kernel-level check must fail for its fault.

The CPU fault runs go through ``checks.kernel.run_kernel_level`` and
``checks.receipt`` directly (``_DRIVER``, the same calls smoke.py makes for the
kernel level); ``test_cli_runs_the_kernel_level_on_cpu`` covers the CLI route.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch

import pytest

from tests.fixtures.smoke_runs import CHECKS, run_and_read, stand_in_env
from tests.fixtures.smoke_runs import check as _check, show as _show, statuses as _status

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "fake_flashinfer"

_DRIVER = """
import sys, time, warnings
from pathlib import Path
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    import torch
from checks.kernel import run_kernel_level
from checks.receipt import build_receipt, write_receipt
from checks.results import format_table
start = time.monotonic()
device = torch.device(sys.argv[2])
results, choice = run_kernel_level(device, 0, None, None)
receipt = build_receipt(level="kernel", device=device, seed=0,
                        stack={"recipe": None, "lock_sha256": None, "forks": {}, "setup_receipt": None},
                        selection=None, model=None, scales=choice.as_json(), results=results, notes=[],
                        timings={"setup_seconds": 0.0, "checks_seconds": sum(r.seconds for r in results),
                                 "total_seconds": time.monotonic() - start})
write_receipt(Path(sys.argv[1]), receipt)
print(format_table(receipt["checks"], receipt["passed"]))
for reason in receipt["reasons"]:
    print(f"  - {reason}")
sys.exit(0 if receipt["passed"] else 1)
"""

# fault -> (the check it exists to fail, the status every check must have on a CPU)
_PASS_CPU = dict.fromkeys(CHECKS, "passed") | {"decode_graphs": "skipped"}
CPU_EXPECTED: dict[str, tuple[str | None, dict[str, str]]] = {
    "": (None, _PASS_CPU),
    "no_asym": ("*", dict.fromkeys(CHECKS, "unsupported")),
    # the output is 1/v_scale too large: every comparison with the reference fails
    "ignore_v_scale": ("calibrated_scales", _PASS_CPU | {"physical_k16v8": "failed",
                                                         "calibrated_scales": "failed",
                                                         "mixed_prefill": "failed"}),
    "stale_graph": ("decode_graphs", _PASS_CPU | {"decode_graphs": "failed"}),
    "bf16_v": ("physical_k16v8", _PASS_CPU | {"physical_k16v8": "failed"}),
    "prefill_offset": ("mixed_prefill", _PASS_CPU | {"mixed_prefill": "failed"}),
    "leak": ("clean_memory", _PASS_CPU | {"clean_memory": "failed"}),
    "nondeterministic": ("deterministic_generation", _PASS_CPU | {"deterministic_generation": "failed"}),
    "nan": ("deterministic_generation", _PASS_CPU | {"deterministic_generation": "failed"}),
}


def _env(fault: str) -> dict[str, str]:
    return stand_in_env(FAKE, "FAKE_FLASHINFER_FAULT", fault)


def _run(cmd: list[str], out: Path, fault: str, timeout: int = 240) -> dict[str, Any]:
    return run_and_read(cmd, out, _env(fault), fault, timeout)





@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One kernel-level run on the CPU per fault (two at a time: each is a torch process)."""
    base = tmp_path_factory.mktemp("kernel_cpu")

    def one(fault: str) -> dict[str, Any]:
        out = base / (fault or "none")
        return _run([sys.executable, "-c", _DRIVER, str(out), "cpu"], out, fault)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(CPU_EXPECTED, pool.map(one, CPU_EXPECTED)))


def test_no_fault_passes_everything_but_the_cpu_graph_check(cpu_runs: dict[str, dict[str, Any]]) -> None:
    import jsonschema
    run = cpu_runs[""]
    receipt = run["receipt"]
    assert receipt is not None, _show(run)
    jsonschema.validate(receipt, json.loads((ROOT / "receipts" / "smoke.schema.json").read_text()))
    assert _status(receipt) == _PASS_CPU, _show(run)
    assert run["rc"] == 1 and receipt["passed"] is False and receipt["level"] == "kernel"
    assert len(receipt["reasons"]) == 1 and receipt["reasons"][0].startswith("changing decode graphs: skipped")
    graphs = _check(receipt, "decode_graphs")
    assert graphs["measured"]["cuda_graphs"] is False and len(graphs["measured"]["replays"]) == 4
    physical = _check(receipt, "physical_k16v8")
    assert physical["measured"]["bf16_v_cache"] == "ValueError naming v_data_type"
    assert physical["measured"]["v_bytes"] * 2 == physical["measured"]["k_bytes"]
    memory = _check(receipt, "clean_memory")["measured"]
    assert len(set(memory["held_after_rounds"])) == 1 and memory["held_measure"] == "live tensor bytes"


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
    asym = _check(cpu_runs["no_asym"]["receipt"], "physical_k16v8")["summary"]
    assert "k_data_type" in asym and "not the asymmetric fork" in asym
    bf16 = _check(cpu_runs["bf16_v"]["receipt"], "physical_k16v8")["measured"]
    assert bf16["bf16_v_cache"].startswith("accepted")
    scale = _check(cpu_runs["ignore_v_scale"]["receipt"], "calibrated_scales")["measured"]
    assert scale["max_abs_err_if_scale_1"] < scale["max_abs_err"]
    stale = _check(cpu_runs["stale_graph"]["receipt"], "decode_graphs")
    assert stale["measured"]["worst_diff_over_bound"] > 1 and "static-buffer run" in stale["summary"]
    held = _check(cpu_runs["leak"]["receipt"], "clean_memory")["measured"]["held_after_rounds"]
    assert held == sorted(held) and len(set(held)) == len(held)
    assert _check(cpu_runs["nondeterministic"]["receipt"], "deterministic_generation")["measured"] == \
        {"finite": True, "identical": False}
    assert _check(cpu_runs["nan"]["receipt"], "deterministic_generation")["measured"]["finite"] is False


def test_cli_runs_the_kernel_level_on_cpu(tmp_path: Path) -> None:
    run = _run([sys.executable, "-m", "checks.smoke", "--level", "kernel", "--device", "cpu",
                "--output", str(tmp_path)], tmp_path, "")
    assert run["receipt"] is not None, _show(run)
    assert _status(run["receipt"]) == _PASS_CPU, _show(run)


# ---------------------------------------------------------------- the stand-in itself


def _load_fake() -> Any:
    """The stand-in under a private name: this process's ``flashinfer`` stays unimported."""
    spec = importlib.util.spec_from_file_location("_fake_flashinfer_under_test",
                                                  FAKE / "flashinfer" / "__init__.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_stand_in_follows_the_documented_fork_api(monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect
    monkeypatch.delenv("FAKE_FLASHINFER_FAULT", raising=False)
    fi = _load_fake()
    ws = torch.empty(1024, dtype=torch.uint8)
    for cls in (fi.BatchDecodeWithPagedKVCacheWrapper, fi.BatchPrefillWithPagedKVCacheWrapper):
        params = inspect.signature(cls.plan).parameters
        assert params["k_data_type"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["v_data_type"].kind is inspect.Parameter.KEYWORD_ONLY
    g = torch.Generator().manual_seed(0)
    k = torch.randn(4, 4, 1, 16, generator=g).to(torch.bfloat16)
    v = (torch.randn(4, 4, 1, 16, generator=g) * 8).to(torch.float8_e4m3fn)
    q = torch.randn(2, 2, 16, generator=g).to(torch.bfloat16)
    i32 = dict(dtype=torch.int32)
    indptr, indices, last = torch.tensor([0, 1, 3], **i32), torch.tensor([2, 0, 3], **i32), torch.tensor([3, 2], **i32)
    w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
    w.plan(indptr, indices, last, 2, 1, 16, 4, q_data_type=torch.bfloat16, k_data_type=torch.bfloat16,
           v_data_type=torch.float8_e4m3fn)
    one, half = w.run(q, (k, v)).float(), w.run(q, (k, v), v_scale=0.5).float()
    assert torch.allclose(half, one * 0.5, rtol=2 ** -7, atol=1e-3)           # v_scale multiplies the output
    with pytest.raises(ValueError, match="v_data_type"):
        w.run(q, (k, v.to(torch.bfloat16)))
    w.plan(indptr, indices, last, 2, 1, 16, 4, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    with pytest.raises(ValueError, match="v_data_type"):                       # v defaults to kv_data_type
        w.run(q, (k, v))
    with pytest.raises(NotImplementedError):
        w.plan(indptr, indices, last, 2, 1, 512, 4, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    # the CUDA-graph path (static buffers, padded gather) agrees with the eager per-request loop
    graph_w = fi.BatchDecodeWithPagedKVCacheWrapper(
        ws, "NHD", use_cuda_graph=True, paged_kv_indptr_buffer=torch.zeros(3, **i32),
        paged_kv_indices_buffer=torch.zeros(4, **i32), paged_kv_last_page_len_buffer=torch.zeros(2, **i32))
    graph_w.plan(indptr, indices, last, 2, 1, 16, 4, q_data_type=torch.bfloat16,
                 k_data_type=torch.bfloat16, v_data_type=torch.float8_e4m3fn)
    assert torch.allclose(graph_w.run(q, (k, v), v_scale=0.5).float(), half, rtol=2 ** -7, atol=1e-3)
    # no checks.reference in the stand-in: the comparison in checks/kernel.py is not with itself
    source = (FAKE / "flashinfer" / "__init__.py").read_text()
    assert "from checks" not in source and "import checks" not in source
    monkeypatch.setenv("FAKE_FLASHINFER_FAULT", "no_asym")
    assert "v_data_type" not in inspect.signature(fi.BatchDecodeWithPagedKVCacheWrapper.plan).parameters


# ---------------------------------------------------------------- CUDA


@pytest.mark.gpu
def test_kernel_level_passes_on_cuda_with_the_stand_in(tmp_path: Path) -> None:
    run = _run([sys.executable, "-m", "checks.smoke", "--level", "kernel", "--device", "cuda",
                "--output", str(tmp_path)], tmp_path, "")
    print(_show(run))
    receipt = run["receipt"]
    assert receipt is not None and run["rc"] == 0, _show(run)
    assert receipt["passed"] is True and _status(receipt) == dict.fromkeys(CHECKS, "passed")
    graphs = _check(receipt, "decode_graphs")["measured"]
    assert graphs["cuda_graphs"] is True and {r["batch"] for r in graphs["replays"]} == {2, 4}
    assert _check(receipt, "clean_memory")["measured"]["held_measure"] == "allocated GPU bytes"
    assert receipt["machine"]["device"].startswith("cuda") and receipt["machine"]["gpu"]


@pytest.mark.gpu
def test_stale_graph_buffers_fail_on_real_cuda_graphs(tmp_path: Path) -> None:
    run = _run([sys.executable, "-m", "checks.smoke", "--level", "kernel", "--device", "cuda",
                "--output", str(tmp_path)], tmp_path, "stale_graph")
    print(_show(run))
    receipt = run["receipt"]
    assert receipt is not None and run["rc"] == 1, _show(run)
    expected = dict.fromkeys(CHECKS, "passed") | {"decode_graphs": "failed"}
    assert receipt["passed"] is False and _status(receipt) == expected
    graphs = _check(receipt, "decode_graphs")
    assert graphs["measured"]["cuda_graphs"] is True and "graph replay" in graphs["summary"]


@pytest.mark.parametrize("what", ["other_revision", "nan"])
def test_cli_kernel_level_rejects_scales_made_for_another_model(tmp_path: Path, what: str) -> None:
    """A fixtures file that exists but is for another revision (or holds a NaN) fails calibrated
    scales; it is never silently replaced by the synthetic scale."""
    from checks.scales import scales_path, write_scales
    from tests.test_smoke_cli import REPO, REV, _manifest

    fixtures = tmp_path / "fixtures"
    rev = "0" * 40 if what == "other_revision" else REV
    write_scales(scales_path(fixtures, REPO), repo=REPO, revision=rev,
                 v_scales=[0.02, float("nan")] if what == "nan" else [0.02, 0.03])
    out = tmp_path / "out"
    run = _run([sys.executable, "-m", "checks.smoke", "--level", "kernel", "--device", "cpu", "--format", "awq",
                "--manifest", str(_manifest(tmp_path)), "--fixtures", str(fixtures), "--output", str(out)], out, "")
    assert run["receipt"] is not None, _show(run)
    assert _status(run["receipt"]) == _PASS_CPU | {"calibrated_scales": "failed"}, _show(run)
    check = _check(run["receipt"], "calibrated_scales")
    assert "the supplied scales were rejected" in check["summary"]
    assert run["receipt"]["scales"]["error"] and run["rc"] == 1
