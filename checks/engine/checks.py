"""Engine level, the checks: each one judges what the started engine controls, not what this harness wrote.

:mod:`october.checks.engine.driver` starts the engines (:mod:`october.checks.engine.vllm_surface`) and calls these;
:func:`_oracles` folds the outside oracles (:mod:`october.checks.engine.oracles`: the captured layer
and the 16-bit-cache engine) into the checks they prove, and :func:`_jit` judges the run's watch
over the JIT workspace.
"""

from __future__ import annotations

from typing import Any

import torch

from . import oracles as oracle
from .. import torch_reference as ref
from ..contract import EXTRA_CHECKS
from .cache_plan import K16V8, CachePlan, layer_cache_dtype, side_ok, split_kv
from .decode import GRAPH_NEAR_TIE, _graph_agrees
from .vllm_surface import (
    DTYPES,
    FREE_BLOCKS,
    PROMPTS,
    ModelShape,
    Selection,
    _caches,
    _generate,
    _generate_tops,
    _Hooks,
    _need,
    _params,
    _tokens,
    _top,
)
from ..memory import held_bytes, sample_rounds
from ..results import FAILED, PASSED, UNSUPPORTED, CheckResult, Unsupported, verdict
from ..scales import DISTINCT_FROM_ONE, near_one
from ..workspace import Watch
from ..workspace import uri as module_uri

JIT_CHECK = EXTRA_CHECKS[0]                       # ("jit_complete", "JIT modules pre-built")
MEMORY_ROUNDS = 3
MIXED_DECODE_TOKENS = 64    # what the decoding requests of the mixed step generate (each also alone)
ALLOCATION_SLACK = 0.02     # allocated bytes may exceed the K and V views' by this much (alignment), no more


