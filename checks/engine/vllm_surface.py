"""Engine level, the vLLM side: the model start, the load/capture hooks, generation and the layer capture.

Kept deliberately small: every vLLM attribute the engine level touches (here, in
:mod:`october.checks.engine.checks` and :mod:`october.checks.engine.driver`) is listed in
``TOUCHED`` and reached through :func:`_need`, so a fork that lacks one makes
the checks ``unsupported`` with its name instead of crashing (a vLLM that
cannot be imported makes them all ``unsupported``).  The engine runs in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the model runner's
``load_model`` can be wrapped (:class:`_Hooks`): the fixture V scales are written into every
attention layer right after the weights load, before ``capture_model`` builds
the CUDA graphs, and the wrapper records that order.

The engine starts with the recipe selection's compute dtype (``vllm.LLM(dtype=...)``)
and K16/V8 as ``kv_cache_dtype=("auto", "fp8_e4m3")``: K is the compute dtype (:func:`_start`).
"""

from __future__ import annotations

import gc
import importlib
import math
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from ..contract import json_loads
from . import planted_faults
from . import oracles as oracle
from .cache_plan import DTYPES, K16V8, CachePlan, codes, split_kv
from ..inputs import InputError, Manifest, TokenProtocol, token_protocol
from ..results import Unsupported
from ..scales import telling_scale

KV_CACHE_DTYPE = K16V8.kv_cache_dtype
ATTENTION_CONFIG = {"backend": "FLASHINFER"}
RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
# vLLM 0.24 runs some architectures (Qwen3, Llama, ...) on its V2 model runner by default: both are hooked
RUNNER_MODULES = (RUNNER_MODULE, "vllm.v1.worker.gpu.model_runner")
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
    (f"{RUNNER_MODULE}.GPUModelRunner (and vllm.v1.worker.gpu.model_runner.GPUModelRunner where it exists)"
     ".load_model / .capture_model / .kv_caches / .vllm_config"),
    "VllmConfig.compilation_config.static_forward_context / .cudagraph_mode (recorded when present)",
    "Attention._v_scale / ._v_scale_float / ._k_scale / ._k_scale_float / .kv_cache_dtype (when present)",
    ("Attention.kv_cache: (k_cache, v_cache), [(k_cache, v_cache)] or [num_blocks, 2, block_size, heads, dim]"
     " / .attn_backend.get_name()"),
    ("Attention.impl.forward(layer, query, key, value, kv_cache, attn_metadata, output); "
     "attn_metadata.num_actual_tokens (when present)"),
    ("Attention.impl.scale (the softmax scale FlashInferMetadataBuilder reads into every plan(); written only "
     "by a diagnostic's planted softmax_scale_x1_02)"),
)
PROMPTS = ("The capital of France is", "Write one sentence about the sea.",
           "List three prime numbers:", "def fibonacci(n):", "Translate 'good morning' to German:")
MAX_TOKENS = 16

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
        cfg = json_loads(path.read_text(encoding="utf-8"))
        cfg = cfg.get("text_config", cfg)
        heads = int(cfg["num_attention_heads"])
        return ModelShape(int(cfg["num_hidden_layers"]), int(cfg.get("num_key_value_heads", heads)),
                          int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads), heads)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"model config {path}: expected num_hidden_layers, num_attention_heads and "
                         f"hidden_size or head_dim, found {type(exc).__name__}: {exc}.\n  -> {fix}") from None


@contextmanager
def counting_graph_captures() -> Iterator[list[int]]:
    """Count the CUDA graphs begun inside the block (``[n]``): every capture, vLLM's full and piecewise
    ones included, goes through ``torch.cuda.CUDAGraph.capture_begin`` (``torch.cuda.graph`` calls it)."""
    count = [0]
    graph_cls = getattr(torch.cuda, "CUDAGraph", None)
    begin = getattr(graph_cls, "capture_begin", None)
    if graph_cls is None or begin is None:
        yield count
        return

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        count[0] += 1
        return begin(self, *a, **kw)

    graph_cls.capture_begin = counted
    try:
        yield count
    finally:
        graph_cls.capture_begin = begin


