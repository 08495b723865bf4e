"""Engine level: the vLLM fork with the downloaded model, K16/V8, FlashInfer backend.

Kept deliberately small: every vLLM attribute it touches is listed in
``TOUCHED`` and reached through :func:`_need`, so a fork that lacks one makes
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
(``october.checks.engine_oracle``): one layer's captured q/k/v against the torch reference, the
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
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from october.checks import engine_oracle as oracle
from october.checks import reference as ref
from october.checks.contract import EXTRA_CHECKS
from october.checks.inputs import InputError, Manifest, ScaleChoice, TokenProtocol, engine_scales, token_protocol
from october.checks.memory import held_bytes
from october.checks.results import (
    CHECK_NAMES,
    FAILED,
    PASSED,
    SKIPPED,
    UNSUPPORTED,
    CheckResult,
    Unsupported,
    every_check,
    in_order,
    run_check,
    run_checks,
    verdict,
)
from october.checks.workspace import Watch
from october.checks.workspace import base as workspace_base
from october.checks.workspace import uri as module_uri

KV_CACHE_DTYPE = ("auto", "fp8_e4m3")
ATTENTION_CONFIG = {"backend": "FLASHINFER"}
RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
FREE_BLOCKS = "llm_engine.engine_core.engine_core.scheduler.kv_cache_manager.block_pool.get_num_free_blocks"
TOUCHED = (
    "vllm.LLM(model, dtype, kv_cache_dtype, attention_config, seed, enforce_eager, "
    "gpu_memory_utilization, enable_prefix_caching, max_model_len)",
    "vllm.SamplingParams(temperature, max_tokens, logprobs)",
    "LLM.generate(prompts, sampling_params, use_tqdm); prompts as {'prompt_token_ids': [...]}",
    "LLM.get_tokenizer().encode(text, add_special_tokens)",
    "LLM.llm_engine.add_request / .step / .has_unfinished_requests",
    "LLM.llm_engine.vllm_config.cache_config.num_gpu_blocks / .block_size",
    "LLM." + FREE_BLOCKS,
    "RequestOutput.request_id / .outputs[0].token_ids / .outputs[0].logprobs[i][token].logprob",
    f"{RUNNER_MODULE}.GPUModelRunner.load_model / .capture_model / .kv_caches / .vllm_config",
    "VllmConfig.compilation_config.static_forward_context",
    "Attention._v_scale / ._v_scale_float",
    "Attention.kv_cache[0] (k_cache, v_cache) / .attn_backend.get_name()",
    "Attention.impl.forward(layer, query, key, value, kv_cache, attn_metadata, output)",
)
JIT_CHECK = EXTRA_CHECKS[0]                       # ("jit_complete", "JIT modules pre-built")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
PROMPTS = ("The capital of France is", "Write one sentence about the sea.",
           "List three prime numbers:", "def fibonacci(n):", "Translate 'good morning' to German:")
MAX_TOKENS = 16
GRAPH_BATCHES = (1, 3, 5)
MEMORY_ROUNDS = 3
K_BYTES, V_BYTES = 2, 1
FP8_MAX = ref.FP8_MAX

Generated = list[tuple[list[int], list[float]]]


def _need(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in dotted.split("."):
        if not hasattr(cur, part):
            raise Unsupported(f"the vLLM fork has no attribute '{dotted}' (missing '{part}')")
        cur = getattr(cur, part)
    return cur


@dataclass(frozen=True)
class ModelShape:
    """What the model's config.json says the KV cache must hold (not what the engine reports)."""

    layers: int
    kv_heads: int
    head_dim: int
    q_heads: int = 0


def model_shape(manifest: Manifest) -> ModelShape:
    path = Path(manifest.local_path) / "config.json"
    fix = "re-run `current download` for this manifest"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        cfg = cfg.get("text_config", cfg)
        heads = int(cfg["num_attention_heads"])
        return ModelShape(int(cfg["num_hidden_layers"]), int(cfg.get("num_key_value_heads", heads)),
                          int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads), heads)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"model config {path}: expected num_hidden_layers, num_attention_heads and "
                         f"hidden_size or head_dim, found {type(exc).__name__}: {exc}.\n  -> {fix}") from None


