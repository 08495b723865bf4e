"""Torch reference for K16/V8: a paged KV cache write and varlen paged attention.

Layout (NHD, as the vLLM fork allocates it): per layer a key cache and a value
cache, each ``[num_blocks, block_size, num_kv_heads, head_dim]``.  Keys are
stored at 16 bits (float16/bfloat16).  Values are stored as float8_e4m3fn with a
per-layer scale ``s``: ``v8 = saturate(v / s)``, read back as ``v8 * s``.

Attention mixes prefill and decode requests in one call: request ``r`` owns
``kv_lens[r]`` cached tokens (its new tokens already written) and its queries are
its last ``n_q`` positions, causal, with grouped-query heads.  All math is fp32
on dequantized values.  Everything here has static shapes and no host syncs, so
the same function is captured in CUDA graphs.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)      # 448
# e4m3 keeps 3 mantissa bits: round-to-nearest is off by at most half an ulp,
# 2**-4 relative, for normal numbers; below 2**-6 the absolute step is 2**-9.
FP8_REL_ERR = 2.0 ** -4
FP8_ABS_ERR = 2.0 ** -10                    # half the smallest subnormal step
K_DTYPES = (torch.float16, torch.bfloat16)


def quantize_v(v: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """``saturate(v / scale)`` as float8_e4m3fn (values past +-448 clamp to +-448)."""
    return (v.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def dequantize_v(v8: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    return v8.float() * scale


def v8_error_bound(v: torch.Tensor, scale: float) -> float:
    """Largest error one dequantized value can carry (no saturation assumed)."""
    return FP8_REL_ERR * float(v.float().abs().max()) + FP8_ABS_ERR * scale


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor, v_scale: torch.Tensor | float) -> None:
    """Write new tokens' K/V (``[T, H, D]``) at ``slot = block * block_size + offset``."""
    if v_cache.dtype != FP8:
        raise TypeError(f"value cache must be {FP8}, found {v_cache.dtype}")
    heads, dim = k_cache.shape[2], k_cache.shape[3]
    k_flat = k_cache.view(-1, heads, dim)
    v_flat = v_cache.view(torch.uint8).view(-1, heads, dim)
    if k_cache.element_size() == 1:             # an 8-bit K (a K8/V8 cache): index_copy through bytes
        k_flat.view(torch.uint8).index_copy_(0, slot_mapping, k.to(k_cache.dtype).view(torch.uint8))
    else:
        k_flat.index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    v_flat.index_copy_(0, slot_mapping, quantize_v(v, v_scale).view(torch.uint8))


def gather(cache: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """``[R, max_blocks]`` block ids -> ``[R, max_blocks * block_size, H, D]`` (cache dtype)."""
    r, mb = block_tables.shape
    bs, h, d = cache.shape[1], cache.shape[2], cache.shape[3]
    return cache[block_tables].reshape(r, mb * bs, h, d)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    v_scale: torch.Tensor | float, block_tables: torch.Tensor,
                    kv_lens: torch.Tensor, q_req: torch.Tensor, q_pos: torch.Tensor,
                    sm_scale: float | None = None) -> torch.Tensor:
    """Attention of each query token over its request's paged K/V; returns fp32 ``[T, Hq, D]``.

    ``q_req[t]`` is the request of token ``t`` and ``q_pos[t]`` its position; a
    query sees keys at positions ``<= q_pos[t]`` and ``< kv_lens[q_req[t]]``.
    """
    t, hq, d = q.shape
    hkv = k_cache.shape[2]
    if hq % hkv:
        raise ValueError(f"query heads ({hq}) must be a multiple of kv heads ({hkv})")
    group = hq // hkv
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    keys = gather(k_cache, block_tables).float()[q_req]                  # [T, L, Hkv, D]
    vals = dequantize_v(gather(v_cache, block_tables), v_scale)[q_req]   # [T, L, Hkv, D]
    length = keys.shape[1]
    qf = q.float().reshape(t, hkv, group, d)
    scores = torch.einsum("thgd,tlhd->thgl", qf, keys) * scale
    pos = torch.arange(length, device=q.device)
    visible = (pos[None, :] <= q_pos[:, None]) & (pos[None, :] < kv_lens[q_req][:, None])
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("thgl,tlhd->thgd", probs, vals)
    return out.reshape(t, hq, d)


def varlen_metadata(qo_lens: Sequence[int], kv_lens: Sequence[int],
                    device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token request ids and positions for requests with ``qo_lens`` new tokens each."""
    req: list[int] = []
    pos: list[int] = []
    for r, (nq, nkv) in enumerate(zip(qo_lens, kv_lens)):
        if nq > nkv:
            raise ValueError(f"request {r}: {nq} query tokens but only {nkv} cached tokens")
        req.extend([r] * nq)
        pos.extend(range(nkv - nq, nkv))
    return (torch.tensor(req, dtype=torch.long, device=device),
            torch.tensor(pos, dtype=torch.long, device=device))


def varlen_paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           v_scale: torch.Tensor | float, qo_indptr: Sequence[int],
                           kv_lens: Sequence[int], block_tables: torch.Tensor,
                           sm_scale: float | None = None) -> torch.Tensor:
    """Host-side convenience: requests described by ``qo_indptr`` (prefill and decode mixed)."""
    qo_lens = [qo_indptr[i + 1] - qo_indptr[i] for i in range(len(qo_indptr) - 1)]
    q_req, q_pos = varlen_metadata(qo_lens, kv_lens, q.device)
    lens = torch.tensor(list(kv_lens), dtype=torch.long, device=q.device)
    return paged_attention(q, k_cache, v_cache, v_scale, block_tables, lens, q_req, q_pos, sm_scale)


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    sm_scale: float | None = None) -> torch.Tensor:
    """Plain causal GQA attention for one request: q ``[n, Hq, D]`` are the last n of k/v ``[L, Hkv, D]``."""
    n, hq, d = q.shape
    length, hkv = k.shape[0], k.shape[1]
    group = hq // hkv
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    kk = k.double().repeat_interleave(group, dim=1)                  # [L, Hq, D]
    vv = v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,lhd->hnl", q.double(), kk) * scale
    qpos = torch.arange(length - n, length, device=q.device)[:, None]
    mask = torch.arange(length, device=q.device)[None, :] <= qpos
    scores = scores.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("hnl,lhd->nhd", torch.softmax(scores, dim=-1), vv)


# A systematic error hides under the max-abs bound: the output x1.01 stays at 0.63 of ``_tol`` (1% of the
# largest output against 1.6%).  The least-squares slope of the output against the reference,
# <out, ref> / <ref, ref> over every element, averages the kernel's rounding away (it is unbiased, ~1e-4 here)
# and keeps a systematic one: output x1.01 gives 1.010, the softmax scale x1.02 gives 1.006 at 17 tokens and
# 1.014..1.022 from 100 up (logit std ~4, fp64 torch over the harness's own data).  Measured on the H200 with
# the real FlashInfer 2f3f0f6d (receipts/examples/kernel-sensitivity-h200): healthy within 1.4e-4 of 1,
# output x1.01 at 1.0098, softmax x1.02 at 1.011..1.017.
SLOPE_BOUND = 0.004


def slope(out: torch.Tensor, want: torch.Tensor) -> float:
    """The least-squares slope of ``out`` against ``want`` (1.0: no systematic scale error)."""
    o, w = out.double().flatten(), want.double().flatten()
    den = float(w @ w)
    return float(o @ w) / den if den > 0 else float("nan")


def slope_ok(slope: float) -> bool:
    return abs(slope - 1.0) <= SLOPE_BOUND      # False for nan too