class _Hooks:
    """Wraps GPUModelRunner.load_model/capture_model: scales in, order recorded per runner.

    ``subject`` is False while the 16-bit-cache oracle engine starts: it gets neither the scales (its
    cache quantizes nothing, and FlashInfer multiplies its output by the layer's V scale whatever the
    cache dtype) nor a planted ``fault`` (:mod:`october.checks.engine.planted_faults`)."""

    def __init__(self, v_scales: tuple[float, ...], fault: str | None = None) -> None:
        self.v_scales = v_scales
        self.fault = fault
        self.subject = True
        self.runner: Any = None
        self.events: list[str] = []
        self.captures = 0               # capture_model calls
        self.cuda_graphs = 0            # CUDA graphs they really captured (torch.cuda.CUDAGraph.capture_begin)
        self.graph_mode: str | None = None      # the compilation config's cudagraph_mode at capture
        self._restore: list[tuple[Any, Any, Any]] = []

    def install(self) -> None:
        found = []
        for name in RUNNER_MODULES:
            try:
                found.append(_need(importlib.import_module(name), "GPUModelRunner"))
            except ImportError as exc:
                if name == RUNNER_MODULE:
                    raise Unsupported(f"{RUNNER_MODULE} cannot be imported ({type(exc).__name__}: {exc})") from None
            except Exception:               # the V2 runner is optional: a vLLM that cannot load it never uses it
                if name == RUNNER_MODULE:
                    raise
        for cls in found:
            self._wrap(cls)

    def _wrap(self, cls: Any) -> None:
        load, capture = _need(cls, "load_model"), _need(cls, "capture_model")
        hooks = self

        def load_model(runner: Any, *a: Any, **kw: Any) -> Any:
            out = load(runner, *a, **kw)
            hooks.runner = runner
            hooks.events = []                       # a new engine: its own order
            if hooks.subject:
                hooks.apply_scales(runner)
                if hooks.fault:
                    hooks.events.append(planted_faults.plant(hooks.fault, hooks.layers(runner), _need))
            return out

        def capture_model(runner: Any, *a: Any, **kw: Any) -> Any:
            # a call is not a capture: vLLM's capture_model returns 0 at once under cudagraph_mode NONE
            # (which it may choose itself for a backend it cannot capture), so the graphs are counted where
            # torch begins each one
            hooks.events.append("graphs_captured")
            hooks.captures += 1
            mode = getattr(getattr(getattr(runner, "vllm_config", None), "compilation_config", None),
                           "cudagraph_mode", None)
            hooks.graph_mode = None if mode is None else str(getattr(mode, "name", mode))
            with counting_graph_captures() as counted:
                out = capture(runner, *a, **kw)
            hooks.cuda_graphs += counted[0]
            return out

        self._restore.append((cls, load, capture))
        cls.load_model, cls.capture_model = load_model, capture_model

    def uninstall(self) -> None:
        while self._restore:
            cls, load, capture = self._restore.pop()
            cls.load_model, cls.capture_model = load, capture

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
                "prompt_tokens": self.tokens.prompt_tokens, "max_new_tokens": self.tokens.max_new_tokens,
                "tokens_from": self.tokens.source}

    def compute(self) -> torch.dtype | None:
        return DTYPES.get(self.compute_dtype or "")


def _start(manifest: Manifest, seed: int, eager: bool, sel: Selection, sixteen_bit: bool = False,
           plan: CachePlan = K16V8) -> Any:
    """The engine under test (``plan``'s cache, FlashInfer: K16/V8 unless a diagnostic asks for a symmetric
    cache), or with ``sixteen_bit`` the oracle: the same model with a 16-bit KV cache and vLLM's own
    backend choice."""
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as exc:
        raise Unsupported(f"vllm cannot be imported ({type(exc).__name__}: {exc})") from None
    llm_cls = _need(vllm, "LLM")
    kw: dict[str, Any] = {"kv_cache_dtype": "auto"} if sixteen_bit else \
        {"kv_cache_dtype": plan.kv_cache_dtype, "attention_config": ATTENTION_CONFIG}
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


