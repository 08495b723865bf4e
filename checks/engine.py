"""Engine level: the vLLM fork with the downloaded model, K16/V8, FlashInfer backend.

Kept deliberately small: every vLLM attribute it touches is listed in
``TOUCHED`` and reached through :func:`_need`, so a fork that lacks one makes
the checks ``unsupported`` with its name instead of crashing.  The engine runs
in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the model runner's
``load_model`` can be wrapped: the fixture V scales are written into every
attention layer right after the weights load, before ``capture_model`` builds
the CUDA graphs, and the wrapper records that order.
"""

from __future__ import annotations

import gc
import math
import os
from pathlib import Path
from typing import Any

import torch

from checks import reference as ref
from checks.inputs import Manifest, ScaleChoice, engine_scales
from checks.results import (CheckResult, FAILED, REQUIRED_CHECKS, Unsupported, run_check,
                            verdict)

KV_CACHE_DTYPE = ("auto", "fp8_e4m3")
ATTENTION_CONFIG = {"backend": "FLASHINFER"}
TOUCHED = (
    "vllm.LLM(model, kv_cache_dtype, attention_config, seed, enforce_eager, "
    "gpu_memory_utilization, enable_prefix_caching, max_model_len)",
    "vllm.SamplingParams(temperature, max_tokens, logprobs)",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner.load_model / .capture_model / .kv_caches "
    "/ .vllm_config",
    "VllmConfig.compilation_config.static_forward_context",
    "Attention._v_scale / ._v_scale_float",
    "LLM.llm_engine.add_request / .step / .has_unfinished_requests",
    "VllmConfig.cache_config.num_gpu_blocks / .block_size",
    "RequestOutput.request_id / .outputs[0].token_ids / .outputs[0].logprobs",
)
PROMPTS = ("The capital of France is", "Write one sentence about the sea.",
           "List three prime numbers:", "def fibonacci(n):", "Translate 'good morning' to German:")
MAX_TOKENS = 16


