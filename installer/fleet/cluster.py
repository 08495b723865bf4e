"""The thin Ray part of ``october_setup fleet``: connect, find nodes, pin one task per node (hard affinity),
ship the kit through the object store when asked, gather the node records.  A node dying under its task is
``lost``, a task past its deadline cancelled (``timeout``), Ctrl-C cancels all (``cancelled``); Ray retries
nothing: a re-run resumes the nodes that did not finish.  Phases come through a small actor (:class:`Board`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ..core.errors import ClusterUnreachable, ToolMissing, UsageError
from .node import CHUNK, Shipment, ShippedFile, blank_record, run_job
from .plan import FleetPlan, NodeInfo, NodeJob, parse_nodes
from .progress import FleetProgress
from ..kit import MANIFEST

INSTALL_HINT = "install it with `uv sync --extra fleet` (or `pip install 'october[fleet]'`) on the driver and every node"
GRACE_S = 30.0          # past a node's own timeout, the driver cancels its task


# Ray (>= 2.45) under a `uv run` ancestor uploads the driver's working directory and starts every worker
# through `uv run` in that copy: the nodes would run the driver's folder, not their installed tool, and nodes
# sharing a disk removed it under each other (seen: "No module named 'october.installer.core.atomic'").
# Off unless the user turns it on.
UV_RUN_PROPAGATION = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


def import_ray() -> Any:
    os.environ.setdefault(UV_RUN_PROPAGATION, "0")          # read once, when ray is first imported
    try:
        import ray
    except ImportError as exc:
        raise ToolMissing("`october_setup fleet` needs Ray", expected="the Python package ray (>= 2.40)",
                          found=f"not importable ({exc})", fix=INSTALL_HINT) from None
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    off = os.environ[UV_RUN_PROPAGATION].strip().lower() not in ("1", "true")      # Ray's own reading
    if off and getattr(constants, UV_RUN_PROPAGATION, False):
        setattr(constants, UV_RUN_PROPAGATION, False)     # ray was imported before the variable was set
    return ray


class _RayLogs(logging.Handler):
    """Ray's log records on the command's reporter: errors as warnings, the rest under --verbose only."""

    def __init__(self, ui: Any) -> None:
        super().__init__()
        self.ui = ui

    def emit(self, record: logging.LogRecord) -> None:
        (self.ui.warn if record.levelno >= logging.ERROR else self.ui.detail)(f"ray: {record.getMessage()}")


@contextmanager
def ray_logs_to(ui: Any) -> Iterator[None]:
    """The driver's ``ray`` logger writes to ``ui`` meanwhile (not Ray's timestamped stderr lines)."""
    import_ray()
    logger = logging.getLogger("ray")
    before = logger.handlers[:]
    logger.handlers[:] = [_RayLogs(ui)]
    try:
        yield
    finally:
        logger.handlers[:] = before


def check_reachable(address: str, timeout: float = 10.0) -> None:
    """Ray retries an unreachable GCS for minutes; a closed port is said at once instead."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ClusterUnreachable(f"cannot reach the Ray cluster at {address}",
                         expected="a running cluster's GCS address (host:port, as `ray start --head` prints)",
                         found=exc.strerror or str(exc),
                         fix="start the cluster (`ray start --head`) or check `ray status`, then pass its address") from None


def connect(address: str) -> Any:
    ray = import_ray()
    if not ray.is_initialized():
        check_reachable(address)
        try:
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        except (ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
            # nothing answered in time: unreachable (8); an address or cluster Ray refuses: the option (2)
            kind = ClusterUnreachable if isinstance(exc, (ConnectionError, TimeoutError)) else UsageError
            raise kind(f"cannot join the Ray cluster at {address}",
                             expected="a running cluster's GCS address (host:port, as `ray start --head` prints)",
                             found=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}",
                             fix="check `ray status --address ADDR` on this machine, then pass that address") from None
    return ray


def cluster_nodes(ray: Any) -> tuple[NodeInfo, ...]:
    return parse_nodes(ray.nodes())


def ship(ray: Any, kit: Path, manifest: dict[str, Any], lock: bytes | None, lock_sha: str | None,
         with_files: bool, progress: Callable[[int, int], None] = lambda _done, _total: None) -> Shipment:
    """Put the kit's files (verified by the caller) into the object store in chunks, for every node to fetch by
    reference; ``progress`` hears the bytes put so far, of all."""
    files = []
    if with_files:
        total, done = sum(int(meta["size"]) for meta in manifest["files"].values()), 0
        for rel, meta in sorted(manifest["files"].items()):
            refs = []
            with open(kit / rel, "rb") as fh:
                while chunk := fh.read(CHUNK):
                    refs.append(ray.put(chunk))
                    done += len(chunk)
                    progress(done, total)
            files.append(ShippedFile(rel=rel, sha256=meta["sha256"], size=int(meta["size"]), chunks=tuple(refs)))
    return Shipment(manifest=(kit / MANIFEST).read_bytes(), files=tuple(files), lock=lock, lock_sha256=lock_sha)


FLUSH_S = 0.5      # how long a node's end waits for its last phases from the board (never the fleet's time)


class Board:
    """The nodes' phases as they report them, kept until the driver takes them (a Ray actor)."""

    def __init__(self) -> None:
        self._seen: list[tuple[str, str]] = []

    def put(self, name: str, phase: str) -> None:
        self._seen.append((name, phase))

    def take(self) -> list[tuple[str, str]]:
        seen, self._seen = self._seen, []
        return seen


