"""Engine level: the vLLM fork with the downloaded model, K16/V8, FlashInfer backend.

Kept deliberately small: every vLLM attribute it touches is listed in
``TOUCHED`` and reached through :func:`_need`, so a fork that lacks one makes
the checks ``unsupported`` with its name instead of crashing (a vLLM that
cannot be imported makes them all ``unsupported``).  The engine runs in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the model runner's
``load_model`` can be wrapped: the fixture V scales are written into every
attention layer right after the weights load, before ``capture_model`` builds
the CUDA graphs, and the wrapper records that order.

Each check measures what the engine controls, not what this harness wrote:

* physical K16/V8 reads the cache tensors the runner allocated and requires a
  generation to change them (they are the live cache);
* calibrated scales also reads the V cache bytes the engine wrote: with the
  supplied ``amax / 448`` scale in effect the stored e4m3 values use most of
  the e4m3 range; with a scale that silently stayed 1.0 they use ``amax / 448``
  of it (the layer attributes alone would only echo what the hook wrote);
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
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from checks import reference as ref
from checks.inputs import InputError, Manifest, ScaleChoice, engine_scales
from checks.results import (FAILED, PASSED, SKIPPED, CheckResult, REQUIRED_CHECKS, Unsupported,
                            run_check, verdict)

KV_CACHE_DTYPE = ("auto", "fp8_e4m3")
ATTENTION_CONFIG = {"backend": "FLASHINFER"}
RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
FREE_BLOCKS = "llm_engine.engine_core.engine_core.scheduler.kv_cache_manager.block_pool.get_num_free_blocks"
TOUCHED = (
    "vllm.LLM(model, kv_cache_dtype, attention_config, seed, enforce_eager, "
    "gpu_memory_utilization, enable_prefix_caching, max_model_len)",
    "vllm.SamplingParams(temperature, max_tokens, logprobs)",
    "LLM.generate(prompts, sampling_params, use_tqdm)",
    "LLM.llm_engine.add_request / .step / .has_unfinished_requests",
    "LLM.llm_engine.vllm_config.cache_config.num_gpu_blocks / .block_size",
    "LLM." + FREE_BLOCKS,
    "RequestOutput.request_id / .outputs[0].token_ids / .outputs[0].logprobs[i][token].logprob",
    f"{RUNNER_MODULE}.GPUModelRunner.load_model / .capture_model / .kv_caches / .vllm_config",
    "VllmConfig.compilation_config.static_forward_context",
    "Attention._v_scale / ._v_scale_float",
)
PROMPTS = ("The capital of France is", "Write one sentence about the sea.",
           "List three prime numbers:", "def fibonacci(n):", "Translate 'good morning' to German:")
MAX_TOKENS = 16
GRAPH_BATCHES = (1, 3, 5)
MEMORY_ROUNDS = 3
K_BYTES, V_BYTES = 2, 1
FP8_MAX = ref.FP8_MAX
MIN_USED_RANGE = 1.0 / 16     # median over layers of max|V stored| / 448
MAX_SATURATED = 0.01          # share of stored V values clamped at +-448, per layer

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


def model_shape(manifest: Manifest) -> ModelShape:
    path = Path(manifest.local_path) / "config.json"
    fix = "re-run `current download` for this manifest"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        cfg = cfg.get("text_config", cfg)
        heads = int(cfg["num_attention_heads"])
        return ModelShape(int(cfg["num_hidden_layers"]), int(cfg.get("num_key_value_heads", heads)),
                          int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads))
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


def _start(manifest: Manifest, seed: int, eager: bool) -> Any:
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as exc:
        raise Unsupported(f"vllm cannot be imported ({type(exc).__name__}: {exc})") from None
    llm_cls = _need(vllm, "LLM")
    try:
        return llm_cls(model=manifest.local_path, kv_cache_dtype=KV_CACHE_DTYPE,
                       attention_config=ATTENTION_CONFIG, seed=seed, enforce_eager=eager,
                       gpu_memory_utilization=0.45, enable_prefix_caching=False, max_model_len=4096)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise Unsupported(f"vllm.LLM does not take the arguments this check needs ({exc})") from None
        raise


def _params(max_tokens: int = MAX_TOKENS) -> Any:
    vllm = importlib.import_module("vllm")
    return _need(vllm, "SamplingParams")(temperature=0.0, max_tokens=max_tokens, logprobs=1)


def _tokens(out: Any) -> tuple[list[int], list[float]]:
    c = _need(out, "outputs")[0]
    ids = list(_need(c, "token_ids"))
    lps = [next((float(v.logprob) for k, v in d.items() if k == t), math.nan)
           for t, d in zip(ids, _need(c, "logprobs") or [])]
    return ids, lps


def _generate(llm: Any, prompts: list[str]) -> Generated:
    return [_tokens(o) for o in _need(llm, "generate")(prompts, _params(), use_tqdm=False)]


def _held_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return int(torch.cuda.memory_allocated(device))
    from checks.kernel import _held_bytes as live_tensor_bytes
    return live_tensor_bytes(device)


def _caches(h: _Hooks) -> list[Any]:
    caches = list(_need(h.runner, "kv_caches"))
    if not caches:
        raise Unsupported("GPUModelRunner.kv_caches is empty after engine start")
    return caches


def _checksum(t: torch.Tensor) -> int:
    return int(t.view(torch.uint8).sum(dtype=torch.int64))


def _physical(llm: Any, h: _Hooks) -> CheckResult:
    caches = _caches(h)
    problems = []
    for i, entry in enumerate(caches):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            problems.append(f"layer {i}: expected a (k_cache, v_cache) tuple, found {type(entry).__name__}")
            continue
        k, v = entry
        if k.dtype not in ref.K_DTYPES or v.dtype != ref.FP8 or v.nbytes * 2 != k.nbytes \
                or k.dim() != 4 or k.shape != v.shape:
            problems.append(f"layer {i}: K {k.dtype} {tuple(k.shape)} {k.nbytes}B, "
                            f"V {v.dtype} {tuple(v.shape)} {v.nbytes}B")
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
                   f"{first[1].dtype if first else '?'}, state {ratio:.3f}x BF16, live",
                   "; ".join(problems[:3]),
                   {"layers": len(caches), "k_dtype": str(first[0].dtype) if first else None,
                    "v_dtype": str(first[1].dtype) if first else None,
                    "layer_shape": list(first[0].shape) if first else None, "k_bytes": k_bytes,
                    "v_bytes": v_bytes, "state_vs_bf16": ratio, "live": live, "problems": problems},
                   {"k_dtype": ["torch.float16", "torch.bfloat16"], "v_dtype": "torch.float8_e4m3fn",
                    "v_bytes": "k_bytes / 2", "state_vs_bf16": 0.75, "live": "K and V changed"})


def _v_range(v: torch.Tensor) -> tuple[float, int, int]:
    """max |value stored|, how many sit at +-448, how many are non-zero (chunked: caches are big)."""
    amax, saturated, written = 0.0, 0, 0
    step = max(1, (64 << 20) // max(1, v[0].numel() * 4))
    for start in range(0, v.shape[0], step):
        a = v[start:start + step].float().abs()
        amax = max(amax, float(a.max()))
        saturated += int((a >= FP8_MAX).sum())
        written += int((a > 0).sum())
    return amax, saturated, written


def _scales(llm: Any, h: _Hooks) -> CheckResult:
    layers = h.layers(h.runner)
    supplied = list(h.v_scales)
    _generate(llm, list(PROMPTS))
    as_float = [float(_need(layer, "_v_scale_float")) for layer in layers]
    as_tensor = [float(_need(layer, "_v_scale").detach().float().reshape(-1)[0]) for layer in layers]
    caches = _caches(h)
    ranges = [_v_range(entry[1]) for entry in caches]
    used = [a / FP8_MAX for a, _, _ in ranges]
    sat = [s / w if w else 0.0 for _, s, w in ranges]
    problems = []
    if not (len(as_float) == len(supplied) == len(caches)):
        problems.append(f"{len(layers)} scaled layers and {len(caches)} caches for {len(supplied)} scales")
    bad = [i for i, (f, t, s) in enumerate(zip(as_float, as_tensor, supplied))
           if abs(f - s) > 1e-6 * s or abs(t - s) > 1e-6 * s]
    if bad:
        problems.append(f"layers {bad[:8]} do not hold the supplied scales after generation")
    order_ok = "scales_loaded" in h.events and (
        "graphs_captured" not in h.events
        or h.events.index("scales_loaded") < h.events.index("graphs_captured"))
    if not order_ok:
        problems.append(f"scales not loaded before graph capture ({h.events})")
    median_used = statistics.median(used) if used else 0.0
    if median_used < MIN_USED_RANGE:
        problems.append(f"stored V uses {median_used:.3g} of the e4m3 range (median over layers): "
                        f"written with another scale than supplied (1.0?)")
    over = [i for i, s in enumerate(sat) if s > MAX_SATURATED]
    if over:
        problems.append(f"layers {over[:8]} clamp more than {MAX_SATURATED:.0%} of V at 448")
    return verdict("calibrated_scales", not problems,
                   f"{len(supplied)} layer scales in effect before capture; stored V uses "
                   f"{median_used:.2f} of the e4m3 range", "; ".join(problems),
                   {"supplied": supplied, "v_scale_float": as_float, "v_scale": as_tensor,
                    "events": h.events, "v_range_used": used, "v_saturated_share": sat},
                   {"max_rel_diff": 1e-6, "order": "scales_loaded before graphs_captured",
                    "v_range_used_median_min": MIN_USED_RANGE, "v_saturated_share_max": MAX_SATURATED})


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
    return verdict("mixed_prefill", ok, "fresh prompt admitted beside 2 decodes matches solo", why,
                   {"first_step_outputs": first, "solo": solo, "mixed": mixed},
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
    free_after, held = [int(free())], [_held_bytes(device)]
    for _ in range(MEMORY_ROUNDS):
        _generate(llm, list(PROMPTS))
        free_after.append(int(free()))
        held.append(_held_bytes(device))
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


def _graphs(manifest: Manifest, seed: int, h: _Hooks, graphed: list[Generated] | BaseException,
            graph_captured: bool, device: torch.device) -> CheckResult:
    if isinstance(graphed, BaseException):
        raise graphed
    captures = h.captures
    llm = _start(manifest, seed, eager=True)
    try:
        eager_captured = h.captures > captures
        eager = [_generate(llm, list(PROMPTS[:n])) for n in GRAPH_BATCHES]
    finally:
        del llm
        gc.collect()
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


def run_engine_level(manifest: Manifest, fixtures: Path | None, seed: int,
                     device: torch.device | None = None) -> tuple[list[CheckResult], ScaleChoice]:
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = model_shape(manifest)
    choice = engine_scales(manifest, fixtures, shape.layers)
    names = [n for n, _ in REQUIRED_CHECKS]
    if choice.error is not None:
        return [CheckResult(n, FAILED if n == "calibrated_scales" else SKIPPED,
                            choice.error.splitlines()[0] if n == "calibrated_scales"
                            else "skipped: no valid calibrated scales to start the engine with")
                for n in names], choice
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    hooks = _Hooks(choice.v_scales)
    try:
        try:
            hooks.install()
            llm = _start(manifest, seed, eager=False)
        except Unsupported as exc:
            return [CheckResult(n, "unsupported", f"unsupported: {exc}") for n in names], choice
        except Exception as exc:     # the engine did not start: nothing was verified
            return [CheckResult(n, FAILED, f"the engine did not start: {type(exc).__name__}: {exc}")
                    for n in names], choice
        graph_captured = hooks.captures > 0
        results = {"physical_k16v8": run_check("physical_k16v8", _physical, llm, hooks),
                   "calibrated_scales": run_check("calibrated_scales", _scales, llm, hooks),
                   "mixed_prefill": run_check("mixed_prefill", _mixed, llm),
                   "clean_memory": run_check("clean_memory", _memory, llm, hooks, shape),
                   "deterministic_generation": run_check("deterministic_generation", _deterministic, llm)}
        graphed: list[Generated] | BaseException
        try:
            graphed = [_generate(llm, list(PROMPTS[:n])) for n in GRAPH_BATCHES]
        except Exception as exc:
            graphed = exc
        finally:
            del llm
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        results["decode_graphs"] = run_check("decode_graphs", _graphs, manifest, seed, hooks, graphed,
                                             graph_captured, device)
    finally:
        hooks.uninstall()
    return [results[n] for n in names], choice