class _Hooks:
    """Wraps GPUModelRunner.load_model/capture_model: scales in, order recorded per runner."""

    def __init__(self, v_scales: tuple[float, ...]) -> None:
        self.v_scales = v_scales
        self.runner: Any = None
        self.events: list[str] = []
        self.captures = 0
        self._restore: tuple[Any, Any, Any] | None = None

    def install(self) -> None:
        try:
            mod = importlib.import_module(RUNNER_MODULE)
        except ImportError as exc:
            raise Unsupported(f"{RUNNER_MODULE} cannot be imported ({type(exc).__name__}: {exc})") from None
        cls = _need(mod, "GPUModelRunner")
        load, capture = _need(cls, "load_model"), _need(cls, "capture_model")
        hooks = self

        def load_model(runner: Any, *a: Any, **kw: Any) -> Any:
            out = load(runner, *a, **kw)
            hooks.runner = runner
            hooks.events = []                       # a new engine: its own order
            hooks.apply_scales(runner)
            return out

        def capture_model(runner: Any, *a: Any, **kw: Any) -> Any:
            hooks.events.append("graphs_captured")
            hooks.captures += 1
            return capture(runner, *a, **kw)

        self._restore = (cls, load, capture)
        cls.load_model, cls.capture_model = load_model, capture_model

    def uninstall(self) -> None:
        if self._restore is not None:
            cls, load, capture = self._restore
            cls.load_model, cls.capture_model = load, capture
            self._restore = None

    def layers(self, runner: Any) -> list[Any]:
        ctx = _need(runner, "vllm_config.compilation_config.static_forward_context")
        found = [layer for layer in ctx.values() if hasattr(layer, "_v_scale_float")]
        if not found:
            raise Unsupported("no layer in static_forward_context has '_v_scale_float'")
        return found

    def apply_scales(self, runner: Any) -> None:
        layers = self.layers(runner)
        if len(layers) != len(self.v_scales):
            self.events.append(f"scales_not_loaded: {len(layers)} layers, {len(self.v_scales)} scales")
            return
        for layer, s in zip(layers, self.v_scales):
            _need(layer, "_v_scale").fill_(s)
            layer._v_scale_float = float(s)
        self.events.append("scales_loaded")


@dataclass(frozen=True)
class Selection:
    """What the recipe says this selection serves (``stack-info.json``'s ``selection``)."""

    compute_dtype: str | None = None
    k_cache_dtype: str | None = None
    v_cache_dtype: str = "fp8_e4m3"
    jit_modules: tuple[str, ...] = ()
    jit_workspace: str | None = None
    setup_command: str | None = None
    shape: dict[str, int] | None = None
    tokens: TokenProtocol = token_protocol({})       # the seed's 8,192 + 128 until given

    @classmethod
    def from_json(cls, data: dict[str, Any] | None, tokens: TokenProtocol) -> "Selection":
        data = data or {}
        return cls(compute_dtype=data.get("compute_dtype"), k_cache_dtype=data.get("k_cache_dtype"),
                   v_cache_dtype=data.get("v_cache_dtype") or "fp8_e4m3",
                   jit_modules=tuple(str(m["uri"] if isinstance(m, dict) else m)
                                     for m in data.get("jit_modules") or ()),
                   jit_workspace=data.get("jit_workspace"), setup_command=data.get("setup_command"),
                   shape=data.get("shape"), tokens=tokens)

    def as_json(self) -> dict[str, Any]:
        return {"compute_dtype": self.compute_dtype, "k_cache_dtype": self.k_cache_dtype,
                "v_cache_dtype": self.v_cache_dtype, "kv_cache_dtype": list(KV_CACHE_DTYPE),
                **self.tokens.as_json(), "tokens_from": self.tokens.source}


