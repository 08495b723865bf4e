"""The calibrated KV scales for the downloaded model (``checks/scales.py``'s format): found in the fixtures, one
per layer of the model's config, finite and positive; their path and sha256 go into the manifest."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from ..core import jsonread
from ..core.errors import ScalesError
from ..core.hashing import sha256_file
from .plan import FIXTURES_ENV, DownloadPlan


def _num_layers(config: Path) -> int | None:
    try:
        data = jsonread.loads(config.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    for source in (data, data.get("text_config") or {}):
        n = source.get("num_hidden_layers") if isinstance(source, dict) else None
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None


def check_scales(plan: DownloadPlan, warn: Callable[[str], None]) -> dict[str, Any] | None:
    """Validate the calibrated scales for this model; None (with a warning) when no fixtures dir is known."""
    from ...checks.scales import ScalesInvalid, check_model, load_scales, scales_path

    if plan.fixtures is None:
        warn(f"no calibrated KV scales checked (neither --fixtures nor ${FIXTURES_ENV} is set); "
             "`current smoke` will need them")
        return None
    path = scales_path(plan.fixtures, plan.repo)
    num_layers = _num_layers(plan.local_dir / "config.json")
    try:
        scales = load_scales(path)
        check_model(scales, plan.repo, plan.revision, num_layers)
    except ScalesInvalid as exc:
        what, _, fix = str(exc).partition("\n  -> ")
        raise ScalesError(f"calibrated scales for {plan.where} are not usable: {what}",
                          fix=fix.strip() or None) from None
    # load_scales already refuses non-finite and non-positive values; keep the invariant explicit.
    assert all(math.isfinite(v) and v > 0 for v in scales.v_scales)
    return {"path": str(path), "sha256": sha256_file(path), "num_layers": scales.num_layers}