def _top(out: Any) -> oracle.Generation:
    c = _need(out, "outputs")[0]
    return (list(_need(c, "token_ids")),
            [{int(k): float(v.logprob) for k, v in d.items()} for d in (_need(c, "logprobs") or [])])


def _generate_top(llm: Any, ids: list[int], max_tokens: int) -> oracle.Generation:
    """Greedy tokens with each position's top-2 logprobs (for the 16-bit oracle comparison)."""
    out, = _need(llm, "generate")([{"prompt_token_ids": ids}], _params(max_tokens, logprobs=2), use_tqdm=False)
    return _top(out)


def _generate_tops(llm: Any, prompts: list[Any], max_tokens: int = MAX_TOKENS) -> list[oracle.Generation]:
    """One batch of prompts, greedy, each position's top-2 logprobs (the graph-vs-eager comparison)."""
    return [_top(o) for o in _need(llm, "generate")(list(prompts), _params(max_tokens, logprobs=2), use_tqdm=False)]


def _caches(h: _Hooks) -> list[Any]:
    caches = list(_need(h.runner, "kv_caches"))
    if not caches:
        raise Unsupported("GPUModelRunner.kv_caches is empty after engine start")
    return caches


layer_pair = split_kv      # a layer's (k_cache, v_cache), whatever layout the engine binds (cache_plan)


def _oracle_layer(h: _Hooks, plan: CachePlan) -> tuple[int, Any]:
    """The layer the oracle captures: with an FP8 V cache the one whose supplied V scale is furthest from 1.0
    (a layer at 1.0, the default, passes an engine that leaves every scale at its default: the review's plant of
    scales ``[0.0093, 1.0, 0.054]`` passed with the middle layer), else (or where no scale is 5% from 1.0: the
    scale check is then unsupported, :func:`october.checks.engine.checks._oracles`) the middle one."""
    layers = h.layers(h.runner)
    i = telling_scale(h.v_scales) if plan.v_fp8 else None
    if i is None or i >= len(layers):
        i = len(layers) // 2
    return i, layers[i]


def _capture_run(llm: Any, h: _Hooks, sel: Selection, shape: ModelShape, ids: list[int],
                 plan: CachePlan = K16V8) -> oracle.LayerVerdict:
    """One request on the eager engine with one layer's impl wrapped and its cache zeroed first."""
    index, layer = _oracle_layer(h, plan)
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
    compute = sel.compute() or (pair[0].dtype if pair[0].dtype in DTYPES.values() else torch.bfloat16)
    want_k = compute if plan.diagnostic else DTYPES.get(sel.k_cache_dtype or "", pair[0].dtype)
    k_scale = float(_need(layer, "_k_scale").detach().float().reshape(-1)[0]) if plan.k_fp8 else None
    held = (codes(pair[0], plan.k_fp8), codes(pair[1], plan.v_fp8))
    return oracle.judge_layer(cap, held, h.v_scales[index] if plan.v_fp8 else None, want_k, index, k_scale,
                              value_dtype=compute)


def _release(h: _Hooks | None = None) -> None:
    """Free a finished engine's memory before the next one starts: with ``h``, drop the cache its runner and
    layers hold (torch.compile's caches may keep the model, and with it the cache, alive) and the runner."""
    if h is not None and h.runner is not None:
        try:
            for layer in h.layers(h.runner):
                layer.kv_cache = torch.zeros(0)
            caches = getattr(h.runner, "kv_caches", None)
            if isinstance(caches, list):
                caches.clear()
        except Unsupported:
            pass
        h.runner = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
