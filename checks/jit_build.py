"""The JIT builder, run inside the stack env: ``python -P -s -m october.checks.jit_build REQUEST``.

Every assumption this project makes about FlashInfer's Python API lives in this
module (checked against mcgrof/flashinfer's ``flashinfer/jit/attention/modules.py``
and ``flashinfer/jit/core.py``):

* ``FLASHINFER_WORKSPACE_BASE`` / ``FLASHINFER_CUDA_ARCH_LIST`` are read when
  flashinfer is imported, so they must be set before (the step sets them; this
  module refuses to run if flashinfer was imported already or they are unset);
* the asymmetric fork's ``BatchDecodeWithPagedKVCacheWrapper.plan`` accepts
  ``k_data_type`` / ``v_data_type``, named (older series) or through ``**kwargs``
  forwarded to ``_plan_impl`` (0.6.15); decided by :mod:`october.checks.flashinfer_asym`;
* ``gen_batch_decode_module(dtype_q, dtype_kv, dtype_o, dtype_idx, head_dim_qk,
  head_dim_vo, pos_encoding_mode, use_sliding_window, use_logits_soft_cap, *,
  dtype_k, dtype_v)`` and ``gen_batch_prefill_module(backend, ...same...,
  use_fp16_qk_reduction, *, dtype_k, dtype_v)`` return a ``JitSpec`` whose
  ``name`` is the module URI and ``jit_library_path`` the ``.so`` it builds;
* ``JitSpec.build(verbose=...)`` builds one module with the per-module ``build.ninja``
  the runtime's ``build_and_load()`` re-checks; modules are built side by side
  (``build_jit_specs`` is the fallback for a spec without ``build``: its combined ninja
  file leaves no per-module log, so FlashInfer 0.6.15 rebuilt every module on first
  use, which the smoke's workspace watch caught on the H200).
* ``dtype_kv`` is passed as the K dtype: the wrappers default K to
  ``kv_data_type``, so that is the module a K16/V8 ``plan`` asks for.

Standard library only at import time; flashinfer and torch are imported in
:func:`main`.  The request and result are JSON files (see :func:`main`).  Exit
code 3 with ``problem`` set in the result: the installed FlashInfer is not the
asymmetric fork.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from . import flashinfer_asym  # stdlib only, safe in the stack env
from .contract import json_loads, sha256_file  # stdlib only, safe in the stack env

RESULT_FORMAT = 1
EXIT_NOT_ASYMMETRIC = 3
ENV_VARS = ("FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST")

Module = Mapping[str, Any]           # one request entry: id, kind, q, k, v, o, head_dim, posenc, backend
Built = dict[str, Any]               # id, uri, path, cached


class ModuleProgress:
    """A line on stdout as modules are ready, ``JIT modules built: 1/3 (URI)`` (the cached ones
    first, in one line), which the tool's console turns into a modules done / total bar
    (``october.installer.core.ui.JIT_MODULES``).  Safe to call from the threads that build modules side by side."""

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        self.total, self.done = total, 0
        self._out = out if out is not None else sys.stdout
        self._lock = threading.Lock()

    def _line(self, what: str) -> None:
        print(f"JIT modules built: {self.done}/{self.total} ({what})", file=self._out, flush=True)

    def cached(self, count: int) -> None:
        with self._lock:
            self.done += count
            self._line(f"{count} found cached" if count else "starting")

    def built(self, uri: str) -> None:
        with self._lock:
            self.done += 1
            self._line(uri)


BuildFn = Callable[[Any, Sequence[Module], ModuleProgress], list[Built]]


def asymmetric_problem(fi: Any, modules: Sequence[Module]) -> str | None:
    """``None`` when this FlashInfer serves every requested module, else why not.

    Decided by :mod:`october.checks.flashinfer_asym` (the same function the kernel smoke level uses): the
    decode wrapper must accept ``k_data_type``/``v_data_type`` (explicit or forwarding
    form), and so must the paged prefill wrapper when an asymmetric (K != V) prefill
    module is requested; a K == V prefill module (the fresh-prefill route's plain bf16
    prefill) needs only FlashInfer's ordinary ragged prefill wrapper.
    """
    caps = flashinfer_asym.capabilities(fi)
    where = f"flashinfer {caps.version} from {getattr(fi, '__file__', '?')}"
    problem = caps.problem()
    if problem is not None:
        return f"{problem}; {where}"
    for m in modules:
        if m["kind"] == "prefill" and m["k"] != m["v"] and not caps.paged_prefill.asymmetric:
            return (f"the recipe asks for an asymmetric prefill module (k={m['k']}, v={m['v']}) but "
                    f"{caps.paged_prefill.reason}; {where}")
        if m["kind"] == "prefill" and m["k"] == m["v"] and not caps.ragged_prefill:
            return f"{where} has no {flashinfer_asym.RAGGED_PREFILL} for the fresh-prefill route"
    return None


def _first_attr(modules: Sequence[str], name: str) -> Any:
    for mod in modules:
        try:
            found = getattr(importlib.import_module(mod), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    raise ImportError(f"none of {', '.join(modules)} defines {name}")


def build_with_flashinfer(fi: Any, modules: Sequence[Module], progress: ModuleProgress) -> list[Built]:
    """Generate one JitSpec per module and build them all in one parallel ninja run."""
    import torch

    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    places = ("flashinfer.jit.attention.modules", "flashinfer.jit.attention", "flashinfer.jit")
    gen_decode = _first_attr(places, "gen_batch_decode_module")
    gen_prefill = _first_attr(places, "gen_batch_prefill_module")
    build_jit_specs = _first_attr(("flashinfer.jit.core", "flashinfer.jit"), "build_jit_specs")
    specs = []
    for m in modules:
        q, k, v, o = (dtypes[m[x]] for x in ("q", "k", "v", "o"))
        common = (q, k, o, torch.int32, m["head_dim"], m["head_dim"], m["posenc"], False, False)
        # K == V: the ordinary module (same URI FlashInfer's own wrappers ask for, e.g. the bf16 ragged
        # prefill of the mixed route); the dtype_k/dtype_v keywords only for an asymmetric one.
        kv = {"dtype_k": k, "dtype_v": v} if m["k"] != m["v"] else {}
        if m["kind"] == "decode":
            spec = gen_decode(*common, **kv)
        else:
            spec = gen_prefill(m.get("backend", "fa2"), *common, False, **kv)
        specs.append(spec)
    cached = [Path(s.jit_library_path).is_file() and Path(s.ninja_path).is_file() if hasattr(s, "ninja_path")
              else Path(s.jit_library_path).is_file() for s in specs]
    todo = [s for s, c in zip(specs, cached) if not c]
    progress.cached(len(specs) - len(todo))
    if todo and all(hasattr(s, "build") for s in todo):
        # each module through JitSpec.build(): the per-module build.ninja and ninja log the runtime's
        # build_and_load() checks, so a smoke run finds them up to date (build_jit_specs' one combined
        # ninja file leaves no per-module log, and FlashInfer then rebuilds every module on first use);
        # the modules build side by side, each ninja run parallel over its own sources
        from concurrent.futures import ThreadPoolExecutor
        def build_one(spec: Any) -> None:
            spec.build(verbose=False)
            progress.built(spec.name)

        with ThreadPoolExecutor(max_workers=len(todo)) as pool:
            list(pool.map(build_one, todo))
    elif todo:
        build_jit_specs(todo, verbose=False, skip_prebuilt=False)
        for spec in todo:               # one combined ninja run: every module is ready at its end
            progress.built(spec.name)
    return [{"id": m["id"], "uri": s.name, "path": str(s.jit_library_path), "cached": c}
            for m, s, c in zip(modules, specs, cached)]


def aot_dir() -> str | None:
    """``flashinfer.jit.env.FLASHINFER_AOT_DIR``: prebuilt modules found there are loaded as they are,
    without ninja (``JitSpecNvcc.try_load``)."""
    try:
        env = importlib.import_module("flashinfer.jit.env")
    except Exception:  # noqa: BLE001 - a FlashInfer without this module has no AOT directory to use
        return None
    found = getattr(env, "FLASHINFER_AOT_DIR", None)
    return str(found) if found else None


def main(argv: Sequence[str], build: BuildFn = build_with_flashinfer) -> int:
    """``argv[0]`` is the request file: {"modules": [...], "result": path}; the result file gets
    {"format", "flashinfer_version", "flashinfer_file", "problem", "modules": [{id, uri, path, sha256, cached}]}."""
    request = json_loads(Path(argv[0]).read_text(encoding="utf-8"))
    result_path = Path(request["result"])
    result: dict[str, Any] = {"format": RESULT_FORMAT, "problem": None, "modules": []}

    def finish(code: int) -> int:
        result_path.write_text(json.dumps(result, indent=1, sort_keys=True), encoding="utf-8")
        return code

    if "flashinfer" in sys.modules:
        result["problem"] = "flashinfer was imported before FLASHINFER_WORKSPACE_BASE was applied"
        return finish(2)
    unset = [v for v in ENV_VARS if not os.environ.get(v)]
    if unset:
        result["problem"] = f"{', '.join(unset)} not set before importing flashinfer"
        return finish(2)
    fi = importlib.import_module("flashinfer")
    result["flashinfer_version"] = str(getattr(fi, "__version__", "unknown"))
    result["flashinfer_file"] = str(getattr(fi, "__file__", ""))
    result["aot_dir"] = aot_dir()
    problem = asymmetric_problem(fi, request["modules"])
    if problem is not None:
        result["problem"] = problem
        return finish(EXIT_NOT_ASYMMETRIC)
    for built in build(fi, request["modules"], ModuleProgress(len(request["modules"]))):
        path = Path(built["path"])
        built["sha256"] = sha256_file(path) if path.is_file() else None
        result["modules"].append(built)
    return finish(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
