"""Kernel level: the FlashInfer fork's asymmetric decode (and the pair's fresh-prefill route) vs the torch reference.

The API is probed first with :mod:`october.checks.flashinfer_asym` (the function the jit builder
uses): a FlashInfer whose decode ``plan`` does not accept ``k_data_type`` /
``v_data_type`` is ``unsupported``, never a crash.  Data are random, shaped as
Qwen3-8B's attention (32 query heads, 8 KV heads, head dim 128, page 16), with
contexts up to the recipe's ``[smoke] prompt_tokens``; q, K and the output are in the
selection's compute dtype (``KernelConfig.compute_dtype``: bfloat16 or float16, as the engine
runs it), V float8_e4m3fn with one per-layer scale, NHD layout.

The oracle never reads what the stack wrote or computed: it is fp32 torch math
on the *true* K/V the harness generated, with V quantized and dequantized by
:mod:`october.checks.torch_reference` itself (the dequantized-V reference); fresh-prefill
outputs are compared with full-precision causal attention on the in-flight K/V.
The cache is written by :attr:`KernelBackend.write` (the reference writer; the
20260702 FlashInfer series has no asymmetric append), so a writer storing V with
a wrong scale is caught by the same oracle.  Which JIT module actually ran is
read from the process's memory map (``/proc/self/maps``), not from FlashInfer.

The data, the cache, FlashInfer's wrappers and the oracle live in :mod:`october.checks.kernel.backend`;
this module holds four of the six checks (:mod:`october.checks.kernel.decode` the decode graphs and the
determinism) and the run driver (:func:`run_kernel_level`).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable

import torch

from .. import flashinfer_asym
from ..contract import sha256_file
from ..inputs import Manifest, ScaleChoice, one_line
from .backend import (
    Cache,
    KernelBackend,
    KernelConfig,
    _cumsum,
    _err,
    _tol,
    attend,
    loaded_modules,
    probe,
)
from .decode import _deterministic, _graphs
from ..memory import held_bytes, sample_rounds
from ..scales import DISTINCT_FROM_ONE, near_one, telling_scale
from ..torch_reference import SLOPE_BOUND
from ..torch_reference import slope as _slope
from ..torch_reference import slope_ok as _slope_ok
from ..results import (
    FAILED,
    UNSUPPORTED,
    CheckResult,
    Unsupported,
    every_check,
    in_order,
    run_checks,
    verdict,
)

STORED_MIN = 1 / 1.5        # stored V amax / 448 must reach this (a scale 2x too large gives ~0.45)
SATURATED_MAX = 1e-4        # and at most this fraction saturated (a scale 2x too small clamps ~0.3%)
ROUTE_RAGGED = "fresh prompts: {c} ragged prefill (fa2) on in-flight K/V, K16/V8 written; asymmetric decode"
ROUTE_PAGED = "fresh prompts: asymmetric paged prefill over the K16/V8 cache they wrote"


# ---------------------------------------------------------------- 1. physical K16/V8


def _module_facts(kb: KernelBackend) -> tuple[dict[str, Any], list[str]]:
    """Which decode module ran (from the memory map) and whether the jit step built it."""
    mods = loaded_modules()
    if mods is None:
        return {"loaded_modules": None}, ["cannot read /proc/self/maps: which kernel ran is unknown"]
    names = [Path(p).stem for p in mods]
    decode = [(p, n) for p, n in zip(mods, names) if n.startswith("batch_decode_")]
    asym_decode = [(p, n) for p, n in decode if f"_dtype_k_{kb.short}_dtype_v_e4m3_" in n]
    symmetric = [n for _, n in decode if "_dtype_kv_" in n]
    problems = []
    if not asym_decode:
        problems.append(f"no K {kb.short} / V e4m3 decode module was loaded (decode modules: {[n for _, n in decode]})")
    if symmetric:
        problems.append(f"a symmetric decode module ran: {symmetric[0]} (V upcast, not K16/V8)")
    facts: dict[str, Any] = {"loaded_modules": names, "decode_module": asym_decode[0][1] if asym_decode else None}
    if asym_decode:
        path, uri = asym_decode[0]
        sha = sha256_file(path)
        facts["decode_module_sha256"] = sha
        record = kb.cfg.jit_record
        if record is None:
            facts["jit_record"] = "not given (no setup receipt): module hash not compared"
        elif record.get(uri) != sha:
            problems.append(f"the loaded {uri[:40]}... has sha256 {sha[:12]}, the jit step recorded "
                            f"{(record.get(uri) or 'no such module')[:12]} (a stale or foreign module)")
        else:
            facts["jit_record"] = "sha256 equals the jit step's record"
    return facts, problems


def _physical(kb: KernelBackend) -> CheckResult:
    c = kb.short
    lens = kb.cfg.decode_lens()
    cache = Cache(kb, lens, 1)
    rows = list(range(len(lens)))
    q = kb.q(len(rows), 1)
    out = kb.decode(cache, rows, q)
    want = cache.decode_ref(q, rows)
    err = _err(out, want)
    w = kb.fi.BatchDecodeWithPagedKVCacheWrapper(kb.workspace(), "NHD")
    kb.plan_decode(w, cache, rows)
    try:
        w.run(q, (cache.k, cache.v.to(kb.dtype)), v_scale=kb.v_scale)
        refusal = f"accepted a {c} V cache planned as fp8"
    except ValueError as exc:
        refusal = "ValueError naming v_data_type" if "v_data_type" in str(exc) else \
            f"ValueError not naming v_data_type: {exc}"
    facts, problems = _module_facts(kb)
    if refusal != "ValueError naming v_data_type":
        problems.append(f"{c} V cache: {refusal}")
    if not err <= _tol(want):
        problems.append(f"decode differs from the reference (err {err:.3g} > {_tol(want):.3g})")
    slope = _slope(out, want)
    if not _slope_ok(slope):
        problems.append(f"decode differs from the reference by a systematic scale (slope {slope:.5f}, "
                        f"|slope - 1| > {SLOPE_BOUND})")
    m = {"contexts": lens, "decode_max_abs_err": err, "decode_slope": slope,
         "reference_max_abs": float(want.abs().max()),
         f"{c}_v_cache": refusal, "compute_dtype": kb.cfg.compute_dtype, **facts}
    return verdict("physical_k16v8", not problems,
                   f"K {c} / V e4m3 decode module ran ({len(lens)} requests up to {max(lens)} tokens, "
                   f"err {err:.2g}); a {c} V cache is refused", "; ".join(problems), m,
                   {"decode_max_abs_err": _tol(want), "decode_slope": f"1 +- {SLOPE_BOUND}",
                    f"{c}_v_cache": "ValueError naming v_data_type",
                    "decode_module": f"*_dtype_k_{c}_dtype_v_e4m3_* loaded, no *_dtype_kv_* decode module",
                    "decode_module_sha256": "equal to the jit step's record"})


# ---------------------------------------------------------------- 2. calibrated scales


def _scales(kb: KernelBackend) -> CheckResult:
    if near_one(kb.v_scale):
        raise Unsupported(f"v_scale {kb.v_scale:.4g} is within {DISTINCT_FROM_ONE:.0%} of 1.0, the default: its output "
                          "would also match V read with 1.0, so whether the kernel applies it cannot be told (no "
                          "layer of the fixtures' scales is further from 1.0)")
    lens = [64, 129, kb.cfg.prompt_tokens // 2]
    cache = Cache(kb, lens, 2)
    rows = list(range(len(lens)))
    q = kb.q(len(rows), 2)
    out = kb.decode(cache, rows, q).float()
    want, at_one = cache.decode_ref(q, rows), cache.decode_ref(q, rows, v_scale=1.0)
    err, err_one = _err(out, want), _err(out, at_one)
    stats = cache.stored_v_stats()
    problems = []
    if not err <= _tol(want):
        problems.append(f"the output does not follow v_scale {kb.v_scale:.4g} (err {err:.3g} > {_tol(want):.3g}; "
                        f"err if read with 1.0: {err_one:.3g})")
    if not err_one > _tol(at_one):
        problems.append("the output also matches V read with scale 1.0")
    if stats["stored_amax_over_e4m3_max"] < STORED_MIN:
        problems.append(f"stored V reaches only {stats['stored_amax_over_e4m3_max']:.2f} of e4m3's range "
                        f"(< {STORED_MIN:.2f}): V was stored with a scale too large")
    if stats["saturated_fraction"] > SATURATED_MAX:
        problems.append(f"{stats['saturated_fraction']:.2%} of stored V saturate at 448: V was stored with a "
                        f"scale too small")
    return verdict("calibrated_scales", not problems, f"v_scale {kb.v_scale:.4g} applied (err {err:.2g}); "
                   f"stored V spans {stats['stored_amax_over_e4m3_max']:.2f} of e4m3", "; ".join(problems),
                   {"v_scale": kb.v_scale, "max_abs_err": err, "max_abs_err_if_scale_1": err_one, **stats},
                   {"max_abs_err": _tol(want), "stored_amax_over_e4m3_max": f">= {STORED_MIN:.3f}",
                    "saturated_fraction": f"<= {SATURATED_MAX}"})


# ---------------------------------------------------------------- 3. mixed fresh prefill


def _mixed(kb: KernelBackend) -> CheckResult:
    c = kb.cfg
    running = [c.prompt_tokens - 1, 300]
    fresh = c.fresh_lens()
    cache = Cache(kb, running, 3, spare=2, later=fresh)
    # one step: running requests append their new token and decode; fresh prompts prefill
    new = [cache.kv(1) for _ in running]
    fresh_kv = [cache.kv(n) for n in fresh]
    for r, (k, v) in enumerate(new):
        cache.append(r, k, v)
    f_rows = [cache.add(n, kv) for n, kv in zip(fresh, fresh_kv)]     # K16/V8 written in the same step
    q_dec, q_pre = kb.q(len(running), 30), kb.q(sum(fresh), 31)
    dec = kb.decode(cache, list(range(len(running))), q_dec)
    pre = kb.ragged_prefill(q_pre, [k for k, _ in fresh_kv], [v for _, v in fresh_kv])
    want_dec = cache.decode_ref(q_dec, list(range(len(running))))
    want_pre, at = [], 0
    for k, v in fresh_kv:            # full precision on the in-flight K/V (the compute dtype, as the step holds them)
        n = k.shape[0]
        want_pre.append(attend(q_pre[at:at + n], k.float(), v.to(kb.dtype).float(), causal=True))
        at += n
    want_p = torch.cat(want_pre)
    # next step: everyone decodes from the asymmetric cache, the fresh requests from what they wrote
    rows = list(range(len(running))) + f_rows
    for r in rows:
        cache.append(r, *cache.kv(1))
    q_next = kb.q(len(rows), 32)
    nxt = kb.decode(cache, rows, q_next)
    want_next = cache.decode_ref(q_next, rows)
    pairs = {"running_decode": (dec, want_dec), f"fresh_prefill_{kb.short}": (pre, want_p),
             "decode_after_prefill": (nxt, want_next)}
    routes = [ROUTE_RAGGED.format(c=kb.short)]
    caps = flashinfer_asym.capabilities(kb.fi)
    if c.asym_prefill:
        if not caps.paged_prefill.asymmetric:
            raise Unsupported(f"the recipe declares an asymmetric paged prefill but {caps.paged_prefill.reason}")
        qo = [cache.lens[r] for r in f_rows]
        q_pp = kb.q(sum(qo), 33)
        pp = kb.paged_prefill(cache, f_rows, q_pp, qo)
        want_pp = torch.cat([attend(q_pp[s - n:s], cache.k_true[r].float(), cache.oracle_v(r), causal=True)
                             for r, n, s in zip(f_rows, qo, _cumsum(qo))])
        pairs["asymmetric_paged_prefill"] = (pp, want_pp)
        routes.append(ROUTE_PAGED)
    errs = {k: (_err(o, w), _tol(w)) for k, (o, w) in pairs.items()}
    slopes = {k: _slope(o, w) for k, (o, w) in pairs.items()}
    bad = [f"{k} differs from the reference (err {e:.3g} > {t:.3g})" for k, (e, t) in errs.items() if not e <= t]
    bad += [f"{k} differs from the reference by a systematic scale (slope {s:.5f}, |slope - 1| > {SLOPE_BOUND})"
            for k, s in slopes.items() if not _slope_ok(s)]
    m = {"routes": routes, "running_contexts": [n + 1 for n in running], "fresh_prompts": fresh,
         "max_abs_err": {k: e for k, (e, _) in errs.items()}, "slope": slopes,
         "paged_prefill": caps.paged_prefill.as_json()}
    return verdict("mixed_prefill", not bad,
                   f"{len(fresh)} fresh prompts ({'+'.join(map(str, fresh))} tokens) beside {len(running)} decodes "
                   f"(up to {max(running) + 1}) and their next decode match the reference",
                   "; ".join(bad),
                   m, {"max_abs_err": {k: t for k, (_, t) in errs.items()}, "slope": f"1 +- {SLOPE_BOUND}",
                       "oracle": f"fp32 torch; decode on the dequantized V, fresh prefill on in-flight {kb.short} K/V"})


# ---------------------------------------------------------------- 5. clean memory


def _memory(kb: KernelBackend) -> CheckResult:
    lens = [64, 33, kb.cfg.prompt_tokens]
    cache = Cache(kb, lens, 9)
    rows = list(range(len(lens)))
    q = kb.q(len(rows), 9)
    w = kb.fi.BatchDecodeWithPagedKVCacheWrapper(kb.workspace(), "NHD")
    peaks: list[int] = []      # extra bytes at peak of each measured run (CUDA)

    def run() -> None:
        if kb.device.type != "cuda":
            kb.decode(cache, rows, q, wrapper=w)
            return
        torch.cuda.reset_peak_memory_stats(kb.device)
        before = torch.cuda.memory_allocated(kb.device)
        out = kb.decode(cache, rows, q, wrapper=w)
        torch.cuda.synchronize(kb.device)
        peaks.append(int(torch.cuda.max_memory_allocated(kb.device)) - before)
        del out

    seen = sample_rounds(run, lambda: held_bytes(kb.device), 4)
    peak_extra = max(peaks[1:]) if len(peaks) > 1 else None    # the warm-up run is not judged
    v_bytes = cache.v.nbytes
    problems = []
    if len(set(seen)) != 1:
        problems.append(f"held bytes changed across decode rounds: {seen}")
    if peak_extra is not None and peak_extra > v_bytes // 4:
        problems.append(f"a decode run allocated {peak_extra} bytes at peak, more than a quarter of the V cache "
                        f"({v_bytes}): the kernel copies the cache (e.g. upcasts V)")
    what = "allocated GPU bytes" if kb.device.type == "cuda" else "live tensor bytes"
    return verdict("clean_memory", not problems, f"{what} steady over {len(seen) - 1} decode rounds"
                   + (f"; peak extra {peak_extra} bytes per run" if peak_extra is not None else ""),
                   "; ".join(problems),
                   {"held_after_rounds": seen, "held_measure": what, "run_peak_extra_bytes": peak_extra,
                    "v_cache_bytes": v_bytes, "k_cache_bytes": cache.k.nbytes},
                   {"held": "unchanged after the warm-up round", "run_peak_extra_bytes": "<= v_cache_bytes / 4 (CUDA)"})


CHECKS: dict[str, Callable[[KernelBackend], CheckResult]] = {
    "physical_k16v8": _physical, "calibrated_scales": _scales, "mixed_prefill": _mixed,
    "decode_graphs": _graphs, "clean_memory": _memory, "deterministic_generation": _deterministic}


def kernel_scales(manifest: Manifest | None, fixtures: Path | None) -> ScaleChoice:
    from ..inputs import engine_scales
    choice = ScaleChoice((0.05,), "synthetic", note="kernel level: one scale for random data")
    if manifest is not None and fixtures is not None:
        found = engine_scales(manifest, fixtures, None)
        if found.error is None:
            # the layer whose scale is furthest from 1.0: one at 1.0 would pass a kernel that ignores it
            layer = telling_scale(found.v_scales)
            layer = 0 if layer is None else layer
            choice = ScaleChoice(found.v_scales[layer:layer + 1], "fixtures", found.path,
                                 note=f"layer {layer}'s V scale from the fixtures file (the one furthest from 1.0)")
        else:
            # fixtures given for this model whose scales file is missing or wrong (another model or revision, a
            # NaN) are never silently replaced: the run goes on with the synthetic scale and the check fails
            choice = ScaleChoice((0.05,), "synthetic", found.path, error=found.error,
                                 note="the fixtures file was rejected")
    return choice


def run_kernel_level(device: torch.device, seed: int, manifest: Manifest | None, fixtures: Path | None,
                     cfg: KernelConfig | None = None,
                     backend: Callable[..., KernelBackend] = KernelBackend) -> tuple[list[CheckResult], ScaleChoice]:
    cfg = cfg or KernelConfig()
    choice = kernel_scales(manifest, fixtures)
    fi, why = probe()
    if fi is None:
        return every_check(UNSUPPORTED, why), choice
    kb = backend(fi, device, float(choice.v_scales[0]), seed, cfg)
    results = in_order(run_checks({name: functools.partial(fn, kb) for name, fn in CHECKS.items()}))
    if choice.error is not None:
        results = [CheckResult(r.name, FAILED, f"the supplied scales were rejected: {one_line(choice.error)}",
                               {"scales_file": choice.path, "error": choice.error}, r.limits, r.seconds)
                   if r.name == "calibrated_scales" else r for r in results]
    elif choice.source != "fixtures":     # say in the summary where the scale came from (the receipt's scales too)
        results = [dataclasses.replace(r, summary=f"{r.summary}; no calibrated scales were supplied: the scale is "
                                                  f"{choice.source} ({choice.note})")
                   if r.name == "calibrated_scales" else r for r in results]
    return results, choice


__all__ = ["KernelBackend", "KernelConfig", "probe", "run_kernel_level", "Unsupported", "loaded_modules"]
