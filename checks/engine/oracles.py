"""Engine level: oracles the engine did not compute.

Two outside oracles, each compared with the live K16/V8 engine:

* **one layer's attention against the torch reference.**  The layer's
  ``impl.forward(layer, query, key, value, kv_cache, attn_metadata, output)`` (vLLM's
  ``AttentionImpl`` API) is wrapped on an ``enforce_eager`` engine and one request
  (a short prompt, then a few decode steps) is run with the layer's cache zeroed
  first.  From the captured q/k/v alone (no engine metadata) the reference computes
  what K16/V8 must give: the prompt's rows on its in-flight K/V at full precision
  (the fresh-prefill route; a paged prefill over the K16/V8 cache is accepted and
  named), every decode row over K in the K dtype and V ``dequant(quant(v, s))``
  with the supplied scale ``s``.  Decode rows must also sit closer to that
  reference than to the same math on unquantized V: an engine that reads a 16-bit
  V underneath does not.  The V codes the layer stored must be exactly
  ``quant(v, s)`` (as a multiset: slots need no metadata), so a scale stuck at 1.0
  or 2x off fails however large V is.
* **the same model with a 16-bit KV cache** (``kv_cache_dtype="auto"``, vLLM's own
  backend choice): greedy tokens over the recipe's ``[smoke]`` protocol
  (``prompt_tokens`` + ``max_new_tokens``) must agree until a divergence the 16-bit
  run itself calls a near-tie, and the chosen tokens' logprobs stay within a bound.

torch + the standard library; vLLM is reached only through the objects passed in.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .. import torch_reference as ref
from ..results import Unsupported

CAPTURE_PROMPT = 64          # prompt tokens of the captured request
CAPTURE_STEPS = 8            # generated tokens (the first comes from the prefill)
TOL_REL = 2.0 ** -6          # max |engine - reference| <= TOL_REL * max |reference| + TOL_ABS
TOL_ABS = 1e-3
CODES_EQUAL_MIN = 0.98       # share of stored V codes equal to quant(v, s) (sorted multisets)
AMAX_RATIO = (0.97, 1.03)    # max |stored code| / max |quant(v, s)|
LOGPROB_MAX = 1.0            # nats, chosen tokens, until the first divergence
LOGPROB_MEAN = 0.2
SLICE_VALUES = 1 << 26       # cache values converted to float32 at a time when reading the stored codes
NEAR_TIE = 1.0               # nats: the 16-bit run's top-1 minus top-2 where a divergence is allowed
PASSAGE = ("The lighthouse keeper wrote in his log every evening. The wind came from the west, the sea "
           "was grey, and three ships passed the point before dark. He counted the lamps, trimmed the "
           "wicks, and noted the oil that remained: {n} gallons. ")


def protocol_ids(tokenizer: Any, n: int) -> list[int]:
    """``n`` prompt token ids from a fixed passage (numbered, so it never repeats exactly)."""
    ids: list[int] = []
    i = 0
    while len(ids) < n:
        ids.extend(int(t) for t in tokenizer.encode(PASSAGE.format(n=40 + i), add_special_tokens=False))
        i += 1
    return ids[:n]


@dataclass
class Capture:
    """What one layer's ``impl.forward`` saw while armed: per call q, k, v, output (float32 copies)."""

    head_dim: int
    calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)
    armed: bool = False


