"""Preflight: is this machine fit to build the recipe's stack?

:mod:`.probes` gathers facts (running tools through the Runner), :mod:`.rules`
judges them (pure).  This module ties the two together for ``current doctor``
and for the ``preflight`` setup step, and turns facts into the receipt's
machine summary.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.errors import UsageError
from ..core.runner import Runner
from .probes import GpuFact, MachineFacts, ToolFact, gather_facts
from .rules import (
    CHECK_NAMES,
    CheckResult,
    apply_skips,
    failures,
    punch_list,
    run_checks,
    system_torch_result,
)
from ..recipe import Recipe

__all__ = ["CHECK_NAMES", "CheckResult", "GpuFact", "MachineFacts", "ToolFact", "doctor",
           "evaluate", "facts_json", "failures", "machine_facts_json", "punch_list", "validate_skip"]


def validate_skip(skip: Iterable[str]) -> tuple[str, ...]:
    """Sorted, de-duplicated skip names; an unknown name is a :class:`UsageError`."""
    names = tuple(sorted(set(skip)))
    unknown = [n for n in names if n not in CHECK_NAMES]
    if unknown:
        raise UsageError(f"--skip-preflight names an unknown check: {', '.join(unknown)}",
                         expected=f"one of {', '.join(CHECK_NAMES)}",
                         found=", ".join(repr(n) for n in unknown),
                         fix="use the check names exactly as listed (as `current doctor` prints them)")
    return names


def evaluate(recipe: Recipe, facts: MachineFacts, skip: Iterable[str],
             torch_facts: Mapping[str, Any] | None = None) -> list[CheckResult]:
    """Judge ``facts`` (and, for a site-provided torch, ``torch_facts``) against the recipe (pure),
    with ``skip`` applied."""
    from ..pyenv import systorch

    names = validate_skip(skip)
    results = run_checks(facts, recipe.preflight, recipe.cuda, recipe_file=recipe.path)
    if recipe.torch.from_system:
        results.append(system_torch_result(systorch.check(recipe, torch_facts or {"error": "not probed"})))
    return apply_skips(results, names)


def system_torch_facts(recipe: Recipe, runner: Runner, step: str) -> dict[str, Any] | None:
    """Probe the site-provided torch's interpreter, when the recipe takes torch from one."""
    from ..pyenv import systorch

    if not recipe.torch.from_system or not recipe.torch.system_python:
        return None
    return systorch.probe(runner, step, Path(recipe.torch.system_python), locate=True)


def doctor(recipe: Recipe, stack: Path, skip: tuple[str, ...], runner: Runner) -> tuple[list[CheckResult], MachineFacts]:
    """The preflight checks alone (``current doctor``): probe, judge, never raise on a failed check.

    Raises :class:`UsageError` for an unknown skip name (before probing anything).
    """
    validate_skip(skip)
    facts = gather_facts(stack, runner)
    return evaluate(recipe, facts, skip, system_torch_facts(recipe, runner, "doctor")), facts


def facts_json(facts: MachineFacts) -> dict[str, Any]:
    """Every fact, JSON-able (``MachineFacts.from_json`` reads it back)."""
    return asdict(facts)


def machine_facts_json(facts: MachineFacts | Mapping[str, Any]) -> dict[str, Any]:
    """The receipt's machine summary. Accepts facts or their :func:`facts_json` form."""
    f = facts if isinstance(facts, MachineFacts) else MachineFacts.from_json(facts)
    first = f.gpus[0] if f.gpus else None
    return {
        "os": f.os,
        "os_release": f.os_release,
        "arch": f.arch,
        "cpu_count": f.cpu_count,
        "python": f.python,
        "ram_bytes": f.ram_bytes,
        "gpu_name": first.name if first else None,
        "gpu_count": len(f.gpus),
        "compute_capability": first.compute_capability if first else None,
        "driver": first.driver if first else None,
        "cuda": f.nvcc.version if f.nvcc.present else None,
        "nvcc": f.nvcc.path if f.nvcc.present else None,
    }
