"""The engine level's outside oracles on synthetic captures (real torch, no engine): each judgement can fail."""

from __future__ import annotations

import math
import warnings

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch

import pytest

from october.checks.engine import oracles as oracle
from october.checks import torch_reference as ref
from october.checks.engine.driver import layer_pair
from october.checks.results import Unsupported

HQ, HKV, D, N0, STEPS = 4, 2, 64, 24, 5


def _capture(amax: float, *, store_scale: float, read_scale: float, upcast: bool = False,
             zero: bool = False, out_scale: float = 1.0, sm_scale: float = 1.0
             ) -> tuple[oracle.Capture, torch.Tensor, float]:
    """What a K16/V8 engine would hand impl.forward for one prompt + decodes, V values up to ``amax``."""
    g = torch.Generator().manual_seed(7)
    n = N0 + STEPS
    q = torch.randn(n, HQ, D, generator=g)
    k = torch.randn(n, HKV, D, generator=g).to(torch.float16).float()
    v = torch.randn(n, HKV, D, generator=g)
    v = v / v.abs().max() * amax
    supplied = amax / ref.FP8_MAX
    cache = torch.zeros(8, 16, HKV, D, dtype=ref.FP8)
    cache.view(-1, HKV, D)[:n] = ref.quantize_v(v, store_scale)
    stored = ref.dequantize_v(cache.view(-1, HKV, D)[:n], read_scale)
    seen = v if upcast else stored
    cap = oracle.Capture(head_dim=D)
    f = 0.0 if zero else out_scale
    qs = q * sm_scale                      # an engine whose softmax scale is sm_scale x 1/sqrt(D)
    out0 = ref.dense_attention(qs[:N0], k[:N0], v[:N0]).float()           # fresh prefill: in-flight K/V
    cap.calls.append((q[:N0], k[:N0], v[:N0], out0 * f))
    for j in range(STEPS):
        p = N0 + j
        o = ref.dense_attention(qs[p:p + 1], k[:p + 1], seen[:p + 1]).float()
        cap.calls.append((q[p:p + 1], k[p:p + 1], v[p:p + 1], o * f))
    return cap, cache, supplied


def _judge(**kw: float | bool) -> oracle.LayerVerdict:
    cap, cache, supplied = _capture(100.0, **kw)  # type: ignore[arg-type]
    return oracle.judge_layer(cap, cache, supplied, torch.float16, 0)


def test_a_healthy_k16v8_layer_passes_every_judgement() -> None:
    s = 100.0 / ref.FP8_MAX
    v = _judge(store_scale=s, read_scale=s)
    assert (v.ok_prefill, v.ok_decode, v.reads_8bit, v.ok_codes) == (True, True, True, True)
    assert v.prefill_route == "in-flight K/V at full precision (fresh prefill)"
    assert v.measured["codes_equal_share"] == 1.0 and v.measured["stored_over_predicted_amax"] == 1.0


def test_a_scale_stuck_at_one_fails_even_when_v_is_large() -> None:
    """The old bound (stored V uses >= 1/16 of e4m3's range) passed this whenever amax > 28."""
    v = _judge(store_scale=1.0, read_scale=1.0)
    assert not v.ok_codes and v.measured["stored_over_predicted_amax"] == pytest.approx(100 / 448, rel=0.07)


def test_a_scale_twice_off_fails_the_codes() -> None:
    s = 100.0 / ref.FP8_MAX
    v = _judge(store_scale=2 * s, read_scale=2 * s)
    assert not v.ok_codes and v.measured["stored_over_predicted_amax"] == pytest.approx(0.5, rel=0.07)
    assert v.ok_decode                     # the values read back are close: only the codes tell


def test_v_read_back_with_one_fails_the_decode_rows() -> None:
    s = 100.0 / ref.FP8_MAX
    v = _judge(store_scale=s, read_scale=1.0)
    assert v.ok_codes and not v.ok_decode


def test_a_16_bit_v_underneath_is_seen() -> None:
    s = 100.0 / ref.FP8_MAX
    v = _judge(store_scale=s, read_scale=s, upcast=True)
    assert not v.reads_8bit
    assert v.measured["decode_rel_l2_vs_16bit_v_reference"] < v.measured["decode_rel_l2_vs_k16v8_reference"]


def test_attention_times_zero_fails_prefill_and_decode() -> None:
    s = 100.0 / ref.FP8_MAX
    v = _judge(store_scale=s, read_scale=s, zero=True)
    assert not v.ok_prefill and not v.ok_decode and v.reads_8bit


@pytest.mark.parametrize("fault", [{"out_scale": 1.01}, {"sm_scale": 1.02}])
def test_a_systematic_error_under_the_max_abs_bound_fails_by_its_slope(fault: dict[str, float]) -> None:
    """Output x1.01 and softmax scale x1.02 (issue 18, item 5): the slope against the reference catches them."""
    s = 100.0 / ref.FP8_MAX
    healthy = _judge(store_scale=s, read_scale=s)
    v = _judge(store_scale=s, read_scale=s, **fault)
    for m in (healthy.measured, v.measured):
        assert set(m) >= {"prefill_slope_vs_reference", "decode_slope_vs_k16v8_reference"}
    assert abs(healthy.measured["decode_slope_vs_k16v8_reference"] - 1) < 1e-3
    assert not v.ok_decode and not v.ok_prefill, v.measured
    assert abs(v.measured["decode_slope_vs_k16v8_reference"] - 1) > ref.SLOPE_BOUND


