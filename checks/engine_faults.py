"""Engine level: faults planted into the engine itself, for the diagnostic run only.

A diagnostic (``--diagnostic-cache``) proves the harness on a real engine; a fault planted into that
engine proves the checks can fail there too.  Each fault reaches only what any vLLM attention layer
has (the same surface the checks touch: ``Attention.impl.forward``, ``Attention._v_scale_float``), so
it works on the real engine as on the stand-in, and it is planted right after the model loads (with
the scales, before CUDA graph capture, so captured graphs carry it too) into the engines under test,
never into the 16-bit-cache oracle engine.

``attn_output_zero``   every layer's attention output multiplied by 0 (after the backend computed it)
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

from october.checks.contract import ENGINE_FAULTS

FAULTS = ENGINE_FAULTS


def _zero_output(layer: Any, need: Callable[[Any, str], Any]) -> None:
    impl = need(layer, "impl")
    orig = need(impl, "forward")

    @functools.wraps(orig)
    def forward(*args: Any, **kwargs: Any) -> Any:
        out = orig(*args, **kwargs)
        for t in (out, kwargs.get("output")):
            if isinstance(t, torch.Tensor):
                t.mul_(0)
        return out

    impl.forward = forward


def _v_read_2x(layer: Any, need: Callable[[Any, str], Any]) -> None:
    layer._v_scale_float = float(need(layer, "_v_scale_float")) * 2.0


_PLANT = {"attn_output_zero": _zero_output, "v_read_scale_2x": _v_read_2x}


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
            "v_read_scale_2x": "V read at twice the scale it was stored with (_v_scale_float doubled)"}
    return {"name": fault, "what": what[fault],
            "planted_into": "the engines under test, after load_model (with the scales, before graph capture); "
                            "never the 16-bit-cache oracle engine",
            "expect": "the checks this fault breaks fail: the diagnostic must not agree"}