def wrap_impl(layer: Any, cap: Capture, need: Callable[[Any, str], Any]) -> Callable[[], None]:
    """Wrap ``layer.impl.forward``; returns the function that restores it."""
    impl = need(layer, "impl")
    orig = need(impl, "forward")
    try:
        params = inspect.signature(orig).parameters
    except (TypeError, ValueError) as exc:
        raise Unsupported(f"cannot read the signature of Attention.impl.forward ({exc})") from None
    missing = [p for p in ("query", "key", "value") if p not in params]
    if missing:
        raise Unsupported(f"Attention.impl.forward has no {', '.join(missing)} parameter "
                          f"(found {list(params)})")
    sig = inspect.signature(orig)

    def forward(*args: Any, **kwargs: Any) -> Any:
        out = orig(*args, **kwargs)
        if cap.armed:
            bound = sig.bind(*args, **kwargs).arguments
            q, k, v = bound["query"], bound["key"], bound["value"]
            o = out if out is not None else bound.get("output")
            if k is None or v is None or o is None:
                raise Unsupported("Attention.impl.forward was called without key/value or output")
            d = cap.head_dim
            # vLLM pads inputs and output for CUDA graphs; its metadata says how many tokens are real
            n = getattr(bound.get("attn_metadata"), "num_actual_tokens", None) or q.shape[0]
            cap.calls.append(tuple(t.detach()[:n].reshape(n, -1, d).float().clone()   # type: ignore[misc]
                                   for t in (q, k, v, o)))
        return out

    had = "forward" in vars(impl)
    impl.forward = forward

    def restore() -> None:
        if had:
            impl.forward = orig
        else:
            del impl.forward
    return restore


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal GQA attention in float64: the last ``len(q)`` positions of ``k``/``v``."""
    return ref.dense_attention(q.double(), k.double(), v.double())


def _err(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(max abs difference, relative L2)"""
    diff = (a.double() - b.double())
    return float(diff.abs().max()), float(diff.norm() / b.double().norm().clamp_min(1e-30))


@dataclass(frozen=True)
class LayerVerdict:
    ok_prefill: bool
    ok_decode: bool
    reads_8bit: bool
    ok_codes: bool
    prefill_route: str
    measured: dict[str, Any]
    limits: dict[str, Any]


