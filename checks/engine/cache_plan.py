"""Engine level: which KV cache the engine is asked for, and how to read what it holds.

Two kinds of run ask the engine for a cache:

* the **stack verdict** (:data:`K16V8`): ``kv_cache_dtype=("auto", "fp8_e4m3")``, K in the compute dtype
  and V e4m3 with the calibrated V scale: what the stack promises;
* a **diagnostic** (:data:`DIAGNOSTIC`, ``--diagnostic-cache``): a symmetric cache that upstream vLLM can
  store, so every engine check runs for real on a real engine.  ``bf16`` is ``kv_cache_dtype="auto"``
  (the cache in the compute dtype: bfloat16 on the H200 recipes; nothing quantized, every layer scale
  1.0), ``fp8_e4m3`` is K and V both e4m3, each quantized with its layer's own scale (``_k_scale``: what
  the engine holds, 1.0 for a checkpoint without one; ``_v_scale``: the calibrated one this harness
  writes before graph capture).  A diagnostic proves the harness on a real engine, never the stack.

What real vLLM 0.24.0 allocates for a symmetric cache with the FlashInfer backend (read from its
source: ``FlashInferBackend.get_kv_cache_shape``, ``STR_DTYPE_TO_TORCH_DTYPE``): one tensor per layer,
logically ``[num_blocks, 2, block_size, kv_heads, head_dim]`` (index 1: K, V), stored as ``uint8`` for
an fp8 cache (``FlashInferImpl.forward`` views it as e4m3).  The fork's K16/V8 cache is a
``(k_cache, v_cache)`` pair.  :func:`split_kv` reads both; :func:`codes` the values a cache side holds.

torch + the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import torch_reference as ref
from ..contract import DIAGNOSTIC_CACHES
from ..results import Unsupported

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
FP8_NAMES = ("fp8", "fp8_e4m3")


@dataclass(frozen=True)
class CachePlan:
    """What the engine is asked for (``kv_cache_dtype``) and what each cache side must then hold."""

    name: str                              # "k16v8", "bf16", "fp8_e4m3": how the receipt names it
    kv_cache_dtype: Any                    # what vllm.LLM(kv_cache_dtype=...) gets
    k_fp8: bool                            # K stored as e4m3 codes (else the compute dtype)
    v_fp8: bool                            # V stored as e4m3 codes (else the compute dtype)
    diagnostic: bool = False

    def holds(self, compute: torch.dtype) -> tuple[torch.dtype, torch.dtype]:
        """The (K, V) dtypes the cache must hold, as values (an fp8 side may be stored as uint8 bytes)."""
        return (ref.FP8 if self.k_fp8 else compute), (ref.FP8 if self.v_fp8 else compute)

    def bytes_per_value(self) -> tuple[int, int]:
        return (1 if self.k_fp8 else 2), (1 if self.v_fp8 else 2)

    def v_scales(self, supplied: tuple[float, ...]) -> tuple[float, ...]:
        """The V scale each layer must hold: the calibrated ones where V is quantized, else 1.0 (a
        16-bit V is stored as it is; FlashInfer would still multiply its output by the layer's scale)."""
        return supplied if self.v_fp8 else tuple(1.0 for _ in supplied)

    def as_json(self) -> dict[str, Any]:
        kv = self.kv_cache_dtype
        return {"name": self.name, "kv_cache_dtype": list(kv) if isinstance(kv, tuple) else kv,
                "k": "float8_e4m3fn" if self.k_fp8 else "compute dtype",
                "v": "float8_e4m3fn" if self.v_fp8 else "compute dtype", "diagnostic": self.diagnostic}


K16V8 = CachePlan("k16v8", ("auto", "fp8_e4m3"), k_fp8=False, v_fp8=True)
DIAGNOSTIC = {"bf16": CachePlan("bf16", "auto", k_fp8=False, v_fp8=False, diagnostic=True),
              "fp8_e4m3": CachePlan("fp8_e4m3", "fp8_e4m3", k_fp8=True, v_fp8=True, diagnostic=True)}
DIAGNOSTIC_CHOICES = DIAGNOSTIC_CACHES


def diagnostic_plans(choice: str) -> list[CachePlan]:
    """``both`` is bf16, then fp8_e4m3."""
    if choice == "both":
        return [DIAGNOSTIC["bf16"], DIAGNOSTIC["fp8_e4m3"]]
    if choice not in DIAGNOSTIC:
        raise ValueError(f"diagnostic cache: expected one of {DIAGNOSTIC_CHOICES}, found {choice!r}")
    return [DIAGNOSTIC[choice]]


def _is_pair(x: Any) -> bool:
    return isinstance(x, (tuple, list)) and len(x) == 2 and all(
        isinstance(t, torch.Tensor) and t.dim() == 4 for t in x)


def _is_joint(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dim() == 5 and x.shape[1] == 2


def split_kv(kv_cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's ``(k_cache, v_cache)`` (views: writing them writes the engine's cache): a pair bound
    directly (the fork on vLLM 0.24) or per virtual engine (0.18: a list whose [0] is the current one),
    or upstream's one tensor ``[num_blocks, 2, block_size, kv_heads, head_dim]`` (K at 1 = 0, V at 1)."""
    if _is_pair(kv_cache):
        return kv_cache[0], kv_cache[1]
    if _is_joint(kv_cache):
        return kv_cache[:, 0], kv_cache[:, 1]
    if isinstance(kv_cache, (tuple, list)) and kv_cache and (_is_pair(kv_cache[0]) or _is_joint(kv_cache[0])):
        return split_kv(kv_cache[0])
    shape = list(kv_cache.shape) if isinstance(kv_cache, torch.Tensor) else None
    raise Unsupported(f"the layer's KV cache is {type(kv_cache).__name__}{' ' + str(shape) if shape else ''}: "
                      "expected a (k_cache, v_cache) pair of 4-D tensors, a list of them per virtual engine, "
                      "or one 5-D tensor [num_blocks, 2, block_size, kv_heads, head_dim]")


def codes(t: torch.Tensor, fp8: bool) -> torch.Tensor:
    """The values a cache side holds: an fp8 side stored as uint8 bytes read as e4m3 (what FlashInfer
    reads), anything else as it is."""
    return t.view(ref.FP8) if fp8 and t.dtype == torch.uint8 else t


def side_ok(t: torch.Tensor, fp8: bool, want: torch.dtype) -> bool:
    """The side holds ``want``: an fp8 side as e4m3 or as its uint8 bytes, a 16-bit side exactly."""
    return t.dtype in (ref.FP8, torch.uint8) if fp8 else t.dtype == want


def layer_cache_dtype(layer: Any) -> str | None:
    """What the engine says the layer stores (``Attention.kv_cache_dtype`` in vLLM; absent elsewhere)."""
    value = getattr(layer, "kv_cache_dtype", None)
    return str(value) if value is not None else None
