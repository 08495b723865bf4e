"""What the real engine exposes of the surface checks/engine/vllm_surface.py TOUCHED lists, on a symmetric cache.

    STACK/env/bin/python bench/vllm_surface_probe.py MODEL_DIR [auto|fp8_e4m3]

Starts vllm.LLM in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) with the FlashInfer backend, generates, and
prints one JSON line: which attributes exist, the KV cache layout per layer, backend names, block counts."""
import json, os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
import vllm, torch
import vllm.v1.worker.gpu_model_runner as gmr
seen = {}
orig = gmr.GPUModelRunner.load_model
def load_model(self, *a, **k):
    out = orig(self, *a, **k); seen["runner"] = self; return out
gmr.GPUModelRunner.load_model = load_model
kv = sys.argv[2] if len(sys.argv) > 2 else "auto"
llm = vllm.LLM(model=sys.argv[1], dtype="bfloat16", kv_cache_dtype=kv, attention_config={"backend": "FLASHINFER"},
               seed=0, enforce_eager=False, gpu_memory_utilization=0.3, enable_prefix_caching=False, max_model_len=4096)
outs = llm.generate(["The capital of France is"], vllm.SamplingParams(temperature=0.0, max_tokens=8, logprobs=1), use_tqdm=False)
r = seen.get("runner"); rep = {"vllm": vllm.__version__, "kv": kv, "tokens": list(outs[0].outputs[0].token_ids)}
def has(o, d):
    for p in d.split("."):
        if not hasattr(o, p): return False
        o = getattr(o, p)
    return True
rep["runner_found"] = r is not None
if r is not None:
    rep["runner_attrs"] = {a: has(r, a) for a in ("kv_caches", "vllm_config", "capture_model")}
    ctx = r.vllm_config.compilation_config.static_forward_context
    layers = [l for l in ctx.values() if hasattr(l, "kv_cache")]
    rep["layers"] = len(layers)
    l0 = layers[0]
    rep["layer_attrs"] = {a: has(l0, a) for a in ("_v_scale", "_v_scale_float", "_k_scale", "kv_cache", "attn_backend", "impl", "impl.forward")}
    rep["backend"] = str(l0.attn_backend.get_name())
    kc = l0.kv_cache
    rep["layer_kv_cache_type"] = type(kc).__name__
    t = kc[0] if isinstance(kc, (list, tuple)) else kc
    rep["kv_cache_entry"] = {"type": type(t).__name__, "shape": list(getattr(t, "shape", [])), "dtype": str(getattr(t, "dtype", None))}
    kvs = r.kv_caches
    rep["runner_kv_caches"] = {"type": type(kvs).__name__, "len": len(kvs), "first": {"type": type(kvs[0]).__name__, "shape": list(getattr(kvs[0], "shape", [])), "dtype": str(getattr(kvs[0], "dtype", None))}}
eng = llm.llm_engine
rep["engine_attrs"] = {a: has(eng, a) for a in ("add_request", "step", "has_unfinished_requests", "vllm_config.cache_config.num_gpu_blocks",
    "engine_core.engine_core.scheduler.kv_cache_manager.block_pool.get_num_free_blocks")}
print("SURFACE " + json.dumps(rep))
