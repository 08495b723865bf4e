"""The step engine: fingerprinted, resumable, atomic done-markers.

A step declares its inputs (JSON-able), runs, and returns its result (a frozen
dataclass with ``to_json`` / ``chain_json``; the step's ``load`` reads it back).
On success the engine writes ``STACK/.state/<step>.json`` atomically with the
step's fingerprint and its result as ``outputs``.  The fingerprint covers the
step's inputs and the ``chain_json`` digest of every earlier step's result, so a
re-run skips a step whose inputs are unchanged, whose earlier steps produced
the same results, and whose recorded result still verifies; a step that runs
again and produces a different result makes every later step run again.  A
step's marker is removed before it runs, so a killed run leaves no marker for
the unfinished step, and a later step's marker, chained on the results it was
made from, cannot match once an earlier result changed.  A marker of another
format, a torn file or a result the step does not recognise means "not done".  A result whose ``chain_json``
left something out that an earlier version chained on has ``legacy_chain_json``: a marker chained that way still
matches, so upgrading the tool rebuilds nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol, Sequence, TypeVar

from . import __version__
from .core import idle, jsonread
from .core.atomic import write_json_atomic
from .core.errors import StateError
from .core.filetrust import FileTrust
from .core.hashing import fingerprint
from .core.paths import StackPaths
from .core.runner import Runner
from .recipe import Recipe

if TYPE_CHECKING:
    from .kit.use import Kit
    from .lock.pylock import LockedState

MARKER_FORMAT = 2     # 2: typed results, chained on their outputs; a marker of format 1 means "not done"
JSON = Any


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


class SilentReporter(Reporter):
    """Every report dropped."""


class StepResult(Protocol):
    """One step's result: saved in its done-marker, read by later steps (installer/steps/results.py)."""

    step: ClassVar[str]

    def to_json(self) -> dict[str, JSON]:
        """The result as JSON, stored as the marker's ``outputs``."""

    def chain_json(self) -> JSON:
        """The part of the result later steps depend on; their fingerprints chain on its digest."""


S = TypeVar("S", bound=StepResult)


@dataclass(frozen=True)
class StepRecord:
    name: str
    fingerprint: str
    result: StepResult
    seconds: float
    finished_at: str
    status: str  # "ran" | "cached"

    @property
    def outputs(self) -> dict[str, JSON]:
        return self.result.to_json()


@dataclass
class StepContext:
    options: SetupOptions
    paths: StackPaths
    runner: Runner
    ui: Reporter
    done: dict[str, StepRecord] = field(default_factory=dict)
    _trust: FileTrust | None = None
    # work a later step may begin early: a listener for an announced event (FORKS_INSTALLED) leaves what it
    # began in ``early`` under that step's name (``steps/jitearly.py``)
    listeners: dict[str, list[Callable[["StepContext", Any], None]]] = field(default_factory=dict)
    early: dict[str, Any] = field(default_factory=dict)

    def listen(self, event: str, listener: Callable[["StepContext", Any], None]) -> None:
        self.listeners.setdefault(event, []).append(listener)

    def announce(self, event: str, detail: Any) -> None:
        """Run each listener of ``event`` with ``detail`` (a listener's failure is its own to handle)."""
        for listener in self.listeners.get(event, ()):
            listener(self, detail)

    @property
    def trust(self) -> FileTrust:
        """Digests of files whose stat signature is unchanged since hashed: what a no-op trusts."""
        if self._trust is None:
            self._trust = FileTrust(self.paths.state / "file-trust.json")
        return self._trust

    @property
    def recipe(self) -> Recipe:
        return self.options.recipe

    def result(self, kind: type[S]) -> S | None:
        """The result of the earlier step ``kind.step`` when it is done and of that type, else None."""
        rec = self.done.get(kind.step)
        return rec.result if rec is not None and isinstance(rec.result, kind) else None

    def need(self, kind: type[S]) -> S:
        """Like :meth:`result`, for a step whose result must be there."""
        got = self.result(kind)
        if got is None:
            raise StateError("an earlier step's result is missing", expected=f"step '{kind.step}' done",
                             found="no record", fix="re-run october_setup")
        return got