def _need(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in dotted.split("."):
        if not hasattr(cur, part):
            raise Unsupported(f"the vLLM fork has no attribute '{dotted}' (missing '{part}')")
        cur = getattr(cur, part)
    return cur


class _Hooks:
    """Wraps GPUModelRunner.load_model/capture_model: scales in, order recorded."""

    def __init__(self, v_scales: tuple[float, ...]) -> None:
        self.v_scales = v_scales
        self.runner: Any = None
        self.events: list[str] = []
        self.layer_names: list[str] = []

    def install(self) -> None:
        mod = __import__("vllm.v1.worker.gpu_model_runner", fromlist=["GPUModelRunner"])
        cls = _need(mod, "GPUModelRunner")
        load, capture = _need(cls, "load_model"), _need(cls, "capture_model")
        hooks = self

        def load_model(runner: Any, *a: Any, **kw: Any) -> Any:
            out = load(runner, *a, **kw)
            hooks.runner = runner
            hooks.apply_scales(runner)
            return out

        def capture_model(runner: Any, *a: Any, **kw: Any) -> Any:
            hooks.events.append("graphs_captured")
            return capture(runner, *a, **kw)

        cls.load_model, cls.capture_model = load_model, capture_model

    def layers(self, runner: Any) -> list[Any]:
        ctx = _need(runner, "vllm_config.compilation_config.static_forward_context")
        names = [n for n, layer in ctx.items() if hasattr(layer, "_v_scale_float")]
        self.layer_names = names
        return [ctx[n] for n in names]

    def apply_scales(self, runner: Any) -> None:
        layers = self.layers(runner)
        if len(layers) != len(self.v_scales):
            self.events.append(f"scales_not_loaded: {len(layers)} layers, "
                               f"{len(self.v_scales)} scales")
            return
        for layer, s in zip(layers, self.v_scales):
            _need(layer, "_v_scale").fill_(s)
            layer._v_scale_float = float(s)
        self.events.append("scales_loaded")


def _llm(manifest: Manifest, seed: int, eager: bool) -> Any:
    import vllm  # type: ignore[import-not-found]
    return _need(vllm, "LLM")(model=manifest.local_path, kv_cache_dtype=KV_CACHE_DTYPE,
                              attention_config=ATTENTION_CONFIG, seed=seed, enforce_eager=eager,
                              gpu_memory_utilization=0.45, enable_prefix_caching=False,
                              max_model_len=4096)


def _params(max_tokens: int = MAX_TOKENS) -> Any:
    import vllm  # type: ignore[import-not-found]
    return _need(vllm, "SamplingParams")(temperature=0.0, max_tokens=max_tokens, logprobs=1)


def _generate(llm: Any, prompts: list[str]) -> list[tuple[list[int], list[float]]]:
    out = []
    for o in _need(llm, "generate")(prompts, _params(), use_tqdm=False):
        c = o.outputs[0]
        lps = [next((v.logprob for k, v in d.items() if k == t), float("nan"))
               for t, d in zip(c.token_ids, c.logprobs or [])]
        out.append((list(c.token_ids), lps))
    return out


def _physical(h: _Hooks) -> CheckResult:
    caches = _need(h.runner, "kv_caches")
    problems = []
    for i, entry in enumerate(caches):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            problems.append(f"layer {i}: expected a (k_cache, v_cache) tuple, found {type(entry).__name__}")
            continue
        k, v = entry
        if k.dtype not in ref.K_DTYPES or v.dtype != ref.FP8 or v.nbytes * 2 != k.nbytes:
            problems.append(f"layer {i}: K {k.dtype} {k.nbytes}B, V {v.dtype} {v.nbytes}B")
    k_bytes = sum(e[0].nbytes for e in caches if isinstance(e, (tuple, list)))
    v_bytes = sum(e[1].nbytes for e in caches if isinstance(e, (tuple, list)))
    ratio = (k_bytes + v_bytes) / (2 * k_bytes) if k_bytes else 0.0
    return verdict("physical_k16v8", not problems and bool(caches),
                   f"{len(caches)} layers, K16/V8, state {ratio:.3f}x BF16",
                   "; ".join(problems[:3]) or "no KV cache tensors",
                   {"layers": len(caches), "k_bytes": k_bytes, "v_bytes": v_bytes,
                    "state_vs_bf16": ratio, "problems": problems},
                   {"v_bytes": "k_bytes / 2", "state_vs_bf16": 0.75})


def _scales(h: _Hooks) -> CheckResult:
    in_effect = [float(_need(layer, "_v_scale_float")) for layer in h.layers(h.runner)]
    supplied = list(h.v_scales)
    bad = [i for i, (e, s) in enumerate(zip(in_effect, supplied)) if abs(e - s) > 1e-6 * abs(s)]
    order_ok = "scales_loaded" in h.events and (
        "graphs_captured" not in h.events
        or h.events.index("scales_loaded") < h.events.index("graphs_captured"))
    ok = len(in_effect) == len(supplied) and not bad and order_ok
    return verdict("calibrated_scales", ok, f"{len(supplied)} layer scales in effect before capture",
                   f"scales in effect differ at layers {bad[:8]} or were loaded late ({h.events})",
                   {"supplied": supplied, "in_effect": in_effect, "events": h.events},
                   {"max_rel_diff": 1e-6, "order": "scales_loaded before graphs_captured"})


def _mixed(llm: Any) -> CheckResult:
    engine = _need(llm, "llm_engine")
    add, step = _need(engine, "add_request"), _need(engine, "step")
    solo = _generate(llm, [PROMPTS[2]])[0][0]
    add("a", PROMPTS[0], _params(64))
    add("b", PROMPTS[1], _params(64))
    for _ in range(3):
        step()
    add("c", PROMPTS[2], _params())
    first = {o.request_id: len(o.outputs[0].token_ids) for o in step()}
    mixed: list[int] = []
    while _need(engine, "has_unfinished_requests")():
        for o in step():
            if o.request_id == "c":
                mixed = list(o.outputs[0].token_ids)
    same_step = {"a", "b", "c"} <= set(first) and first["c"] == 1
    ok = same_step and mixed == solo
    return verdict("mixed_prefill", ok, "fresh prompt admitted beside 2 decodes matches solo",
                   f"same_step={same_step}, tokens equal={mixed == solo}",
                   {"first_step_outputs": first, "solo": solo, "mixed": mixed},
                   {"tokens": "identical to the solo run"})


def _memory(llm: Any, h: _Hooks) -> CheckResult:
    cfg = _need(llm, "llm_engine.vllm_config.cache_config")
    blocks, block_size = _need(cfg, "num_gpu_blocks"), _need(cfg, "block_size")
    caches = _need(h.runner, "kv_caches")
    k0 = caches[0][0]
    heads, dim = k0.shape[-2], k0.shape[-1]
    expected = blocks * block_size * len(caches) * heads * dim * 3
    actual = sum(k.nbytes + v.nbytes for k, v in caches)
    _generate(llm, list(PROMPTS))
    seen = []
    for _ in range(3):
        _generate(llm, list(PROMPTS))
        torch.cuda.synchronize()
        seen.append(int(torch.cuda.memory_allocated()))
    ok = actual == expected and len(set(seen)) == 1
    return verdict("clean_memory", ok, f"{actual} KV bytes as the formula says; memory steady",
                   f"KV bytes {actual} vs {expected}; allocated {seen}",
                   {"kv_bytes": actual, "allocated_after_rounds": seen},
                   {"kv_bytes": expected, "allocated": "unchanged"})


def _deterministic(llm: Any) -> CheckResult:
    (t1, l1), = _generate(llm, [PROMPTS[0]])
    (t2, _), = _generate(llm, [PROMPTS[0]])
    finite = all(math.isfinite(x) for x in l1)
    ok = bool(t1) and finite and t1 == t2
    return verdict("deterministic_generation", ok, f"{len(t1)} tokens, finite, identical twice",
                   f"empty={not t1} finite={finite} identical={t1 == t2}",
                   {"tokens": t1, "tokens_second_run": t2}, {"logprobs": "finite"})


def _graphs(manifest: Manifest, seed: int, graphed: list[list[tuple[list[int], list[float]]]]
            ) -> CheckResult:
    llm = _llm(manifest, seed, eager=True)
    eager = [_generate(llm, list(PROMPTS[:n])) for n in (1, 3, 5)]
    del llm
    gc.collect()
    same = [[t for t, _ in g] == [t for t, _ in e] for g, e in zip(graphed, eager)]
    return verdict("decode_graphs", all(same), "graph decode at batch 1/3/5 matches eager",
                   f"graph vs eager token mismatch at batches {[n for n, s in zip((1, 3, 5), same) if not s]}",
                   {"batches": [1, 3, 5], "match": same}, {"tokens": "identical to enforce_eager"})


def run_engine_level(manifest: Manifest, fixtures: Path | None, seed: int
                     ) -> tuple[list[CheckResult], ScaleChoice]:
    choice = engine_scales(manifest, fixtures, None)
    names = [n for n, _ in REQUIRED_CHECKS]
    if choice.error is not None:
        return [CheckResult(n, FAILED if n == "calibrated_scales" else "skipped",
                            choice.error.splitlines()[0] if n == "calibrated_scales"
                            else "skipped: no valid calibrated scales to start the engine with")
                for n in names], choice
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    hooks = _Hooks(choice.v_scales)
    try:
        hooks.install()
        llm = _llm(manifest, seed, eager=False)
    except Unsupported as exc:
        return [CheckResult(n, "unsupported", f"unsupported: {exc}") for n in names], choice
    results = {"physical_k16v8": run_check("physical_k16v8", _physical, hooks),
               "calibrated_scales": run_check("calibrated_scales", _scales, hooks),
               "mixed_prefill": run_check("mixed_prefill", _mixed, llm),
               "clean_memory": run_check("clean_memory", _memory, llm, hooks),
               "deterministic_generation": run_check("deterministic_generation", _deterministic, llm)}
    try:
        graphed = [_generate(llm, list(PROMPTS[:n])) for n in (1, 3, 5)]
    finally:
        del llm
        gc.collect()
        torch.cuda.empty_cache()
    results["decode_graphs"] = run_check("decode_graphs", _graphs, manifest, seed, graphed)
    return [results[n] for n in names], choice
