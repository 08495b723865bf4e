"""The fleet, planned: which nodes, what each runs, what the previous receipt finished, and the verdict.
Pure functions over frozen dataclasses; nothing here imports Ray or runs anything."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..core.cliargs import CACHE_CHARS, KIT_CHARS, STACK_CHARS, usable_chars
from ..core.errors import UsageError
from . import NAME_LABEL

SELECT_MODES = ("all", "gpu")
# a node record's status: passed or installed (finished), failed, lost, timeout, cancelled or error
PASSED = "passed"
FINISHED = (PASSED, "installed")
PLACEHOLDERS = ("{name}", "{host}", "{node_id}")


@dataclass(frozen=True)
class NodeInfo:
    """One Ray node as ``ray.nodes()`` describes it."""

    node_id: str
    host: str
    name: str                 # the label ``october-node`` when set, else the hostname
    alive: bool
    gpus: float


@dataclass(frozen=True)
class FleetOptions:
    address: str
    recipe: str
    kit: Path                          # the kit on the driver (and, without ship_kit, on every node)
    stack: str                         # the stack path on each node; may hold {name}, {host}, {node_id}
    receipt: Path                      # the fleet receipt (read first: finished nodes are not re-installed)
    cache_dir: str | None = None       # per node, same placeholders; None: each node's default
    lock_file: Path | None = None      # the lock every node installs (shipped to the nodes with the task)
    select: str = "all"                # all alive nodes, or those with GPUs
    nodes: tuple[str, ...] = ()        # or these: node ids (or 8+ character prefixes), hostnames, names
    ship_kit: bool = False             # nodes share no path: send the kit through Ray's object store
    ship_dir: str | None = None        # where a shipped kit lands on each node (default: tmp, by manifest sha)
    max_parallel: int = 8              # nodes installing at once
    timeout_s: float = 3600.0          # per node, setup and smoke together
    smoke: bool = True
    smoke_format: str | None = None      # None: current smoke takes the stack's (its recipe's models)
    smoke_level: str | None = None     # None: the level the stack promises
    smoke_args: tuple[str, ...] = ()   # passed on to `current smoke` (e.g. --fixtures, --manifest)
    system_python: str | None = None   # torch from this interpreter on every node (october_setup --system-python)
    setup_args: tuple[str, ...] = ()   # passed on to october_setup (e.g. --skip-preflight CHECK)
    python: str = sys.executable       # the interpreter october runs under on the nodes


@dataclass(frozen=True)
class NodeJob:
    """What one node does.  ``setup_argv`` is None for a node the previous receipt finished: its stack is
    verified (``verify_argv``: a stack changed since fails the node, and the next run installs it again) and
    its facts are reported again."""

    name: str
    node_id: str
    host: str
    stack: str
    kit_dir: str
    lock_path: str | None
    setup_argv: tuple[str, ...] | None
    smoke_argv: tuple[str, ...] | None
    smoke_receipt: str | None
    timeout_s: float
    verify_argv: tuple[str, ...] | None = None     # a resumed node: `current verify` of its stack first
    # a resumed node: the smoke it runs when its receipt is not believed (another version's checks wrote it)
    smoke_again_argv: tuple[str, ...] | None = None


@dataclass(frozen=True)
class FleetPlan:
    """``seed``: the first installing node runs alone before the others start.  Set when the nodes
    share one cache directory: FlashInfer's JIT builds are not byte-reproducible (two nvcc builds of
    one module differ), so only modules built once and restored by the others from the shared JIT
    cache (verified by sha256) give every node the same JIT hashes."""

    jobs: tuple[NodeJob, ...]
    max_parallel: int
    seed: bool = False
    resumed: tuple[str, ...] = ()      # names the previous receipt finished (facts re-read only)


def parse_nodes(raw: Iterable[Mapping[str, Any]]) -> tuple[NodeInfo, ...]:
    """``ray.nodes()`` entries as :class:`NodeInfo` (dead ones too, marked)."""
    out = []
    for n in raw:
        labels = n.get("Labels") or {}
        host = str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "?")
        out.append(NodeInfo(node_id=str(n["NodeID"]), host=host,
                            name=str(labels.get(NAME_LABEL) or host), alive=bool(n.get("Alive")),
                            gpus=float((n.get("Resources") or {}).get("GPU", 0.0))))
    return tuple(sorted(out, key=lambda i: (i.name, i.node_id)))


def select_nodes(nodes: Sequence[NodeInfo], mode: str, wanted: Sequence[str]) -> tuple[NodeInfo, ...]:
    """The alive nodes the user asked for; an unknown name, an empty choice or two nodes sharing a
    name (their stacks would collide) is a usage error."""
    if mode not in SELECT_MODES:
        raise UsageError("unknown node selection", expected=" or ".join(SELECT_MODES), found=repr(mode),
                         fix="pass --select all or --select gpu, or name nodes with --node")
    alive = [n for n in nodes if n.alive]
    shown = ", ".join(f"{n.name} ({n.node_id[:8]}, {n.host})" for n in alive) or "none"
    if wanted:
        chosen: list[NodeInfo] = []
        for w in wanted:
            hits = [n for n in alive if w in (n.name, n.host, n.node_id) or (len(w) >= 8 and n.node_id.startswith(w))]
            if not hits:
                raise UsageError(f"no alive node matches --node {w}", expected="a node id (or 8+ character prefix), "
                                 "hostname or october-node label", found=f"alive nodes: {shown}",
                                 fix="pick from the nodes listed, or check `ray status`")
            chosen += [h for h in hits if h not in chosen]
    elif mode == "gpu":
        chosen = [n for n in alive if n.gpus > 0]
    else:
        chosen = alive
    if not chosen:
        raise UsageError("the fleet has no node to install", expected=f"at least one alive node ({mode})",
                         found=f"alive nodes: {shown}",
                         fix="start Ray on the nodes, or choose nodes with --node / --select all")
    dup = sorted(k for k, c in Counter(n.name for n in chosen).items() if c > 1)
    if dup:
        raise UsageError(f"several selected nodes are named {', '.join(dup)}",
                         expected="one name per node (each gets its own stack and receipt entry)",
                         found=f"{len(chosen)} nodes: {shown}",
                         fix=f"start each node with a label: `ray start ... --labels {NAME_LABEL}=NAME`")
    return tuple(chosen)


def expand(template: str, node: NodeInfo) -> str:
    return template.replace("{name}", node.name).replace("{host}", node.host).replace("{node_id}", node.node_id)


def check_paths(opts: FleetOptions) -> None:
    """The paths each node's ``october_setup`` is given hold no character it refuses (exit 19, the character
    and why: :func:`~october.installer.core.cliargs.usable_chars`), said once here before any node is
    contacted, not by every node after the kit was shipped.  Placeholders are checked as written.  The
    numbers too (:func:`check_numbers`)."""
    check_numbers(opts)
    usable_chars("STACK", Path(opts.stack), STACK_CHARS)
    usable_chars("--kit", opts.kit, KIT_CHARS)
    if opts.cache_dir is not None:
        usable_chars("--cache-dir", Path(opts.cache_dir), CACHE_CHARS)
    if opts.ship_dir is not None:
        usable_chars("--ship-dir", Path(opts.ship_dir), KIT_CHARS)     # the nodes install from the kit there


def kit_dir_on_node(opts: FleetOptions, manifest_sha: str) -> str:
    """Shared kit: the same path as on the driver.  Shipped: the same node-local path on every node
    (the lock records where wheels were read, so per-node paths would make locks differ)."""
    if not opts.ship_kit:
        return str(opts.kit)
    return opts.ship_dir or f"/tmp/october-fleet-kit-{manifest_sha[:16]}"


def node_job(opts: FleetOptions, node: NodeInfo, kit_dir: str, recipe: str, *, install: bool) -> NodeJob:
    stack = expand(opts.stack, node)
    lock_path = f"{stack}.fleet-pylock.toml" if opts.lock_file is not None else None
    setup: tuple[str, ...] | None = None
    if install:
        setup = (opts.python, "-m", "october.installer.october_setup", stack, "--recipe", recipe, "--kit", kit_dir, "--locked")
        if lock_path is not None:
            setup += ("--lock-file", lock_path)
        if opts.cache_dir is not None:
            setup += ("--cache-dir", expand(opts.cache_dir, node))
        if opts.system_python is not None:
            setup += ("--system-python", expand(opts.system_python, node))
        setup += tuple(opts.setup_args)      # not --quiet: its `==> step:` lines are the node's phases (and log)
    out = f"{stack}/receipts/smoke"
    smoke: tuple[str, ...] | None = None
    if opts.smoke:          # a finished node's smoke receipt is re-read, run again only when not believed
        smoke = (opts.python, "-c", "from october.installer.cli.main import current_app; current_app()", "smoke",
                 "--install", stack, *(("--format", opts.smoke_format) if opts.smoke_format else ()),
                 "--output", out, "--recipe", recipe)
        if opts.smoke_level is not None:
            smoke += ("--level", opts.smoke_level)
        smoke += tuple(opts.smoke_args)
    verify = None if install else (opts.python, "-c", "from october.installer.cli.main import current_app; current_app()",
                                   "verify", "--install", stack)
    return NodeJob(name=node.name, node_id=node.node_id, host=node.host, stack=stack, kit_dir=kit_dir,
                   lock_path=lock_path, setup_argv=setup, smoke_argv=smoke if install else None,
                   smoke_receipt=f"{out}/receipt.json" if opts.smoke else None, timeout_s=opts.timeout_s,
                   verify_argv=verify, smoke_again_argv=None if install else smoke)


def shared_key(opts: FleetOptions) -> tuple[bytes | None, str | None]:
    """The driver's cache key for the nodes of a shared ``--cache-dir`` (each signs and takes that cache's entries
    with it, wherever their homes are), under the same rule as a setup's (never a key file inside the cache);
    -> (key, None), (None, why not), or (None, None) when the nodes share no cache."""
    if not shared_cache(opts):
        return None, None
    from ..core import cachekey

    cache = Path(str(opts.cache_dir)).expanduser()
    return cachekey.load_key(cache=cache), cachekey.key_problem(cache=cache)


def shared_cache(opts: FleetOptions) -> bool:
    """Whether the nodes share one cache directory (given, and not made per node by a placeholder)."""
    return opts.cache_dir is not None and not any(p in opts.cache_dir for p in PLACEHOLDERS)


INSTALL_OPTIONS = ("stack", "cache_dir", "system_python", "setup_args", "smoke_format", "smoke_level")


def install_options(opts: FleetOptions) -> dict[str, Any]:
    """The options that make a node's stack what it is (where, from which cache and interpreter, with which
    setup and smoke options): a node finished under others is not this run's."""
    return {"stack": opts.stack, "cache_dir": opts.cache_dir, "system_python": opts.system_python,
            "setup_args": list(opts.setup_args), "smoke_format": opts.smoke_format, "smoke_level": opts.smoke_level}