def _nonzero(t: torch.Tensor) -> torch.Tensor:
    """The non-zero values of a cache side as float32, read a slice of blocks at a time (a live cache
    is most of a GPU: converting it whole would double it)."""
    per = max(1, SLICE_VALUES // max(1, t[0].numel())) if t.dim() else 1
    parts = [c[c != 0] for c in (chunk.float() for chunk in (t.split(per) if t.dim() else [t]))]
    return torch.cat(parts) if parts else torch.zeros(0)


def _codes_agree(stored: torch.Tensor, predicted: torch.Tensor) -> tuple[bool, dict[str, Any]]:
    """The values a cache side holds against what it must hold, as multisets of the non-zero values
    (slots need no metadata); exact for a 16-bit side, :data:`CODES_EQUAL_MIN` for e4m3 codes."""
    exact = stored.dtype != ref.FP8
    a = _nonzero(stored).sort().values
    b = _nonzero(predicted).sort().values
    same_count = a.numel() == b.numel()
    equal = float((a == b).float().mean()) if same_count and a.numel() else 0.0
    a_max = float(a.abs().max()) if a.numel() else 0.0
    b_max = float(b.abs().max()) if b.numel() else 0.0
    ratio = a_max / b_max if b_max else math.inf
    ok = same_count and (equal == 1.0 if exact else equal >= CODES_EQUAL_MIN) and AMAX_RATIO[0] <= ratio <= AMAX_RATIO[1]
    return ok, {"stored": int(a.numel()), "predicted": int(b.numel()), "equal_share": equal,
                "stored_over_predicted_amax": ratio}


def judge_layer(cap: Capture, cache: torch.Tensor | tuple[torch.Tensor, torch.Tensor], scale: float | None,
                k_dtype: torch.dtype, layer_index: int, k_scale: float | None = None,
                value_dtype: torch.dtype | None = None) -> LayerVerdict:
    """Compare the captured request with the torch reference (see the module docstring).

    ``cache``: the layer's V cache, or its ``(k_cache, v_cache)`` (then K is judged too).  ``scale``: the
    supplied V scale, or None for a 16-bit V (stored and read as it is, in ``value_dtype``); ``k_scale``:
    K's scale when K is stored as e4m3 too (a symmetric fp8 cache), else K is ``k_dtype``."""
    k_cache, v_cache = cache if isinstance(cache, tuple) else (None, cache)
    sizes = [c[0].shape[0] for c in cap.calls]
    if len(sizes) < 2 or sizes[0] < 2 or any(s != 1 for s in sizes[1:]):
        raise Unsupported(f"the captured layer saw token counts {sizes[:12]}, expected one prefill "
                          "then single-token decodes (a scheduler this harness does not model)")
    q_all = [c[0] for c in cap.calls]
    k_raw = torch.cat([c[1] for c in cap.calls])
    k_all = k_raw.to(k_dtype)                                      # K as a 16-bit cache holds it
    v_all = torch.cat([c[2] for c in cap.calls])
    o_all = [c[3] for c in cap.calls]
    k_held = ref.quantize_v(k_raw, k_scale) if k_scale is not None else k_all
    k_ref = ref.dequantize_v(k_held, k_scale) if k_scale is not None else k_all
    v_held = ref.quantize_v(v_all, scale) if scale is not None else v_all.to(value_dtype or k_dtype)
    v_deq = ref.dequantize_v(v_held, scale) if scale is not None else v_held.float()
    n0 = sizes[0]
    fresh = _attend(q_all[0], k_all[:n0], v_all[:n0])
    paged = _attend(q_all[0], k_ref[:n0], v_deq[:n0])
    e_fresh, _ = _err(o_all[0], fresh)
    e_paged, _ = _err(o_all[0], paged)
    tol_p = TOL_REL * float(fresh.abs().max()) + TOL_ABS
    dec_out = torch.cat(o_all[1:])
    ref8 = torch.cat([_attend(q, k_ref[:n0 + j + 1], v_deq[:n0 + j + 1]) for j, q in enumerate(q_all[1:])])
    ref16 = torch.cat([_attend(q, k_ref[:n0 + j + 1], v_all[:n0 + j + 1]) for j, q in enumerate(q_all[1:])])
    e8, l2_8 = _err(dec_out, ref8)
    slope_d = ref.slope(dec_out, ref8)
    slope_p = ref.slope(o_all[0], fresh if e_fresh <= e_paged else paged)
    e16, l2_16 = _err(dec_out, ref16)
    tol_d = TOL_REL * float(ref8.abs().max()) + TOL_ABS
    # reads a 16-bit V underneath: the output follows the unquantized values, not the stored codes
    reads_16bit = scale is not None and l2_16 < l2_8 and e16 <= tol_d
    ok_v, v_codes = _codes_agree(v_cache, v_held)
    ok_k, k_codes = _codes_agree(k_cache, k_held) if k_cache is not None else (True, None)
    route = "in-flight K/V at full precision (fresh prefill)" if e_fresh <= e_paged else \
        "the paged cache"
    measured = {
        "layer": layer_index, "tokens": sizes, "supplied_scale": scale, "k_scale": k_scale,
        "cache_reference": ("K " + ("e4m3" if k_scale is not None else str(k_dtype)) + ", V "
                            + ("e4m3" if scale is not None else str(value_dtype or k_dtype))),
        "prefill_max_err_vs_fresh_reference": e_fresh, "prefill_max_err_vs_cached_reference": e_paged,
        "prefill_route_observed": route,
        "decode_max_err_vs_k16v8_reference": e8, "decode_rel_l2_vs_k16v8_reference": l2_8,
        "decode_rel_l2_vs_16bit_v_reference": l2_16, "decode_max_err_vs_16bit_v_reference": e16,
        "reference_max": float(ref8.abs().max()),
        "prefill_slope_vs_reference": slope_p, "decode_slope_vs_k16v8_reference": slope_d,
        "stored_v_codes": v_codes["stored"], "predicted_v_codes": v_codes["predicted"],
        "codes_equal_share": v_codes["equal_share"], "stored_over_predicted_amax": v_codes["stored_over_predicted_amax"],
        "k_codes": k_codes,
    }
    limits = {"prefill_max_err": tol_p, "decode_max_err": tol_d,
              "reads_16bit_v": "fails when the decode rows match the 16-bit-V reference within the "
                               "tolerance and closer than the K16/V8 one (only where V is quantized)",
              "tolerance": f"{TOL_REL:g} x max|reference| + {TOL_ABS:g}",
              "slope": f"1 +- {ref.SLOPE_BOUND} (least squares of the output against the reference)",
              "codes_equal_share_min": CODES_EQUAL_MIN if scale is not None else 1.0,
              "stored_over_predicted_amax": list(AMAX_RATIO),
              "codes": "the stored V codes are quant(v, supplied scale) of the captured values (a 16-bit V: "
                       "the captured values exactly); K likewise with its own scale, or exactly at 16 bits"}
    return LayerVerdict(min(e_fresh, e_paged) <= tol_p and ref.slope_ok(slope_p), e8 <= tol_d and ref.slope_ok(slope_d),
                        not reads_16bit, ok_v and ok_k, route, measured, limits)


Generation = tuple[list[int], list[dict[int, float]]]


def at_divergence(a: dict[int, float], b: dict[int, float]) -> list[tuple[float, float]]:
    """Where two greedy runs first choose differently their contexts are still the same, so their logprobs
    there are comparable token for token: the pairs for the tokens both runs report (top-k and chosen)."""
    return [(a[t], b[t]) for t in sorted(set(a) & set(b))]


def compare_with_16bit(k16v8: Generation, oracle: Generation) -> tuple[bool, str, dict[str, Any], dict[str, Any]]:
    """Greedy agreement and logprob bound against the 16-bit-cache run of the same protocol prompt: the
    chosen tokens' logprobs up to the first divergence, and at it every token both runs report (so a
    divergence at the first token still compares the prefill's distribution, never nothing)."""
    (ta, la), (tb, lb) = k16v8, oracle
    n = min(len(ta), len(tb))
    first = next((i for i in range(n) if ta[i] != tb[i]), n)
    diffs = [abs(la[i].get(ta[i], math.nan) - lb[i].get(tb[i], math.nan)) for i in range(first)]
    shared = at_divergence(la[first], lb[first]) if first < min(n, len(la), len(lb)) else []
    at_fork = [abs(x - y) for x, y in shared]      # held to LOGPROB_MAX, not the mean: at an early parting
    finite = all(math.isfinite(d) for d in diffs + at_fork)      # they would be most of it
    worst = max(diffs + at_fork) if diffs + at_fork else 0.0
    mean = sum(diffs) / len(diffs) if diffs else 0.0
    margin = None
    if first < n:
        top = sorted(lb[first].values(), reverse=True)
        margin = top[0] - top[1] if len(top) > 1 else None
    problems = []
    if len(ta) != len(tb) or not ta:
        problems.append(f"{len(ta)} tokens from K16/V8, {len(tb)} from the 16-bit cache")
    if not finite:
        problems.append("non-finite logprobs")
    elif worst > LOGPROB_MAX or mean > LOGPROB_MEAN:
        problems.append(f"chosen-token logprobs differ by up to {worst:.3g} (mean {mean:.3g}) nats"
                        + (f" (with the {len(shared)} tokens both runs report where they part at {first})"
                           if shared else ""))
    if first < n and (margin is None or margin > NEAR_TIE):
        problems.append(f"greedy tokens diverge at {first} of {n} where the 16-bit run is sure "
                        f"(top-2 margin {margin if margin is None else round(margin, 3)} nats)")
    elif first < n and not shared:
        problems.append(f"greedy tokens diverge at {first} of {n} and the runs report no token in common there: "
                        "nothing to compare the divergence by")
    measured = {"tokens": n, "agree_until": first, "divergence_margin": margin, "compared_at_divergence": len(shared),
                "logprob_diff_max": worst, "logprob_diff_mean": mean,
                "k16v8_tokens": ta[:32], "oracle_tokens": tb[:32]}
    limits = {"logprob_diff_max": LOGPROB_MAX, "logprob_diff_mean": LOGPROB_MEAN,
              "divergence": f"only where the 16-bit run's top-2 margin <= {NEAR_TIE} nats"}
    return not problems, "; ".join(problems), measured, limits
