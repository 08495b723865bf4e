"""Kernel level: the FlashInfer fork's asymmetric wrappers against the torch reference.

The API is probed first: ``plan`` must take ``k_data_type`` and ``v_data_type``
(the fork's keyword-only arguments); a FlashInfer without them is
``unsupported``, never a crash.  Random paged data, K bfloat16, V float8_e4m3fn
with a per-layer scale, NHD layout.
"""

from __future__ import annotations

import gc
import inspect
import math
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from checks import reference as ref
from checks.inputs import Manifest, ScaleChoice
from checks.results import (FAILED, PASSED, SKIPPED, CheckResult, REQUIRED_CHECKS, Unsupported,
                            run_check, verdict)

WRAPPERS = ("BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper")
HQ, HKV, D, PAGE, BLOCKS = 8, 2, 128, 16, 128
WORKSPACE = 128 * 1024 * 1024


def probe() -> tuple[ModuleType | None, str | None]:
    """``(flashinfer, None)`` when the asymmetric API is there, else ``(None, why)``."""
    try:
        import flashinfer  # type: ignore[import-not-found]
    except Exception as exc:  # ImportError, or a broken JIT environment
        return None, f"flashinfer cannot be imported ({type(exc).__name__}: {exc})"
    for name in WRAPPERS:
        cls = getattr(flashinfer, name, None)
        if cls is None:
            return None, f"flashinfer.{name} is missing"
        params = inspect.signature(cls.plan).parameters
        missing = [p for p in ("k_data_type", "v_data_type") if p not in params]
        if missing:
            return None, f"flashinfer.{name}.plan has no {', '.join(missing)} (not the asymmetric fork)"
    return flashinfer, None