def finished_before(previous: Mapping[str, Any] | None, *, recipe_sha: str, kit_sha: str,
                    lock_sha: str | None, smoke: bool, options: Mapping[str, Any] | None = None
                    ) -> dict[str, Mapping[str, Any]]:
    """Node records of the previous fleet receipt that finished this same install (same recipe, kit
    and lock, and the same :data:`INSTALL_OPTIONS` when ``options`` are given; with a smoke when this run
    wants one), by name."""
    if not previous or (previous.get("recipe", {}).get("sha256"), previous.get("kit", {}).get("sha256"),
                        previous.get("lock_file_sha256")) != (recipe_sha, kit_sha, lock_sha):
        return {}
    before = previous.get("options") if isinstance(previous.get("options"), dict) else {}
    # a key an earlier receipt did not record (cache_dir before it was) is not held against it: its nodes are
    # verified before they count as finished
    if options is not None and (not before or any(k in before and before[k] != options[k] for k in INSTALL_OPTIONS)):
        return {}
    ok = (PASSED,) if smoke else FINISHED
    return {str(n["name"]): n for n in previous.get("nodes", []) if n.get("status") in ok}


def check_numbers(opts: FleetOptions) -> None:
    """--max-parallel and --timeout make sense (exit 2), asked before the cluster is contacted."""
    if opts.max_parallel < 1:
        raise UsageError("--max-parallel must be at least 1", expected="1 or more", found=str(opts.max_parallel),
                         fix="pass --max-parallel N")
    if opts.timeout_s <= 0:
        raise UsageError("--timeout must be positive", expected="seconds > 0", found=str(opts.timeout_s),
                         fix="pass --timeout SECONDS")