def test_an_unmodelled_schedule_is_unsupported_not_a_verdict() -> None:
    s = 100.0 / ref.FP8_MAX
    cap, cache, supplied = _capture(100.0, store_scale=s, read_scale=s)
    cap.calls = cap.calls[:1] + [cap.calls[1], cap.calls[1]]
    cap.calls[1] = tuple(torch.cat([t, t]) for t in cap.calls[1])  # type: ignore[assignment]
    with pytest.raises(Unsupported, match="one prefill then single-token decodes"):
        oracle.judge_layer(cap, cache, supplied, torch.float16, 0)


def _gen(tokens: list[int], lps: list[float], second: list[float] | None = None) -> oracle.Generation:
    second = second or [lp - 5.0 for lp in lps]
    return tokens, [{t: lp, 10_000 + i: s} for i, (t, lp, s) in enumerate(zip(tokens, lps, second))]


def test_16_bit_oracle_agreement_and_bounds() -> None:
    base = _gen([1, 2, 3, 4], [-0.1, -0.2, -0.1, -0.3])
    ok, why, m, _ = oracle.compare_with_16bit(_gen([1, 2, 3, 4], [-0.12, -0.25, -0.1, -0.3]), base)
    assert ok and m["agree_until"] == 4 and m["logprob_diff_max"] == pytest.approx(0.05)
    ok, why, m, _ = oracle.compare_with_16bit(_gen([1, 2, 9, 9], [-0.1, -0.2, -0.1, -0.3]), base)
    assert not ok and "diverge at 2 of 4 where the 16-bit run is sure" in why
    # a near tie as the engines report one (top-2 and the chosen token): at position 2 the 16-bit run takes
    # 3 over 9 by 0.01 nats, the K16/V8 run 9 over 3; both report both, with the same logprobs
    near_tie = ([1, 2, 3, 4], [{1: -0.1}, {2: -0.2}, {3: -0.7, 9: -0.71}, {4: -0.3}])
    parted = ([1, 2, 9, 9], [{1: -0.1}, {2: -0.2}, {9: -0.7, 3: -0.71}, {9: -0.3}])
    ok, why, m, _ = oracle.compare_with_16bit(parted, near_tie)
    assert ok and m["agree_until"] == 2 and m["divergence_margin"] == pytest.approx(0.01), why
    assert m["compared_at_divergence"] == 2
    # the same parting where the K16/V8 run's distribution moved (3 at -3.0): caught at the divergence
    moved = ([1, 2, 9, 9], [{1: -0.1}, {2: -0.2}, {9: -0.7, 3: -3.0}, {9: -0.3}])
    ok, why, m, _ = oracle.compare_with_16bit(moved, near_tie)
    assert not ok and "logprobs differ" in why and m["logprob_diff_max"] == pytest.approx(2.3)
    ok, why, _, _ = oracle.compare_with_16bit(_gen([1, 2, 3, 4], [-2.0, -2.0, -2.0, -2.0]), base)
    assert not ok and "logprobs differ" in why
    ok, why, _, _ = oracle.compare_with_16bit(_gen([1, 2, 3, 4], [math.nan] * 4), base)
    assert not ok and "non-finite" in why


def test_protocol_prompt_has_exactly_the_asked_tokens() -> None:
    class Bytes:
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            return list(text.encode())
    ids = oracle.protocol_ids(Bytes(), 8192)
    assert len(ids) == 8192 and ids != oracle.protocol_ids(Bytes(), 8192)[:1] * 8192


def test_layer_pair_takes_every_vllm_layout() -> None:
    k, v = torch.zeros(2, 16, 2, 64, dtype=torch.float16), torch.zeros(2, 16, 2, 64, dtype=ref.FP8)
    assert layer_pair((k, v))[1] is v                  # the fork on 0.24: bound per layer
    assert layer_pair([(k, v)])[0] is k                # 0.18: per virtual engine
    # upstream 0.24, a symmetric cache: one [num_blocks, 2, block_size, heads, dim] tensor; K and V are views
    joint = torch.zeros(3, 2, 16, 2, 64, dtype=torch.uint8)
    jk, jv = layer_pair(joint)
    jv.fill_(7)
    assert jk.shape == jv.shape == (3, 16, 2, 64) and int(joint[:, 1].sum()) == 7 * jv.numel() and int(jk.sum()) == 0
    for bad in (torch.zeros(2, 3, 16, 2, 64), torch.zeros(16, 2, 64)):
        with pytest.raises(Unsupported, match="the layer's KV cache is Tensor"):
            layer_pair(bad)
