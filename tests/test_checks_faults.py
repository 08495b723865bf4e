"""Every smoke check must be able to fail: one planted fault per check (smoke.md).

Faults are planted here, by subclassing the reference backend; production code
has no switch that breaks it.
"""

from __future__ import annotations

import dataclasses
import warnings

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch

from typing import Sequence

import pytest

from october.checks.reference import checks as reference_checks
from october.checks.reference.backend import Batch, DecodeGraph, ReferenceBackend, Request
from october.checks.reference.tiny_decoder import PagedKVCache, calibrate_v_scales
from october.checks.results import FAILED, PASSED, SKIPPED, CheckResult

SC = reference_checks.SuiteConfig()


def _scales(backend: ReferenceBackend) -> list[float]:
    return calibrate_v_scales(backend.model, reference_checks.make_prompts(backend.cfg.vocab, [32], 99)[0])


def _run(cls: type[ReferenceBackend]) -> dict[str, CheckResult]:
    backend = cls(seed=0)
    results = reference_checks.run_reference_suite(backend, _scales(backend), "calibrated", SC)
    return {r.name: r for r in results}


# ------------------------------------------------------------------- the planted faults


class Bf16ValueCache(PagedKVCache):
    def _alloc_v(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch.bfloat16, device=device)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        kc, vc = self.k[layer], self.v[layer]
        kc.view(-1, *kc.shape[2:]).index_copy_(0, slots, k.to(kc.dtype))
        vc.view(-1, *vc.shape[2:]).index_copy_(0, slots, v.to(vc.dtype))


class VStoredAsBf16(ReferenceBackend):
    def _make_cache(self) -> PagedKVCache:
        return Bf16ValueCache(self.cfg, self.device)


class ScalesLeftAtOne(ReferenceBackend):
    def load_scales(self, v_scales: Sequence[float]) -> None:
        self.events.append("scales_loaded")          # claims it, loads nothing


class MixedPrefillOffByOne(ReferenceBackend):
    """A fresh prompt batched beside decodes gets its positions shifted by one."""

    def prepare(self, reqs: Sequence[Request]) -> Batch:
        batch = super().prepare(reqs)
        if not batch.is_mixed:
            return batch
        counts = torch.bincount(batch.q_req)
        prefill_rows = (counts[batch.q_req] > 1).long()
        return dataclasses.replace(batch, positions=batch.positions + prefill_rows)


class StaleGraph(DecodeGraph):
    def load(self, batch: Batch) -> None:             # never copies the new inputs in
        pass


class GraphsWithStaleInputs(ReferenceBackend):
    graph_class = StaleGraph


class LeaksOneBlockPerRound(ReferenceBackend):
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int
                 ) -> list[tuple[list[int], list[float]]]:
        self._leak = True
        return super().generate(prompts, max_new_tokens)

    def release(self, req: Request) -> None:
        if getattr(self, "_leak", False) and req.blocks:
            req.blocks.pop()
            self._leak = False
        super().release(req)


class NanInLogits(ReferenceBackend):
    def _compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        out = super()._compute_logits(hidden)
        out[:, 5] = float("nan")
        return out


class RunsDiffer(ReferenceBackend):
    calls = 0

    def _compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        out = super()._compute_logits(hidden)
        self.calls += 1
        out[:, self.calls % self.cfg.vocab] += 100.0
        return out


# ------------------------------------------------------------------- tests


def test_healthy_reference_passes_everything_but_cuda_graphs_on_cpu() -> None:
    got = _run(ReferenceBackend)
    assert {n: r.status for n, r in got.items()} == {
        "physical_k16v8": PASSED, "calibrated_scales": PASSED, "mixed_prefill": PASSED,
        "decode_graphs": SKIPPED, "clean_memory": PASSED, "deterministic_generation": PASSED}
    assert got["physical_k16v8"].measured["state_vs_bf16"] == 0.75
    assert got["mixed_prefill"].measured["mixed_step"] == {"prefill_tokens": 13, "decode_requests": 2}
    sizes = {r["batch"] for r in got["decode_graphs"].measured["replays"]}
    assert sizes == {1, 2, 3, 4}
    assert got["decode_graphs"].measured["worst_diff_over_bound"] <= 1.0


@pytest.mark.parametrize(("backend", "check", "says"), [
    (VStoredAsBf16, "physical_k16v8", "V is torch.bfloat16"),
    (ScalesLeftAtOne, "calibrated_scales", "default scale 1.0"),
    (MixedPrefillOffByOne, "mixed_prefill", "differs from its solo run"),
    (GraphsWithStaleInputs, "decode_graphs", "differs from eager"),
    (LeaksOneBlockPerRound, "clean_memory", "free blocks"),
    (NanInLogits, "deterministic_generation", "non-finite logprobs"),
    (RunsDiffer, "deterministic_generation", "two runs differ"),
], ids=["v-bf16", "scales-1.0", "mixed-prefill", "stale-graph", "leak", "nan", "nondeterministic"])
def test_planted_fault_fails_its_check(backend: type[ReferenceBackend], check: str, says: str) -> None:
    result = _run(backend)[check]
    assert result.status == FAILED, result
    assert says in result.summary


def test_scales_loaded_after_graphs_fail() -> None:
    backend = ReferenceBackend(seed=0)
    scales = _scales(backend)
    backend.start([1.0, 1.0])
    backend.load_scales(scales)                       # too late: after the graphs
    result = reference_checks.check_scales(backend, scales, "calibrated")
    assert result.status == FAILED and "after the decode graphs" in result.summary


def test_a_check_that_crashes_is_a_failure() -> None:
    class Broken(ReferenceBackend):
        def kv_caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
            raise RuntimeError("cache vanished")

    got = _run(Broken)["physical_k16v8"]
    assert got.status == FAILED and "cache vanished" in got.summary
