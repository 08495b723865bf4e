"""What a user sees while ``october_setup fleet`` runs, the way every long command shows it
(:class:`~october.installer.core.ui.ConsoleReporter`): a ``==> fleet:`` line, a line as each node
starts and as it ends (with the counts of nodes done, ok and failed), and on a terminal a bar per
running node (at which of its phases it is: receiving the kit, each october_setup step, the smoke)
and one for the nodes done.  In a log the phases show under --verbose only.

The nodes report their phases (:func:`setup_phase` reads them from october_setup's own ``==> step:``
lines); :func:`~october.installer.fleet.cluster.run_plan` passes them here.  No Ray in this module.
"""

from __future__ import annotations

import re
import time
from typing import Any

from .plan import FINISHED, PASSED, FleetPlan, NodeJob

RECEIVING = "receiving the kit"
RECHECK = "re-check"
SMOKE = "smoke"
_STEP_LINE = re.compile(r"^==> (?P<step>[a-z]+): ")       # ConsoleReporter.task_start / reportlines.skip_line


def setup_phase(line: str, steps: tuple[str, ...]) -> str | None:
    """``setup: <step>`` for october_setup's line that starts (or skips) one of ``steps``, else None."""
    m = _STEP_LINE.match(line)
    return f"setup: {m.group('step')}" if m and m.group("step") in steps else None


def phase_count(job: NodeJob, *, setup_steps: int, shipped: bool) -> int:
    """How many phases ``job`` reports: a finished node only its re-check; an installing one the kit's
    arrival (when shipped), each setup step, the smoke."""
    if job.setup_argv is None:
        return 1
    return int(shipped) + setup_steps + int(job.smoke_argv is not None)


class FleetProgress:
    """The fleet's progress on ``ui``: :meth:`begin`, then per node :meth:`started`, :meth:`phase`
    (as it reports), :meth:`finished`, and :meth:`end`."""

    def __init__(self, ui: Any, plan: FleetPlan, *, setup_steps: int, shipped: bool) -> None:
        self.ui = ui
        self._jobs = {j.name: j for j in plan.jobs}
        self._total = {j.name: phase_count(j, setup_steps=setup_steps, shipped=shipped) for j in plan.jobs}
        self._seen: dict[str, int] = {}          # phases reported, per running node
        self._status: dict[str, str] = {}        # per finished node
        self._began = time.monotonic()

    def _counts(self) -> str:
        """``N ok, M failed``; a node installed without a smoke (--no-smoke) is neither: it is counted
        apart, so the last progress line does not call ok what the verdict then calls not passed."""
        done = list(self._status.values())
        unproven = sum(s in FINISHED and s != PASSED for s in done)
        ok = sum(s == PASSED for s in done)
        return (f"{ok} ok" + (f", {unproven} installed without a smoke" if unproven else "")
                + f", {len(done) - ok - unproven} failed")

    def begin(self) -> None:
        install = sum(j.setup_argv is not None for j in self._jobs.values())
        recheck = len(self._jobs) - install
        self.ui.task_start("fleet", f"{len(self._jobs)} node(s): {install} to install"
                                    + (f", {recheck} finished before to re-check" if recheck else ""))
        self.ui.stage("fleet nodes", f"nodes: {self._counts()}", 0, len(self._jobs))

    def started(self, job: NodeJob) -> None:
        self._seen[job.name] = 0
        self.ui.info(f"{job.name}: {'install' if job.setup_argv else RECHECK} on {job.node_id[:8]} ({job.host})")
        self.ui.stage(f"node {job.name}", f"{job.name}: waiting for the node", 0, self._total[job.name])

    def phase(self, name: str, phase: str) -> None:
        """Node ``name`` began ``phase`` (a report that comes after its end is dropped)."""
        if name not in self._seen or name in self._status:
            return
        total = self._total[name]
        self._seen[name] += 1
        self.ui.stage(f"node {name}", f"{name}: {phase}", min(self._seen[name] - 1, total - 1), total)

    def finished(self, name: str, status: str) -> None:
        self._status[name] = status
        if name in self._seen:
            self.ui.stage(f"node {name}", name, self._total[name], self._total[name])
        counts = self._counts()
        self.ui.stage("fleet nodes", f"nodes: {counts}", len(self._status), len(self._jobs))
        self.ui.info(f"{name}: {status} ({len(self._status)} of {len(self._jobs)} node(s) done: {counts})")

    def end(self) -> None:
        self.ui.task_done("fleet", f"{len(self._status)} node(s) in {time.monotonic() - self._began:.1f}s: "
                                   f"{self._counts()}")
