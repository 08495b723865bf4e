"""The six smoke checks on the reference backend (see shared/reference/smoke.md).

Each check is a function over a started :class:`~october.checks.reference.backend.ReferenceBackend`
and returns what it measured and the limits it held that to.  Tests plant
faults by subclassing the backend; each check must fail for its fault.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from .. import torch_reference as ref
from .backend import ReferenceBackend, Request
from ..memory import held_bytes, sample_rounds
from ..results import PASSED, SKIPPED, CheckResult, in_order, run_checks, verdict

SCALE_RTOL = 1e-6           # scales are stored as float32
K_BYTES, V_BYTES, SCALE_BYTES = 2, 1, 4


@dataclass(frozen=True)
class SuiteConfig:
    max_new_tokens: int = 6
    rounds: int = 3
    seed: int = 0
    logprob_atol: float = 1e-4      # same math, different batch composition: fp32 rounding only
    graph_rtol: float = 1e-4


def make_prompts(vocab: int, lengths: Sequence[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed + 1)
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in lengths]


# ---------------------------------------------------------------- 1. physical K16/V8


def check_physical(backend: ReferenceBackend, sc: SuiteConfig) -> CheckResult:
    caches = backend.kv_caches()
    problems: list[str] = []
    for i, (k, v) in enumerate(caches):
        if k.dtype not in ref.K_DTYPES:
            problems.append(f"layer {i}: K is {k.dtype}, expected float16/bfloat16")
        if v.dtype != ref.FP8:
            problems.append(f"layer {i}: V is {v.dtype}, expected float8_e4m3fn")
        if k.dim() != 4 or k.shape != v.shape:
            problems.append(f"layer {i}: K {tuple(k.shape)} / V {tuple(v.shape)}, expected equal 4-D NHD")
        if v.nbytes * 2 != k.nbytes:
            problems.append(f"layer {i}: V {v.nbytes} bytes, expected K/2 = {k.nbytes // 2}")
    k_bytes = sum(k.nbytes for k, _ in caches)
    v_bytes = sum(v.nbytes for _, v in caches)
    # The tensors read must be the live cache: a generation must change both.
    before = [(k.view(torch.uint8).count_nonzero().item(), v.view(torch.uint8).count_nonzero().item())
              for k, v in caches[:1]]
    backend.generate(make_prompts(backend.cfg.vocab, [5], sc.seed), 2)
    after = [(k.view(torch.uint8).count_nonzero().item(), v.view(torch.uint8).count_nonzero().item())
             for k, v in caches[:1]]
    if not caches or before == after:
        problems.append("the cache tensors did not change during generation (not the live cache)")
    ratio = (k_bytes + v_bytes) / (2 * k_bytes) if k_bytes else None
    measured = {"layers": len(caches),
                "k_dtype": str(caches[0][0].dtype) if caches else None,
                "v_dtype": str(caches[0][1].dtype) if caches else None,
                "layer_shape": list(caches[0][0].shape) if caches else None,
                "k_bytes": k_bytes, "v_bytes": v_bytes, "state_vs_bf16": ratio,
                "problems": problems}
    limits = {"k_dtype": ["torch.float16", "torch.bfloat16"], "v_dtype": "torch.float8_e4m3fn",
              "v_bytes": "k_bytes / 2", "state_vs_bf16": 0.75}
    return verdict("physical_k16v8", not problems,
                   f"K {measured['k_dtype']}, V {measured['v_dtype']}, state {ratio:.3f}x BF16"
                   if ratio else "no cache", "; ".join(problems[:3]), measured, limits)


# ---------------------------------------------------------------- 2. calibrated scales


def check_scales(backend: ReferenceBackend, supplied: Sequence[float], source: str) -> CheckResult:
    in_effect = backend.scales_in_effect()
    problems: list[str] = []
    if len(in_effect) != len(supplied):
        problems.append(f"{len(in_effect)} layers have scales, {len(supplied)} were supplied")
    rel = [abs(e - s) / abs(s) for e, s in zip(in_effect, supplied)]
    bad = [i for i, r in enumerate(rel) if not r <= SCALE_RTOL]       # NaN is bad
    at_default = [i for i, (e, s) in enumerate(zip(in_effect, supplied)) if e == 1.0 and s != 1.0]
    if bad:
        problems.append(f"layers {bad[:8]} differ from the supplied scales")
    if at_default:
        problems.append(f"layers {at_default[:8]} still use the default scale 1.0")
    events = list(backend.events)
    loads = [i for i, e in enumerate(events) if e == "scales_loaded"]
    loaded = loads[-1] if loads else None           # the load whose values are in effect
    graphs = next((i for i, e in enumerate(events) if e.startswith("graphs_")), None)
    if loaded is None:
        problems.append("scales were never loaded")
    elif graphs is not None and loaded > graphs:
        problems.append("scales were loaded after the decode graphs were built")
    measured = {"source": source, "supplied": list(supplied), "in_effect": in_effect,
                "max_rel_diff": max(rel) if rel else None, "layers_at_default": at_default,
                "events": events}
    limits = {"max_rel_diff": SCALE_RTOL, "order": "scales_loaded before graph capture"}
    return verdict("calibrated_scales", not problems,
                   f"{len(supplied)} layer scales in effect ({source})", "; ".join(problems),
                   measured, limits)


# ---------------------------------------------------------------- 3. mixed fresh prefill


def check_mixed_prefill(backend: ReferenceBackend, sc: SuiteConfig) -> CheckResult:
    pa, pb, pc = make_prompts(backend.cfg.vocab, [7, 10, 13], sc.seed + 3)
    n = sc.max_new_tokens
    solo_tokens, solo_lps = backend.generate([pc], n)[0]
    a, b = backend.add_request(pa), backend.add_request(pb)
    reqs: list[Request] = [a, b]
    try:
        for _ in range(3):                      # A and B are decoding...
            backend.sample(reqs, backend.step(reqs))
        c = backend.add_request(pc)             # ...when C's whole prompt arrives
        reqs.append(c)
        batch = backend.prepare(reqs)
        logits = backend.run_eager(batch)
        backend.commit(reqs)
        backend.sample(reqs, logits)
        for _ in range(n - 1):
            backend.sample(reqs, backend.step(reqs))
        mixed_tokens, mixed_lps = c.generated, list(c.logprobs)
    finally:
        for r in reqs:
            backend.release(r)
    diffs = [abs(x - y) for x, y in zip(mixed_lps, solo_lps)]
    diff = max(diffs) if all(math.isfinite(d) for d in diffs) else math.nan     # max() drops a NaN not first
    same_step = batch.is_mixed and batch.prefill_tokens == len(pc) and batch.decode_requests == 2
    ok = same_step and mixed_tokens == solo_tokens and diff <= sc.logprob_atol
    measured = {"mixed_step": {"prefill_tokens": batch.prefill_tokens,
                               "decode_requests": batch.decode_requests},
                "solo_tokens": solo_tokens, "mixed_tokens": mixed_tokens,
                "max_logprob_diff": diff}
    limits = {"mixed_step": {"prefill_tokens": len(pc), "decode_requests": 2},
              "tokens": "identical to the solo run", "max_logprob_diff": sc.logprob_atol}
    why = ("the fresh prompt was not admitted in the same step as the decodes" if not same_step
           else f"fresh prefill in a mixed step differs from its solo run "
                f"(tokens {'equal' if mixed_tokens == solo_tokens else 'differ'}, "
                f"max logprob diff {diff:.3g})")
    return verdict("mixed_prefill", ok,
                   f"{len(pc)}-token prefill beside 2 decodes matches solo (diff {diff:.2g})",
                   why, measured, limits)


# ---------------------------------------------------------------- 4. changing decode graphs

_SCHEDULE = ([0], [0, 1, 2], [1, 3], [0, 1, 2, 3], [2], [3, 0], [1, 2, 3])


def check_decode_graphs(backend: ReferenceBackend, sc: SuiteConfig) -> CheckResult:
    if not backend.graphs:
        return CheckResult("decode_graphs", "failed", "no decode graphs were built at start")
    prompts = make_prompts(backend.cfg.vocab, [5, 9, 14, 3], sc.seed + 5)
    reqs = [backend.add_request(p) for p in prompts]
    replays: list[dict[str, object]] = []
    sizes: list[int] = []
    worst = 0.0
    problems: list[str] = []
    try:
        backend.sample(reqs, backend.step(reqs))            # prefill, eager
        for idx in _SCHEDULE:
            rs = [reqs[i] for i in idx]
            batch = backend.prepare(rs)
            graph = backend.graph_for(batch)
            if graph is None:
                problems.append(f"no decode graph for batch size {len(rs)}")
                backend.commit(rs)
                continue
            eager = backend.run_eager(batch)
            graphed = backend.run_graph(batch)
            diff = float((eager - graphed).abs().max())
            bound = sc.graph_rtol * (1.0 + float(eager.abs().max()))
            worst = max(worst, diff / bound)
            sizes.append(len(rs))
            replays.append({"batch": len(rs), "graph_size": graph.batch_size,
                            "kv_lens": batch.kv_lens.tolist(), "max_abs_diff": diff})
            if not diff <= bound:
                problems.append(f"replay of batch {len(rs)} (kv_lens {batch.kv_lens.tolist()}) "
                                f"differs from eager by {diff:.3g} > {bound:.3g}")
            backend.commit(rs)
            backend.sample(rs, eager)
    finally:
        for r in reqs:
            backend.release(r)
    measured = {"cuda_graphs": backend.uses_cuda_graphs, "graph_sizes": sorted(backend.graphs),
                "replays": replays, "worst_diff_over_bound": worst}
    limits = {"max_abs_diff": f"{sc.graph_rtol} * (1 + max|eager logit|)",
              "batch_sizes": sorted({len(i) for i in _SCHEDULE})}
    if problems:
        return CheckResult("decode_graphs", "failed", "; ".join(problems[:2]), measured, limits)
    if not backend.uses_cuda_graphs:
        return CheckResult("decode_graphs", SKIPPED,
                           f"CUDA graphs need a GPU; {len(replays)} static-buffer replays matched eager",
                           measured, limits)
    return CheckResult("decode_graphs", PASSED,
                       f"{len(replays)} CUDA graph replays, batch sizes "
                       f"{sorted(set(sizes))}, match eager", measured, limits)


# ---------------------------------------------------------------- 5. clean memory


def expected_cache_bytes(backend: ReferenceBackend) -> int:
    c = backend.cfg
    per_token = c.layers * c.kv_heads * c.head_dim * (K_BYTES + V_BYTES)
    return c.num_blocks * c.block_size * per_token + c.layers * SCALE_BYTES


def _gpu_allocated(backend: ReferenceBackend) -> int | None:
    return held_bytes(backend.device) if backend.device.type == "cuda" else None


def check_clean_memory(backend: ReferenceBackend, sc: SuiteConfig) -> CheckResult:
    expected = expected_cache_bytes(backend)
    actual = backend.cache.nbytes()
    prompts = make_prompts(backend.cfg.vocab, [6, 11, 4], sc.seed + 7)
    free_start = backend.allocator.num_free
    samples = sample_rounds(lambda: backend.generate(prompts, sc.max_new_tokens),
                            lambda: (backend.allocator.num_free, _gpu_allocated(backend)), sc.rounds)
    free_after, gpu = [f for f, _ in samples], [g for _, g in samples]
    problems = []
    if actual != expected:
        problems.append(f"cache holds {actual} bytes, formula gives {expected}")
    if any(f != free_start for f in free_after):
        problems.append(f"free blocks {free_start} -> {free_after} across rounds")
    if gpu[0] is not None and len(set(gpu)) != 1:
        problems.append(f"allocated GPU bytes changed across rounds: {gpu}")
    c = backend.cfg
    measured = {"cache_bytes": actual, "expected_bytes": expected,
                "free_blocks_start": free_start, "free_blocks_after_rounds": free_after,
                "gpu_allocated_after_rounds": gpu if gpu[0] is not None else None}
    limits = {"formula": f"blocks {c.num_blocks} x block_size {c.block_size} x layers {c.layers}"
                         f" x kv_heads {c.kv_heads} x head_dim {c.head_dim} x (2 + 1) + layers x 4",
              "free_blocks": "unchanged after every round",
              "gpu_allocated": "unchanged after the warm-up round (CUDA only)"}
    what = "GPU memory steady" if gpu[0] is not None else "GPU memory not measured on cpu"
    return verdict("clean_memory", not problems,
                   f"{actual} cache bytes as expected, blocks returned over {sc.rounds + 1} rounds; "
                   f"{what}", "; ".join(problems), measured, limits)


# ---------------------------------------------------------------- 6. finite deterministic


def check_deterministic(backend: ReferenceBackend, sc: SuiteConfig) -> CheckResult:
    prompt = make_prompts(backend.cfg.vocab, [9], sc.seed + 11)[0]
    t1, l1 = backend.generate([prompt], sc.max_new_tokens)[0]
    t2, l2 = backend.generate([prompt], sc.max_new_tokens)[0]
    nonfinite = sum(1 for x in l1 + l2 if not math.isfinite(x))
    diff = max((abs(x - y) for x, y in zip(l1, l2)), default=0.0)
    problems = []
    if not t1:
        problems.append("empty answer")
    if nonfinite:
        problems.append(f"{nonfinite} non-finite logprobs")
    if t1 != t2:
        problems.append(f"two runs differ: {t1} vs {t2}")
    measured = {"tokens": t1, "tokens_second_run": t2, "nonfinite_logprobs": nonfinite,
                "max_logprob_diff": diff if math.isfinite(diff) else str(diff)}
    limits = {"tokens": f"{sc.max_new_tokens} greedy tokens, identical across runs",
              "logprobs": "all finite"}
    return verdict("deterministic_generation", not problems,
                   f"{len(t1)} tokens, finite logprobs, identical twice", "; ".join(problems),
                   measured, limits)


# ---------------------------------------------------------------- the suite


def run_reference_suite(backend: ReferenceBackend, v_scales: Sequence[float], source: str,
                        sc: SuiteConfig) -> list[CheckResult]:
    backend.start(v_scales)
    return in_order(run_checks({
        "physical_k16v8": lambda: check_physical(backend, sc),
        "calibrated_scales": lambda: check_scales(backend, v_scales, source),
        "mixed_prefill": lambda: check_mixed_prefill(backend, sc),
        "decode_graphs": lambda: check_decode_graphs(backend, sc),
        "clean_memory": lambda: check_clean_memory(backend, sc),
        "deterministic_generation": lambda: check_deterministic(backend, sc)}))