def _start(manifest: Manifest, seed: int, eager: bool, sel: Selection, sixteen_bit: bool = False) -> Any:
    """The K16/V8 engine (FlashInfer), or with ``sixteen_bit`` the oracle: the same model with a
    16-bit KV cache and vLLM's own backend choice."""
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as exc:
        raise Unsupported(f"vllm cannot be imported ({type(exc).__name__}: {exc})") from None
    llm_cls = _need(vllm, "LLM")
    kw: dict[str, Any] = {"kv_cache_dtype": "auto"} if sixteen_bit else \
        {"kv_cache_dtype": KV_CACHE_DTYPE, "attention_config": ATTENTION_CONFIG}
    length = -(-(sel.tokens.prompt_tokens + sel.tokens.max_new_tokens + 64) // 256) * 256
    try:
        return llm_cls(model=manifest.local_path, dtype=sel.compute_dtype or "auto", seed=seed,
                       enforce_eager=eager, gpu_memory_utilization=0.45, enable_prefix_caching=False,
                       max_model_len=max(4096, length), **kw)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise Unsupported(f"vllm.LLM does not take the arguments this check needs ({exc})") from None
        raise


def _params(max_tokens: int = MAX_TOKENS, logprobs: int = 1) -> Any:
    vllm = importlib.import_module("vllm")
    return _need(vllm, "SamplingParams")(temperature=0.0, max_tokens=max_tokens, logprobs=logprobs)


def _tokens(out: Any) -> tuple[list[int], list[float]]:
    c = _need(out, "outputs")[0]
    ids = list(_need(c, "token_ids"))
    lps = [next((float(v.logprob) for k, v in d.items() if k == t), math.nan)
           for t, d in zip(ids, _need(c, "logprobs") or [])]
    return ids, lps


def _generate(llm: Any, prompts: list[Any], max_tokens: int = MAX_TOKENS) -> Generated:
    return [_tokens(o) for o in _need(llm, "generate")(prompts, _params(max_tokens), use_tqdm=False)]


def _generate_top(llm: Any, ids: list[int], max_tokens: int) -> oracle.Generation:
    """Greedy tokens with each position's top-2 logprobs (for the 16-bit oracle comparison)."""
    out, = _need(llm, "generate")([{"prompt_token_ids": ids}], _params(max_tokens, logprobs=2), use_tqdm=False)
    c = _need(out, "outputs")[0]
    return (list(_need(c, "token_ids")),
            [{int(k): float(v.logprob) for k, v in d.items()} for d in (_need(c, "logprobs") or [])])


def _caches(h: _Hooks) -> list[Any]:
    caches = list(_need(h.runner, "kv_caches"))
    if not caches:
        raise Unsupported("GPUModelRunner.kv_caches is empty after engine start")
    return caches


def _checksum(t: torch.Tensor) -> int:
    return int(t.view(torch.uint8).sum(dtype=torch.int64))


def _amend(result: CheckResult, problems: list[str], measured: dict[str, Any], limits: dict[str, Any],
           unsupported: str | None = None) -> CheckResult:
    """Add later evidence (the oracles) to a check measured earlier: a problem fails a passed check."""
    result.measured.update(measured)
    result.limits.update(limits)
    if result.status == PASSED and unsupported:
        result.status, result.summary = UNSUPPORTED, f"unsupported: {unsupported}"
    elif result.status == PASSED and problems:
        result.status, result.summary = FAILED, "; ".join(problems)
    elif result.status == FAILED and problems:
        result.summary = "; ".join([result.summary] + problems)
    return result


def _physical(llm: Any, h: _Hooks, sel: Selection) -> CheckResult:
    if sel.k_cache_dtype not in DTYPES:
        raise Unsupported("no recipe K cache dtype to hold the cache to (expected the selection's "
                          f"k_cache_dtype in the stack info, found {sel.k_cache_dtype!r}): run through "
                          "`current smoke`, or pass --stack-info with a selection")
    want_k = DTYPES[sel.k_cache_dtype]
    caches = _caches(h)
    problems = []
    for i, entry in enumerate(caches):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            problems.append(f"layer {i}: expected a (k_cache, v_cache) tuple, found {type(entry).__name__}")
            continue
        k, v = entry
        if k.dtype != want_k or v.dtype != ref.FP8 or v.nbytes * 2 != k.nbytes \
                or k.dim() != 4 or k.shape != v.shape:
            problems.append(f"layer {i}: K {k.dtype} {tuple(k.shape)} {k.nbytes}B, "
                            f"V {v.dtype} {tuple(v.shape)} {v.nbytes}B")
    backends = sorted({str(_need(layer, "attn_backend").get_name()) for layer in h.layers(h.runner)})
    if backends != ["FLASHINFER"]:
        problems.append(f"attention backends {backends}, expected FLASHINFER on every layer")
    pairs = [e for e in caches if isinstance(e, (tuple, list)) and len(e) == 2]
    live = "no (k_cache, v_cache) pairs"
    if pairs:
        before = [_checksum(t) for t in pairs[0]]
        _generate(llm, [PROMPTS[3]])
        after = [_checksum(t) for t in pairs[0]]
        live = "K and V changed" if before[0] != after[0] and before[1] != after[1] else \
            f"layer 0 K changed={before[0] != after[0]}, V changed={before[1] != after[1]}"
        if live != "K and V changed":
            problems.append(f"generation did not write the caches read here ({live})")
    k_bytes = sum(e[0].nbytes for e in pairs)
    v_bytes = sum(e[1].nbytes for e in pairs)
    ratio = (k_bytes + v_bytes) / (2 * k_bytes) if k_bytes else 0.0
    first = pairs[0] if pairs else None
    return verdict("physical_k16v8", not problems,
                   f"{len(caches)} layers, K {first[0].dtype if first else '?'} / V "
                   f"{first[1].dtype if first else '?'}, state {ratio:.3f}x BF16, live, FLASHINFER",
                   "; ".join(problems[:3]),
                   {"layers": len(caches), "k_dtype": str(first[0].dtype) if first else None,
                    "v_dtype": str(first[1].dtype) if first else None, "attention_backends": backends,
                    "layer_shape": list(first[0].shape) if first else None, "k_bytes": k_bytes,
                    "v_bytes": v_bytes, "state_vs_bf16": ratio, "live": live, "problems": problems},
                   {"k_dtype": str(want_k), "v_dtype": "torch.float8_e4m3fn", "attention_backends": ["FLASHINFER"],
                    "v_bytes": "k_bytes / 2", "state_vs_bf16": 0.75, "live": "K and V changed"})


def _scales(llm: Any, h: _Hooks) -> CheckResult:
    """The scales in effect after engine start, exactly the supplied ones, loaded before capture.
    (The stored codes and the read-back scale are judged from the captured layer later.)"""
    layers = h.layers(h.runner)
    supplied = list(h.v_scales)
    _generate(llm, list(PROMPTS))
    as_float = [float(_need(layer, "_v_scale_float")) for layer in layers]
    as_tensor = [float(_need(layer, "_v_scale").detach().float().reshape(-1)[0]) for layer in layers]
    problems = []
    if len(as_float) != len(supplied):
        problems.append(f"{len(layers)} scaled layers for {len(supplied)} scales")
    bad = [i for i, (f, t, s) in enumerate(zip(as_float, as_tensor, supplied))
           if f != s or t != float(torch.tensor(s, dtype=torch.float32))]
    if bad:
        problems.append(f"layers {bad[:8]} do not hold the supplied scales after generation")
    order_ok = "scales_loaded" in h.events and (
        "graphs_captured" not in h.events
        or h.events.index("scales_loaded") < h.events.index("graphs_captured"))
    if not order_ok:
        problems.append(f"scales not loaded before graph capture ({h.events})")
    return verdict("calibrated_scales", not problems,
                   f"{len(supplied)} layer scales in effect before capture; stored V codes are quant(v, s)",
                   "; ".join(problems),
                   {"supplied": supplied, "v_scale_float": as_float, "v_scale": as_tensor, "events": h.events},
                   {"v_scale_float": "equal to supplied", "v_scale": "equal to supplied (float32)",
                    "order": "scales_loaded before graphs_captured"})


def _mixed(llm: Any) -> CheckResult:
    engine = _need(llm, "llm_engine")
    add, step = _need(engine, "add_request"), _need(engine, "step")
    unfinished = _need(engine, "has_unfinished_requests")
    solo = _generate(llm, [PROMPTS[2]])[0][0]
    add("mixed-a", PROMPTS[0], _params(64))
    add("mixed-b", PROMPTS[1], _params(64))
    for _ in range(3):
        step()
    add("mixed-c", PROMPTS[2], _params())
    latest = {_need(o, "request_id"): _tokens(o)[0] for o in step()}
    first = {rid: len(ids) for rid, ids in latest.items()}
    while unfinished():
        for o in step():
            latest[_need(o, "request_id")] = _tokens(o)[0]
    mixed = latest.get("mixed-c", [])
    same_step = {"mixed-a", "mixed-b", "mixed-c"} <= set(first) and first["mixed-c"] == 1
    ok = same_step and mixed == solo
    why = "the fresh prompt was not admitted in the same step as the decodes" if not same_step else \
        "fresh prefill in a mixed step gives other tokens than its solo run"
    return verdict("mixed_prefill", ok, "fresh prompt beside 2 decodes matches solo, the torch reference "
                   "on a captured layer and the 16-bit-cache engine", why,
                   {"route": "fresh prompt prefilled in the same step as 2 decodes, its K/V written to the "
                             "K16/V8 cache, then decoded from it",
                    "first_step_outputs": first, "solo": solo, "mixed": mixed},
                   {"first_step": "mixed-a, mixed-b and mixed-c (1 token)",
                    "tokens": "identical to the solo run"})


def _memory(llm: Any, h: _Hooks, shape: ModelShape) -> CheckResult:
    cfg = _need(llm, "llm_engine.vllm_config.cache_config")
    blocks, block_size = int(_need(cfg, "num_gpu_blocks")), int(_need(cfg, "block_size"))
    free = _need(llm, FREE_BLOCKS)
    caches = _caches(h)
    expected = blocks * block_size * shape.layers * shape.kv_heads * shape.head_dim * (K_BYTES + V_BYTES)
    actual = sum(k.nbytes + v.nbytes for k, v in caches)
    device = caches[0][0].device
    free_start = int(free())
    _generate(llm, list(PROMPTS))                       # warm-up round
    free_after, held = [int(free())], [held_bytes(device)]
    for _ in range(MEMORY_ROUNDS):
        _generate(llm, list(PROMPTS))
        free_after.append(int(free()))
        held.append(held_bytes(device))
    problems = []
    if actual != expected:
        problems.append(f"KV bytes {actual}, formula gives {expected}")
    if any(f != free_start for f in free_after):
        problems.append(f"free KV blocks {free_start} -> {free_after} across rounds")
    what = "allocated GPU bytes" if device.type == "cuda" else "live tensor bytes"
    if len(set(held)) != 1:
        problems.append(f"{what} changed across rounds: {held}")
    return verdict("clean_memory", not problems,
                   f"{actual} KV bytes as the formula says; blocks returned and {what} steady over "
                   f"{MEMORY_ROUNDS + 1} rounds", "; ".join(problems),
                   {"kv_bytes": actual, "num_gpu_blocks": blocks, "block_size": block_size,
                    "free_blocks_start": free_start, "free_blocks_after_rounds": free_after,
                    "held_after_rounds": held, "held_measure": what},
                   {"kv_bytes": expected,
                    "formula": f"blocks x block_size x layers {shape.layers} x kv_heads {shape.kv_heads}"
                               f" x head_dim {shape.head_dim} x (2 + 1)",
                    "free_blocks": "back to the start after every round",
                    "held": "unchanged after the warm-up round"})


def _deterministic(llm: Any) -> CheckResult:
    (t1, l1), = _generate(llm, [PROMPTS[0]])
    (t2, l2), = _generate(llm, [PROMPTS[0]])
    nonfinite = sum(1 for x in l1 + l2 if not math.isfinite(x))
    problems = []
    if not t1:
        problems.append("empty answer")
    if nonfinite or len(l1) != len(t1):
        problems.append(f"{nonfinite} non-finite logprobs ({len(l1)} for {len(t1)} tokens)")
    if t1 != t2:
        problems.append("two runs of the same prompt gave different tokens")
    return verdict("deterministic_generation", not problems, f"{len(t1)} tokens, finite, identical twice",
                   "; ".join(problems), {"tokens": t1, "tokens_second_run": t2, "nonfinite_logprobs": nonfinite},
                   {"tokens": "identical across runs", "logprobs": "all finite"})


def _graphs(h: _Hooks, graphed: list[Generated] | BaseException, eager: list[Generated] | BaseException,
            graph_captured: bool, eager_captured: bool, device: torch.device) -> CheckResult:
    if isinstance(graphed, BaseException):
        raise graphed
    if isinstance(eager, BaseException):
        raise eager
    same = [[t for t, _ in g] == [t for t, _ in e] for g, e in zip(graphed, eager)]
    cuda = device.type == "cuda"
    measured = {"batches": list(GRAPH_BATCHES), "match": same, "graphs_captured": graph_captured,
                "eager_engine_captured": eager_captured, "cuda_graphs": cuda and graph_captured}
    limits = {"tokens": "identical to enforce_eager", "graphs_captured": True,
              "eager_engine_captured": False}
    if not graph_captured or eager_captured:
        return CheckResult("decode_graphs", FAILED, "the graph engine captured no decode graphs"
                           if not graph_captured else "the enforce_eager engine captured graphs too",
                           measured, limits)
    if not all(same):
        bad = [n for n, s in zip(GRAPH_BATCHES, same) if not s]
        return CheckResult("decode_graphs", FAILED, f"{'CUDA graph' if cuda else 'graph-path'} decode "
                           f"differs from eager at batches {bad}", measured, limits)
    if not cuda:
        return CheckResult("decode_graphs", SKIPPED, "CUDA graphs need a GPU; the engine's graph path "
                           f"matched eager at batches {list(GRAPH_BATCHES)}", measured, limits)
    return CheckResult("decode_graphs", PASSED, f"CUDA graph decode at batches {list(GRAPH_BATCHES)} "
                       "matches eager", measured, limits)


# ------------------------------------------------------------------------------ JIT modules


def _jit(sel: Selection, shape: ModelShape, watch: Watch) -> CheckResult:
    """The derived modules were in the workspace before the engine started, and the run's watch
    (:class:`october.checks.workspace.Watch`) saw none gained or changed while it ran."""
    name = JIT_CHECK[0]
    workspace = watch.base
    if not sel.jit_modules or workspace is None:
        return CheckResult(name, UNSUPPORTED, "unsupported: no derived JIT module list or workspace for this "
                           "selection (expected the stack info `current smoke` writes)",
                           {"workspace": str(workspace) if workspace else None}, {})
    fix = sel.setup_command or "october_setup STACK --recipe RECIPE"
    before = watch.built_before()
    entry, _ = watch.finish()
    missing = [u for u in sel.jit_modules if u not in before]
    gained = sorted(module_uri(g) for g in entry["gained"])
    changed = sorted(module_uri(c) for c in entry["changed"])
    problems = []
    if missing:
        problems.append(f"module {missing[0]} is not pre-built in {workspace}"
                        + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                        + f"; run `{fix}` to build it")
    if gained:
        problems.append(f"the engine JIT-built {len(gained)} module(s) during the smoke ({gained[0]}): "
                        f"they are outside the verified workspace; run `{fix}`")
    if changed:
        problems.append(f"{len(changed)} JIT module(s) changed during the smoke ({changed[0]}); run `{fix}`")
    got = {"num_attention_heads": shape.q_heads, "num_key_value_heads": shape.kv_heads, "head_dim": shape.head_dim,
           "num_hidden_layers": shape.layers}
    if sel.shape:
        wrong = {k: (v, got[k]) for k, v in sel.shape.items() if got.get(k) is not None and got[k] != v}
        if wrong:
            problems.append(f"the modules were derived for another model shape: recipe vs config.json {wrong}")
    return verdict(name, not problems, f"{len(sel.jit_modules)} derived modules pre-built; the workspace "
                   "gained none during the smoke", "; ".join(problems),
                   {"workspace": str(workspace), "expected": list(sel.jit_modules), "missing": missing,
                    "present": {u: before[u] for u in sel.jit_modules if u in before}, "gained": gained,
                    "changed": changed},
                   {"missing": [], "gained": [], "changed": [], "build_command": fix})


# ------------------------------------------------------------------------------ the run


def layer_pair(kv_cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's ``(k_cache, v_cache)``: bound directly (vLLM 0.24: one object per layer) or per
    virtual engine (vLLM 0.18: a list whose [0] is the current one)."""
    def is_pair(x: Any) -> bool:
        return isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(t, torch.Tensor) and t.dim() == 4
                                                                     for t in x)
    if is_pair(kv_cache):
        return kv_cache[0], kv_cache[1]
    if isinstance(kv_cache, (tuple, list)) and kv_cache and is_pair(kv_cache[0]):
        return kv_cache[0][0], kv_cache[0][1]
    raise Unsupported(f"Attention.kv_cache is {type(kv_cache).__name__}, expected a (k_cache, v_cache) pair of "
                      "4-D tensors (or a list of them per virtual engine)")


def _middle_layer(h: _Hooks) -> tuple[int, Any]:
    layers = h.layers(h.runner)
    i = len(layers) // 2
    return i, layers[i]


def _capture_run(llm: Any, h: _Hooks, sel: Selection, shape: ModelShape, ids: list[int]) -> oracle.LayerVerdict:
    """One request on the eager engine with one layer's impl wrapped and its cache zeroed first."""
    index, layer = _middle_layer(h)
    pair = layer_pair(_need(layer, "kv_cache"))
    cap = oracle.Capture(head_dim=shape.head_dim)
    restore = oracle.wrap_impl(layer, cap, _need)
    try:
        pair[0].zero_()
        pair[1].zero_()
        cap.armed = True
        _generate(llm, [{"prompt_token_ids": ids[:oracle.CAPTURE_PROMPT]}], oracle.CAPTURE_STEPS)
    finally:
        cap.armed = False
        restore()
    want_k = DTYPES.get(sel.k_cache_dtype or "", pair[0].dtype)
    return oracle.judge_layer(cap, pair[1], h.v_scales[index], want_k, index)


def _oracles(results: dict[str, CheckResult], layer: oracle.LayerVerdict | BaseException,
             agreement: tuple[Any, ...] | BaseException) -> None:
    """Fold the outside oracles into the checks they prove."""
    if isinstance(layer, BaseException):
        why = f"the captured-layer oracle could not run: {type(layer).__name__}: {layer}"
        unsup = str(layer) if isinstance(layer, Unsupported) else None
        for n in ("physical_k16v8", "calibrated_scales", "mixed_prefill"):
            _amend(results[n], [why], {"layer_oracle": why}, {}, unsup)
    else:
        m, lim = layer.measured, layer.limits
        _amend(results["physical_k16v8"], [] if layer.reads_8bit else [
            f"decode on layer {m['layer']} reads a 16-bit V underneath (rel L2 {m['decode_rel_l2_vs_k16v8_reference']:.3g}"
            f" vs the K16/V8 reference, {m['decode_rel_l2_vs_16bit_v_reference']:.3g} vs 16-bit V)"],
            {"layer_oracle": m}, {"layer_oracle": lim})
        scale_problems = []
        if not layer.ok_codes:
            scale_problems.append(f"layer {m['layer']} stored V codes are not quant(v, supplied scale): "
                                  f"{m['codes_equal_share']:.3f} equal, stored/predicted max "
                                  f"{m['stored_over_predicted_amax']:.3g} (a scale stuck at 1.0 or off)")
        if not layer.ok_decode:
            scale_problems.append(f"layer {m['layer']} decode differs from the reference dequantized with "
                                  f"the supplied scale by {m['decode_max_err_vs_k16v8_reference']:.3g}")
        _amend(results["calibrated_scales"], scale_problems, {"layer_oracle": m}, {"layer_oracle": lim})
        mixed_problems = []
        if not layer.ok_prefill:
            mixed_problems.append(f"layer {m['layer']} prefill rows differ from the torch reference by "
                                  f"{min(m['prefill_max_err_vs_fresh_reference'], m['prefill_max_err_vs_cached_reference']):.3g}")
        if not layer.ok_decode:
            mixed_problems.append(f"layer {m['layer']} decode rows differ from the torch reference by "
                                  f"{m['decode_max_err_vs_k16v8_reference']:.3g}")
        _amend(results["mixed_prefill"], mixed_problems,
               {"layer_oracle": m, "prefill_route_observed": layer.prefill_route}, {"layer_oracle": lim})
    if isinstance(agreement, BaseException):
        why = f"the 16-bit-cache oracle could not run: {type(agreement).__name__}: {agreement}"
        _amend(results["mixed_prefill"], [why], {"sixteen_bit_oracle": why}, {},
               str(agreement) if isinstance(agreement, Unsupported) else None)
    else:
        ok, why, measured, limits = agreement
        _amend(results["mixed_prefill"], [] if ok else [f"against the 16-bit-cache engine: {why}"],
               {"sixteen_bit_oracle": measured}, {"sixteen_bit_oracle": limits})


def _safely(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:        # recorded against the checks that needed it
        return exc


def run_engine_level(manifest: Manifest, fixtures: Path | None, seed: int,
                     device: torch.device | None = None, selection: dict[str, Any] | None = None,
                     tokens: TokenProtocol | None = None,
                     facts: dict[str, Any] | None = None,
                     watch: Watch | None = None) -> tuple[list[CheckResult], ScaleChoice]:
    """The six checks (plus JIT modules pre-built); ``facts`` (when given) receives what the receipt
    records about the engine: compute dtype, K/V cache dtypes asked and found, the token protocol.
    ``watch``: the run's watch over the JIT workspace (started here on the selection's when not given)."""
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sel = Selection.from_json(selection, tokens or token_protocol({}))
    facts = facts if facts is not None else {}
    facts.update(sel.as_json())
    shape = model_shape(manifest)
    choice = engine_scales(manifest, fixtures, shape.layers)
    if choice.error is not None:
        return [CheckResult(r.name, FAILED, choice.error.splitlines()[0]) if r.name == "calibrated_scales" else r
                for r in every_check(SKIPPED, "skipped: no valid calibrated scales to start the engine with")], choice
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    watch = watch or Watch.start(workspace_base(selection))
    if watch.base is not None:
        facts["jit_workspace"] = str(watch.base)
    hooks = _Hooks(choice.v_scales)
    try:
        try:
            hooks.install()
            llm = _start(manifest, seed, eager=False, sel=sel)
        except Unsupported as exc:
            return every_check(UNSUPPORTED, f"unsupported: {exc}"), choice
        except Exception as exc:     # the engine did not start: nothing was verified
            return every_check(FAILED, f"the engine did not start: {type(exc).__name__}: {exc}"), choice
        graph_captured = hooks.captures > 0
        # on the graph engine now; decode_graphs below, once the enforce_eager engine has run
        on_graph_engine = [n for n in CHECK_NAMES if n != "decode_graphs"]
        results = run_checks({"physical_k16v8": lambda: _physical(llm, hooks, sel),
                              "calibrated_scales": lambda: _scales(llm, hooks),
                              "mixed_prefill": lambda: _mixed(llm),
                              "clean_memory": lambda: _memory(llm, hooks, shape),
                              "deterministic_generation": lambda: _deterministic(llm)}, on_graph_engine)
        first = results["physical_k16v8"].measured
        facts.update({"k_cache_dtype_found": first.get("k_dtype"), "v_cache_dtype_found": first.get("v_dtype"),
                      "attention_backends": first.get("attention_backends")})
        ids = _safely(lambda: oracle.protocol_ids(_need(llm, "get_tokenizer")(), sel.tokens.prompt_tokens))
        graphed = _safely(lambda: [_generate(llm, list(PROMPTS[:n])) for n in GRAPH_BATCHES])
        k16v8 = ids if isinstance(ids, BaseException) else _safely(_generate_top, llm, ids, sel.tokens.max_new_tokens)
        del llm
        _release()
        captures = hooks.captures
        layer: Any = ids
        eager: Any = RuntimeError("the enforce_eager engine did not start")
        eager_captured = False
        try:
            llm = _start(manifest, seed, eager=True, sel=sel)
            eager_captured = hooks.captures > captures
            if not isinstance(ids, BaseException):
                layer = _safely(_capture_run, llm, hooks, sel, shape, ids)
            eager = _safely(lambda: [_generate(llm, list(PROMPTS[:n])) for n in GRAPH_BATCHES])
            del llm
        except Exception as exc:
            eager = layer = exc
        _release()
        agreement: Any = k16v8
        if not isinstance(k16v8, BaseException):
            try:
                llm = _start(manifest, seed, eager=True, sel=sel, sixteen_bit=True)
                sixteen = _safely(_generate_top, llm, ids, sel.tokens.max_new_tokens)
                del llm
                agreement = sixteen if isinstance(sixteen, BaseException) else \
                    oracle.compare_with_16bit(k16v8, sixteen)
            except Exception as exc:
                agreement = exc
            _release()
        results["decode_graphs"] = run_check("decode_graphs", _graphs, hooks, graphed, eager,
                                             graph_captured, eager_captured, device)
        _oracles(results, layer, agreement)
        jit = run_check(JIT_CHECK[0], _jit, sel, shape, watch)
    finally:
        hooks.uninstall()
    return in_order(results) + [jit], choice


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
