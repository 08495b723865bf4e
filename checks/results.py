"""Check results: a check's result, how one is run, and how a level's six are dispatched.

The check names, statuses, levels and what a level proves are the contract's (:mod:`october.checks.contract`).

Standard library only.  A check function returns a :class:`CheckResult`; it may
raise :class:`Unsupported` (the stack lacks a capability: not a pass, not a
measured failure) or :class:`Skipped` (this machine cannot run it, e.g. no GPU).
Any other exception is a failure: a check that crashes has not proved anything.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .contract import (
    CHECK_NAMES,
    EXTRA_CHECKS,
    FAILED,
    LEVELS,
    PASSED,
    PROVES,
    REQUIRED_CHECKS,
    SKIPPED,
    STATUSES,
    TITLES,
    UNSUPPORTED,
    proves,
)

__all__ = ["CHECK_NAMES", "EXTRA_CHECKS", "FAILED", "LEVELS", "PASSED", "PROVES", "REQUIRED_CHECKS", "SKIPPED",
           "STATUSES", "TITLES", "UNSUPPORTED", "proves", "CheckResult", "Skipped", "Unsupported", "every_check",
           "format_table", "in_order", "overall", "run_check", "run_checks", "verdict"]


class Unsupported(Exception):
    """The installed stack lacks what the check needs (named in the message)."""


class Skipped(Exception):
    """This machine cannot run the check (e.g. CUDA-only on a CPU)."""


@dataclass
class CheckResult:
    name: str
    status: str
    summary: str
    measured: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, found {self.status!r}")

    @property
    def title(self) -> str:
        return TITLES.get(self.name, self.name)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "status": self.status,
                "summary": self.summary, "measured": self.measured, "limits": self.limits,
                "seconds": round(self.seconds, 4)}


def verdict(name: str, ok: bool, summary_ok: str, summary_bad: str,
            measured: dict[str, Any], limits: dict[str, Any]) -> CheckResult:
    return CheckResult(name, PASSED if ok else FAILED, summary_ok if ok else summary_bad,
                       measured, limits)


def run_check(name: str, fn: Callable[..., CheckResult], *args: Any, **kwargs: Any) -> CheckResult:
    """Run one check, time it, and turn exceptions into statuses."""
    start = time.monotonic()
    try:
        result = fn(*args, **kwargs)
    except Unsupported as exc:
        result = CheckResult(name, UNSUPPORTED, str(exc))
    except Skipped as exc:
        result = CheckResult(name, SKIPPED, str(exc))
    except Exception as exc:  # a crash is a failure, with its cause recorded
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result = CheckResult(name, FAILED, f"raised {last}",
                             measured={"traceback": traceback.format_exc(limit=6)})
    result.seconds = time.monotonic() - start
    return result


def run_checks(table: Mapping[str, Callable[[], CheckResult]],
               names: Sequence[str] = CHECK_NAMES) -> dict[str, CheckResult]:
    """Run a level's checks (``table``: check name -> its implementation, bound to the level's
    backend) in the contract's order, each through :func:`run_check`.  The one dispatch of the six
    checks: a level's table must name exactly the contract's checks (``names``: the ones run now)."""
    if set(table) != set(names):
        raise ValueError(f"a level's check table must name {sorted(names)}, found {sorted(table)}")
    return {n: run_check(n, table[n]) for n in CHECK_NAMES if n in table}


def in_order(results: Mapping[str, CheckResult]) -> list[CheckResult]:
    """The six results in the contract's order; a missing one is a harness bug, never a silent gap."""
    missing = [n for n in CHECK_NAMES if n not in results]
    if missing:
        raise ValueError(f"the level produced no result for {missing}")
    return [results[n] for n in CHECK_NAMES]


def every_check(status: str, summary: str) -> list[CheckResult]:
    """One status for all six checks (a level that could not start: nothing was measured)."""
    return [CheckResult(n, status, summary) for n in CHECK_NAMES]


def overall(results: list[CheckResult], level: str | None = None, promised: str | None = None,
            extra: list[str] | None = None) -> tuple[bool, list[str]]:
    """``passed`` is true only when every required check is present and passed, the level run is the
    level the stack promises, and no run-level problem (``extra``) was found."""
    by_name = {r.name: r for r in results}
    reasons = []
    for name, title in REQUIRED_CHECKS:
        r = by_name.get(name)
        if r is None:
            reasons.append(f"{title}: missing")
        elif r.status != PASSED:
            reasons.append(f"{title}: {r.status}: {r.summary}")
    for r in results:
        if r.name not in dict(REQUIRED_CHECKS) and r.status != PASSED:
            reasons.append(f"{r.title}: {r.status}: {r.summary}")
    if level is not None and proves(level, promised) != "stack":
        what = proves(level, promised)
        reasons.append(f"level {level} proves the {what} only, not the stack" +
                       (f" (the stack promises level {promised})" if promised else
                        " (no stack promise was given: run it through `current smoke`, which passes --stack-info)"))
    reasons += list(extra or [])
    return (not reasons, reasons)


def format_table(checks: list[dict[str, Any]], passed: bool) -> str:
    """A short fixed-width table of receipt check entries (dicts as in the receipt)."""
    width = max([len(c.get("title", c["name"])) for c in checks] + [5])
    lines = [f"{'check'.ljust(width)}  {'status':<11}  {'secs':>7}  summary"]
    for c in checks:
        summary = str(c.get("summary", ""))
        if len(summary) > 90:
            summary = summary[:87] + "..."
        lines.append(f"{c.get('title', c['name']).ljust(width)}  {c['status']:<11}  "
                     f"{float(c.get('seconds', 0.0)):>7.3f}  {summary}")
    lines.append(f"passed: {'true' if passed else 'false'}")
    return "\n".join(lines)
