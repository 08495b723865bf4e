"""Engine level: the vLLM fork with the downloaded model, K16/V8, FlashInfer backend.

Kept deliberately small: every vLLM attribute it touches is listed in
``TOUCHED`` (:mod:`october.checks.engine.vllm_surface`) and reached through ``_need``, so a fork that lacks one makes
the checks ``unsupported`` with its name instead of crashing (a vLLM that
cannot be imported makes them all ``unsupported``).  The engine runs in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the model runner's
``load_model`` can be wrapped: the fixture V scales are written into every
attention layer right after the weights load, before ``capture_model`` builds
the CUDA graphs, and the wrapper records that order.

The engine starts with the recipe selection's compute dtype (``vllm.LLM(dtype=...)``)
and K16/V8 as ``kv_cache_dtype=("auto", "fp8_e4m3")``: K is the compute dtype.  The
selection (compute dtype, K/V cache dtypes, derived JIT modules, workspace) and the
``[smoke]`` token protocol come from the stack info ``current smoke`` writes.  Besides
the engine's own consistency, three checks compare it with oracles it did not compute
(``october.checks.engine.oracles``): one layer's captured q/k/v against the torch reference, the
stored V codes against ``quant(v, supplied scale)``, and the same model with a 16-bit KV
cache over the protocol prompt.

Each check measures what the engine controls, not what this harness wrote:

* physical K16/V8 reads the cache tensors the runner allocated and requires a
  generation to change them (they are the live cache);
* physical K16/V8 requires exactly the recipe's K dtype, V e4m3, the FlashInfer
  backend on every layer, and decode outputs that read the 8-bit V (closer to the
  K16/V8 reference than to a 16-bit-V one);
* calibrated scales compares the scales in effect after engine start with the supplied
  ones exactly, and the V codes the engine stored with ``quant(v, s)`` of the captured
  values (the layer attributes alone would only echo what the hook wrote), and the decode
  rows with the reference dequantized by the supplied scale (a V read back with 1.0 fails);
* mixed fresh-prefill route: a fresh prompt in the same step as decodes equals its solo
  run, the captured layer's prefill and decode rows match the torch reference, and the
  protocol run agrees with the 16-bit-cache engine;
* JIT modules pre-built: every module derived for the selection is in the stack's
  workspace before the engine starts, and the run's watch over it (:class:`october.checks.workspace.Watch`,
  the same one the kernel level reports through) sees none gained or changed while it runs;
* clean memory counts the scheduler's free KV blocks across rounds (a leaked
  block never shows in allocated bytes: the cache is allocated once), besides
  allocated GPU bytes (on a CPU: live tensor bytes) and the byte formula, whose
  layers / kv heads / head dim come from the model's ``config.json``;
* changing decode graphs requires that the graph engine captured graphs and
  the ``enforce_eager`` engine did not; on a CPU there are no CUDA graphs, so it
  is ``skipped`` after the comparison (a mismatch still fails).

The module layout: :mod:`october.checks.engine.vllm_surface` (the vLLM surface: start, hooks, generation,
the layer capture), :mod:`october.checks.engine.checks` (the checks and the oracle folding),
:mod:`october.checks.engine.cache_plan` (the cache asked for: K16/V8, or a diagnostic's symmetric one, and the
layouts engines bind), :mod:`october.checks.engine.diagnostic` (``--diagnostic-cache``: every check on a
symmetric cache, never a stack verdict), :mod:`october.checks.engine.planted_faults` (faults planted into the
engine for a diagnostic) and this module, the run driver (:func:`run_engine_level`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from . import oracles as oracle
from .cache_plan import K16V8, CachePlan
from .checks import (
    JIT_CHECK,
    _jit,
    _memory,
    _mixed,
    _oracles,
    _physical,
    _scales,
)
from .decode import GRAPH_BATCHES, _deterministic, _graphs
from .refusal import refusal_results, refused_cache_dtype
from .vllm_surface import (
    ATTENTION_CONFIG,
    KV_CACHE_DTYPE,
    PROMPTS,
    TOUCHED,
    ModelShape,
    Selection,
    _capture_run,
    _generate_top,
    _generate_tops,
    _Hooks,
    _need,
    _release,
    _start,
    layer_pair,
    model_shape,
)
from ..inputs import Manifest, ScaleChoice, TokenProtocol, engine_scales, one_line, token_protocol
from ..results import (
    CHECK_NAMES,
    FAILED,
    SKIPPED,
    UNSUPPORTED,
    CheckResult,
    Unsupported,
    every_check,
    in_order,
    run_check,
    run_checks,
)
from ..workspace import Watch
from ..workspace import base as workspace_base


def _safely(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:        # recorded against the checks that needed it
        return exc


def _eager_engine(manifest: Manifest, seed: int, sel: Selection, plan: CachePlan, hooks: _Hooks, shape: ModelShape,
                  ids: Any) -> tuple[Any, Any, bool]:
    """The enforce_eager engine: one layer captured against the torch reference (on the protocol's ``ids``, where
    they were made), the graph batches decoded eagerly, and whether it captured graphs (it must not) -> (layer,
    eager, eager_captured); its memory released before it returns.  An engine that does not start is both results'
    failure."""
    captures = hooks.captures
    layer: Any = ids
    eager: Any = RuntimeError("the enforce_eager engine did not start")
    eager_captured = False
    try:
        llm = _start(manifest, seed, eager=True, sel=sel, plan=plan)
        eager_captured = hooks.captures > captures
        if not isinstance(ids, BaseException):
            layer = _safely(_capture_run, llm, hooks, sel, shape, ids, plan)
        eager = _safely(lambda: [_generate_tops(llm, list(PROMPTS[:n])) for n in GRAPH_BATCHES])
        llm = None          # released here (the name stays bound: the lambda above reads it)
    except Exception as exc:
        eager = layer = exc
    _release(hooks)
    return layer, eager, eager_captured


def _sixteen_bit_agreement(manifest: Manifest, seed: int, sel: Selection, hooks: _Hooks, ids: Any, k16v8: Any) -> Any:
    """The K16/V8 engine's answer (``k16v8``) against a 16-bit-cache engine's on the same ``ids`` (the outside
    oracle, :func:`october.checks.engine.oracles.compare_with_16bit`), or the failure that stopped either; the
    16-bit engine's memory released before it returns."""
    agreement: Any = k16v8
    if not isinstance(k16v8, BaseException):
        hooks.subject = False           # the oracle engine: no scales written, no fault planted
        try:
            llm = _start(manifest, seed, eager=True, sel=sel, sixteen_bit=True)
            sixteen = _safely(_generate_top, llm, ids, sel.tokens.max_new_tokens)
            del llm
            agreement = sixteen if isinstance(sixteen, BaseException) else \
                oracle.compare_with_16bit(k16v8, sixteen)
        except Exception as exc:
            agreement = exc
        finally:
            hooks.subject = True
        _release(hooks)
    return agreement