def plan_fleet(opts: FleetOptions, nodes: Sequence[NodeInfo], *, manifest_sha: str, recipe: str,
               done: Mapping[str, Mapping[str, Any]]) -> FleetPlan:
    check_numbers(opts)
    hosts = Counter(n.host for n in nodes)
    if any(c > 1 for c in hosts.values()) and not any(p in opts.stack for p in ("{name}", "{node_id}")):
        raise UsageError("several selected nodes run on one host and would share one stack path",
                         expected="a STACK with {name} or {node_id} in it", found=f"STACK {opts.stack}",
                         fix="pass e.g. /scratch/october/{name}")
    kit_dir = kit_dir_on_node(opts, manifest_sha)
    jobs = tuple(node_job(opts, n, kit_dir, recipe, install=n.name not in done) for n in nodes)
    installing = sum(j.setup_argv is not None for j in jobs)
    return FleetPlan(jobs=jobs, max_parallel=opts.max_parallel, seed=shared_cache(opts) and installing > 1,
                     resumed=tuple(j.name for j in jobs if j.setup_argv is None))


@dataclass(frozen=True)
class Verdict:
    passed: bool
    consistent: bool
    reasons: tuple[str, ...]
    differs: Mapping[str, tuple[str, ...]]       # node name -> what differs from the rest


