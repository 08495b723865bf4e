"""Does this FlashInfer take asymmetric K/V dtypes?  Decided by what ``plan`` accepts (stdlib only).

Shared by the jit builder (``october.checks.jit_build``) and the kernel
smoke level (``october.checks.kernel.checks``), so both reach the same verdict on the same
FlashInfer.  Two forms are asymmetric:

* ``explicit``: ``plan`` names ``k_data_type`` and ``v_data_type`` itself (the
  older fork series, e.g. ``plan(..., kv_data_type=None, *, k_data_type=None,
  v_data_type=None)``);
* ``forwarding``: ``plan(self, indptr, ..., page_size, *deprecated_positional_args,
  **kwargs)`` hands its keywords to another method that names them (FlashInfer
  0.6.15, PR #3812: ``_plan_impl(..., *, k_data_type, v_data_type)``).

A ``**kwargs`` alone proves nothing: released FlashInfer 0.7.4 has the same
forwarding ``plan`` and a ``_plan_impl`` without the two keywords (symmetric).
So the forwarding form is followed by *running* ``plan`` on a recording
stand-in for ``self``: the first method ``plan`` calls on ``self`` is captured
with the arguments it was given (nothing of FlashInfer's state is touched), and
those arguments are bound against that method's real signature.  Refused: a
``plan`` or a forwarding target that does not accept both keywords, a ``plan``
that drops them on the way, and anything this probe cannot follow.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

KV_KWARGS = ("k_data_type", "v_data_type")
DECODE = "BatchDecodeWithPagedKVCacheWrapper"
PAGED_PREFILL = "BatchPrefillWithPagedKVCacheWrapper"
RAGGED_PREFILL = "BatchPrefillWithRaggedKVCacheWrapper"
MAX_HOPS = 3


@dataclass(frozen=True)
class Verdict:
    """Whether ``wrapper.plan`` accepts ``k_data_type``/``v_data_type``, in which form, and why."""

    wrapper: str
    asymmetric: bool
    form: str | None            # "explicit" | "forwarding" | None (refused)
    reason: str
    target: str | None = None   # the method that finally names the keywords

    def as_json(self) -> dict[str, Any]:
        return {"wrapper": self.wrapper, "asymmetric": self.asymmetric, "form": self.form,
                "target": self.target, "reason": self.reason}


class _Forwarded(Exception):
    def __init__(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__(name)
        self.name, self.args_, self.kwargs = name, args, kwargs


class _RecordingSelf:
    """Stands in for ``self``: any method called on it raises :class:`_Forwarded` with its arguments."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            raise _Forwarded(name, args, kwargs)
        return record


class _Marker:
    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"<probe {self.what}>"


def _signature(fn: Any) -> inspect.Signature:
    return inspect.signature(inspect.unwrap(fn))


def _named(sig: inspect.Signature) -> bool:
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return all(k in sig.parameters and sig.parameters[k].kind in kinds for k in KV_KWARGS)


