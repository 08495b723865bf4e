"""The smoke receipt: machine facts and assembly (standard library + torch); its format is in :mod:`october.checks.contract`."""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

from .contract import (
    CHECK_NAMES,
    PASSED,
    SMOKE_RECEIPT_FILENAME,
    SMOKE_RECEIPT_FORMAT_VERSION,
    SMOKE_RECEIPT_KIND,
    NOTHING,
    proved,
    write_json_atomic,
)
from .results import CheckResult, overall


def _driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8")
        for word in text.split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)
        first = out.stdout.strip().splitlines()
        return first[0].strip() if out.returncode == 0 and first else None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_facts(device: torch.device) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "platform": platform.platform(), "machine": platform.machine(),
        "python": platform.python_version(), "torch": torch.__version__,
        "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
        "device": str(device), "gpu": None, "compute_capability": None, "driver": None,
    }
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        facts["gpu"] = torch.cuda.get_device_name(idx)
        major, minor = torch.cuda.get_device_capability(idx)
        facts["compute_capability"] = f"{major}.{minor}"
        facts["driver"] = _driver_version()
    return facts


def build_receipt(*, level: str, device: torch.device, seed: int, stack: dict[str, Any],
                  selection: str | None, model: dict[str, Any] | None, scales: dict[str, Any],
                  results: list[CheckResult], timings: dict[str, float],
                  notes: list[str], promised_level: str | None = None,
                  extra: dict[str, Any] | None = None, problems: list[str] | None = None,
                  diagnostic: dict[str, Any] | None = None) -> dict[str, Any]:
    """The receipt.  ``passed`` is the stack verdict: every check passed at the level the stack
    promises (``proves == "stack"``) and no run-level ``problems``; ``checks_passed`` says only
    whether the six checks passed at the level that ran.  ``proves`` claims only what ran and passed
    (:func:`october.checks.contract.proved`): ``nothing`` when a check failed, was skipped or was
    unsupported.  A ``diagnostic`` run (a symmetric cache on the engine,
    :mod:`october.checks.engine.diagnostic`) proves at most the harness and is never passed."""
    passed, reasons = overall(results, level, promised_level, problems)
    by_name = {r.name: r for r in results}
    checks_passed = all(n in by_name and by_name[n].status == PASSED for n in CHECK_NAMES)
    every_passed = checks_passed and all(r.status == PASSED for r in results)    # the extra (JIT) check too
    what = proved(level, promised_level, every_passed, passed)
    if diagnostic is not None:
        passed, what = False, ("harness" if diagnostic.get("harness_ok") is True else NOTHING)
        can = diagnostic['proves'] if what != NOTHING else "nothing (the harness and the engine did not agree)"
        reasons.append(f"diagnostic run ({', '.join(diagnostic['caches'])} cache): it proves {can}; "
                       "it can never pass as a stack verdict")
    doc = {
        "format_version": SMOKE_RECEIPT_FORMAT_VERSION, "kind": SMOKE_RECEIPT_KIND,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "level": level, "promised_level": promised_level, "proves": what,
        "seed": seed, "stack": stack, "selection": selection, "model": model,
        "scales": scales, "machine": machine_facts(device),
        "checks": [r.as_json() for r in results],
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "notes": notes, "checks_passed": checks_passed, "passed": passed, "reasons": reasons,
    }
    doc.update(extra or {})
    if diagnostic is not None:
        doc["diagnostic"] = diagnostic
    return doc


def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: non-finite floats are written as strings ("nan", "inf")."""
    if isinstance(obj, float) and obj != obj or obj in (float("inf"), float("-inf")):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_receipt(out_dir: Path, receipt: dict[str, Any]) -> Path:
    """Atomically (:func:`october.checks.contract.write_json_atomic`): never a half-written receipt."""
    path = out_dir / SMOKE_RECEIPT_FILENAME
    write_json_atomic(path, _finite(receipt), default=str, allow_nan=False)
    return path
