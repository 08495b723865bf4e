"""Engine level: a vLLM that refuses the K16/V8 cache, told apart from an engine that crashed.

Upstream vLLM (0.24.0 as released, 0.33.0) keeps one cache dtype for K and V: ``CacheConfig.cache_dtype``
is a string literal, so ``kv_cache_dtype=("auto", "fp8_e4m3")`` is refused while the engine is configured,
before any cache exists.  Measured on the real 0.24.0 (``tests/test_vllm_sdist_real.py`` runs this
module against it): a pydantic ``ValidationError`` for ``CacheConfig`` / ``cache_dtype`` whose message
lists the accepted values (``Input should be 'auto', 'float16', ...``).

That is a verdict, not a crash: ``physical K16/V8`` fails and names what the engine refused, what it
accepts instead and what the cache holds (nothing: none was allocated); the other checks did not run
and say why.  ``passed`` is false, as it must be for a stack that cannot store K16/V8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..results import CHECK_NAMES, FAILED, SKIPPED, CheckResult

_MARKS = ("cache_dtype", "kv_cache_dtype")
_ACCEPTS = re.compile(r"Input should be (.+?)(?: \[type=|$)", re.MULTILINE)


@dataclass(frozen=True)
class Refusal:
    asked: tuple[str, ...]          # the kv_cache_dtype the harness passed
    error: str                      # the exception's type and first line
    accepts: tuple[str, ...]        # the values the engine lists instead (empty when it lists none)

    def as_json(self) -> dict[str, Any]:
        return {"kv_cache_dtype_asked": list(self.asked), "error": self.error, "accepts": list(self.accepts),
                "cache_holds": "nothing: the engine refused its configuration before allocating a cache"}


def refused_cache_dtype(exc: BaseException, asked: tuple[str, ...]) -> Refusal | None:
    """A :class:`Refusal` when ``exc`` is the engine refusing the cache dtype ``asked``, else None."""
    text = str(exc)
    if not any(m in text for m in _MARKS):
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = next((ln for ln in lines if not any(ln.startswith(m) for m in _MARKS) and "validation error" not in ln),
                lines[0] if lines else "")
    m = _ACCEPTS.search(text)
    accepts = tuple(re.findall(r"'([^']+)'", m.group(1))) if m else ()
    title = next((ln for ln in lines if "validation error" in ln), "")
    return Refusal(asked, f"{type(exc).__name__}: {title + ': ' if title else ''}{head}"[:400], accepts)


def refusal_results(r: Refusal) -> list[CheckResult]:
    """``physical K16/V8`` failed with the refusal; every other check not run, saying why."""
    accepts = ", ".join(r.accepts[:8]) + (", ..." if len(r.accepts) > 8 else "")
    physical = CheckResult(
        "physical_k16v8", FAILED,
        f"the engine refused kv_cache_dtype={tuple(r.asked)!r} ({r.error.split(':')[0]}): it takes one "
        f"cache dtype for K and V{' (' + accepts + ')' if accepts else ''}, so it cannot store K16/V8; "
        "no cache was allocated",
        {"engine_refused": r.as_json()},
        {"kv_cache_dtype": list(r.asked), "k_dtype": "the compute dtype", "v_dtype": "torch.float8_e4m3fn"})
    why = "not run: the engine refused the K16/V8 cache (see physical K16/V8)"
    return [physical] + [CheckResult(n, SKIPPED, why) for n in CHECK_NAMES if n != "physical_k16v8"]
