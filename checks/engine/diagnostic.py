"""Engine level, diagnostic run: every engine check on a real engine with a symmetric cache.

Upstream vLLM cannot store K16/V8 (:mod:`october.checks.engine.refusal`), so on it the stack verdict
is an honest failure and proves nothing about the harness.  A diagnostic (``--diagnostic-cache bf16``,
``fp8_e4m3`` or ``both``: bf16, then fp8_e4m3) asks the same engine for a cache it can store
(:data:`october.checks.engine.cache_plan.DIAGNOSTIC`) and runs every engine check for real against it: the
physical check holds the cache to the asked dtype on every layer with FlashInfer, the scales check
and the captured layer compare what the engine stored with ``quant(x, scale)`` of the captured values
(a 16-bit side: the values exactly), the layer oracle uses a reference that dequantizes what the cache
quantized, and the 16-bit comparison, graphs, memory, determinism and the JIT watch run as ever.

Its receipt can never pass as a stack verdict: ``passed`` is false whatever the checks say, ``proves``
is ``harness``, and ``diagnostic`` says so, with each cache's own results and ``harness_ok`` (every
check passed on that cache).  The top-level ``checks`` fold the caches: a check passed only when it
passed on every cache.  ``current smoke`` exits 21 when the harness agreed with the engine on every
cache asked for, 1 when it did not (a planted fault must give 1).

The run never touches the stack's JIT workspace: FlashInfer builds the symmetric modules into a copy
(``OUTPUT/diagnostic-jit``) that the JIT watch watches.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from . import planted_faults
from ..contract import DIAGNOSTIC_AGREED_EXIT
from .cache_plan import diagnostic_plans
from ..inputs import Manifest, ScaleChoice, TokenProtocol
from ..torch_reference import SLOPE_BOUND, slope_ok
from ..results import FAILED, PASSED, SKIPPED, UNSUPPORTED, CheckResult
from ..workspace import Watch

PROVES = "the engine harness on a real engine, not the stack"
AGREED_EXIT = DIAGNOSTIC_AGREED_EXIT   # `current smoke`: the diagnostic finished, every check passed on every cache
DISAGREED_EXIT = 1         # a check did not pass on some cache (what a planted fault must give)
WORKSPACE = "diagnostic-jit"
_WORST = (FAILED, UNSUPPORTED, SKIPPED)


REUSE_ENV = "OCTOBER_DIAGNOSTIC_JIT"


def own_workspace(stack_ws: Path | None, out_dir: Path, reuse: str | None = None) -> Path | None:
    """A copy of the stack's JIT workspace under the output directory (None: the stack has none): the
    symmetric modules FlashInfer builds land there, never in the verified ``STACK/jit``.

    ``reuse`` (default ``$OCTOBER_DIAGNOSTIC_JIT``): a directory kept across diagnostic runs instead, made
    once as that copy and then taken as it is, so the symmetric modules one run built are not built again
    by the next (the benches' runs on the H200; a diagnostic is never a stack verdict)."""
    if stack_ws is None:
        return None
    reuse = reuse if reuse is not None else os.environ.get(REUSE_ENV) or None
    if reuse is not None:
        kept = Path(reuse)
        if not kept.is_dir():
            kept.parent.mkdir(parents=True, exist_ok=True)
            if stack_ws.is_dir():
                shutil.copytree(stack_ws, kept, symlinks=True)
            else:
                kept.mkdir()
        return kept
    dest = out_dir / WORKSPACE
    if dest.exists():
        shutil.rmtree(dest)
    if stack_ws.is_dir():
        shutil.copytree(stack_ws, dest, symlinks=True)
    else:
        dest.mkdir(parents=True)
    return dest


def combine(per_cache: dict[str, list[CheckResult]]) -> list[CheckResult]:
    """One result per check over the caches: passed only when passed on every cache, else the worst
    status; the summary names each cache's, ``measured`` and ``limits`` are keyed by cache."""
    names = [r.name for r in next(iter(per_cache.values()))]
    out = []
    for name in names:
        rs = {c: next(r for r in results if r.name == name) for c, results in per_cache.items()}
        statuses = {r.status for r in rs.values()}
        status = PASSED if statuses == {PASSED} else next(s for s in _WORST if s in statuses)
        out.append(CheckResult(name, status, "; ".join(f"{c}: {r.status}: {r.summary}" for c, r in rs.items()),
                               {c: r.measured for c, r in rs.items()}, {c: r.limits for c, r in rs.items()},
                               sum(r.seconds for r in rs.values())))
    return out


def layer_oracle_slope(results: list[CheckResult]) -> dict[str, Any] | None:
    """The layer oracle's least-squares slopes of the captured layer's output against the torch reference,
    with the bound they are held to (what a systematic scale fault, ``attn_output_x1_01`` or
    ``softmax_scale_x1_02``, moves); None when the oracle did not run."""
    lo = next((r.measured.get("layer_oracle") for r in results if r.name == "calibrated_scales"), None)
    if not isinstance(lo, dict) or "decode_slope_vs_k16v8_reference" not in lo:
        return None
    prefill, decode = lo["prefill_slope_vs_reference"], lo["decode_slope_vs_k16v8_reference"]
    return {"prefill": prefill, "decode": decode, "bound": SLOPE_BOUND, "rule": f"|slope - 1| <= {SLOPE_BOUND}",
            "held": slope_ok(prefill) and slope_ok(decode)}


def run_diagnostic(manifest: Manifest, fixtures: Path | None, seed: int, device: torch.device,
                   selection: dict[str, Any] | None, tokens: TokenProtocol, choice_name: str,
                   fault: str | None, workspace: Path | None
                   ) -> tuple[list[CheckResult], ScaleChoice, dict[str, Any]]:
    """Every engine check per asked cache; returns the folded results, the scales, and the receipt's
    ``diagnostic`` section.  ``workspace``: the diagnostic's own JIT workspace (:func:`own_workspace`)."""
    from .driver import run_engine_level

    per_cache: dict[str, list[CheckResult]] = {}
    section: dict[str, Any] = {}
    choice: ScaleChoice | None = None
    for plan in diagnostic_plans(choice_name):
        facts: dict[str, Any] = {}
        watch = Watch.start(workspace)
        results, choice = run_engine_level(manifest, fixtures, seed, device, selection, tokens, facts, watch,
                                           plan=plan, fault=fault)
        entry, _ = watch.finish()
        per_cache[plan.name] = results
        section[plan.name] = {"kv_cache_dtype": plan.kv_cache_dtype, "harness_ok": all(r.status == PASSED for r in results),
                              "checks": [r.as_json() for r in results], "engine": facts, "jit_workspace": entry,
                              "layer_oracle_slope": layer_oracle_slope(results)}
    assert choice is not None
    agreed = all(c["harness_ok"] for c in section.values())
    diagnostic = {"caches": list(section), "proves": PROVES, "never_a_stack_verdict": True,
                  "harness_ok": agreed, "fault": planted_faults.describe(fault),
                  "fault_caught": None if fault is None else not agreed,
                  "workspace": str(workspace) if workspace else None,
                  "exit_codes": {"harness agreed": AGREED_EXIT, "harness disagreed": DISAGREED_EXIT},
                  "per_cache": section}
    return combine(per_cache), choice, diagnostic
