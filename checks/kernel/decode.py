"""Kernel level, the decode checks: CUDA-graph replays after a re-plan to other lengths agree with eager decode and
the oracle (check 4), and decode output is finite and bitwise repeatable (check 6).

:mod:`october.checks.kernel.checks` holds the other four and runs all six.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import torch_reference as ref
from ..results import FAILED, PASSED, SKIPPED, CheckResult, verdict
from .backend import Cache, KernelBackend, _err, _tol


# ---------------------------------------------------------------- 4. changing decode graphs


def _graphs(kb: KernelBackend) -> CheckResult:
    """Capture ``run`` once per batch size, re-plan other lengths, replay; compare with eager and the oracle.

    Without CUDA there is no capture: ``run`` is called again on the static
    inputs after each re-plan (what a replay reads), reported skipped.
    """
    fi, dev, c = kb.fi, kb.device, kb.cfg
    cuda = dev.type == "cuda"
    replays: list[dict[str, Any]] = []
    ratios: list[float] = []            # each replay's differences over their bounds
    for batch, shapes in ((2, ([30, 200], [7, 64])), (4, ([1, 16, 17, 300], [90, 2, 48, 160]))):
        caches = [Cache(kb, lens, 50 + 10 * batch + i) for i, lens in enumerate(shapes)]
        blocks = max(x.blocks for x in caches)
        i32: dict[str, Any] = dict(dtype=torch.int32, device=dev)
        w = fi.BatchDecodeWithPagedKVCacheWrapper(
            kb.workspace(), "NHD", use_cuda_graph=True, paged_kv_indptr_buffer=torch.zeros(batch + 1, **i32),
            paged_kv_indices_buffer=torch.zeros(blocks, **i32), paged_kv_last_page_len_buffer=torch.zeros(batch, **i32))
        k_static = torch.zeros(blocks, c.page, c.hkv, c.d, dtype=kb.k_dtype, device=dev)
        v_static = torch.zeros(blocks, c.page, c.hkv, c.d, dtype=ref.FP8, device=dev)
        q_static = kb.q(batch, 4)
        kb.plan_decode(w, caches[0], list(range(batch)))
        w.run(q_static, (k_static, v_static), v_scale=kb.v_scale)           # warm-up
        graph, out = None, None
        if cuda:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = w.run(q_static, (k_static, v_static), v_scale=kb.v_scale)
        for i, cache in enumerate(caches):
            k_static.view(torch.uint8)[:cache.blocks].copy_(cache.k.view(torch.uint8))
            v_static.view(torch.uint8)[:cache.blocks].copy_(cache.v.view(torch.uint8))
            q_new = kb.q(batch, 7 + i)
            q_static.copy_(q_new)
            kb.plan_decode(w, cache, list(range(batch)))
            if graph is not None:
                graph.replay()
                replayed = out
            else:
                replayed = w.run(q_static, (k_static, v_static), v_scale=kb.v_scale)
            assert replayed is not None
            eager = kb.decode(cache, list(range(batch)), q_new).float()
            want = cache.decode_ref(q_new, list(range(batch)))
            diff, err = _err(replayed, eager), _err(eager, want)
            ratios += [diff / _tol(eager), err / _tol(want)]
            replays.append({"batch": batch, "kv_lens": list(cache.lens), "max_abs_diff": diff,
                            "eager_vs_reference": err})
    # Python's max() drops a NaN that is not first: a replay that read garbage must make the worst NaN
    worst = max(ratios) if all(math.isfinite(r) for r in ratios) else math.nan
    measured = {"cuda_graphs": cuda, "replays": replays, "worst_diff_over_bound": worst}
    limits = {"max_abs_diff": "2**-6 * max|eager| + 1e-3 (replay vs eager, eager vs reference)"}
    if not (ratios and worst <= 1.0):
        what = "graph replay" if cuda else "static-buffer run"
        return CheckResult("decode_graphs", FAILED, f"a {what} after re-plan differs from eager or the "
                           f"reference ({worst:.3g} x the bound)", measured, limits)
    if not cuda:
        return CheckResult("decode_graphs", SKIPPED, f"CUDA graphs need a GPU; {len(replays)} "
                           f"static-buffer runs after re-plan matched eager", measured, limits)
    return CheckResult("decode_graphs", PASSED, f"{len(replays)} CUDA graph replays match eager and the reference",
                       measured, limits)


# ---------------------------------------------------------------- 6. finite deterministic


def _deterministic(kb: KernelBackend) -> CheckResult:
    lens = [77, 300, kb.cfg.prompt_tokens]
    cache = Cache(kb, lens, 10)
    rows = list(range(len(lens)))
    q = kb.q(len(rows), 10)
    a, b = kb.decode(cache, rows, q), kb.decode(cache, rows, q)
    finite = bool(torch.isfinite(a).all())
    same = bool(torch.equal(a, b))
    err = _err(a, cache.decode_ref(q, rows))
    return verdict("deterministic_generation", finite and same, "decode output finite and bitwise repeatable",
                   f"finite={finite} identical={same}", {"finite": finite, "identical": same,
                                                         "contexts": lens, "max_abs_err": err},
                   {"identical": True, "finite": True})
