"""Engine level: faults planted into the engine itself, for the diagnostic run only.

A diagnostic (``--diagnostic-cache``) proves the harness on a real engine; a fault planted into that
engine proves the checks can fail there too.  Each fault reaches only what any vLLM attention layer
has (the same surface the checks touch: ``Attention.impl.forward``, ``Attention._v_scale_float``), so
it works on the real engine as on the stand-in, and it is planted right after the model loads (with
the scales, before CUDA graph capture, so captured graphs carry it too) into the engines under test,
never into the 16-bit-cache oracle engine.

``attn_output_zero``   every layer's attention output multiplied by 0 (after the backend computed it)
``attn_output_x1_01``  every layer's attention output multiplied by 1.01 (a systematic 1% scale error, which
                       the max-abs bound misses and the layer oracle's slope rule must not)
``softmax_scale_x1_02`` every layer's softmax scale 2% high: ``impl.scale`` x1.02, where vLLM 0.24.0's
                       FlashInfer backend reads it (see :func:`_softmax_scale_x1_02`)
``v_read_scale_2x``    every layer reads V at twice the scale it was stored with: ``_v_scale_float``
                       (the host scale the FlashInfer backend passes to its prefill and decode
                       wrappers, which multiply their output by it) doubled, ``_v_scale`` (the device
                       scale ``reshape_and_cache_flash`` divides by when storing) left alone

Never active unless asked for by name (``--plant-fault``, accepted only with ``--diagnostic-cache``);
the receipt records the fault planted and the layers it reached.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ..contract import ENGINE_FAULTS
from ..torch_reference import SLOPE_BOUND

FAULTS = ENGINE_FAULTS


OUTPUT_FACTOR = {"attn_output_zero": 0.0, "attn_output_x1_01": 1.01}
SOFTMAX_FACTOR = 1.02


def _scale_output(factor: float) -> Callable[[Any, Callable[[Any, str], Any]], None]:
    def plant_one(layer: Any, need: Callable[[Any, str], Any]) -> None:
        impl = need(layer, "impl")
        orig = need(impl, "forward")

        @functools.wraps(orig)
        def forward(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            # vLLM 0.24's FlashInfer returns the ``output`` it was given (or a slice of it): scale each
            # memory once, so x1.01 stays x1.01
            done: set[int] = set()
            for t in (out, kwargs.get("output")):
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in done:
                    t.mul_(factor)
                    done.add(t.untyped_storage().data_ptr())
            return out

        impl.forward = forward
    return plant_one


def _softmax_scale_x1_02(layer: Any, need: Callable[[Any, str], Any]) -> None:
    """The softmax scale 2% high, where the real engine reads it.

    vLLM 0.24.0, ``vllm/v1/attention/backends/flashinfer.py``: ``FlashInferImpl.__init__`` keeps the model's
    scale as ``self.scale``; ``FlashInferMetadataBuilder.__init__`` reads it once, from every layer's impl
    (``infer_global_hyperparameters(get_per_layer_parameters(vllm_config, layer_names, FlashInferImpl))``,
    ``vllm/v1/attention/backends/utils.py`` ``get_per_layer_parameters``: ``sm_scale = impl.scale``) into
    ``self.sm_scale``, and ``FlashInferMetadataBuilder.build`` passes that to every ``plan()``
    (``BatchPrefillWithPagedKVCacheWrapper.plan``, ``fast_plan_decode``, the cascade wrapper:
    ``sm_scale=self.sm_scale``), whose wrappers' ``run()`` apply it; ``FlashInferImpl.forward`` asserts
    ``wrapper._sm_scale == self.scale`` and starts the TRT-LLM paths' ``bmm1_scale`` from ``self.scale``.
    The builders are made in ``initialize_kv_cache`` (the V1 runner's ``initialize_metadata_builders``,
    the V2 runner's ``init_attn_backend`` in ``vllm/v1/worker/gpu/attn_utils.py``), after ``load_model``,
    where this is planted: so ``impl.scale`` is the one value every ``plan()``/``run()`` uses (a builder
    that had read it before would trip that assert, not run with a stale scale)."""
    impl = need(layer, "impl")
    impl.scale = float(need(impl, "scale")) * SOFTMAX_FACTOR


def _v_read_2x(layer: Any, need: Callable[[Any, str], Any]) -> None:
    layer._v_scale_float = float(need(layer, "_v_scale_float")) * 2.0


_PLANT = {"attn_output_zero": _scale_output(OUTPUT_FACTOR["attn_output_zero"]), "v_read_scale_2x": _v_read_2x,
          "attn_output_x1_01": _scale_output(OUTPUT_FACTOR["attn_output_x1_01"]),
          "softmax_scale_x1_02": _softmax_scale_x1_02}


def plant(fault: str, layers: list[Any], need: Callable[[Any, str], Any]) -> str:
    """Plant ``fault`` into every layer; returns the event the hooks record."""
    if fault not in _PLANT:
        raise ValueError(f"planted fault: expected one of {FAULTS}, found {fault!r}")
    for layer in layers:
        _PLANT[fault](layer, need)
    return f"fault_planted: {fault} on {len(layers)} layers"


def describe(fault: str | None) -> dict[str, Any] | None:
    """The receipt's record of a planted fault (None: none was asked for)."""
    if fault is None:
        return None
    what = {"attn_output_zero": "every layer's attention output multiplied by 0",
            "v_read_scale_2x": "V read at twice the scale it was stored with (_v_scale_float doubled)",
            "attn_output_x1_01": "every layer's attention output multiplied by 1.01 (a systematic 1% scale error)",
            "softmax_scale_x1_02": ("every layer's softmax scale 2% high (Attention.impl.scale x1.02: what vLLM "
                                    "0.24's FlashInferMetadataBuilder reads into sm_scale for every plan())")}
    out = {"name": fault, "what": what[fault],
            "planted_into": "the engines under test, after load_model (with the scales, before graph capture); "
                            "never the 16-bit-cache oracle engine",
            "expect": "the checks this fault breaks fail: the diagnostic must not agree"}
    if fault in ("attn_output_x1_01", "softmax_scale_x1_02"):
        out["expect"] += (f"; the layer oracle's slope of the output against the reference (prefill and decode, "
                          f"in calibrated_scales and mixed_prefill) outside 1 +- {SLOPE_BOUND}")
    return out