def allocated_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct allocations behind ``tensors``.  A view's ``nbytes`` follows its shape and
    dtype, so V pages allocated at 16 bits and half used would still read as 8-bit; the storage shows
    what was taken (K and V views of one buffer, or one buffer for every layer, count it once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


CHECKSUM_CHUNK_BYTES = 64 << 20   # a live cache side is gigabytes on the H200 (15.6 GiB for the tiny model's
                                  # layer at gpu_memory_utilization 0.45); an int64 sum of it whole needs 8x that


def _checksum(t: torch.Tensor) -> int:
    """Sum of the tensor's bytes, a slice of blocks (dim 0) at a time: never more than a chunk's copy."""
    if t.numel() == 0:
        return 0
    if t.dim() == 0:
        return int(t.reshape(1).view(torch.uint8).sum(dtype=torch.int64))
    per = max(1, (t.numel() // max(1, t.shape[0])) * t.element_size())
    step = max(1, CHECKSUM_CHUNK_BYTES // per)
    return sum(int(t[i:i + step].reshape(-1).view(torch.uint8).sum(dtype=torch.int64))
               for i in range(0, t.shape[0], step))


def _amend(result: CheckResult, problems: list[str], measured: dict[str, Any], limits: dict[str, Any],
           unsupported: str | None = None) -> CheckResult:
    """Add later evidence (the oracles) to a check measured earlier: a problem fails a passed check."""
    result.measured.update(measured)
    result.limits.update(limits)
    if result.status == PASSED and unsupported:
        result.status, result.summary = UNSUPPORTED, unsupported
    elif result.status == PASSED and problems:
        result.status, result.summary = FAILED, "; ".join(problems)
    elif result.status == FAILED and problems:
        result.summary = "; ".join([result.summary] + problems)
    return result


def _physical(llm: Any, h: _Hooks, sel: Selection, plan: CachePlan = K16V8) -> CheckResult:
    """The live cache holds what ``plan`` asked for on every layer, through FlashInfer: K16/V8 (K the
    recipe's K dtype, V e4m3, V bytes K/2), or a diagnostic's symmetric cache (both sides the compute
    dtype, or both e4m3, stored as e4m3 or as its uint8 bytes the way vLLM 0.24 keeps them)."""
    key = sel.compute_dtype if plan.diagnostic else sel.k_cache_dtype
    if key not in DTYPES:
        what = "compute_dtype" if plan.diagnostic else "k_cache_dtype"
        raise Unsupported(f"no recipe {'compute' if plan.diagnostic else 'K cache'} dtype to hold the cache to "
                          f"(expected the selection's {what} in the stack info, found {key!r}): run through "
                          "`current smoke`, or pass --stack-info with a selection")
    want_k, want_v = plan.holds(DTYPES[key])
    k_b, v_b = plan.bytes_per_value()
    caches = _caches(h)
    problems = []
    pairs = []
    for i, entry in enumerate(caches):
        try:
            k, v = split_kv(entry)
        except Unsupported as exc:
            problems.append(f"layer {i}: {exc}")
            continue
        pairs.append((k, v))
        if not side_ok(k, plan.k_fp8, want_k) or not side_ok(v, plan.v_fp8, want_v) \
                or v.nbytes * k_b != k.nbytes * v_b or k.dim() != 4 or k.shape != v.shape:
            problems.append(f"layer {i}: K {k.dtype} {tuple(k.shape)} {k.nbytes}B, "
                            f"V {v.dtype} {tuple(v.shape)} {v.nbytes}B")
    layers = h.layers(h.runner)
    backends = sorted({str(_need(layer, "attn_backend").get_name()) for layer in layers})
    if backends != ["FLASHINFER"]:
        problems.append(f"attention backends {backends}, expected FLASHINFER on every layer")
    declared = sorted({str(d) for d in map(layer_cache_dtype, layers) if d is not None})
    asked = plan.kv_cache_dtype if isinstance(plan.kv_cache_dtype, str) else None
    if plan.diagnostic and declared and declared != [asked]:
        problems.append(f"the layers say they store {declared}, expected {asked!r} on every layer")
    live = "no (k_cache, v_cache) pairs"
    if pairs:
        before = [_checksum(t) for t in pairs[0]]
        _generate(llm, [PROMPTS[3]])
        after = [_checksum(t) for t in pairs[0]]
        live = "K and V changed" if before[0] != after[0] and before[1] != after[1] else \
            f"layer 0 K changed={before[0] != after[0]}, V changed={before[1] != after[1]}"
        if live != "K and V changed":
            problems.append(f"generation did not write the caches read here ({live})")
    k_bytes = sum(k.nbytes for k, _ in pairs)
    v_bytes = sum(v.nbytes for _, v in pairs)
    k_values = sum(k.numel() for k, _ in pairs)
    allocated = allocated_bytes([t for pair in pairs for t in pair])
    ratio = allocated / (4 * k_values) if k_values else 0.0     # what was taken, against K and V both 16-bit
    want_ratio = (k_b + v_b) / 4
    if pairs and allocated > (k_bytes + v_bytes) * (1 + ALLOCATION_SLACK):
        problems.append(f"the K and V caches take {allocated} bytes of GPU memory, their views {k_bytes + v_bytes}: "
                        f"state {ratio:.3f}x BF16, not {want_ratio:.3f}x (a cache allocated wider than it stores)")
    first = pairs[0] if pairs else None
    found = f"K {first[0].dtype if first else '?'} / V {first[1].dtype if first else '?'}"
    return verdict("physical_k16v8", not problems,
                   f"{len(caches)} layers, {found}{' (e4m3 bytes)' if first and first[1].dtype == torch.uint8 else ''}"
                   f", state {ratio:.3f}x BF16, live, FLASHINFER" + (f" (diagnostic {plan.name})" if plan.diagnostic else ""),
                   "; ".join(problems[:3]),
                   {"layers": len(caches), "k_dtype": str(first[0].dtype) if first else None,
                    "v_dtype": str(first[1].dtype) if first else None, "attention_backends": backends,
                    "layers_declare": declared, "cache": plan.as_json(),
                    "layer_shape": list(first[0].shape) if first else None, "k_bytes": k_bytes,
                    "v_bytes": v_bytes, "allocated_bytes": allocated, "state_vs_bf16": ratio, "live": live,
                    "problems": problems},
                   {"k_dtype": str(want_k) + (" (or its uint8 bytes)" if plan.k_fp8 else ""),
                    "v_dtype": str(want_v) + (" (or its uint8 bytes)" if plan.v_fp8 else ""),
                    "attention_backends": ["FLASHINFER"],
                    "v_bytes": f"k_bytes x {v_b} / {k_b}",
                    "allocated_bytes": f"<= (k_bytes + v_bytes) x {1 + ALLOCATION_SLACK}",
                    "state_vs_bf16": want_ratio, "live": "K and V changed"})


def _scales(llm: Any, h: _Hooks) -> CheckResult:
    """The scales in effect after engine start, exactly the supplied ones (``h.v_scales``: the calibrated V
    scales, or 1.0 where V is not quantized), loaded before capture.  (The stored codes and the read-back
    scale are judged from the captured layer later.)"""
    layers = h.layers(h.runner)
    supplied = list(h.v_scales)
    _generate(llm, list(PROMPTS))
    as_float = [float(_need(layer, "_v_scale_float")) for layer in layers]
    as_tensor = [float(_need(layer, "_v_scale").detach().float().reshape(-1)[0]) for layer in layers]
    problems = []
    if len(as_float) != len(supplied):
        problems.append(f"{len(layers)} scaled layers for {len(supplied)} scales")
    bad = [i for i, (f, t, s) in enumerate(zip(as_float, as_tensor, supplied))
           if f != s or t != float(torch.tensor(s, dtype=torch.float32))]
    if bad:
        problems.append(f"layers {bad[:8]} do not hold the supplied scales after generation")
    order_ok = "scales_loaded" in h.events and (
        "graphs_captured" not in h.events
        or h.events.index("scales_loaded") < h.events.index("graphs_captured"))
    if not order_ok:
        problems.append(f"scales not loaded before graph capture ({h.events})")
    k_scales = [float(layer._k_scale.detach().float().reshape(-1)[0]) if hasattr(layer, "_k_scale") else None
                for layer in layers]
    return verdict("calibrated_scales", not problems,
                   f"{len(supplied)} layer scales in effect before capture; stored V codes are quant(v, s)",
                   "; ".join(problems),
                   {"supplied": supplied, "v_scale_float": as_float, "v_scale": as_tensor, "k_scale": k_scales,
                    "events": h.events},
                   {"v_scale_float": "equal to supplied", "v_scale": "equal to supplied (float32)",
                    "order": "scales_loaded before graphs_captured"})


def _mixed(llm: Any) -> CheckResult:
    engine = _need(llm, "llm_engine")
    add, step = _need(engine, "add_request"), _need(engine, "step")
    unfinished = _need(engine, "has_unfinished_requests")
    solo = _generate(llm, [PROMPTS[2]])[0][0]
    # the decoding requests, each alone: what they must still produce when a fresh prompt shares their step
    solo_decodes = {rid: _generate_tops(llm, [prompt], MIXED_DECODE_TOKENS)[0]
                    for rid, prompt in (("mixed-a", PROMPTS[0]), ("mixed-b", PROMPTS[1]))}
    add("mixed-a", PROMPTS[0], _params(MIXED_DECODE_TOKENS, logprobs=2))
    add("mixed-b", PROMPTS[1], _params(MIXED_DECODE_TOKENS, logprobs=2))
    for _ in range(3):
        step()
    add("mixed-c", PROMPTS[2], _params())
    # the first step output that carries the fresh request: with async scheduling (vLLM 0.24's default, a
    # batch queue) a step returns an earlier batch's outputs, so "the next step" is not "its batch"
    latest: dict[str, list[int]] = {}
    tops: dict[str, Any] = {}
    first: dict[str, int] = {}
    while unfinished():
        outs = step()
        for o in outs:
            latest[_need(o, "request_id")] = _tokens(o)[0]
            tops[_need(o, "request_id")] = _top(o)
        if not first and any(_need(o, "request_id") == "mixed-c" for o in outs):
            first = {_need(o, "request_id"): len(_tokens(o)[0]) for o in outs}
    mixed = latest.get("mixed-c", [])
    same_step = {"mixed-a", "mixed-b", "mixed-c"} <= set(first) and first["mixed-c"] == 1
    # a decode row's output in the mixed steps against its solo run, with the graph check's tolerance for
    # a near tie (the mixed batch may reduce in another order)
    decodes = {rid: _graph_agrees(tops[rid], alone) if rid in tops else (False, {"missing": True})
               for rid, alone in solo_decodes.items()}
    bad_decodes = [rid for rid, (agrees, _) in decodes.items() if not agrees]
    ok = same_step and mixed == solo and not bad_decodes
    why = "the fresh prompt was not admitted in the same step as the decodes" if not same_step else \
        "fresh prefill in a mixed step gives other tokens than its solo run" if mixed != solo else \
        f"the decoding request(s) {bad_decodes} give other tokens beside the fresh prefill than alone"
    return verdict("mixed_prefill", ok, "fresh prompt beside 2 decodes matches solo, the decodes match theirs, "
                   "the torch reference on a captured layer and the 16-bit-cache engine", why,
                   {"route": "fresh prompt prefilled in the same step as 2 decodes, its K/V written to the "
                             "K16/V8 cache, then decoded from it",
                    "first_step_outputs": first, "solo": solo, "mixed": mixed,
                    "decodes_vs_solo": {rid: m for rid, (_, m) in decodes.items()}},
                   {"first_step": "the first output with mixed-c: mixed-a, mixed-b and mixed-c (1 token)",
                    "tokens": "identical to the solo run",
                    "decodes_vs_solo": f"mixed-a and mixed-b: the tokens of their solo runs, or diverging only at a "
                                       f"near tie (solo top-2 margin <= {GRAPH_NEAR_TIE} nats)"})


def _memory(llm: Any, h: _Hooks, shape: ModelShape, plan: CachePlan = K16V8) -> CheckResult:
    cfg = _need(llm, "llm_engine.vllm_config.cache_config")
    blocks, block_size = int(_need(cfg, "num_gpu_blocks")), int(_need(cfg, "block_size"))
    free = _need(llm, FREE_BLOCKS)
    caches = [split_kv(e) for e in _caches(h)]
    k_b, v_b = plan.bytes_per_value()
    expected = blocks * block_size * shape.layers * shape.kv_heads * shape.head_dim * (k_b + v_b)
    actual = sum(k.nbytes + v.nbytes for k, v in caches)
    allocated = allocated_bytes([t for pair in caches for t in pair])
    device = caches[0][0].device
    free_start = int(free())
    samples = sample_rounds(lambda: _generate(llm, list(PROMPTS)), lambda: (int(free()), held_bytes(device)),
                            MEMORY_ROUNDS)
    free_after, held = [f for f, _ in samples], [b for _, b in samples]
    problems = []
    if actual != expected:
        problems.append(f"KV bytes {actual}, formula gives {expected}")
    if allocated > expected * (1 + ALLOCATION_SLACK):
        problems.append(f"the KV caches take {allocated} bytes of GPU memory, the formula gives {expected}")
    if any(f != free_start for f in free_after):
        problems.append(f"free KV blocks {free_start} -> {free_after} across rounds")
    what = "allocated GPU bytes" if device.type == "cuda" else "live tensor bytes"
    if len(set(held)) != 1:
        problems.append(f"{what} changed across rounds: {held}")
    return verdict("clean_memory", not problems,
                   f"{actual} KV bytes as the formula says; blocks returned and {what} steady over "
                   f"{MEMORY_ROUNDS + 1} rounds", "; ".join(problems),
                   {"kv_bytes": actual, "allocated_bytes": allocated, "num_gpu_blocks": blocks, "block_size": block_size,
                    "free_blocks_start": free_start, "free_blocks_after_rounds": free_after,
                    "held_after_rounds": held, "held_measure": what},
                   {"kv_bytes": expected, "allocated_bytes": f"<= kv_bytes x {1 + ALLOCATION_SLACK}",
                    "formula": f"blocks x block_size x layers {shape.layers} x kv_heads {shape.kv_heads}"
                               f" x head_dim {shape.head_dim} x ({k_b} + {v_b})",
                    "free_blocks": "back to the start after every round",
                    "held": "unchanged after the warm-up round"})


# ------------------------------------------------------------------------------ JIT modules


def _jit(sel: Selection, shape: ModelShape, watch: Watch, diagnostic: bool = False) -> CheckResult:
    """The derived modules were in the workspace before the engine started, and the run's watch
    (:class:`october.checks.workspace.Watch`) saw none gained or changed while it ran.  A diagnostic's
    symmetric cache needs modules no recipe derives (its own workspace, a copy of the stack's): the
    watch still runs and lists what the engine built, and only a pre-built module that changed fails."""
    name = JIT_CHECK[0]
    workspace = watch.base
    if not sel.jit_modules or workspace is None:
        return CheckResult(name, UNSUPPORTED, "no derived JIT module list or workspace for this "
                           "selection (expected the stack info `current smoke` writes)",
                           {"workspace": str(workspace) if workspace else None}, {})
    fix = sel.setup_command or "october_setup STACK --recipe RECIPE"
    before = watch.built_before()
    entry, _ = watch.finish()
    missing = [u for u in sel.jit_modules if u not in before]
    gained = sorted(module_uri(g) for g in entry["gained"])
    changed = sorted(module_uri(c) for c in entry["changed"])
    problems = []
    if missing:
        problems.append(f"module {missing[0]} is not pre-built in {workspace}"
                        + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                        + f"; run `{fix}` to build it")
    if gained and not diagnostic:
        problems.append(f"the engine JIT-built {len(gained)} module(s) during the smoke ({gained[0]}): "
                        f"they are outside the verified workspace; run `{fix}`")
    if changed:
        problems.append(f"{len(changed)} JIT module(s) changed during the smoke ({changed[0]}); run `{fix}`")
    got = {"num_attention_heads": shape.q_heads, "num_key_value_heads": shape.kv_heads, "head_dim": shape.head_dim,
           "num_hidden_layers": shape.layers}
    if sel.shape:
        wrong = {k: (v, got[k]) for k, v in sel.shape.items() if got.get(k) is not None and got[k] != v}
        if wrong:
            problems.append(f"the modules were derived for another model shape: recipe vs config.json {wrong}")
    ok_text = f"{len(sel.jit_modules)} derived modules pre-built; the workspace " + (
        f"gained {len(gained)} module(s) for the diagnostic's symmetric cache, changed none" if diagnostic
        else "gained none during the smoke")
    return verdict(name, not problems, ok_text, "; ".join(problems),
                   {"workspace": str(workspace), "expected": list(sel.jit_modules), "missing": missing,
                    "present": {u: before[u] for u in sel.jit_modules if u in before}, "gained": gained,
                    "changed": changed},
                   {"missing": [], "gained": "listed (a diagnostic's symmetric modules)" if diagnostic else [],
                    "changed": [], "build_command": fix})


def _off(m: dict[str, Any], lim: dict[str, Any], rows: str) -> str:
    """How the layer oracle's ``rows`` (prefill or decode) are off: by more than the max-abs tolerance,
    and/or by a systematic scale (the slope of the output against the reference outside its bound)."""
    if rows == "prefill":
        err = min(m["prefill_max_err_vs_fresh_reference"], m["prefill_max_err_vs_cached_reference"])
        slope = m["prefill_slope_vs_reference"]
    else:
        err, slope = m["decode_max_err_vs_k16v8_reference"], m["decode_slope_vs_k16v8_reference"]
    parts = [f"by {err:.3g}" + (f" (max; limit {lim[rows + '_max_err']:.3g})" if err > lim[rows + "_max_err"] else
                                " (max, within its limit)")]
    if not ref.slope_ok(slope):
        parts.append(f"by a systematic scale: slope {slope:.5f} against the reference, outside 1 +- "
                     f"{ref.SLOPE_BOUND}")
    return "; ".join(parts)


def _oracles(results: dict[str, CheckResult], layer: oracle.LayerVerdict | BaseException,
             agreement: tuple[Any, ...] | BaseException) -> None:
    """Fold the outside oracles into the checks they prove."""
    if isinstance(layer, BaseException):
        why = f"the captured-layer oracle could not run: {type(layer).__name__}: {layer}"
        unsup = str(layer) if isinstance(layer, Unsupported) else None
        for n in ("physical_k16v8", "calibrated_scales", "mixed_prefill"):
            _amend(results[n], [why], {"layer_oracle": why}, {}, unsup)
    else:
        m, lim = layer.measured, layer.limits
        _amend(results["physical_k16v8"], [] if layer.reads_8bit else [
            f"decode on layer {m['layer']} reads a 16-bit V underneath (rel L2 {m['decode_rel_l2_vs_k16v8_reference']:.3g}"
            f" vs the K16/V8 reference, {m['decode_rel_l2_vs_16bit_v_reference']:.3g} vs 16-bit V)"],
            {"layer_oracle": m}, {"layer_oracle": lim})
        scale_problems = []
        if not layer.ok_codes:
            scale_problems.append(f"layer {m['layer']} stored V codes are not quant(v, supplied scale): "
                                  f"{m['codes_equal_share']:.3f} equal, stored/predicted max "
                                  f"{m['stored_over_predicted_amax']:.3g} (a scale stuck at 1.0 or off)")
        if not layer.ok_decode:
            scale_problems.append(f"layer {m['layer']} decode differs from the reference dequantized with "
                                  f"the supplied scale {_off(m, lim, 'decode')}")
        supplied = m.get("supplied_scale")
        blind = None if scale_problems or supplied is None or not near_one(float(supplied)) else (
            f"layer {m['layer']}'s supplied V scale {float(supplied):.4g} is within {DISTINCT_FROM_ONE:.0%} of 1.0, "
            "the default, and no layer's is further: a scale left at 1.0 could not be told from one applied")
        _amend(results["calibrated_scales"], scale_problems, {"layer_oracle": m}, {"layer_oracle": lim}, blind)
        mixed_problems = []
        if not layer.ok_prefill:
            mixed_problems.append(f"layer {m['layer']} prefill rows differ from the torch reference "
                                  f"{_off(m, lim, 'prefill')}")
        if not layer.ok_decode:
            mixed_problems.append(f"layer {m['layer']} decode rows differ from the torch reference "
                                  f"{_off(m, lim, 'decode')}")
        _amend(results["mixed_prefill"], mixed_problems,
               {"layer_oracle": m, "prefill_route_observed": layer.prefill_route}, {"layer_oracle": lim})
    if isinstance(agreement, BaseException):
        why = f"the 16-bit-cache oracle could not run: {type(agreement).__name__}: {agreement}"
        _amend(results["mixed_prefill"], [why], {"sixteen_bit_oracle": why}, {},
               str(agreement) if isinstance(agreement, Unsupported) else None)
    else:
        ok, why, measured, limits = agreement
        _amend(results["mixed_prefill"], [] if ok else [f"against the 16-bit-cache engine: {why}"],
               {"sixteen_bit_oracle": measured}, {"sixteen_bit_oracle": limits})
