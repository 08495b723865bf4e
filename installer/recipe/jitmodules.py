"""The JIT modules a model selection needs, derived (not hand-listed), and FlashInfer's names for them.

A K16/V8 pair serves a model through two FlashInfer routes (``ROUTES``):

* ``decode``: the asymmetric CUDA-core batch decode over the paged cache: q, K and o
  in the compute dtype (K16 = the compute dtype, vLLM's ``kv_cache_dtype=("auto", ...)``),
  V in e4m3;
* ``fresh_prefill``: fresh prompts attend over their in-flight K/V at full precision
  (FlashInfer's ordinary ``BatchPrefillWithRaggedKVCacheWrapper``, backend ``fa2``):
  q = K = V = o = the compute dtype.  Ragged and paged runs live in the same module;
* ``paged_prefill`` (only where a recipe declares its fork has it): an asymmetric paged
  prefill, q/K/o in the compute dtype and V e4m3.

Each module is named with FlashInfer's own URI rule, recorded from the real source
(flashinfer-ai/flashinfer 2f3f0f6d, ``flashinfer/jit/attention/modules.py``:
``get_batch_decode_uri``, ``get_batch_prefill_uri``, ``_kv_uri_fragment``; dtype
names from ``flashinfer/jit/utils.py`` ``filename_safe_dtype_map``).  The record
and sample URIs are in ``tests/fixtures/flashinfer_uri_rule.json`` (made by
``tests/fixtures/flashinfer_uri_record.py``); a test holds this module to it.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

ROUTES = ("decode", "fresh_prefill", "paged_prefill")
DEFAULT_ROUTES = ("decode", "fresh_prefill")
from ...checks.contract import COMPUTE_DTYPES  # noqa: E402  (vLLM --dtype name -> FlashInfer name; one definition)

V_FORMATS = {"fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2"}          # vLLM cache dtype -> FlashInfer name
HEAD_DIMS = (64, 128, 256)                                    # FlashInfer rejects > 256
KINDS = ("decode", "prefill")                                 # a module's kind
DTYPES = ("f16", "bf16", "e4m3", "e5m2")                      # FlashInfer names a module's q/k/v/o dtypes
GQA_GROUPS = (1, 2, 3, 4, 8)                                  # DISPATCH_GQA_GROUP_SIZE in include/flashinfer/utils.cuh
IDX = "i32"                                                   # vLLM's FlashInfer indptr dtype (int32)


class DeriveError(ValueError):
    """A selection the modules cannot be derived for; the message names the value."""


@dataclass(frozen=True)
class ModelShape:
    """The attention shape of a model, from its config.json at the pinned revision."""

    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    source: str = ""


@dataclass(frozen=True)
class JitModule:
    """One FlashInfer attention module: what ``gen_batch_{decode,prefill}_module`` is called with."""

    kind: str               # decode | prefill
    q: str
    k: str
    v: str
    o: str
    head_dim: int
    posenc: int = 0
    backend: str = "fa2"
    use_swa: bool = False
    use_logits_cap: bool = False
    f16qk: bool = False
    route: str = ""         # the serving route it was derived for ("" when hand-listed in [[jit.modules]])

    @property
    def uri(self) -> str:
        return module_uri(self)


def _kv_fragment(k: str, v: str) -> str:
    return f"dtype_kv_{k}" if k == v else f"dtype_k_{k}_dtype_v_{v}"


def module_uri(m: JitModule) -> str:
    """FlashInfer's URI for the module (its JIT cache directory and ``.so`` name)."""
    tail = (f"dtype_o_{m.o}_dtype_idx_{IDX}_head_dim_qk_{m.head_dim}_head_dim_vo_{m.head_dim}_"
            f"posenc_{m.posenc}_use_swa_{m.use_swa}_use_logits_cap_{m.use_logits_cap}")
    if m.kind == "decode":
        return f"batch_decode_with_kv_cache_dtype_q_{m.q}_{_kv_fragment(m.k, m.v)}_{tail}"
    if m.kind == "prefill":
        return (f"batch_prefill_with_kv_cache_dtype_q_{m.q}_{_kv_fragment(m.k, m.v)}_{tail}_f16qk_{m.f16qk}"
                + ("_sm90" if m.backend == "fa3" else ""))
    raise DeriveError(f"module kind {m.kind!r}: expected decode or prefill")


def check_shape(shape: ModelShape) -> None:
    if shape.head_dim not in HEAD_DIMS:
        raise DeriveError(f"head_dim {shape.head_dim}: expected one of {HEAD_DIMS} (FlashInfer's head dims)")
    if shape.num_key_value_heads <= 0 or shape.num_attention_heads % shape.num_key_value_heads:
        raise DeriveError(f"{shape.num_attention_heads} q heads over {shape.num_key_value_heads} kv heads: "
                          "expected a whole number of q heads per kv head")
    group = shape.num_attention_heads // shape.num_key_value_heads
    if group not in GQA_GROUPS:
        raise DeriveError(f"GQA group size {group}: FlashInfer's decode kernels dispatch {GQA_GROUPS} only")
    if shape.num_hidden_layers <= 0:
        raise DeriveError(f"num_hidden_layers {shape.num_hidden_layers}: expected a positive count")


def derive_modules(shape: ModelShape, compute_dtype: str, v_format: str = "fp8_e4m3",
                   routes: Sequence[str] = DEFAULT_ROUTES) -> tuple[JitModule, ...]:
    """The modules a K16/V8 engine asks FlashInfer for when it serves this selection."""
    if compute_dtype not in COMPUTE_DTYPES:
        raise DeriveError(f"compute dtype {compute_dtype!r}: expected one of {', '.join(COMPUTE_DTYPES)}")
    if v_format not in V_FORMATS:
        raise DeriveError(f"V format {v_format!r}: expected one of {', '.join(V_FORMATS)}")
    unknown = [r for r in routes if r not in ROUTES]
    if unknown:
        raise DeriveError(f"routes {unknown}: expected some of {', '.join(ROUTES)}")
    check_shape(shape)
    c, v = COMPUTE_DTYPES[compute_dtype], V_FORMATS[v_format]
    kind_v = {"decode": ("decode", v), "fresh_prefill": ("prefill", c), "paged_prefill": ("prefill", v)}
    return tuple(JitModule(kind_v[r][0], c, c, kind_v[r][1], c, shape.head_dim, route=r) for r in routes)


def selection_facts(compute_dtype: str, v_format: str, modules: Sequence[JitModule],
                    extra: Mapping[str, object] | None = None) -> dict[str, object]:
    """What the smoke run is told about a selection (JSON-able)."""
    return {"compute_dtype": compute_dtype, "k_cache_dtype": compute_dtype, "v_cache_dtype": v_format,
            "kv_cache_dtype": ["auto", v_format],
            "jit_modules": [{"uri": m.uri, "route": m.route, "kind": m.kind} for m in modules], **(extra or {})}