# the fetch step begins (before its first git command); detail: None
FETCH_BEGUN = "fetch-begun"
# the install step's editable installs are done (before its checks); detail: its list of ForkSource
FORKS_INSTALLED = "forks-installed"
# the install step took the forks' build outputs from the built-stack cache entry this run copied the env from,
# whose editable installs of the forks it keeps: the env is as install leaves it; detail: None
ENV_COPIED = "env-copied"


# every step's name, in the order the pipeline runs them (installer/pipeline/plan.py makes the steps)
STEP_ORDER = ("preflight", "fetch", "env", "wheel", "install", "jit", "lock", "receipt")


def planned_step_names(recipe: Recipe) -> tuple[str, ...]:
    """The steps the pipeline runs for ``recipe``, by name, in order, no step imported (what ``fleet`` counts):
    every one of :data:`STEP_ORDER` but ``wheel`` without a ``[wheel]`` and ``jit`` without JIT modules."""
    return tuple(n for n in STEP_ORDER if (n != "wheel" or recipe.wheel is not None) and (n != "jit" or recipe.jit))


class Step(Protocol[S]):
    name: ClassVar[str]

    def inputs(self, ctx: StepContext) -> JSON:
        """What the step reads from the recipe and the options, as JSON (fingerprinted)."""

    def run(self, ctx: StepContext) -> S:
        """Do the work; return the result stored in the done-marker."""

    def load(self, outputs: Mapping[str, JSON]) -> S:
        """The result back from a marker's ``outputs``; raises ``ValueError`` when it is not one."""

    def verify(self, ctx: StepContext, result: S) -> str | None:
        """``None`` when the recorded result is still valid, else the reason it is not."""


def read_marker(path: Path) -> dict[str, Any] | None:
    try:
        data = jsonread.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None  # none, or a torn or foreign file: "not done"
    return data if isinstance(data, dict) and data.get("format_version") == MARKER_FORMAT else None


def written_sha256(marker_path: Path) -> str | None:
    """The sha256 a step's marker records for the file it wrote (``outputs.sha256``), or None."""
    want = ((read_marker(marker_path) or {}).get("outputs") or {}).get("sha256")
    return want if isinstance(want, str) else None


def load_result(step: Step[S], marker: Mapping[str, Any] | None) -> S | None:
    """The step's result from its marker, or None when there is none or it is not one."""
    if marker is None or not isinstance(marker.get("outputs"), dict):
        return None
    try:
        return step.load(marker["outputs"])
    except (ValueError, KeyError, TypeError):
        return None


def inputs_fingerprint(step: Step[Any], ctx: StepContext) -> str:
    return fingerprint({"step": step.name, "inputs": step.inputs(ctx)})


def must_run(step: Step[Any], ctx: StepContext) -> bool:
    """Whether ``step`` runs whatever the earlier results are (marker missing or unreadable, inputs changed);
    False does not mean it will not run, only that nothing is begun early for it."""
    marker = read_marker(ctx.paths.marker(step.name))
    if marker is None or load_result(step, marker) is None:
        return True
    return marker.get("inputs") != inputs_fingerprint(step, ctx)


def run_pipeline(steps: Sequence[Step[Any]], ctx: StepContext,
                 on_record: Callable[[StepRecord], None] | None = None) -> list[StepRecord]:
    """Run ``steps`` in order; return one record per step (ran or cached)."""
    try:
        records = _walk(steps, ctx, on_record, verify_only=False)
    finally:
        idle.forget()
    assert records is not None
    return records


def verify_pipeline(steps: Sequence[Step[Any]], ctx: StepContext) -> list[StepRecord] | None:
    """Every step's record when all are done and still verify; None as soon as one would run.  Runs nothing
    (the no-op fast path) and writes only the file-trust store, when it learned a signature: files a run
    hashed while they were too new to trust (a second stack ends a second after its env was copied) were
    hashed again here, and are kept now so that the next no-op reads none of them.  Best effort: a
    read-only stack still no-ops."""
    records = _walk(steps, ctx, None, verify_only=True)
    if records is not None and ctx._trust is not None and ctx._trust.changed:
        try:
            ctx._trust.save()
        except OSError:
            pass
    return records


