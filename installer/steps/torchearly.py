"""The site torch warmed for the env step's probe while the fetch step clones the forks.

An env made on a system interpreter ends with the probe importing torch in the stack's env, with this run's
pycache prefix (:meth:`~october.installer.core.paths.StackPaths.pycache_args`): a site torch installed without
bytecode (the H200 image's) is compiled there a module at a time and its libraries are read from disk, 7.6 s of
the cold env step's 8.3 s on the H200.  When the fetch step begins (:data:`~october.installer.engine.FETCH_BEGUN`)
and the env step must make a new env on the system interpreter (none there, none copied during the fetch by
:class:`~october.installer.steps.envearly.EarlyEnv`), :class:`EarlyTorch` starts ``checks/probes/warm_torch.py``
with that interpreter and the same prefix in the background (:meth:`Runner.start`, under a guard holding the
stack lock): it asks the kernel to read torch's libraries ahead and compiles torch's modules in parallel.  The
bytecode is this run's, as the probe's own would be (the prefix is removed as the run ends), and Python checks
each file against its source.  The env step waits for it before the probe (:func:`settle`); a run that ends
first kills it (:meth:`EarlyTorch.stop`).  It only saves time: a failure is noted in the env log and the probe
compiles what is missing, as before.  Only on a machine of at least :data:`MIN_CPUS` CPUs (the H100/H200 nodes have
16 and more): it compiles every module of torch (2,100-2,500 files), where the probe compiles the thousand it
imports, so with few CPUs it costs more than it saves and slows the fetch it runs beside.

Measured on an H100 host of 16 CPUs (``bench/h200_cold_ab.sh``, two cold stacks each side, alternating): the
warm-up compiled the image torch's 2,141 modules in 1.6-1.8 s beside the fetch; the probe then took 3.4-3.5 s
(5.1-7.9 s before), the env step 4.38 s median (7.38 s before).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..core.cpus import available_cpus
from ..core.errors import CommandFailed
from ..core.resources import stack_script
from ..core.runner import Started
from ..engine import FETCH_BEGUN, StepContext, must_run
from .results import PreflightResult

if TYPE_CHECKING:
    from ..engine import Step

WARM = stack_script("warm_torch.py")
KEY = "env-torch"           # its place in ctx.early (the env step's own name is EarlyEnv's)
MIN_CPUS = 8
MAX_JOBS = 32               # compile processes, however many CPUs
WAIT_S = 120.0              # the env step's wait for it (2 s on 16 CPUs); then it is killed and the probe compiles


class EarlyTorch:
    """``warm_torch.py`` for the site torch, begun when the fetch step begins."""

    def __init__(self, step: Step[Any], hold_fds: Sequence[int] = ()) -> None:
        self.step = step
        self.hold_fds = tuple(hold_fds)
        self.started: Started | None = None

    @classmethod
    def wire(cls, ctx: StepContext, steps: Sequence[Step[Any]], *, hold_fds: Sequence[int] = ()
             ) -> EarlyTorch | None:
        """Listen for the fetch step's beginning when the recipe's torch is the system interpreter's and the plan
        runs env after fetch, else None.  Wired after EarlyEnv: its listener decides first."""
        names = [s.name for s in steps]
        if (not ctx.recipe.torch.from_system or "fetch" not in names or "env" not in names
                or names.index("env") < names.index("fetch")):
            return None
        early = cls(steps[names.index("env")], hold_fds)
        ctx.listen(FETCH_BEGUN, early.begin)
        return early

    def begin(self, ctx: StepContext, _detail: Any) -> None:
        """Listener for FETCH_BEGUN: start the warm-up once, or do nothing (never fails the fetch step)."""
        try:
            if (self.started is not None or os.path.lexists(ctx.paths.env) or not must_run(self.step, ctx)
                    or self.step.name in ctx.early):        # the env is being copied from the cache: no probe compiles
                return
            pre = ctx.result(PreflightResult)
            facts = pre.facts.get("system_torch") if pre is not None else None
            python = ctx.recipe.torch.system_python
            file = facts.get("file") if isinstance(facts, Mapping) else None
            if not python or not isinstance(file, str) or not file:
                return
            cpus = available_cpus()
            if cpus < MIN_CPUS:
                self._note(ctx, f"# torch not warmed during the fetch: {cpus} CPU(s), fewer than {MIN_CPUS}")
                return
            self.started = ctx.runner.start([python, *ctx.paths.pycache_args(), "-I", str(WARM),
                                             str(Path(file).parent), str(min(cpus, MAX_JOBS))], step=self.step.name,
                                            hold_fds=self.hold_fds,
                                            preface="# begun during the fetch (october.installer.steps.torchearly)")
            ctx.early[KEY] = self
        except Exception as exc:  # noqa: BLE001 - the env step's probe compiles what it needs itself
            self._note(ctx, f"# torch not warmed during the fetch: {exc!r}")

    def stop(self, ctx: StepContext, why: str = "the run ended first") -> None:
        """At the end of the run, before the stack lock is released and the prefix removed, or when no probe is to
        read it: kill it if it runs."""
        if self.started is None or self.started.finished:
            return
        ended = self.started.kill()
        self._note(ctx, f"# the torch warm-up begun during the fetch was killed: {why}"
                   + ("" if ended else f" (its output still held open after {Started.KILL_WAIT_S:.0f}s)"))

    def _note(self, ctx: StepContext, text: str) -> None:
        ctx.runner.note(self.step.name, text, best_effort=True)


def settle(ctx: StepContext, wait_s: float = WAIT_S) -> None:
    """The env step, before its probe: wait for the warm-up begun during the fetch (its end is what the probe
    reads), at most ``wait_s`` (then it is killed); a failed one is noted, never raised (a disk-full or any other
    error of a speed-only step: the probe compiles what it needs)."""
    early = ctx.early.pop(KEY, None)
    if not isinstance(early, EarlyTorch) or early.started is None:
        return
    if not early.started.ended_within(wait_s):
        early.stop(ctx, f"not done after {wait_s:.0f}s; the probe compiles what it needs")
        return
    try:
        early.started.wait()
    except Exception as exc:  # noqa: BLE001 - speed only: the probe compiles what it needs
        what = (f"exit {exc.returncode}" if isinstance(exc, CommandFailed)
                else f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}")
        early._note(ctx, f"# the torch warm-up failed ({what}); the probe compiles what it needs")


def drop(ctx: StepContext) -> None:
    """The env step, when it made no new env on the system interpreter (copied from the cache): no probe reads
    the warm-up, so it is killed now, its CPUs left to the install and the JIT."""
    early = ctx.early.pop(KEY, None)
    if isinstance(early, EarlyTorch):
        early.stop(ctx, "the env was copied from the built-stack cache (no probe compiles torch)")
