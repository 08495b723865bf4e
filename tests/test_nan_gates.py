"""A NaN never passes a gate, and the reference level never proves a stack.

Python's ``max()`` keeps its first argument when a later one is NaN (``max(0.0, nan, 0.5) == 0.5``), and
``x > tol`` is False for NaN: a check written either way lets a garbage output through.  Each test plants
the fault into real torch on the CPU (no GPU here).  The kernel test stands FlashInfer's decode wrapper
in with the project's own torch reference (``checks/torch_reference.py``), because FlashInfer's kernels
need a GPU; its CUDA-graph variant returns NaN, a replay that read garbage.
"""

from __future__ import annotations

import json
import math
import types
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch

from october.checks import contract
from october.checks import results as res
from october.checks import torch_reference as ref


class _DecodeWrapper:
    """``BatchDecodeWithPagedKVCacheWrapper`` as torch (plan, then run over a paged K16/V8 cache); with
    ``use_cuda_graph`` its output is NaN."""

    def __init__(self, workspace: object, layout: str, use_cuda_graph: bool = False, **buffers: object) -> None:
        self.graph = use_cuda_graph

    def plan(self, indptr, indices, last, hq, hkv, d, page, **kw):  # type: ignore[no-untyped-def]
        self.indptr, self.indices, self.last, self.page = indptr.tolist(), indices.tolist(), last.tolist(), page

    def run(self, q, kv, v_scale=None):  # type: ignore[no-untyped-def]
        k_cache, v_cache = kv
        rows = range(len(self.last))
        lens = [(self.indptr[r + 1] - self.indptr[r] - 1) * self.page + self.last[r] for r in rows]
        tables = torch.zeros(len(lens), max(self.indptr[r + 1] - self.indptr[r] for r in rows), dtype=torch.long)
        for r in rows:
            pages = self.indices[self.indptr[r]:self.indptr[r + 1]]
            tables[r, :len(pages)] = torch.tensor(pages)
        q_req, q_pos = ref.varlen_metadata([1] * len(lens), lens)
        out = ref.paged_attention(q, k_cache, v_cache, v_scale, tables, torch.tensor(lens), q_req, q_pos)
        return (torch.full_like(out, math.nan) if self.graph else out).to(q.dtype)


def _kernel_backend():  # type: ignore[no-untyped-def]
    from october.checks.kernel.backend import KernelBackend, KernelConfig

    fi = types.SimpleNamespace(BatchDecodeWithPagedKVCacheWrapper=_DecodeWrapper)
    return KernelBackend(fi, torch.device("cpu"), 0.05, 0, KernelConfig(prompt_tokens=256, hq=4, hkv=2, d=16))


def test_kernel_graph_replays_that_are_nan_fail_the_check() -> None:
    from october.checks.kernel import decode

    r = decode._graphs(_kernel_backend())
    assert all(math.isnan(x["max_abs_diff"]) for x in r.measured["replays"])
    # on a CPU a good run is "skipped"; on CUDA the same gate says "passed"
    assert r.status == res.FAILED and math.isnan(r.measured["worst_diff_over_bound"]), (r.status, r.summary)


def test_kernel_graph_replays_that_match_are_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side of the gate: the same stand-in without NaN is what a good CPU run gives."""
    from october.checks.kernel import decode

    monkeypatch.setattr(_DecodeWrapper, "__init__", lambda self, *a, **kw: setattr(self, "graph", False))
    r = decode._graphs(_kernel_backend())
    assert r.status == res.SKIPPED and 0.0 <= r.measured["worst_diff_over_bound"] <= 1.0, (r.status, r.summary)


def _generations(logprob: float) -> list[list[tuple[list[int], list[dict[int, float]]]]]:
    run = ([11, 12, 13], [{11: logprob, 7: -3.0}, {12: logprob, 3: -3.0}, {13: logprob, 9: -3.0}])
    return [[run] * n for n in (1, 3, 5)]


@pytest.mark.parametrize("logprob, status", [(math.nan, res.FAILED), (math.inf, res.FAILED), (-0.5, res.PASSED)])
def test_engine_decode_graphs_judges_the_logprobs_finite(logprob: float, status: str) -> None:
    """NaN on both the graph and the eager run agree with each other; no other check reads the logprobs of
    these batches, so this one must refuse them."""
    from october.checks.engine.decode import _graphs

    batches = _generations(logprob)
    r = _graphs(None, batches, batches, True, False, torch.device("cuda"), {"cuda_graphs_captured": 3})
    assert r.status == status, (r.status, r.summary)
    assert r.measured["nonfinite_logprobs"] == (0 if status == res.PASSED else 2 * 9 * 3)


@pytest.mark.parametrize("in_effect, status", [([math.nan, 0.02], res.FAILED), ([0.03, 0.02], res.FAILED),
                                               ([0.01, 0.02], res.PASSED)])
def test_reference_scales_check_refuses_a_nan_scale(in_effect: list[float], status: str) -> None:
    from october.checks.reference.checks import check_scales

    backend = types.SimpleNamespace(scales_in_effect=lambda: in_effect, events=["scales_loaded", "graphs_captured"])
    assert check_scales(backend, [0.01, 0.02], "fixtures").status == status


def test_the_reference_level_proves_the_harness_whatever_is_promised() -> None:
    assert {contract.proves("reference", p) for p in (None, "reference", "kernel", "engine")} == {"harness"}


def test_a_stack_cannot_promise_the_reference_level(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from october.checks import smoke

    with pytest.raises(SystemExit) as exc:          # argparse: not one of the choices
        smoke.main(["--promised-level", "reference", "--device", "cpu", "--output", str(tmp_path / "a")])
    assert exc.value.code == 2
    info = tmp_path / "stack-info.json"
    info.write_text(json.dumps({"promised_level": "reference"}))
    assert smoke.main(["--stack-info", str(info), "--device", "cpu", "--output", str(tmp_path / "b")]) == 2
    assert "expected promised_level in ('kernel', 'engine'), found 'reference'" in capsys.readouterr().err
    assert not (tmp_path / "b" / "receipt.json").exists()


def test_the_schema_refuses_a_passed_reference_receipt() -> None:
    """The installer validates every receipt against receipts/smoke.schema.json: a passed verdict is one of
    the kernel or engine level, whatever else the receipt says (a real passed receipt from the H200, its
    level changed)."""
    import copy

    import jsonschema

    root = Path(__file__).resolve().parent.parent
    schema = json.loads((root / "receipts" / "smoke.schema.json").read_text())
    receipt = json.loads((root / "receipts" / "examples" / "h200-s13-final" / "smoke.json").read_text())
    assert receipt["passed"] is True
    jsonschema.validate(receipt, schema)
    lowered = dict(receipt, level="reference")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(lowered, schema)
    without_rule = copy.deepcopy(schema)
    del without_rule["then"]["properties"]["level"]
    jsonschema.validate(lowered, without_rule)          # the rule, and nothing else, refuses it
