"""The torch K16/V8 reference against dense attention on unquantized data."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch

import pytest

from october.checks import torch_reference as ref

HQ, HKV, D, BS, NB = 8, 2, 32, 4, 48


def _paged_requests(kv_lens: list[int], v_scale: float, seed: int = 0):
    """Random requests written through a shuffled slot mapping; returns cache + dense copies."""
    g = torch.Generator().manual_seed(seed)
    k_cache = torch.zeros(NB, BS, HKV, D, dtype=torch.bfloat16)
    v_cache = torch.zeros(NB, BS, HKV, D, dtype=ref.FP8)
    free = (torch.randperm(NB - 1, generator=g) + 1).tolist()
    tables, dense = [], []
    for n in kv_lens:
        blocks = [free.pop() for _ in range((n + BS - 1) // BS)]
        tables.append(blocks)
        k = torch.randn(n, HKV, D, generator=g)
        v = torch.randn(n, HKV, D, generator=g) * 3.0
        slots = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(n)])
        ref.write_kv(k_cache, v_cache, k, v, slots, v_scale)
        dense.append((k, v))
    width = max(len(t) for t in tables)
    bt = torch.tensor([t + [0] * (width - len(t)) for t in tables])
    return k_cache, v_cache, bt, dense


def test_write_stores_k16_and_saturating_v8() -> None:
    k_cache = torch.zeros(2, BS, 1, 4, dtype=torch.bfloat16)
    v_cache = torch.zeros(2, BS, 1, 4, dtype=ref.FP8)
    k = torch.tensor([[[1.0, -2.0, 3.0, 0.5]]])
    v = torch.tensor([[[1.0, -1000.0, 1000.0, 0.3]]])
    ref.write_kv(k_cache, v_cache, k, v, torch.tensor([6]), 0.5)   # block 1, offset 2
    assert torch.equal(k_cache[1, 2].float(), k[0])
    back = ref.dequantize_v(v_cache[1, 2], 0.5)[0]
    assert back[1].item() == -448.0 * 0.5 and back[2].item() == 448.0 * 0.5   # saturated
    assert back[0].item() == 1.0
    assert abs(back[3].item() - 0.3) <= ref.FP8_REL_ERR * 0.3 + ref.FP8_ABS_ERR * 0.5
    assert v_cache.view(torch.uint8).count_nonzero() == 4                      # nothing else touched


def test_write_refuses_a_non_fp8_value_cache() -> None:
    k_cache = torch.zeros(1, BS, 1, 4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        ref.write_kv(k_cache, k_cache.clone(), torch.ones(1, 1, 4), torch.ones(1, 1, 4),
                     torch.tensor([0]), 1.0)


@pytest.mark.parametrize("v_scale", [3.0 * 4 / 448, 0.05])
def test_mixed_prefill_and_decode_match_dense_attention(v_scale: float) -> None:
    kv_lens = [9, 1, 17, 6]
    qo_lens = [9, 1, 1, 3]          # fresh prefill, decode of a 1-token context, decode, chunk
    k_cache, v_cache, bt, dense = _paged_requests(kv_lens, v_scale)
    g = torch.Generator().manual_seed(7)
    q = torch.randn(sum(qo_lens), HQ, D, generator=g)
    indptr = [0]
    for n in qo_lens:
        indptr.append(indptr[-1] + n)
    out = ref.varlen_paged_attention(q, k_cache, v_cache, v_scale, indptr, kv_lens, bt)
    assert out.dtype == torch.float32 and out.shape == q.shape
    for r, (k, v) in enumerate(dense):
        rows = slice(indptr[r], indptr[r + 1])
        exact = ref.dense_attention(q[rows], k, v)
        # Same math on what the cache holds: only fp32 rounding apart.
        held_k = k.to(torch.bfloat16)
        held_v = ref.dequantize_v(ref.quantize_v(v, v_scale), v_scale)
        same = ref.dense_attention(q[rows], held_k, held_v)
        assert torch.allclose(out[rows].double(), same, atol=1e-5, rtol=1e-5)
        # Against unquantized data: an output is a convex mix of V rows, so FP8's half-ulp
        # (2**-4 relative) bounds its error; bf16 keys perturb the mix by far less.
        bound = ref.v8_error_bound(v, v_scale) + 2.0 ** -7 * float(v.abs().max())
        err = float((out[rows].double() - exact).abs().max())
        assert err <= bound, (r, err, bound)
        if qo_lens[r] > 1 or kv_lens[r] > 1:
            assert err > 0.0        # quantization really happened


def test_causal_mask_and_gqa_groups() -> None:
    k_cache, v_cache, bt, dense = _paged_requests([5], 0.05, seed=3)
    q = torch.randn(5, HQ, D)
    out = ref.varlen_paged_attention(q, k_cache, v_cache, 0.05, [0, 5], [5], bt)
    # The first query sees only the first key: its output is that value row, per kv head group.
    v0 = ref.dequantize_v(v_cache[bt[0, 0], 0], 0.05)                 # [HKV, D]
    expected = v0.repeat_interleave(HQ // HKV, dim=0)
    assert torch.allclose(out[0], expected, atol=1e-6)


def test_metadata_rejects_more_queries_than_context() -> None:
    with pytest.raises(ValueError, match="query tokens"):
        ref.varlen_metadata([4], [3])
