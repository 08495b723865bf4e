"""Engine level, the decode checks: one prompt twice gives the same finite answer, and the CUDA-graph engine
decodes each batch of GRAPH_BATCHES as the enforce_eager engine does (a divergence only at a near tie).

:mod:`october.checks.engine.driver` runs both engines and calls these, as it calls
:mod:`october.checks.engine.checks` for the cache and the oracles.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from . import oracles as oracle
from .vllm_surface import PROMPTS, _generate, _Hooks
from ..results import FAILED, PASSED, SKIPPED, CheckResult, verdict


GRAPH_BATCHES = (1, 3, 5)


def _deterministic(llm: Any) -> CheckResult:
    (t1, l1), = _generate(llm, [PROMPTS[0]])
    (t2, l2), = _generate(llm, [PROMPTS[0]])
    nonfinite = sum(1 for x in l1 + l2 if not math.isfinite(x))
    problems = []
    if not t1:
        problems.append("empty answer")
    if nonfinite or len(l1) != len(t1):
        problems.append(f"{nonfinite} non-finite logprobs ({len(l1)} for {len(t1)} tokens)")
    if t1 != t2:
        problems.append("two runs of the same prompt gave different tokens")
    return verdict("deterministic_generation", not problems, f"{len(t1)} tokens, finite, identical twice",
                   "; ".join(problems), {"tokens": t1, "tokens_second_run": t2, "nonfinite_logprobs": nonfinite},
                   {"tokens": "identical across runs", "logprobs": "all finite"})


GRAPH_LOGPROB_MAX = 0.1    # nats: the chosen tokens' logprobs, graph against eager, until a divergence


GRAPH_NEAR_TIE = 0.1       # nats: eager's top-1 minus top-2 where the graph run may take the other token


def _graph_agrees(g: oracle.Generation, e: oracle.Generation) -> tuple[bool, dict[str, Any]]:
    """The graph run of one prompt against its eager run: the same greedy tokens with logprobs within
    GRAPH_LOGPROB_MAX, up to a divergence that only a near tie (eager's top-2 margin <= GRAPH_NEAR_TIE)
    allows.  Measured on the H200: a random-weight model's nearly flat logits tie often, and the padded
    graph batch (3 -> 4, 5 -> 8) changes FlashInfer's split of the reduction."""
    (tg, lg), (te, le) = g, e
    n = min(len(tg), len(te))
    first = next((i for i in range(n) if tg[i] != te[i]), n)
    pairs = [(lg[i].get(tg[i], math.nan), le[i].get(te[i], math.nan)) for i in range(min(first, len(lg), len(le)))]
    # at the divergence the contexts are still the same: every token both report is compared there
    shared = oracle.at_divergence(lg[first], le[first]) if first < min(n, len(lg), len(le)) else []
    pairs += shared
    # both non-finite at one place is the same output (finiteness is judged by _graphs); one side only is not
    diffs = [abs(a - b) if math.isfinite(a) and math.isfinite(b) else 0.0 if not (math.isfinite(a) or math.isfinite(b))
             else math.inf for a, b in pairs]
    finite = all(math.isfinite(d) for d in diffs)
    worst = max(diffs, default=0.0)
    margin = None
    if first < n and first < len(le):
        top = sorted(le[first].values(), reverse=True)
        margin = top[0] - top[1] if len(top) > 1 else None
    ok = bool(tg) and finite and worst <= GRAPH_LOGPROB_MAX and \
        (first == n and len(tg) == len(te) or first < n and margin is not None and margin <= GRAPH_NEAR_TIE and bool(shared))
    return ok, {"agree_until": first, "tokens": [len(tg), len(te)], "logprob_diff_max": worst if finite else None,
                "divergence_margin": margin, "compared_at_divergence": len(shared)}


def _graphs(h: _Hooks, graphed: list[list[oracle.Generation]] | BaseException,
            eager: list[list[oracle.Generation]] | BaseException,
            graph_captured: bool, eager_captured: bool, device: torch.device,
            graphs: dict[str, Any] | None = None) -> CheckResult:
    """``graphs``: what the graph engine's capture really did (:class:`_Hooks`: the CUDA graphs torch
    began, vLLM's cudagraph_mode); on CUDA a capture_model that began none captured nothing."""
    if isinstance(graphed, BaseException):
        raise graphed
    if isinstance(eager, BaseException):
        raise eager
    # one batch per size, each with that many prompts in both runs: an empty or short list compares nothing
    runs = [(n, graphed[i] if i < len(graphed) else [], eager[i] if i < len(eager) else [])
            for i, n in enumerate(GRAPH_BATCHES)]
    pairs = [[_graph_agrees(g, e) for g, e in zip(gb, eb)] +
             ([(False, {"prompts": f"{len(gb)} graphed, {len(eb)} eager, expected {n}"})]
              if not len(gb) == len(eb) == n else [])
             for n, gb, eb in runs]
    same = [all(ok for ok, _ in batch) for batch in pairs] + \
        ([False] if len(graphed) != len(GRAPH_BATCHES) or len(eager) != len(GRAPH_BATCHES) else [])
    cuda = device.type == "cuda"
    measured = {"batches": list(GRAPH_BATCHES), "match": same,
                "exact": [all(g[0] == e[0] for g, e in zip(gb, eb)) for gb, eb in zip(graphed, eager)],
                "per_prompt": [[m for _, m in batch] for batch in pairs],
                "graphs_captured": graph_captured,
                "eager_engine_captured": eager_captured, **(graphs or {})}
    began = int((graphs or {}).get("cuda_graphs_captured") or 0)
    measured["cuda_graphs"] = cuda and graph_captured and began > 0
    limits = {"tokens": f"identical to enforce_eager, or diverging only where eager's top-2 margin <= "
                        f"{GRAPH_NEAR_TIE} nats (a near tie: the graph's padded batch may reduce in another order)",
              "logprob_diff_max": GRAPH_LOGPROB_MAX, "graphs_captured": True, "eager_engine_captured": False,
              "cuda_graphs_captured": ">= 1 on CUDA"}
    if not graph_captured or eager_captured:
        return CheckResult("decode_graphs", FAILED, "the graph engine captured no decode graphs"
                           if not graph_captured else "the enforce_eager engine captured graphs too",
                           measured, limits)
    if cuda and began == 0:
        mode = (graphs or {}).get("cudagraph_mode")
        return CheckResult("decode_graphs", FAILED, "capture_model ran but captured no CUDA graph (cudagraph_mode "
                           f"{mode or 'unknown'}): decode ran eagerly, so graph and eager were the same path",
                           measured, limits)
    # _graph_agrees takes NaN on both runs as the same output; no other check reads these prompts' logprobs
    # (the determinism check runs PROMPTS[0] alone, mixed_prefill compares tokens): judged here
    nonfinite = sum(1 for runs in (graphed, eager) for batch in runs for toks, lps in batch
                    for t, d in zip(toks, lps) if not math.isfinite(d.get(t, math.nan)))
    measured["nonfinite_logprobs"] = nonfinite
    if nonfinite:
        return CheckResult("decode_graphs", FAILED, f"{nonfinite} chosen-token logprobs of the graph and eager "
                           f"runs are not finite (or missing)", measured, limits)
    if not all(same):
        bad = [n for n, s in zip(GRAPH_BATCHES, same) if not s]
        where = f"at batches {bad}" if bad else (f"in its batches ({len(graphed)} graphed, {len(eager)} eager, "
                                                 f"expected {len(GRAPH_BATCHES)})")
        return CheckResult("decode_graphs", FAILED, f"{'CUDA graph' if cuda else 'graph-path'} decode "
                           f"differs from eager {where}", measured, limits)
    if not cuda:
        return CheckResult("decode_graphs", SKIPPED, "CUDA graphs need a GPU; the engine's graph path "
                           f"matched eager at batches {list(GRAPH_BATCHES)}", measured, limits)
    mode = (graphs or {}).get("cudagraph_mode")
    return CheckResult("decode_graphs", PASSED, f"CUDA graph decode at batches {list(GRAPH_BATCHES)} "
                       f"matches eager ({began} graphs captured{f', cudagraph_mode {mode}' if mode else ''})",
                       measured, limits)