def _majority(values: Mapping[str, Any]) -> Any:
    counts = Counter(values.values())
    return max(counts, key=lambda v: (counts[v], -sorted(values.values(), key=str).index(v))) if counts else None


JIT_HINT = ("FlashInfer's JIT builds are not byte-reproducible, so nodes that each build their own modules "
            "differ: give every node one shared --cache-dir (a path they all see) and the fleet builds on one "
            "node first, the others restore those modules verified by sha256")


def judge(records: Sequence[Mapping[str, Any]], *, smoke: bool, shared_cache: bool = False) -> Verdict:
    """The fleet passes only when every node passed its smoke and all locks (and, per GPU arch,
    all JIT module hashes) are identical; a node that differs is named with what differs.  When
    JIT hashes differ and the nodes did not share a cache, the reasons say how to get one build."""
    reasons: list[str] = []
    differs: dict[str, list[str]] = defaultdict(list)
    for r in records:
        if r["status"] not in FINISHED:
            reasons.append(f"{r['name']}: {r['status']}" + (f" ({r['detail']})" if r.get("detail") else ""))
    finished = [r for r in records if r["status"] in FINISHED]
    locks = {r["name"]: r.get("lock_sha256") for r in finished}
    common = _majority(locks)
    for name, sha in sorted(locks.items()):
        if sha != common:
            differs[name].append(f"lock sha256 {sha}, the fleet's is {common}")
    by_arch: dict[str, dict[str, tuple[tuple[str, str], ...]]] = defaultdict(dict)
    for r in finished:
        by_arch[str(r.get("arch"))][r["name"]] = tuple(sorted((m["uri"], m["sha256"]) for m in r.get("jit") or []))
    for arch, mods in by_arch.items():
        want = _majority(mods)
        for name, got in sorted(mods.items()):
            if got != want:
                odd = sorted(set(got) ^ set(want))
                differs[name].append(f"JIT modules for arch {arch} differ from the fleet's in "
                                     + ", ".join(sorted({u for u, _ in odd})))
    for name, what in sorted(differs.items()):
        reasons.append(f"{name} differs: " + "; ".join(what))
    if not shared_cache and any("JIT modules" in w for what in differs.values() for w in what):
        reasons.append(JIT_HINT)
    consistent = not differs
    if not smoke and finished:
        reasons.append("no smoke ran (--no-smoke): the stacks are installed and identical at best, not proven")
    passed = bool(records) and consistent and all(r["status"] == "passed" for r in records) and smoke
    return Verdict(passed=passed, consistent=consistent, reasons=tuple(reasons),
                   differs={k: tuple(v) for k, v in differs.items()})
