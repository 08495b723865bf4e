"""The JIT builder, run inside the stack env: ``python -P -s -m installer.jit.flashinfer_builder REQUEST``.

Every assumption this project makes about FlashInfer's Python API lives in this
module (checked against mcgrof/flashinfer's ``flashinfer/jit/attention/modules.py``
and ``flashinfer/jit/core.py``):

* ``FLASHINFER_WORKSPACE_BASE`` / ``FLASHINFER_CUDA_ARCH_LIST`` are read when
  flashinfer is imported, so they must be set before (the step sets them; this
  module refuses to run if flashinfer was imported already or they are unset);
* the asymmetric fork's ``BatchDecodeWithPagedKVCacheWrapper.plan`` (and the
  prefill wrapper's) take keyword-only ``k_data_type`` / ``v_data_type``;
* ``gen_batch_decode_module(dtype_q, dtype_kv, dtype_o, dtype_idx, head_dim_qk,
  head_dim_vo, pos_encoding_mode, use_sliding_window, use_logits_soft_cap, *,
  dtype_k, dtype_v)`` and ``gen_batch_prefill_module(backend, ...same...,
  use_fp16_qk_reduction, *, dtype_k, dtype_v)`` return a ``JitSpec`` whose
  ``name`` is the module URI and ``jit_library_path`` the ``.so`` it builds;
* ``build_jit_specs(specs, verbose=..., skip_prebuilt=...)`` builds them all with
  one ninja run (parallel; ``MAX_JOBS`` caps the jobs).
* ``dtype_kv`` is passed as the K dtype: the wrappers default K to
  ``kv_data_type``, so that is the module a K16/V8 ``plan`` asks for.

Standard library only at import time; flashinfer and torch are imported in
:func:`main`.  The request and result are JSON files (see :func:`main`).  Exit
code 3 with ``problem`` set in the result: the installed FlashInfer is not the
asymmetric fork.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from installer.hashing import sha256_file  # stdlib only, safe in the stack env

RESULT_FORMAT = 1
EXIT_NOT_ASYMMETRIC = 3
ENV_VARS = ("FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST")
ASYM_KWARGS = ("k_data_type", "v_data_type")
WRAPPERS = {"decode": "BatchDecodeWithPagedKVCacheWrapper", "prefill": "BatchPrefillWithPagedKVCacheWrapper"}

Module = Mapping[str, Any]           # one request entry: id, kind, q, k, v, o, head_dim, posenc, backend
Built = dict[str, Any]               # id, uri, path, cached
BuildFn = Callable[[Any, Sequence[Module]], list[Built]]


def asymmetric_problem(fi: Any, kinds: Sequence[str]) -> str | None:
    """``None`` when every wrapper the modules need has ``plan(..., k_data_type=, v_data_type=)``."""
    for kind in sorted(set(kinds)):
        cls_name = WRAPPERS[kind]
        cls = getattr(fi, cls_name, None)
        if cls is None:
            return f"flashinfer {getattr(fi, '__version__', '?')} has no {cls_name}"
        try:
            params = inspect.signature(cls.plan).parameters
        except (TypeError, ValueError) as exc:
            return f"cannot read the signature of {cls_name}.plan ({exc})"
        missing = [k for k in ASYM_KWARGS if k not in params]
        if missing:
            return (f"{cls_name}.plan has no {', '.join(missing)} parameter "
                    f"(flashinfer {getattr(fi, '__version__', '?')} from {getattr(fi, '__file__', '?')})")
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


def build_with_flashinfer(fi: Any, modules: Sequence[Module]) -> list[Built]:
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
        if m["kind"] == "decode":
            spec = gen_decode(*common, dtype_k=k, dtype_v=v)
        else:
            spec = gen_prefill(m.get("backend", "fa2"), *common, False, dtype_k=k, dtype_v=v)
        specs.append(spec)
    cached = [Path(s.jit_library_path).is_file() for s in specs]
    todo = [s for s, c in zip(specs, cached) if not c]
    if todo:
        build_jit_specs(todo, verbose=False, skip_prebuilt=False)
    return [{"id": m["id"], "uri": s.name, "path": str(s.jit_library_path), "cached": c}
            for m, s, c in zip(modules, specs, cached)]


def main(argv: Sequence[str], build: BuildFn = build_with_flashinfer) -> int:
    """``argv[0]`` is the request file: {"modules": [...], "result": path}; the result file gets
    {"format", "flashinfer_version", "flashinfer_file", "problem", "modules": [{id, uri, path, sha256, cached}]}."""
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
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
    # only modules with K != V need the asymmetric API (the fresh-prefill route's ragged prefill is symmetric)
    problem = asymmetric_problem(fi, [m["kind"] for m in request["modules"] if m["k"] != m["v"]])
    if problem is not None:
        result["problem"] = problem
        return finish(EXIT_NOT_ASYMMETRIC)
    for built in build(fi, request["modules"]):
        path = Path(built["path"])
        built["sha256"] = sha256_file(path) if path.is_file() else None
        result["modules"].append(built)
    return finish(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