def _required_positional(sig: inspect.Signature) -> int:
    """Positional parameters without defaults, ``self`` excluded."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = [p for p in sig.parameters.values() if p.kind in kinds]
    return sum(1 for p in params[1:] if p.default is inspect.Parameter.empty)


def plan_verdict(cls: Any, wrapper: str, method: str = "plan") -> Verdict:
    """The verdict for ``cls.<method>`` (``wrapper`` is the name used in messages)."""
    fn = getattr(cls, method, None)
    if fn is None:
        return Verdict(wrapper, False, None, f"{wrapper} has no {method}()")
    try:
        sig = _signature(fn)
    except (TypeError, ValueError) as exc:
        return Verdict(wrapper, False, None, f"cannot read the signature of {wrapper}.{method} ({exc})")
    if _named(sig):
        return Verdict(wrapper, True, "explicit", f"{wrapper}.{method} names k_data_type and v_data_type",
                       target=method)
    k, v = _Marker("k_data_type"), _Marker("v_data_type")
    args = tuple(_Marker(f"arg{i}") for i in range(_required_positional(sig)))
    me = _RecordingSelf()
    try:
        sig.bind(me, *args, k_data_type=k, v_data_type=v)
    except TypeError as exc:
        return Verdict(wrapper, False, None, f"{wrapper}.{method} does not accept k_data_type/v_data_type "
                       f"({exc}): a symmetric FlashInfer")
    where, current, call_kwargs = f"{wrapper}.{method}", inspect.unwrap(fn), {"k_data_type": k, "v_data_type": v}
    for _ in range(MAX_HOPS):
        try:
            current(me, *args, **call_kwargs)
        except _Forwarded as fwd:
            if fwd.kwargs.get("k_data_type") is not k or fwd.kwargs.get("v_data_type") is not v:
                return Verdict(wrapper, False, None, f"{where} takes **kwargs but does not pass k_data_type/"
                               f"v_data_type on to self.{fwd.name}()")
            target = getattr(cls, fwd.name, None)
            if target is None:
                return Verdict(wrapper, False, None, f"{where} forwards to self.{fwd.name}(), which "
                               f"{wrapper} does not define")
            try:
                tsig = _signature(target)
                tsig.bind(me, *fwd.args_, **fwd.kwargs)
            except (TypeError, ValueError) as exc:
                return Verdict(wrapper, False, None, f"{where} forwards **kwargs to {wrapper}.{fwd.name}, "
                               f"which does not accept k_data_type/v_data_type ({exc}): a symmetric FlashInfer")
            if _named(tsig):
                return Verdict(wrapper, True, "forwarding", f"{where}(**kwargs) forwards to {wrapper}."
                               f"{fwd.name}, which names k_data_type and v_data_type", target=fwd.name)
            where, current, args, call_kwargs = (f"{wrapper}.{fwd.name}", inspect.unwrap(target), fwd.args_,
                                                 dict(fwd.kwargs))
            continue
        except Exception as exc:  # noqa: BLE001 - any other outcome: not provably asymmetric
            return Verdict(wrapper, False, None, f"{where} takes **kwargs and this probe cannot follow it "
                           f"({type(exc).__name__}: {exc})")
        return Verdict(wrapper, False, None, f"{where} takes **kwargs and returned without passing them on")
    return Verdict(wrapper, False, None, f"{wrapper}.{method} forwards through more than {MAX_HOPS} methods")


def wrapper_verdict(fi: Any, wrapper: str) -> Verdict:
    cls = getattr(fi, wrapper, None)
    if cls is None:
        return Verdict(wrapper, False, None, f"flashinfer {getattr(fi, '__version__', '?')} has no {wrapper}")
    return plan_verdict(cls, wrapper)


@dataclass(frozen=True)
class Capabilities:
    """What a FlashInfer offers the K16/V8 routes: asymmetric decode (required), an asymmetric paged
    prefill (optional: the 20260702 series is decode-only) and a plain ragged prefill (the fresh-prefill route)."""

    version: str
    decode: Verdict
    paged_prefill: Verdict
    ragged_prefill: bool

    def problem(self) -> str | None:
        """Why this FlashInfer cannot serve K16/V8 at all, or None."""
        if not self.decode.asymmetric:
            return f"{self.decode.reason} (flashinfer {self.version}: not the asymmetric fork)"
        return None

    def as_json(self) -> dict[str, Any]:
        return {"version": self.version, "decode": self.decode.as_json(),
                "paged_prefill": self.paged_prefill.as_json(), "ragged_prefill": self.ragged_prefill}


def capabilities(fi: Any) -> Capabilities:
    return Capabilities(str(getattr(fi, "__version__", "unknown")), wrapper_verdict(fi, DECODE),
                        wrapper_verdict(fi, PAGED_PREFILL), getattr(fi, RAGGED_PREFILL, None) is not None)