def _kept_legacy(prior: StepResult | None, marker: Mapping[str, Any] | None, result: StepResult) -> str | None:
    """The legacy chain digest a step run again carries on (its marker's ``legacy_chain``): that of the result it
    replaced when both chain the same (the preflight by another install of the same uv), so later markers an
    earlier version chained on that still match, on this run and every later one."""
    if prior is None or fingerprint(prior.chain_json()) != fingerprint(result.chain_json()):
        return None
    kept = marker.get("legacy_chain") if marker is not None else None
    legacy = getattr(prior, "legacy_chain_json", None)
    return kept if isinstance(kept, str) else fingerprint(legacy()) if legacy is not None else None


def _walk(steps: Sequence[Step[Any]], ctx: StepContext, on_record: Callable[[StepRecord], None] | None, *,
          verify_only: bool) -> list[StepRecord] | None:
    upstream: list[list[str]] = []      # [step, digest of its chain_json] for every earlier step
    earlier: list[list[str]] = []       # the same by each result's legacy_chain_json, where it has one
    records: list[StepRecord] = []
    ctx.paths.state.mkdir(parents=True, exist_ok=True)
    for here, step in enumerate(steps):
        inputs_fp = inputs_fingerprint(step, ctx)
        upstream_fp = fingerprint(upstream)
        fp = fingerprint({"inputs": inputs_fp, "upstream": upstream_fp})
        marker_path = ctx.paths.marker(step.name)
        marker = read_marker(marker_path)
        result = prior = load_result(step, marker)
        reason: str | None = None
        if marker is None or result is None:
            reason = "not done yet"
        elif marker.get("inputs") != inputs_fp:
            reason = "its inputs changed"
        elif marker.get("fingerprint") != fp and marker.get("fingerprint") != fingerprint(
                {"inputs": inputs_fp, "upstream": fingerprint(earlier)}):   # as an earlier version chained
            reason = "an earlier step's result changed"
        else:
            bad = step.verify(ctx, result)
            reason = f"its outputs no longer verify ({bad})" if bad is not None else None
        if reason is None and marker is not None and result is not None:
            record = StepRecord(step.name, fp, result, float(marker.get("seconds", 0.0)),
                                str(marker.get("finished_at", "")), "cached")
            ctx.ui.step_skip(step.name)
        elif verify_only:
            return None
        else:
            # not done until it finishes: a run killed from here on leaves no marker for this step,
            # and a later step's marker is chained on the results it was made from
            marker_path.unlink(missing_ok=True)
            # what this step imports where used, and the next one unless it was done before (it will most
            # likely verify), made while this one waits on a command (core.idle)
            ahead = [later for later in steps[here + 1:here + 2] if not ctx.paths.marker(later.name).is_file()]
            idle.later(name for later in (step, *ahead) for name in getattr(later, "warm", ()))
            ctx.ui.step_start(step.name, reason or "")
            start = time.monotonic()
            result = step.run(ctx)
            seconds = round(time.monotonic() - start, 3)
            finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
            kept = _kept_legacy(prior, marker, result)
            write_json_atomic(marker_path, {"format_version": MARKER_FORMAT, "step": step.name,
                                            "fingerprint": fp, "inputs": inputs_fp, "upstream": upstream_fp,
                                            "outputs": result.to_json(), "seconds": seconds,
                                            "finished_at": finished, "tool_version": __version__,
                                            **({"legacy_chain": kept} if kept else {})})
            marker = {"legacy_chain": kept}
            record = StepRecord(step.name, fp, result, seconds, finished, "ran")
            ctx.ui.step_done(step.name, seconds)
        ctx.done[step.name] = record
        records.append(record)
        if on_record is not None:
            on_record(record)
        upstream.append([step.name, fingerprint(result.chain_json())])
        legacy = getattr(result, "legacy_chain_json", None)
        kept = marker.get("legacy_chain") if marker is not None else None
        earlier.append([step.name, kept if isinstance(kept, str) else
                        fingerprint(legacy()) if legacy is not None else upstream[-1][1]])
    if ctx._trust is not None and any(r.status == "ran" for r in records):
        ctx._trust.save()           # a no-op writes nothing
    return records