def run_engine_level(manifest: Manifest, fixtures: Path | None, seed: int,
                     device: torch.device | None = None, selection: dict[str, Any] | None = None,
                     tokens: TokenProtocol | None = None,
                     facts: dict[str, Any] | None = None,
                     watch: Watch | None = None, plan: CachePlan = K16V8,
                     fault: str | None = None) -> tuple[list[CheckResult], ScaleChoice]:
    """The six checks (plus JIT modules pre-built); ``facts`` (when given) receives what the receipt
    records about the engine: compute dtype, K/V cache dtypes asked and found, the token protocol.
    ``watch``: the run's watch over the JIT workspace (started here on the selection's when not given).
    ``plan``: the cache asked for (K16/V8; a diagnostic's symmetric one, :mod:`october.checks.engine.diagnostic`);
    ``fault``: one of :data:`october.checks.engine.planted_faults.FAULTS`, planted into the engines under test."""
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sel = Selection.from_json(selection, tokens or token_protocol({}))
    facts = facts if facts is not None else {}
    facts.update(sel.as_json())
    if plan.diagnostic:
        facts.update({"kv_cache_dtype": plan.kv_cache_dtype, "cache": plan.as_json()})
    if fault:
        facts["fault_planted"] = fault
    shape = model_shape(manifest)
    choice = engine_scales(manifest, fixtures, shape.layers)
    if choice.error is not None:
        return [CheckResult(r.name, FAILED, one_line(choice.error)) if r.name == "calibrated_scales" else r
                for r in every_check(SKIPPED, "no valid calibrated scales to start the engine with")], choice
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    watch = watch or Watch.start(workspace_base(selection))
    if watch.base is not None:
        facts["jit_workspace"] = str(watch.base)
    hooks = _Hooks(plan.v_scales(choice.v_scales), fault)
    try:
        try:
            hooks.install()
            llm = _start(manifest, seed, eager=False, sel=sel, plan=plan)
        except Unsupported as exc:
            return every_check(UNSUPPORTED, str(exc)), choice
        except Exception as exc:     # the engine did not start: nothing was verified
            refused = refused_cache_dtype(exc, plan.kv_cache_dtype if isinstance(plan.kv_cache_dtype, tuple)
                                          else (plan.kv_cache_dtype,))
            if refused is not None:     # upstream vLLM: one cache dtype for K and V
                facts["engine_refused"] = refused.as_json()
                return refusal_results(refused), choice
            return every_check(FAILED, f"the engine did not start: {type(exc).__name__}: {exc}"), choice
        graph_captured = hooks.captures > 0
        graphs = {"cuda_graphs_captured": hooks.cuda_graphs, "cudagraph_mode": hooks.graph_mode}
        if hooks.runner is not None:        # vLLM 0.24 starts some architectures on its V2 model runner
            facts["model_runner"] = f"{type(hooks.runner).__module__}.{type(hooks.runner).__qualname__}"
        # on the graph engine now; decode_graphs below, once the enforce_eager engine has run
        on_graph_engine = [n for n in CHECK_NAMES if n != "decode_graphs"]
        results = run_checks({"physical_k16v8": lambda: _physical(llm, hooks, sel, plan),
                              "calibrated_scales": lambda: _scales(llm, hooks),
                              "mixed_prefill": lambda: _mixed(llm),
                              "clean_memory": lambda: _memory(llm, hooks, shape, plan),
                              "deterministic_generation": lambda: _deterministic(llm)}, on_graph_engine)
        first = results["physical_k16v8"].measured
        facts.update({"k_cache_dtype_found": first.get("k_dtype"), "v_cache_dtype_found": first.get("v_dtype"),
                      "attention_backends": first.get("attention_backends")})
        ids = _safely(lambda: oracle.protocol_ids(_need(llm, "get_tokenizer")(), sel.tokens.prompt_tokens))
        graphed = _safely(lambda: [_generate_tops(llm, list(PROMPTS[:n])) for n in GRAPH_BATCHES])
        k16v8 = ids if isinstance(ids, BaseException) else _safely(_generate_top, llm, ids, sel.tokens.max_new_tokens)
        llm = None          # released here (the name stays bound: the lambdas above read it)
        _release(hooks)                 # the runner and its layers hold the cache: let it go before the next engine
        layer, eager, eager_captured = _eager_engine(manifest, seed, sel, plan, hooks, shape, ids)
        agreement = _sixteen_bit_agreement(manifest, seed, sel, hooks, ids, k16v8)
        results["decode_graphs"] = run_check("decode_graphs", _graphs, hooks, graphed, eager,
                                             graph_captured, eager_captured, device, graphs)
        _oracles(results, layer, agreement)
        jit = run_check(JIT_CHECK[0], _jit, sel, shape, watch, plan.diagnostic)
    finally:
        hooks.uninstall()
    return in_order(results) + [jit], choice


# the public surface, where tests and smoke.py import it (defined in vllm_surface)
__all__ = ["ATTENTION_CONFIG", "KV_CACHE_DTYPE", "TOUCHED", "ModelShape", "Selection", "layer_pair", "model_shape",
           "run_engine_level"]
