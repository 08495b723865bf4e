"""Calibrated per-layer KV scales: the file format, loading and validation.

Standard library only: this module runs in the stack env (``october.checks.smoke``)
and in the tool env (``current download`` validates the file it finds).

File: ``<fixtures>/<org>__<name>.kv_scales.json`` (``scales_path``), where
``<fixtures>`` is ``--fixtures`` or ``$KNLP_KV_FIXTURES``::

    {
      "format_version": 1,
      "kind": "october-kv-scales",
      "model": {"repo": "Qwen/Qwen3-8B-AWQ", "revision": "<40 hex>"},
      "num_layers": 36,
      "v_scales": [0.0123, ...],            # one per layer, > 0, finite
      "k_scales": null | [...],             # optional; K stays 16-bit, so these are informational
      "method": {
        "statistic": "amax / 448",          # how a scale was derived from activations
        "calibration_tokens": 8192,
        "dataset": "free text naming the calibration data",
        "dtype": "float8_e4m3fn"
      }
    }

A value scale ``s`` means ``v_fp8 = saturate(v / s)`` and ``v ~= v_fp8 * s``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .contract import FULL_SHA, json_loads, write_text_atomic

FORMAT_VERSION = 1
KIND = "october-kv-scales"
ENV_VAR = "KNLP_KV_FIXTURES"


class ScalesInvalid(ValueError):
    """Raised with a one-line message: what was expected, what was found, what to do."""


@dataclass(frozen=True)
class KVScales:
    path: str
    repo: str
    revision: str
    num_layers: int
    v_scales: tuple[float, ...]
    k_scales: tuple[float, ...] | None
    method: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "repo": self.repo, "revision": self.revision,
                "num_layers": self.num_layers, "v_scales": list(self.v_scales),
                "k_scales": list(self.k_scales) if self.k_scales is not None else None,
                "method": self.method}


def fixtures_dir(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else None


def scales_path(fixtures: Path, repo: str) -> Path:
    return fixtures / f"{repo.replace('/', '__')}.kv_scales.json"


def _fail(path: Path, what: str, expected: str, found: str, fix: str) -> ScalesInvalid:
    return ScalesInvalid(f"{path}: {what}: expected {expected}, found {found}.\n  -> {fix}")


def _float_list(path: Path, key: str, value: Any, n: int) -> tuple[float, ...]:
    regen = "re-run the calibration for this model, or point --fixtures at the right directory"
    if not isinstance(value, list):
        raise _fail(path, key, f"a list of {n} numbers", type(value).__name__, regen)
    if len(value) != n:
        raise _fail(path, key, f"{n} values (num_layers)", f"{len(value)}", regen)
    out = []
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise _fail(path, f"{key}[{i}]", "a number", repr(x), regen)
        fx = float(x)
        if not math.isfinite(fx) or fx <= 0.0:
            raise _fail(path, f"{key}[{i}]", "a positive finite scale", repr(x), regen)
        out.append(fx)
    return tuple(out)


def load_scales(path: Path) -> KVScales:
    """Parse and structurally validate a scales file (model identity is checked separately)."""
    if not path.is_file():
        raise _fail(path, "scales file", "an existing file", "nothing",
                    f"put the calibrated scales there or set ${ENV_VAR} / --fixtures")
    try:
        data = json_loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(path, "scales file", "JSON", f"invalid JSON ({exc})", "regenerate the file") from None
    if not isinstance(data, dict):
        raise _fail(path, "scales file", "a JSON object", type(data).__name__, "regenerate the file")
    if data.get("format_version") != FORMAT_VERSION or data.get("kind") != KIND:
        raise _fail(path, "format", f"kind={KIND!r} format_version={FORMAT_VERSION}",
                    f"kind={data.get('kind')!r} format_version={data.get('format_version')!r}",
                    "regenerate the file with this tool's format")
    model = data.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("repo"), str) \
            or not isinstance(model.get("revision"), str) or not FULL_SHA.match(model["revision"]):
        raise _fail(path, "model", "{repo: 'org/name', revision: <40 hex>}", repr(model),
                    "record the model the scales were calibrated on")
    n = data.get("num_layers")
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise _fail(path, "num_layers", "a positive integer", repr(n), "regenerate the file")
    v = _float_list(path, "v_scales", data.get("v_scales"), n)
    if all(x == 1.0 for x in v):
        # the engine's own default: an engine that ignored the scales would hold the same, so nothing is proved
        raise _fail(path, "v_scales", "calibrated V scales (a calibration gives values other than 1.0)",
                    f"{n} times 1.0, the engine's default scale", "re-run the calibration for this model")
    k_raw = data.get("k_scales")
    k = None if k_raw is None else _float_list(path, "k_scales", k_raw, n)
    method = data.get("method")
    if not isinstance(method, dict) or not isinstance(method.get("statistic"), str):
        raise _fail(path, "method", "a table with at least 'statistic'", repr(method),
                    "say how the scales were computed")
    return KVScales(path=str(path), repo=model["repo"], revision=model["revision"], num_layers=n,
                    v_scales=v, k_scales=k, method=method)


def check_model(scales: KVScales, repo: str, revision: str, num_layers: int | None = None) -> None:
    """Reject scales calibrated on another model, revision or layer count."""
    p = Path(scales.path)
    fix = "use the scales calibrated for this exact model revision (or recalibrate)"
    if scales.repo != repo:
        raise _fail(p, "model.repo", repr(repo), repr(scales.repo), fix)
    if scales.revision != revision:
        raise _fail(p, "model.revision", revision, scales.revision, fix)
    if num_layers is not None and scales.num_layers != num_layers:
        raise _fail(p, "num_layers", f"{num_layers} (the model's layers)", str(scales.num_layers), fix)


def write_scales(path: Path, *, repo: str, revision: str, v_scales: list[float],
                 k_scales: list[float] | None = None, method: dict[str, Any] | None = None) -> None:
    """Write a scales file (used by calibration and by tests); atomic replace."""
    data = {"format_version": FORMAT_VERSION, "kind": KIND,
            "model": {"repo": repo, "revision": revision}, "num_layers": len(v_scales),
            "v_scales": v_scales, "k_scales": k_scales,
            "method": method or {"statistic": "amax / 448", "calibration_tokens": 0,
                                 "dataset": "unspecified", "dtype": "float8_e4m3fn"}}
    write_text_atomic(path, json.dumps(data, indent=2, allow_nan=True) + "\n")


DISTINCT_FROM_ONE = 0.05   # a V scale nearer 1.0 than this (as a ratio) cannot be told from one left at 1.0


def near_one(scale: float) -> bool:
    """A scale an oracle cannot tell from 1.0 (within :data:`DISTINCT_FROM_ONE`; not positive and finite: told
    from nothing): a check of it proves nothing (see :func:`telling_scale`)."""
    return telling_scale([scale]) is None


def telling_scale(scales: "list[float] | tuple[float, ...]") -> int | None:
    """The index of the V scale furthest from 1.0 (as a ratio, so 0.5 and 2.0 are as far), or None when none
    is :data:`DISTINCT_FROM_ONE` away.  A check whose oracle applies a scale within that of 1.0 passes a kernel or
    engine that leaves the scale at 1.0 (the default: a scale ignored) and, at the edge of its tolerance, fails a
    healthy one: a review found both with layer 0's scale 1.0 and 0.99 beside a layer at 0.02."""
    usable = [i for i, v in enumerate(scales) if v > 0 and math.isfinite(v)]
    if not usable:
        return None
    best = max(usable, key=lambda i: abs(math.log(scales[i])))
    return best if abs(math.log(scales[best])) >= math.log1p(DISTINCT_FROM_ONE) else None