class _BoardReader:
    """The driver's side of the :class:`Board` (on the driver's node when it can be): passes the nodes' reports
    on to ``progress``, never waiting for the board (a lost board costs the phases, not the fleet's time)."""

    def __init__(self, ray: Any, progress: FleetProgress, lost: tuple[type[BaseException], ...]) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
        self.board = ray.remote(num_cpus=0, max_restarts=0)(Board).options(scheduling_strategy=here).remote()
        self.ray, self.progress, self.lost = ray, progress, lost
        self._taking: Any = self.board.take.remote()

    def pass_on(self) -> None:
        if self._taking is None or not self.ray.wait([self._taking], timeout=0)[0]:
            return
        try:
            seen = self.ray.get(self._taking)
        except (*self.lost, self.ray.exceptions.RayError):
            self._taking = None          # the board is gone or failed: the nodes' starts and ends still show
            return
        for name, phase in seen:
            self.progress.phase(name, phase)
        self._taking = self.board.take.remote()

    def flush(self, timeout: float = FLUSH_S) -> None:
        """Before a node is said finished: its reports since the last take, waited for at most ``timeout`` per
        take (a report after the node's end is dropped)."""
        for _ in range(2):          # the take in flight, then one asked now (after the node's last report)
            if self._taking is not None:
                self.ray.wait([self._taking], timeout=timeout)
            self.pass_on()


def _remote(ray: Any) -> Any:
    def node_task(job: NodeJob, shipment: Shipment | None, board: Any, cache_key: bytes | None) -> dict[str, Any]:
        here = ray.get_runtime_context().get_node_id()
        if here != job.node_id:          # hard affinity makes this impossible; a receipt must not rest on it
            raise RuntimeError(f"the task for {job.name} ran on node {here}, not on {job.node_id}")
        # a report is not waited for: the install never stalls on the driver's progress
        return run_job(job, shipment, fetch=lambda ref: ray.get(ref),
                       report=lambda phase: board.put.remote(job.name, phase), cache_key=cache_key)
    return ray.remote(num_cpus=0, max_retries=0)(node_task)


def lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    ex = ray.exceptions
    names = ("NodeDiedError", "WorkerCrashedError", "ActorDiedError", "TaskUnschedulableError",
             "ObjectLostError", "OwnerDiedError", "RaySystemError", "LocalRayletDiedError")
    return tuple(getattr(ex, n) for n in names if hasattr(ex, n))


def run_plan(ray: Any, plan: FleetPlan, shipment: Shipment | None,
             progress: FleetProgress, cache_key: bytes | None = None) -> tuple[list[dict[str, Any]], bool]:
    """Run the plan; return the node records (plan order) and whether the user interrupted it.  ``cache_key``:
    the driver's key for the cache the nodes share (:func:`october.installer.fleet.plan.shared_key`)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = _remote(ray)
    lost = lost_errors(ray)
    phases = _BoardReader(ray, progress, lost)
    pending = list(plan.jobs)
    seed = next((j for j in pending if j.setup_argv is not None), None) if plan.seed else None
    pending.sort(key=lambda j: j is not seed)       # the seed goes first, alone (see FleetPlan.seed)
    running: dict[Any, tuple[NodeJob, float]] = {}
    out: dict[str, dict[str, Any]] = {}
    interrupted = False
    try:
        while pending or running:
            limit = 1 if seed is not None and seed.name not in out else plan.max_parallel
            while pending and len(running) < limit:
                job = pending.pop(0)
                strategy = NodeAffinitySchedulingStrategy(node_id=job.node_id, soft=False)
                ref = task.options(scheduling_strategy=strategy, name=f"october-fleet-{job.name}").remote(
                    job, shipment, phases.board, cache_key)
                running[ref] = (job, time.monotonic() + job.timeout_s + GRACE_S)
                progress.started(job)
            ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            if ready:
                phases.flush()          # a node that ended: its last phases before its end
            else:
                phases.pass_on()
            for ref in ready:
                job, _deadline = running.pop(ref)
                out[job.name] = _gather(ray, ref, job, lost)
                progress.finished(job.name, out[job.name]["status"])
            now = time.monotonic()
            for ref, (job, deadline) in list(running.items()):
                if now > deadline:
                    ray.cancel(ref, force=True)
                    running.pop(ref)
                    out[job.name] = blank_record(job, "timeout", f"no answer within {job.timeout_s:.0f} s "
                                                 f"(+{GRACE_S:.0f} s grace); the task was cancelled")
                    progress.finished(job.name, "timeout")
    except KeyboardInterrupt:
        interrupted = True
        for ref, (job, _d) in running.items():
            ray.cancel(ref, force=True)
            out[job.name] = blank_record(job, "cancelled", "interrupted by the user; re-run to resume this node")
            progress.finished(job.name, "cancelled")
        for job in pending:
            out[job.name] = blank_record(job, "cancelled", "interrupted before it started")
            progress.finished(job.name, "cancelled")
    return [out[j.name] for j in plan.jobs], interrupted


def _gather(ray: Any, ref: Any, job: NodeJob, lost: tuple[type[BaseException], ...]) -> dict[str, Any]:
    try:
        return ray.get(ref)  # type: ignore[no-any-return]
    except lost as exc:
        return blank_record(job, "lost", f"the node died or left mid-install ({type(exc).__name__}); "
                            "re-run the fleet command when it is back to resume it")
    except ray.exceptions.TaskCancelledError:
        return blank_record(job, "cancelled", "the task was cancelled")
    except ray.exceptions.RayTaskError as exc:
        return blank_record(job, "error", f"the node task raised: {str(exc).strip().splitlines()[-1][:400]}")
