"""``october_setup fleet``: verify the kit here, plan, run the plan on Ray, judge, write the receipt.
Progress on the command's reporter (:mod:`.progress`); the verdict and its reasons on ``say``."""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime, timezone
from typing import Any, Callable

from .. import __version__
from ..core import jsonread
from ..core.errors import ReceiptError, UsageError
from ..core.hashing import sha256_bytes, sha256_file
from ..core.schemas import validate, write_receipt
from . import FLEET_FORMAT
from .plan import (FleetOptions, FleetPlan, check_paths, finished_before, install_options, judge, plan_fleet, select_nodes,
                   shared_cache, shared_key)
from .progress import FleetProgress
from ..kit import MANIFEST


def read_previous(opts: FleetOptions) -> dict[str, Any] | None:
    """The previous fleet receipt at the same path (what to resume from); a damaged one is an error."""
    if not opts.receipt.is_file():
        return None
    try:
        doc = jsonread.loads(opts.receipt.read_text(encoding="utf-8"))
        validate("fleet", doc, where=str(opts.receipt))
    except (ValueError, ReceiptError) as exc:
        raise UsageError(f"the previous fleet receipt {opts.receipt} cannot be resumed from",
                         expected="a fleet receipt written by october_setup fleet", found=str(exc).splitlines()[0],
                         fix="move it away to install every node again, or pass another --receipt") from None
    return doc


def run_fleet(opts: FleetOptions, ui: Any, say: Callable[[str], None] = print) -> int:
    """0 when the fleet passed; 1 when a node failed, was lost or differs; 130 on Ctrl-C.  ``ui`` (a
    :class:`~october.installer.core.ui.ConsoleReporter`) shows the run as every long command does."""
    from .cluster import cluster_nodes, connect, ray_logs_to, run_plan, ship
    from ..engine import planned_step_names
    from ..kit.use import open_kit
    from ..recipe import load_recipe

    started = time.monotonic()
    check_paths(opts)
    rec = load_recipe(opts.recipe)
    if opts.system_python is not None and (rec.torch.from_system or rec.torch.allow_system):
        # the nodes take torch from their interpreter (its path is each node's: not checked here), so the kit
        # carries no torch wheel; each node's october_setup applies --system-python in full
        rec = dataclasses.replace(rec, torch=dataclasses.replace(rec.torch, source="system", index_url=None))
    kit = open_kit(opts.kit, rec, lock=opts.lock_file)  # verified here once, and again on every node
    kit_sha = sha256_file(kit.root / MANIFEST)
    lock = opts.lock_file.read_bytes() if opts.lock_file is not None else None
    lock_sha = sha256_bytes(lock) if lock is not None else None
    previous = read_previous(opts)
    done = finished_before(previous, recipe_sha=rec.sha256, kit_sha=kit_sha, lock_sha=lock_sha, smoke=opts.smoke,
                           options=install_options(opts))
    if previous and not done and finished_before(previous, recipe_sha=rec.sha256, kit_sha=kit_sha,
                                                 lock_sha=lock_sha, smoke=opts.smoke):
        ui.info(f"the previous receipt {opts.receipt} finished its nodes with other options (STACK, --cache-dir, "
                "--system-python, --setup-arg or the smoke's): every node is installed again (an unchanged stack "
                "is a no-op)")

    with ray_logs_to(ui):
        ray = connect(opts.address)
        chosen = select_nodes(cluster_nodes(ray), opts.select, opts.nodes)
        plan = plan_fleet(opts, chosen, manifest_sha=kit_sha, recipe=opts.recipe,
                          done={k: v for k, v in done.items() if v.get("node_id") in {n.node_id for n in chosen}})
        if rec.jit and not shared_cache(opts) and sum(j.setup_argv is not None for j in plan.jobs) > 1:
            ui.warn(f"the recipe builds {len(rec.jit)} JIT module(s) and the nodes do not share --cache-dir: each "
                    "node builds its own, the builds are not byte-reproducible, and the fleet will name the JIT (and "
                    "lock) differences; pass one --cache-dir every node sees to build once")
        progress = FleetProgress(ui, plan, setup_steps=len(planned_step_names(rec)), shipped=opts.ship_kit)
        progress.begin()
        if plan.seed:
            ui.info(f"the nodes share the cache {opts.cache_dir}: {next(j.name for j in plan.jobs if j.setup_argv)} "
                    "installs first (its JIT modules are restored by the others)")
        if plan.resumed:
            ui.info(f"resuming: {len(plan.resumed)} node(s) finished before are re-checked, not re-installed "
                    f"({', '.join(plan.resumed)})")
        shipment = None
        if opts.ship_kit or lock is not None:
            ui.info("shipping the kit through the Ray object store" if opts.ship_kit else "shipping the lock")
            shipment = ship(ray, kit.root, dict(kit.manifest), lock, lock_sha, with_files=opts.ship_kit,
                            progress=lambda got, total: ui.transfer("shipping the kit", got, total, "B"))
        cache_key, unsigned = shared_key(opts) if plan.seed else (None, None)
        if unsigned is not None:
            ui.warn(f"the nodes' shared cache is not used for built stacks and JIT modules: {unsigned}")
        records, interrupted = run_plan(ray, plan, shipment, progress, cache_key)
        progress.end()
    doc = receipt_doc(opts, plan, records, interrupted=interrupted, recipe=(rec.name, rec.sha256),
                      kit_sha=kit_sha, lock_sha=lock_sha, wall=time.monotonic() - started)
    opts.receipt.parent.mkdir(parents=True, exist_ok=True)
    write_receipt("fleet", opts.receipt, doc)
    for line in doc["reasons"]:
        say(f"  - {line}")
    say(f"fleet {'PASSED' if doc['passed'] else 'did not pass'}: {len(records)} node(s); receipt: {opts.receipt}")
    return 130 if interrupted else 0 if doc["passed"] else 1


def receipt_doc(opts: FleetOptions, plan: FleetPlan, records: list[dict[str, Any]], *, interrupted: bool,
                recipe: tuple[str, str], kit_sha: str, lock_sha: str | None, wall: float) -> dict[str, Any]:
    verdict = judge(records, smoke=opts.smoke, shared_cache=shared_cache(opts))
    for r in records:
        r["differs"] = list(verdict.differs.get(r["name"], ()))
    return {
        "format_version": FLEET_FORMAT, "kind": "fleet",
        "tool": {"name": "october", "version": __version__},
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "address": opts.address,
        "recipe": {"name": recipe[0], "sha256": recipe[1]},
        "kit": {"path": str(opts.kit), "sha256": kit_sha, "shipped": opts.ship_kit},
        "lock_file_sha256": lock_sha,
        "options": {"select": opts.select, "nodes": list(opts.nodes), "stack": opts.stack,
                    "max_parallel": opts.max_parallel, "timeout_s": opts.timeout_s, "smoke": opts.smoke,
                    "smoke_format": opts.smoke_format, "smoke_level": opts.smoke_level,
                    "system_python": opts.system_python, "setup_args": list(opts.setup_args), "seed": plan.seed,
                    "cache_dir": opts.cache_dir},
        "passed": verdict.passed and not interrupted,
        "consistent": verdict.consistent,
        "interrupted": interrupted,
        "wall_seconds": round(wall, 3),
        "reasons": list(verdict.reasons) + (["interrupted by the user"] if interrupted else []),
        "nodes": records,
    }
