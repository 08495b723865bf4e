"""``[models.<format>]``: the pinned hub model of each format, its files, dtypes and attention shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ...checks.contract import FORMATS
from .jitmodules import ModelShape

MODEL_FORMATS = FORMATS  # one definition: the contract both interpreters share


@dataclass(frozen=True)
class ModelSelection:
    format: str
    repo: str
    revision: str
    patterns: tuple[str, ...]
    sha256: Mapping[str, str] = field(default_factory=dict)
    compute_dtype: str | None = None        # vLLM --dtype the engine runs with (float16 | bfloat16)
    v_format: str = "fp8_e4m3"              # the V cache dtype; K is the compute dtype (K16)
    shape: ModelShape | None = None         # from config.json at the pinned revision
    jit_modules: tuple[str, ...] = ()       # URIs derived for this selection


def parse_models(top: Mapping[str, Any]) -> dict[str, ModelSelection]:
    return {fmt: ModelSelection(format=fmt, repo=sel["repo"], revision=sel["revision"], patterns=tuple(sel["patterns"]),
                                sha256=dict(sel.get("sha256", {})), compute_dtype=sel.get("compute_dtype"),
                                v_format=sel.get("v_format", "fp8_e4m3"),
                                shape=ModelShape(**sel["config"]) if "config" in sel else None)
            for fmt, sel in top.get("models", {}).items()}