class _Paged:
    """Random requests in a paged cache: block tables, FlashInfer indptr/indices, reference."""

    def __init__(self, kv_lens: list[int], v_scale: float, device: torch.device, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.kv_lens = kv_lens
        self.k = torch.zeros(BLOCKS, PAGE, HKV, D, dtype=torch.bfloat16, device=device)
        self.v = torch.zeros(BLOCKS, PAGE, HKV, D, dtype=ref.FP8, device=device)
        self.v_scale = v_scale
        pages = [math.ceil(n / PAGE) for n in kv_lens]
        perm = (torch.randperm(BLOCKS - 1, generator=g) + 1).tolist()
        self.tables, at = [], 0
        for n in pages:
            self.tables.append(perm[at:at + n])
            at += n
        for table, n in zip(self.tables, kv_lens):
            slots = torch.tensor([table[p // PAGE] * PAGE + p % PAGE for p in range(n)], device=device)
            k = torch.randn(n, HKV, D, generator=g).to(device)
            v = (torch.randn(n, HKV, D, generator=g) * 200 * v_scale).to(device)
            ref.write_kv(self.k, self.v, k, v, slots, v_scale)
        i32: dict[str, Any] = dict(dtype=torch.int32, device=device)
        self.indptr = torch.tensor([0] + list(_cumsum(pages)), **i32)
        self.indices = torch.tensor([b for t in self.tables for b in t], **i32)
        self.last_len = torch.tensor([(n - 1) % PAGE + 1 for n in kv_lens], **i32)
        width = max(pages)
        self.block_tables = torch.tensor([t + [0] * (width - len(t)) for t in self.tables],
                                         dtype=torch.long, device=device)

    def reference(self, q: torch.Tensor, qo_lens: list[int], scale: float | None = None) -> torch.Tensor:
        q_req, q_pos = ref.varlen_metadata(qo_lens, self.kv_lens, q.device)
        lens = torch.tensor(self.kv_lens, dtype=torch.long, device=q.device)
        return ref.paged_attention(q, self.k, self.v, self.v_scale if scale is None else scale,
                                   self.block_tables, lens, q_req, q_pos)


def _cumsum(xs: list[int]) -> list[int]:
    out, s = [], 0
    for x in xs:
        s += x
        out.append(s)
    return out


def _tol(expected: torch.Tensor) -> float:
    # bf16 query/output rounding (2**-8 relative) on top of identical fp8 values.
    return 2.0 ** -7 * float(expected.abs().max()) + 1e-3


class KernelBackend:
    def __init__(self, fi: ModuleType, device: torch.device, v_scale: float, seed: int) -> None:
        self.fi, self.device, self.v_scale, self.seed = fi, device, v_scale, seed

    def workspace(self) -> torch.Tensor:
        return torch.empty(WORKSPACE, dtype=torch.uint8, device=self.device)

    def decode(self, paged: _Paged, q: torch.Tensor, v_scale: float | None = None,
               wrapper: Any = None) -> torch.Tensor:
        w = wrapper if wrapper is not None else \
            self.fi.BatchDecodeWithPagedKVCacheWrapper(self.workspace(), "NHD")
        w.plan(paged.indptr, paged.indices, paged.last_len, HQ, HKV, D, PAGE,
               q_data_type=torch.bfloat16, k_data_type=torch.bfloat16, v_data_type=ref.FP8)
        return w.run(q, (paged.k, paged.v), v_scale=self.v_scale if v_scale is None else v_scale)

    def prefill(self, paged: _Paged, q: torch.Tensor, qo_lens: list[int]) -> torch.Tensor:
        w = self.fi.BatchPrefillWithPagedKVCacheWrapper(self.workspace(), "NHD")
        qo = torch.tensor([0] + _cumsum(qo_lens), dtype=torch.int32, device=self.device)
        w.plan(qo, paged.indptr, paged.indices, paged.last_len, HQ, HKV, D, PAGE, causal=True,
               q_data_type=torch.bfloat16, k_data_type=torch.bfloat16, v_data_type=ref.FP8)
        return w.run(q, (paged.k, paged.v), v_scale=self.v_scale)

    def q(self, n: int, salt: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed + salt)
        return torch.randn(n, HQ, D, generator=g).to(self.device, torch.bfloat16)


def _physical(kb: KernelBackend) -> CheckResult:
    paged = _Paged([37, 100, 5, 250], kb.v_scale, kb.device, kb.seed)
    q = kb.q(4, 1)
    out = kb.decode(paged, q).float()
    want = paged.reference(q, [1, 1, 1, 1])
    err = float((out - want).abs().max())
    # The dtypes and byte counts above are the harness's own tensors; what the kernel
    # controls is whether it really reads V as fp8: planned for V fp8, it must refuse a
    # bf16 V cache (forks.md: ValueError naming v_data_type), not run on it silently.
    w = kb.fi.BatchDecodeWithPagedKVCacheWrapper(kb.workspace(), "NHD")
    w.plan(paged.indptr, paged.indices, paged.last_len, HQ, HKV, D, PAGE,
           q_data_type=torch.bfloat16, k_data_type=torch.bfloat16, v_data_type=ref.FP8)
    try:
        w.run(q, (paged.k, paged.v.to(torch.bfloat16)), v_scale=kb.v_scale)
        refusal = "accepted a bf16 V cache planned as fp8"
    except ValueError as exc:
        refusal = "ValueError naming v_data_type" if "v_data_type" in str(exc) else \
            f"ValueError not naming v_data_type: {exc}"
    refused = refusal == "ValueError naming v_data_type"
    layout = (paged.k.dtype in ref.K_DTYPES and paged.v.dtype == ref.FP8
              and paged.v.nbytes * 2 == paged.k.nbytes)
    ok = layout and refused and err <= _tol(want)
    m = {"k_dtype": str(paged.k.dtype), "v_dtype": str(paged.v.dtype), "k_bytes": paged.k.nbytes,
         "v_bytes": paged.v.nbytes, "decode_max_abs_err": err, "bf16_v_cache": refusal}
    why = "; ".join(x for x in (
        "" if layout else "K/V cache layout wrong",
        "" if refused else f"bf16 V cache: {refusal}",
        "" if err <= _tol(want) else f"decode differs from the reference (err {err:.3g})") if x)
    return verdict("physical_k16v8", ok, f"asymmetric decode on K bf16 / V fp8 matches the reference "
                   f"(err {err:.2g}); a bf16 V cache is refused", why, m,
                   {"v_bytes": "k_bytes / 2", "decode_max_abs_err": _tol(want),
                    "bf16_v_cache": "ValueError naming v_data_type"})


def _scales(kb: KernelBackend) -> CheckResult:
    paged = _Paged([64, 129], kb.v_scale, kb.device, kb.seed + 1)
    q = kb.q(2, 2)
    out = kb.decode(paged, q).float()
    want, at_one = paged.reference(q, [1, 1]), paged.reference(q, [1, 1], scale=1.0)
    err, err_one = float((out - want).abs().max()), float((out - at_one).abs().max())
    ok = err <= _tol(want) and (kb.v_scale == 1.0 or err_one > _tol(at_one))
    return verdict("calibrated_scales", ok, f"v_scale {kb.v_scale:.4g} is applied (err {err:.2g})",
                   f"the kernel output does not follow v_scale {kb.v_scale:.4g}",
                   {"v_scale": kb.v_scale, "max_abs_err": err, "max_abs_err_if_scale_1": err_one},
                   {"max_abs_err": _tol(want)})


def _mixed(kb: KernelBackend) -> CheckResult:
    lens, qo = [80, 33, 40, 17], [1, 1, 40, 1]          # request 2 is a whole fresh prompt
    paged = _Paged(lens, kb.v_scale, kb.device, kb.seed + 2)
    q = kb.q(sum(qo), 3)
    mixed = kb.prefill(paged, q, qo).float()
    solo_paged = _Paged([40], kb.v_scale, kb.device, kb.seed + 2)
    solo_paged.k, solo_paged.v = paged.k, paged.v
    solo_paged.indptr = paged.indptr[2:4] - paged.indptr[2]
    solo_paged.indices = paged.indices[int(paged.indptr[2]):int(paged.indptr[3])]
    solo_paged.last_len = paged.last_len[2:3]
    solo_paged.block_tables = paged.block_tables[2:3]
    rows = slice(2, 42)
    solo = kb.prefill(solo_paged, q[rows].contiguous(), [40]).float()
    want = paged.reference(q, qo)
    diff, err = float((mixed[rows] - solo).abs().max()), float((mixed - want).abs().max())
    ok = diff <= _tol(solo) and err <= _tol(want)
    return verdict("mixed_prefill", ok, f"fresh 40-token prefill beside 3 decodes matches solo "
                   f"(diff {diff:.2g})", f"mixed prefill differs (solo diff {diff:.3g}, ref err {err:.3g})",
                   {"solo_max_abs_diff": diff, "reference_max_abs_err": err},
                   {"max_abs_diff": _tol(solo)})


def _graphs(kb: KernelBackend) -> CheckResult:
    """Capture ``run`` once per batch size, re-plan other lengths, replay, compare with eager.

    Without CUDA there is no capture: ``run`` is called again on the static
    inputs after each re-plan (what a replay reads), which still catches a
    ``plan`` that does not refresh the static buffers, but is reported skipped.
    """
    fi, dev = kb.fi, kb.device
    cuda = dev.type == "cuda"
    replays, worst = [], 0.0
    for batch, shapes in ((2, ([30, 200], [7, 64])), (4, ([1, 16, 17, 300], [90, 2, 48, 160]))):
        i32: dict[str, Any] = dict(dtype=torch.int32, device=dev)
        w = fi.BatchDecodeWithPagedKVCacheWrapper(
            kb.workspace(), "NHD", use_cuda_graph=True,
            paged_kv_indptr_buffer=torch.zeros(batch + 1, **i32),
            paged_kv_indices_buffer=torch.zeros(BLOCKS, **i32),
            paged_kv_last_page_len_buffer=torch.zeros(batch, **i32))
        q_static = kb.q(batch, 4)
        first = _Paged(shapes[0], kb.v_scale, dev, kb.seed + 5)
        kb.decode(first, q_static, wrapper=w)                     # plan + warm-up
        graph, out = None, None
        if cuda:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = w.run(q_static, (first.k, first.v), v_scale=kb.v_scale)
        for i, lens in enumerate(shapes):
            paged = _Paged(lens, kb.v_scale, dev, kb.seed + 6 + i)
            first.k.copy_(paged.k)
            first.v.copy_(paged.v)
            q_new = kb.q(batch, 7 + i)
            q_static.copy_(q_new)
            w.plan(paged.indptr, paged.indices, paged.last_len, HQ, HKV, D, PAGE,
                   q_data_type=torch.bfloat16, k_data_type=torch.bfloat16, v_data_type=ref.FP8)
            if graph is not None:
                graph.replay()
                replayed = out
            else:
                replayed = w.run(q_static, (first.k, first.v), v_scale=kb.v_scale)
            assert replayed is not None
            eager = kb.decode(paged, q_new).float()
            diff = float((replayed.float() - eager).abs().max())
            worst = max(worst, diff / _tol(eager))
            replays.append({"batch": batch, "kv_lens": lens, "max_abs_diff": diff})
    measured = {"cuda_graphs": cuda, "replays": replays, "worst_diff_over_bound": worst}
    limits = {"max_abs_diff": "2**-7 * max|eager| + 1e-3"}
    if not worst <= 1.0:
        what = "graph replay" if cuda else "static-buffer run"
        return CheckResult("decode_graphs", FAILED, f"a {what} after re-plan differs from eager "
                           f"({worst:.3g} x the bound)", measured, limits)
    if not cuda:
        return CheckResult("decode_graphs", SKIPPED, f"CUDA graphs need a GPU; {len(replays)} "
                           f"static-buffer runs after re-plan matched eager", measured, limits)
    return CheckResult("decode_graphs", PASSED, f"{len(replays)} CUDA graph replays match eager",
                       measured, limits)


def _held_bytes(device: torch.device) -> int:
    """Bytes held on ``device``: the CUDA caching allocator's count, or on a CPU the
    storage bytes of every live (gc-tracked) tensor there."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return int(torch.cuda.memory_allocated(device))
    gc.collect()
    storages: dict[int, int] = {}
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance falls back to __class__, which some lazy
        # module attributes (torch.distributed.reduce_op) turn into a warning
        if issubclass(type(obj), torch.Tensor) and obj.device.type == device.type:
            try:
                st = obj.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            storages[st.data_ptr()] = st.nbytes()
    return sum(storages.values())


def _memory(kb: KernelBackend) -> CheckResult:
    paged = _Paged([64, 33, 120], kb.v_scale, kb.device, kb.seed + 9)
    q = kb.q(3, 9)
    w = kb.fi.BatchDecodeWithPagedKVCacheWrapper(kb.workspace(), "NHD")
    kb.decode(paged, q, wrapper=w)
    seen = [_held_bytes(kb.device)]
    for _ in range(4):
        kb.decode(paged, q, wrapper=w)
        seen.append(_held_bytes(kb.device))
    expected = BLOCKS * PAGE * HKV * D * (2 + 1)
    actual = paged.k.nbytes + paged.v.nbytes
    ok = len(set(seen)) == 1 and actual == expected
    what = "allocated GPU bytes" if kb.device.type == "cuda" else "live tensor bytes"
    return verdict("clean_memory", ok, f"{actual} cache bytes as expected; {what} steady over "
                   f"{len(seen) - 1} decode rounds",
                   f"cache bytes {actual} vs {expected}, {what} {seen}",
                   {"cache_bytes": actual, "held_after_rounds": seen, "held_measure": what},
                   {"cache_bytes": expected, "held": "unchanged after the warm-up round"})


def _deterministic(kb: KernelBackend) -> CheckResult:
    paged = _Paged([77, 300, 12], kb.v_scale, kb.device, kb.seed + 10)
    q = kb.q(3, 10)
    a, b = kb.decode(paged, q), kb.decode(paged, q)
    finite = bool(torch.isfinite(a).all())
    same = bool(torch.equal(a, b))
    return verdict("deterministic_generation", finite and same, "decode output finite and bitwise repeatable",
                   f"finite={finite} identical={same}", {"finite": finite, "identical": same},
                   {"identical": True, "finite": True})


def run_kernel_level(device: torch.device, seed: int, manifest: Manifest | None,
                     fixtures: Path | None) -> tuple[list[CheckResult], ScaleChoice]:
    from checks.inputs import engine_scales
    choice = ScaleChoice((0.05,), "synthetic", note="kernel level: one scale for random data")
    if manifest is not None and fixtures is not None:
        found = engine_scales(manifest, fixtures, None)
        if found.error is None:
            choice = ScaleChoice(found.v_scales[:1], "fixtures", found.path,
                                 note="layer 0's V scale from the fixtures file")
        elif found.path is not None and Path(found.path).exists():
            # a scales file that is there but wrong (another model or revision, a NaN) is never
            # silently replaced: the run goes on with the synthetic scale and the check fails
            choice = ScaleChoice((0.05,), "synthetic", found.path, error=found.error,
                                 note="the fixtures file was rejected")
    fi, why = probe()
    if fi is None:
        return [CheckResult(n, "unsupported", f"unsupported: {why}") for n, _ in REQUIRED_CHECKS], choice
    kb = KernelBackend(fi, device, float(choice.v_scales[0]), seed)
    fns: dict[str, Callable[[KernelBackend], CheckResult]] = {
        "physical_k16v8": _physical, "calibrated_scales": _scales, "mixed_prefill": _mixed,
        "decode_graphs": _graphs, "clean_memory": _memory, "deterministic_generation": _deterministic}
    results = [run_check(n, fns[n], kb) for n, _ in REQUIRED_CHECKS]
    if choice.error is not None:
        results = [CheckResult(r.name, FAILED, f"the supplied scales were rejected: {choice.error.splitlines()[0]}",
                               {"scales_file": choice.path, "error": choice.error}, r.limits, r.seconds)
                   if r.name == "calibrated_scales" else r for r in results]
    return results, choice


__all__ = ["probe", "run_kernel_level", "Unsupported"]
