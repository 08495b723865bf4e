"""The step engine: fingerprinted, resumable, atomic done-markers.

A step declares its inputs (JSON-able), runs, and returns its outputs
(JSON-able).  On success the engine writes ``STACK/.state/<step>.json``
atomically with the input fingerprint (chained with the previous step's) and
the outputs.  A re-run skips a step whose marker fingerprint still matches and
whose outputs still verify; once one step runs, every later step runs too.  A
killed run leaves no marker for the unfinished step.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol, Sequence

from october.installer import __version__
from october.installer.core.atomic import write_json_atomic
from october.installer.core.errors import StateError
from october.installer.core.hashing import fingerprint
from october.installer.core.paths import StackPaths
from october.installer.recipe import Recipe
from october.installer.core.runner import Runner

if TYPE_CHECKING:
    from october.installer.kit.use import Kit

MARKER_FORMAT = 1
JSON = Any


@dataclass(frozen=True)
class LockedState:
    """What a ``--locked`` run must reproduce, read from an existing pylock."""

    path: Path
    sha256: str
    commits: Mapping[str, str]                 # fork name -> full commit id
    wheel_sha256: str | None
    packages: Mapping[str, str]                # normalized name -> version (index packages)
    hashes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> sha256 of its locked wheels


@dataclass(frozen=True)
class SetupOptions:
    stack: Path
    recipe: Recipe
    cache_dir: Path
    allow_dirty: bool = False
    skip_preflight: tuple[str, ...] = ()
    locked: LockedState | None = None
    quiet: bool = False
    verbose: bool = False
    kit: "Kit | None" = None    # --kit: git objects come from this offline kit only (october.installer.kit.use)


class Reporter(Protocol):
    def step_start(self, name: str, reason: str) -> None: ...
    def transfer(self, label: str, done: float, total: float | None, unit: str = "B") -> None: ...
    def step_skip(self, name: str) -> None: ...
    def step_done(self, name: str, seconds: float) -> None: ...
    def info(self, text: str) -> None: ...
    def detail(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...


class SilentReporter:
    def step_start(self, name: str, reason: str) -> None: ...
    def transfer(self, label: str, done: float, total: float | None, unit: str = "B") -> None: ...
    def step_skip(self, name: str) -> None: ...
    def step_done(self, name: str, seconds: float) -> None: ...
    def info(self, text: str) -> None: ...
    def detail(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...


@dataclass(frozen=True)
class StepRecord:
    name: str
    fingerprint: str
    outputs: Mapping[str, JSON]
    seconds: float
    finished_at: str
    status: str  # "ran" | "cached"


@dataclass
class StepContext:
    options: SetupOptions
    paths: StackPaths
    runner: Runner
    ui: Reporter
    done: dict[str, StepRecord] = field(default_factory=dict)

    @property
    def recipe(self) -> Recipe:
        return self.options.recipe

    def output(self, step: str) -> Mapping[str, JSON]:
        if step not in self.done:
            raise StateError("an earlier step's result is missing", expected=f"step '{step}' done",
                             found="no record", fix="re-run october_setup")
        return self.done[step].outputs


class Step(Protocol):
    name: ClassVar[str]

    def inputs(self, ctx: StepContext) -> JSON:
        """Everything the step reads, as JSON; part of its fingerprint."""

    def run(self, ctx: StepContext) -> Mapping[str, JSON]:
        """Do the work; return outputs (JSON) stored in the done-marker."""

    def verify(self, ctx: StepContext, outputs: Mapping[str, JSON]) -> str | None:
        """``None`` when the recorded outputs are still valid, else the reason they are not."""


def read_marker(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # a torn or foreign file is treated as "not done"
    if not isinstance(data, dict) or data.get("format_version") != MARKER_FORMAT:
        return None
    return data


def run_pipeline(steps: Sequence[Step], ctx: StepContext,
                 on_record: Callable[[StepRecord], None] | None = None) -> list[StepRecord]:
    """Run ``steps`` in order; return one record per step (ran or cached)."""
    previous = ""
    rerun_reason: str | None = None
    records: list[StepRecord] = []
    ctx.paths.state.mkdir(parents=True, exist_ok=True)
    for step in steps:
        fp = fingerprint({"step": step.name, "inputs": step.inputs(ctx), "previous": previous})
        marker_path = ctx.paths.marker(step.name)
        marker = read_marker(marker_path)
        reason = rerun_reason
        if reason is None:
            if marker is None:
                reason = "not done yet"
            elif marker.get("fingerprint") != fp:
                reason = "its inputs changed"
            else:
                bad = step.verify(ctx, marker.get("outputs", {}))
                if bad is not None:
                    reason = f"its outputs no longer verify ({bad})"
        if reason is None and marker is not None:
            record = StepRecord(step.name, fp, marker.get("outputs", {}), float(marker.get("seconds", 0.0)),
                                str(marker.get("finished_at", "")), "cached")
            ctx.ui.step_skip(step.name)
        else:
            # this step and every later one are no longer done: drop their markers before any work,
            # so a run killed anywhere from here on cannot leave a later step looking "cached"
            for later in steps[steps.index(step):]:
                ctx.paths.marker(later.name).unlink(missing_ok=True)
            ctx.ui.step_start(step.name, reason or "")
            start = time.monotonic()
            outputs = dict(step.run(ctx))
            seconds = round(time.monotonic() - start, 3)
            finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
            write_json_atomic(marker_path, {"format_version": MARKER_FORMAT, "step": step.name,
                                            "fingerprint": fp, "outputs": outputs, "seconds": seconds,
                                            "finished_at": finished, "tool_version": __version__})
            record = StepRecord(step.name, fp, outputs, seconds, finished, "ran")
            ctx.ui.step_done(step.name, seconds)
            rerun_reason = f"an earlier step ('{step.name}') ran"
        ctx.done[step.name] = record
        records.append(record)
        if on_record is not None:
            on_record(record)
        previous = fp
    return records
