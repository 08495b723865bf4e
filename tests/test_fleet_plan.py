"""The fleet's pure part: node selection, per-node commands, resume, verdict and receipt schema.
No Ray here (the real-cluster tests are in test_fleet_ray.py); ``ray.nodes()`` entries below are
copied from a real Ray 2.60 two-node cluster (NodeID, Alive, hostnames, Resources, Labels)."""

from __future__ import annotations

from types import SimpleNamespace

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from october.installer.core.errors import UsageError
from october.installer.fleet.plan import (
    JIT_HINT,
    FleetOptions,
    finished_before,
    judge,
    parse_nodes,
    plan_fleet,
    select_nodes,
)
from tests.fixtures.root import PROJECT_ROOT

RAW = [  # recorded from ray.nodes() on a local two-node cluster (ray 2.60.0)
    {"NodeID": "3254eb02b5939caa4b0ae5f2ef37ba17542a89b4d911bc7cf66a8330", "Alive": True, "NodeManagerHostname": "vm",
     "NodeManagerAddress": "192.0.2.2", "Resources": {"node:192.0.2.2": 1.0, "CPU": 1.0, "fleetnode_0": 1.0},
     "Labels": {"october-node": "n0", "ray.io/node-id": "3254eb02b5939caa4b0ae5f2ef37ba17542a89b4d911bc7cf66a8330"}},
    {"NodeID": "9ded9a9b9c3f9998fcb36179f822bb206e5ac7fc6a53912b93617d07", "Alive": True, "NodeManagerHostname": "vm",
     "NodeManagerAddress": "192.0.2.2", "Resources": {"node:192.0.2.2": 1.0, "CPU": 1.0, "GPU": 8.0},
     "Labels": {"october-node": "n1", "ray.io/node-id": "9ded9a9b9c3f9998fcb36179f822bb206e5ac7fc6a53912b93617d07"}},
    {"NodeID": "77aa", "Alive": False, "NodeManagerHostname": "gone", "NodeManagerAddress": "10.0.0.9",
     "Resources": {}, "Labels": {}},
]
SHA = "a" * 64


def opts(**kw: Any) -> FleetOptions:
    base: dict[str, Any] = dict(address="127.0.0.1:6379", recipe="fixture", kit=Path("/shared/kit"),
                                stack="/scratch/{name}", receipt=Path("/tmp/fleet.json"), python="/usr/bin/python3",
                                smoke_format="fp16")
    base.update(kw)
    return FleetOptions(**base)


def test_nodes_are_parsed_named_by_label_and_selected() -> None:
    nodes = parse_nodes(RAW)
    assert [n.name for n in nodes] == ["gone", "n0", "n1"]
    assert [n.name for n in select_nodes(nodes, "all", [])] == ["n0", "n1"]          # the dead one is left out
    assert [n.name for n in select_nodes(nodes, "gpu", [])] == ["n1"]
    assert [n.name for n in select_nodes(nodes, "all", ["9ded9a9b"])] == ["n1"]       # by id prefix
    assert [n.name for n in select_nodes(nodes, "all", ["vm"])] == ["n0", "n1"]       # by hostname
    with pytest.raises(UsageError, match="no alive node matches --node gone"):
        select_nodes(nodes, "all", ["gone"])
    with pytest.raises(UsageError, match="no node to install"):
        select_nodes(nodes[:1] + nodes[1:2], "gpu", [])
    unlabelled = parse_nodes([{**r, "Labels": {}} for r in RAW[:2]])
    with pytest.raises(UsageError, match="several selected nodes are named vm"):
        select_nodes(unlabelled, "all", [])


def test_each_node_runs_the_single_node_commands_on_its_own_stack() -> None:
    nodes = select_nodes(parse_nodes(RAW), "all", [])
    plan = plan_fleet(opts(lock_file=Path("/l/pylock.toml"), cache_dir="/c/{name}", smoke_level="kernel",
                           smoke_args=("--fixtures=/f",), max_parallel=1), nodes, manifest_sha=SHA,
                      recipe="fixture", done={})
    a = plan.jobs[0]
    assert a.setup_argv == ("/usr/bin/python3", "-m", "october.installer.october_setup", "/scratch/n0", "--recipe", "fixture",
                            "--kit", "/shared/kit", "--locked", "--lock-file", "/scratch/n0.fleet-pylock.toml",
                            "--cache-dir", "/c/n0")
    assert a.smoke_argv is not None and a.smoke_argv[3:] == (
        "smoke", "--install", "/scratch/n0", "--format", "fp16", "--output", "/scratch/n0/receipts/smoke",
        "--recipe", "fixture", "--level", "kernel", "--fixtures=/f")
    assert plan.jobs[1].stack == "/scratch/n1" and plan.max_parallel == 1
    assert plan.seed is False                                   # per-node caches: nothing to seed
    site = plan_fleet(opts(system_python="/opt/torch/bin/python", setup_args=("--skip-preflight=gpu",),
                           cache_dir="/shared/cache"), nodes, manifest_sha=SHA, recipe="fixture", done={})
    assert site.jobs[0].setup_argv is not None and site.jobs[0].setup_argv[-5:] == (
        "--cache-dir", "/shared/cache", "--system-python", "/opt/torch/bin/python", "--skip-preflight=gpu")
    assert site.seed is True                                    # one cache for all: one node installs first
    one_left = plan_fleet(opts(cache_dir="/shared/cache"), nodes, manifest_sha=SHA, recipe="fixture",
                          done={"n0": {"name": "n0", "status": "passed"}})
    assert one_left.seed is False                               # a single node to install needs no seed
    shipped = plan_fleet(opts(ship_kit=True), nodes, manifest_sha=SHA, recipe="fixture", done={})
    assert {j.kit_dir for j in shipped.jobs} == {"/tmp/october-fleet-kit-" + SHA[:16]}   # one path: equal locks
    with pytest.raises(UsageError, match="share one stack path"):
        plan_fleet(opts(stack="/scratch/stack"), nodes, manifest_sha=SHA, recipe="fixture", done={})
    with pytest.raises(UsageError, match="--max-parallel"):
        plan_fleet(opts(max_parallel=0), nodes, manifest_sha=SHA, recipe="fixture", done={})
    with pytest.raises(UsageError, match="--timeout"):
        plan_fleet(opts(timeout_s=0), nodes, manifest_sha=SHA, recipe="fixture", done={})


def test_without_smoke_format_each_node_smokes_what_its_stack_says() -> None:
    """A FlashInfer-only recipe has no model: no --format goes to `current smoke`, which reads the stack."""
    nodes = select_nodes(parse_nodes(RAW), "all", [])
    plan = plan_fleet(opts(smoke_format=None), nodes, manifest_sha=SHA, recipe="fixture", done={})
    argv = plan.jobs[0].smoke_argv
    assert argv is not None and "--format" not in argv and argv[3:6] == ("smoke", "--install", "/scratch/n0")


def test_a_rerun_reinstalls_only_the_nodes_that_did_not_finish() -> None:
    prev = {"recipe": {"sha256": SHA}, "kit": {"sha256": SHA}, "lock_file_sha256": None,
            "nodes": [{"name": "n0", "status": "passed", "node_id": "x"}, {"name": "n1", "status": "lost"}]}
    done = finished_before(prev, recipe_sha=SHA, kit_sha=SHA, lock_sha=None, smoke=True)
    assert list(done) == ["n0"]
    nodes = select_nodes(parse_nodes(RAW), "all", [])
    plan = plan_fleet(opts(), nodes, manifest_sha=SHA, recipe="fixture", done=done)
    assert plan.resumed == ("n0",)
    assert plan.jobs[0].setup_argv is None and plan.jobs[0].smoke_argv is None   # facts re-read only
    again, smoke = plan.jobs[0].smoke_again_argv, plan.jobs[1].smoke_argv     # the smoke, if not believed
    assert again is not None and smoke is not None
    assert again == tuple(a.replace("/scratch/n1", "/scratch/n0") for a in smoke)
    assert plan.jobs[1].setup_argv is not None and plan.jobs[1].smoke_again_argv is None
    # another kit, lock or recipe: nothing is kept
    assert finished_before(prev, recipe_sha=SHA, kit_sha="b" * 64, lock_sha=None, smoke=True) == {}
    assert finished_before(prev, recipe_sha=SHA, kit_sha=SHA, lock_sha="c" * 64, smoke=True) == {}
    # an installed-but-unproven node is not finished for a run that smokes
    prev["nodes"][0]["status"] = "installed"
    assert finished_before(prev, recipe_sha=SHA, kit_sha=SHA, lock_sha=None, smoke=True) == {}
    assert list(finished_before(prev, recipe_sha=SHA, kit_sha=SHA, lock_sha=None, smoke=False)) == ["n0"]
    # a resumed node is verified on its node first (its stack checked, not only its lock re-read)
    assert plan.jobs[0].verify_argv is not None and plan.jobs[0].verify_argv[-3:] == ("verify", "--install", "/scratch/n0")
    assert plan.jobs[1].verify_argv is None


def test_a_receipt_of_other_install_options_resumes_nothing_and_one_without_a_key_still_resumes() -> None:
    """The scenario hunt: a receipt whose nodes were finished with another STACK (or cache, interpreter, setup or
    smoke options) resumed them by name, and every node then failed "no lock at" the new STACK.  The upgrade
    hunt: a receipt written before cache_dir was recorded resumed nothing; a key it lacks is not held against
    it (its nodes are verified before they count)."""
    from october.installer.fleet.plan import install_options

    o = opts()
    prev = {"recipe": {"sha256": SHA}, "kit": {"sha256": SHA}, "lock_file_sha256": None,
            "options": install_options(o), "nodes": [{"name": "n0", "status": "passed", "node_id": "x"}]}
    same = dict(recipe_sha=SHA, kit_sha=SHA, lock_sha=None, smoke=True, options=install_options(o))
    assert list(finished_before(prev, **same)) == ["n0"]
    for key, value in (("stack", "/elsewhere/{name}"), ("cache_dir", "/c/{name}"), ("system_python", "/py"),
                       ("setup_args", ["--allow-dirty"]), ("smoke_level", "kernel")):
        assert finished_before({**prev, "options": {**prev["options"], key: value}}, **same) == {}, key
    older = {k: v for k, v in prev["options"].items() if k != "cache_dir"}
    assert list(finished_before({**prev, "options": older}, **same)) == ["n0"]
    assert finished_before({k: v for k, v in prev.items() if k != "options"}, **same) == {}   # no options at all


def test_fleet_progress_names_each_node_its_phase_and_the_counts() -> None:
    """FleetProgress on a real ConsoleReporter (a log, -v, a terminal), fed as run_plan feeds it: n0
    finished before (re-checked), n1 installs and its smoke fails.  The phases are read from the lines a
    node's october_setup prints in a pipe (reportlines.skip_line / ConsoleReporter.task_start)."""
    import io

    from rich.console import Console

    from october.installer.core.reportlines import skip_line
    from october.installer.core.ui import ConsoleReporter
    from october.installer.fleet.progress import FleetProgress, setup_phase
    from october.installer.engine import STEP_ORDER

    assert setup_phase("==> fetch: starting", STEP_ORDER) == "setup: fetch"
    assert setup_phase(skip_line("preflight"), STEP_ORDER) == "setup: preflight"
    assert setup_phase("==> smoke: level kernel", STEP_ORDER) is None           # current smoke's, not a step
    assert setup_phase("    fetch: ok in 1.0s", STEP_ORDER) is None
    plan = plan_fleet(opts(), select_nodes(parse_nodes(RAW), "all", []), manifest_sha=SHA, recipe="fixture",
                      done={"n0": {"name": "n0", "status": "passed", "node_id": RAW[0]["NodeID"]}})

    def run(**ui_kw: Any) -> tuple[ConsoleReporter, str, list[str]]:
        out = io.StringIO()
        ui = ConsoleReporter(console=Console(file=out, width=120, highlight=False, **ui_kw.pop("console", {})), **ui_kw)
        progress = FleetProgress(ui, plan, setup_steps=6, shipped=False)
        progress.begin()
        for job in plan.jobs:
            progress.started(job)
        for name, phase in (("n0", "re-check"), ("n1", "setup: preflight"), ("n1", "setup: fetch")):
            progress.phase(name, phase)
        progress.finished("n0", "passed")
        progress.phase("n0", "late")                     # a report that arrives after the node's end
        progress.phase("n1", "smoke")
        bars = [f"{t.description} {t.completed:.0f}/{t.total:.0f}" for t in ui._bars.tasks] if ui._bars else []
        progress.finished("n1", "failed")
        progress.end()
        return ui, out.getvalue(), bars

    _, log, bars = run()
    assert bars == []
    lines = log.splitlines()
    assert lines[:3] == ["==> fleet: 2 node(s): 1 to install, 1 finished before to re-check",
                         "    n0: re-check on 3254eb02 (vm)", "    n1: install on 9ded9a9b (vm)"]
    assert lines[3:5] == ["    n0: passed (1 of 2 node(s) done: 1 ok, 0 failed)",
                          "    n1: failed (2 of 2 node(s) done: 1 ok, 1 failed)"]
    assert lines[5].startswith("    fleet: 2 node(s) in ") and lines[5].endswith("s: 1 ok, 1 failed") and len(lines) == 6
    _, verbose, _ = run(verbose=True)
    assert "      n1: setup: fetch (1/7)\n" in verbose and "      n1: smoke (2/7)\n" in verbose   # 6 steps + smoke
    assert "late" not in verbose and "      nodes: 1 ok, 1 failed (2/2)\n" in verbose
    assert run(quiet=True)[1] == ""
    ui, drawn, bars = run(console={"force_terminal": True})
    assert bars == ["nodes: 1 ok, 0 failed 1/2", "n1: smoke 2/7"]       # n0's bar went as it ended
    assert ui._tasks == {} and "━" in drawn and "n1: failed" in drawn   # and n1's, and the nodes' at the end

    # --no-smoke: a node that installed is not counted "ok" (the verdict will say the fleet did not pass)
    out = io.StringIO()
    ui = ConsoleReporter(console=Console(file=out, width=120, highlight=False))
    progress = FleetProgress(ui, plan, setup_steps=6, shipped=False)
    progress.begin()
    progress.finished("n0", "passed")
    progress.finished("n1", "installed")
    progress.end()
    assert out.getvalue().splitlines()[-1].endswith("s: 1 ok, 1 installed without a smoke, 0 failed")


def rec(name: str, status: str = "passed", lock: str = SHA, arch: str | None = "9.0",
        jit: tuple[tuple[str, str], ...] = (("decode", "d" * 64),)) -> dict[str, Any]:
    return {"name": name, "node_id": "ab" * 4, "host": "h", "resumed": False, "status": status, "detail": None,
            "stack": f"/s/{name}", "gpu": None, "arch": arch, "lock_sha256": lock,
            "jit": [{"uri": u, "sha256": s} for u, s in jit], "kit_received_bytes": None,
            "setup": {"exit_code": 0, "seconds": 1.0},
            "smoke": {"passed": status == "passed", "exit_code": 0, "level": "kernel", "seconds": 1.0, "reasons": []},
            "seconds": 2.0}


def test_the_verdict_passes_only_identical_passing_nodes_and_names_the_odd_one() -> None:
    ok = judge([rec("n0"), rec("n1"), rec("n2", arch="8.0", jit=(("decode", "e" * 64),))], smoke=True)
    assert ok.passed and ok.consistent and not ok.reasons          # JIT hashes are compared per arch
    bad = judge([rec("n0"), rec("n1", lock="f" * 64), rec("n2")], smoke=True)
    assert not bad.passed and not bad.consistent and list(bad.differs) == ["n1"]
    assert "lock sha256 " + "f" * 64 in bad.differs["n1"][0] and SHA in bad.differs["n1"][0]
    jit = judge([rec("n0"), rec("n1"), rec("n2", jit=(("decode", "0" * 64),))], smoke=True)
    assert list(jit.differs) == ["n2"] and "JIT modules for arch 9.0" in jit.differs["n2"][0]
    assert jit.reasons[-1] == JIT_HINT and "--cache-dir" in JIT_HINT         # how to get one build on every node
    shared = judge([rec("n0"), rec("n1"), rec("n2", jit=(("decode", "0" * 64),))], smoke=True, shared_cache=True)
    assert list(shared.differs) == ["n2"] and JIT_HINT not in shared.reasons   # it had one: n2 drifted
    lost = judge([rec("n0"), rec("n1", status="lost")], smoke=True)
    assert not lost.passed and lost.consistent and lost.reasons == ("n1: lost",)
    unproven = judge([rec("n0", status="installed"), rec("n1", status="installed")], smoke=False)
    assert not unproven.passed and unproven.consistent and "no smoke ran" in unproven.reasons[-1]
    assert not judge([], smoke=True).passed


def test_the_schema_refuses_a_receipt_that_over_claims() -> None:
    schema = json.loads((PROJECT_ROOT / "receipts" / "fleet.schema.json").read_text())
    doc = {"format_version": 1, "kind": "fleet", "tool": {"name": "october", "version": "0"}, "created_at": "now",
           "address": "a", "recipe": {"name": "r", "sha256": SHA}, "kit": {"path": "/k", "sha256": SHA, "shipped": False},
           "lock_file_sha256": None, "options": {}, "passed": True, "consistent": True, "interrupted": False,
           "wall_seconds": 1.0, "reasons": [], "nodes": [dict(rec("n0"), differs=[])]}
    jsonschema.Draft202012Validator(schema).validate(doc)
    smoked = dict(rec("n0"), differs=[])
    smoked["smoke"] = dict(smoked["smoke"], proves="stack", device="cuda", checks={"physical_k16v8": "passed"})
    jsonschema.Draft202012Validator(schema).validate({**doc, "nodes": [smoked]})
    for bad in ({"consistent": False}, {"interrupted": True}, {"nodes": []},
                {"nodes": [dict(rec("n0", status="lost"), differs=[])]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(schema).validate({**doc, **bad})


def test_single_node_commands_neither_import_nor_need_ray(tmp_path: Path) -> None:
    """`october_setup --help`, `kit --help`, a single-node run (stopped by its recipe error) and the
    fleet's own option checks run with ray made unimportable (sys.modules['ray'] = None) and never
    import it."""
    prog = ("import sys; sys.modules['ray'] = None\n"
            "from october.installer.cli.main import setup_main\n"
            "codes = []\n"
            "for argv in {argv!r}:\n"
            "    try:\n"
            "        codes.append(setup_main(argv))\n"
            "    except SystemExit as e:\n"
            "        codes.append(e.code)\n"
            "sys.stderr.write('CODES %r RAY %r\\n' % (codes, sys.modules.get('ray') is not None))\n")
    argv = [["--help"], ["kit", "--help"], [str(tmp_path / "s"), "--recipe", str(tmp_path / "nope.toml")],
            ["fleet", "--help"],
            ["fleet", str(tmp_path / "{name}"), "--address", "127.0.0.1:1", "--kit", str(tmp_path),
             "--recipe", str(tmp_path / "nope.toml")]]
    done = subprocess.run([sys.executable, "-c", prog.format(argv=argv)], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=120)
    assert "CODES [0, 0, 3, 0, 3] RAY False" in done.stderr, done.stderr[-2000:]


def test_the_fleet_without_ray_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from october.installer.core.errors import ToolMissing
    from october.installer.fleet.cluster import connect

    monkeypatch.setitem(sys.modules, "ray", None)          # as if ray were not installed
    with pytest.raises(ToolMissing) as err:
        connect("127.0.0.1:1")
    assert err.value.exit_code == 7 and "uv sync --extra fleet" in err.value.message


def test_a_shipped_kit_is_verified_on_arrival(tmp_path: Path) -> None:
    """receive_kit with a fetch that hands out the stored chunks (Ray's object store stands behind it in
    the real runs): a damaged chunk is refused, files already present and right are not fetched again."""
    from october.installer.core.errors import KitError
    from october.installer.core.hashing import sha256_bytes
    from october.installer.fleet.node import Shipment, ShippedFile, receive_kit
    from october.installer.kit.manifest import file_table

    src = tmp_path / "kit"
    (src / "wheels").mkdir(parents=True)
    (src / "wheels" / "a.whl").write_bytes(b"A" * 1000)
    (src / "b.txt").write_bytes(b"bee")
    table = file_table(src)
    manifest = json.dumps({"files": table}).encode()
    store = {"a1": b"A" * 600, "a2": b"A" * 400, "b": b"bee"}
    ship = Shipment(manifest=manifest, lock=None, lock_sha256=None, files=(
        ShippedFile("b.txt", table["b.txt"]["sha256"], 3, ("b",)),
        ShippedFile("wheels/a.whl", table["wheels/a.whl"]["sha256"], 1000, ("a1", "a2"))))
    fetched: list[str] = []

    def fetch(ref: Any) -> bytes:
        fetched.append(ref)
        return store[ref]

    dest = tmp_path / "node"
    with pytest.raises(KitError):          # not a kit manifest this october reads: refused after arrival
        receive_kit(dest, ship, fetch)
    assert (dest / "wheels" / "a.whl").read_bytes() == b"A" * 1000
    store["b"] = b"bad"
    (dest / "b.txt").unlink()
    fetched.clear()
    with pytest.raises(KitError, match="arrived damaged"):
        receive_kit(dest, ship, fetch)
    assert fetched == ["b"] and sha256_bytes(b"bad") != table["b.txt"]["sha256"]   # a.whl was not fetched again


def test_an_unreachable_cluster_is_said_at_once_as_exit_8() -> None:
    """Ray itself would retry the GCS for minutes; a closed loopback port is refused in well under that, as an
    unreachable remote (exit 8, the README's row), not a usage error (the audit: exit 2 read as a bad option)."""
    from october.installer.core.errors import ClusterUnreachable

    import socket
    import time

    from october.installer.fleet.cluster import connect

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                  # bound, never listening: connection refused
        start = time.monotonic()
        with pytest.raises(ClusterUnreachable, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}") as err:
            connect(f"127.0.0.1:{port}")
    assert time.monotonic() - start < 15 and err.value.exit_code == 8


@pytest.mark.parametrize("plant", [None, "hand-written", "other-lock", "other-node", "not-json", "other-jit",
                                   "other-code", "no-code"])
def test_a_resumed_node_believes_only_a_smoke_receipt_of_its_own_lock(tmp_path: Path, plant: str | None) -> None:
    """The review's finding: a node the last fleet run finished re-read its smoke receipt and took any file
    saying passed.  Now the receipt must be one `current smoke` writes (schema) and name the stack's lock.
    The receipt is the real H200 kernel smoke's (receipts/examples), its lock set to this stack's."""
    from october.installer.fleet.node import run_job
    from october.installer.fleet.plan import NodeJob

    stack = tmp_path / "stack"
    stack.mkdir()
    (stack / "pylock.toml").write_text('lock-version = "1.0"\n')
    lock_sha = hashlib.sha256((stack / "pylock.toml").read_bytes()).hexdigest()
    receipt = json.loads((PROJECT_ROOT / "receipts" / "examples" / "kernel-smoke-flashinfer-2f3f0f6d-h200.json").read_text())
    receipt["stack"]["lock_sha256"] = lock_sha
    receipt["stack"]["setup_receipt"] = str(stack / "receipts" / "setup.json")
    # the upgrade hunt: a receipt another version's checks wrote (or one before receipts named their code) was
    # believed, and the checks this version added never ran on that node
    from october.installer.pyenv.builtkey import tool_code

    receipt["stack"]["tool_code"] = {"other-code": "0" * 64, "no-code": None}.get(str(plant), tool_code())
    if receipt["stack"]["tool_code"] is None:
        del receipt["stack"]["tool_code"]
    # the stack's setup receipt lists the JIT modules the smoke loaded; the scenario hunt: a re-run that rebuilt
    # one (another sha256) left the old smoke receipt believed
    jit = [dict(m) for m in receipt["stack"]["jit"]]
    if plant == "other-jit":
        jit[0]["sha256"] = "f" * 64
    (stack / "receipts").mkdir()
    (stack / "receipts" / "setup.json").write_text(json.dumps({"jit": jit}))
    if plant == "other-node":          # another node's passing receipt, same kit lock, copied over
        receipt["stack"]["setup_receipt"] = "/elsewhere/stack/receipts/setup.json"
    if plant == "hand-written":
        receipt = {"passed": True}
    elif plant == "other-lock":
        receipt["stack"]["lock_sha256"] = "0" * 64
    path = tmp_path / "smoke" / "receipt.json"
    path.parent.mkdir()
    path.write_text("{ not json" if plant == "not-json" else json.dumps(receipt))
    job = NodeJob(name="n0", node_id="ab" * 4, host="h", stack=str(stack), kit_dir=str(tmp_path / "kit"),
                  lock_path=None, setup_argv=None, smoke_argv=None, smoke_receipt=str(path), timeout_s=60)
    rec = run_job(job, None, lambda _ref: b"")
    if plant is None:
        assert rec["status"] == "passed" and rec["smoke"]["passed"] is True, rec
        return
    if plant == "other-code":
        # the review: with the fleet's smoke asked for, a node whose stack verified is smoked again (here a
        # stand-in smoke writes this code's receipt), not failed until the next run
        good = dict(receipt, stack={**receipt["stack"], "tool_code": tool_code()})
        again = (sys.executable, "-c", f"open({str(path)!r}, 'w').write({json.dumps(good)!r})")
        rerun = run_job(dataclasses.replace(job, smoke_again_argv=again), None, lambda _ref: b"")
        assert rerun["status"] == "passed" and rerun["smoke"]["passed"] is True, rerun
        assert rerun["detail"].startswith("smoked again: its earlier smoke receipt was not believed (it was written "
                                          "by other code of the tool"), rerun
        path.write_text(json.dumps(receipt))
    assert rec["status"] == "failed" and rec["smoke"]["passed"] is False, rec
    assert "is not believed" in rec["detail"]
    if plant == "other-lock":
        assert "0" * 64 in rec["detail"] and lock_sha in rec["detail"]
    if plant == "other-node":
        assert "/elsewhere/stack/receipts/setup.json" in rec["detail"]
    if plant in ("other-code", "no-code"):
        assert "it was written by other code of the tool" in rec["detail"], rec
    if plant == "other-jit":
        assert "it smoked other JIT modules than the 2 the stack's setup receipt lists now" in rec["detail"], rec
    assert "re-run the fleet command" in rec["detail"]


def test_fleet_numbers_are_usage_errors_before_anything_is_contacted(tmp_path) -> None:
    """The new-user hunt: ``--max-parallel 0`` was said only after the kit was opened and Ray contacted (exit 8,
    "cluster unreachable"); it is a usage error (exit 2) before either."""
    import subprocess
    import sys

    from tests.fixtures.root import PROJECT_ROOT

    (tmp_path / "kit").mkdir()
    for option, value in (("--max-parallel", "0"), ("--timeout", "0")):
        proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", "fleet", "--address", "127.0.0.1:1",
                               "--recipe", "current", "--kit", str(tmp_path / "kit"), option, value,
                               str(tmp_path / "stacks" / "{name}")], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 2 and option in proc.stderr, proc.stderr


def test_a_node_of_a_shared_cache_runs_its_commands_with_the_drivers_key(tmp_path: Path) -> None:
    """The cache's entries are signed with a per-user key kept outside the cache: a node whose home holds another
    key would refuse the seed's JIT entries and build its own (the fleet then names the JIT differences).  The
    driver's key goes to each node's commands in $OCTOBER_CACHE_KEY, masked in the node's logs."""
    from october.installer.fleet.node import run_job
    from october.installer.fleet.plan import NodeJob

    key = bytes(range(32))
    seen = tmp_path / "seen"
    stack = tmp_path / "stack"
    argv = (sys.executable, "-c", "import os, sys; k = os.environ.get('OCTOBER_CACHE_KEY', ''); "
            f"open({str(seen)!r}, 'w').write(k); print('key', k); sys.exit(3)")
    job = NodeJob(name="n0", node_id="ab" * 4, host="h", stack=str(stack), kit_dir=str(tmp_path / "kit"),
                  lock_path=None, setup_argv=argv, smoke_argv=None, smoke_receipt=None, timeout_s=60)
    rec = run_job(job, None, lambda _ref: b"", cache_key=key)
    assert seen.read_text() == key.hex() and rec["status"] == "failed"
    log = Path(f"{stack}.fleet-logs") / "fleet-setup.log"
    assert key.hex() not in log.read_text() + json.dumps(rec) and "key " in log.read_text()
    run_job(job, None, lambda _ref: b"")                    # no shared cache: the node's own key
    assert seen.read_text() == ""


def test_the_key_can_be_given_in_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from october.installer.core import cachekey

    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "unused.key"))
    monkeypatch.setenv(cachekey.KEY_ENV, "11" * 32)
    assert cachekey.load_key() == bytes([0x11]) * 32 and not (tmp_path / "unused.key").exists()
    for bad in ("not hex", "11" * 16, "11" * 33):           # not 32 bytes: no key, and the message says so
        monkeypatch.setenv(cachekey.KEY_ENV, bad)
        assert cachekey.load_key() is None and "is not 32 bytes in hex" in (cachekey.key_problem() or "")


def test_the_fleet_hands_its_nodes_a_key_only_under_the_setup_rule(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """The second review: the driver loaded its key without the cache it signs for, so a key file inside the shared
    cache (refused by every setup) was handed to the nodes, and a forged entry signed with it was taken there."""
    from october.installer.fleet.plan import shared_key

    cache = tmp_path / "cache"
    opts = SimpleNamespace(cache_dir=str(cache))
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(cache / "team.key"))
    key, why = shared_key(opts)                             # type: ignore[arg-type]
    assert key is None and "is inside the cache" in (why or "") and not (cache / "team.key").exists()
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "team.key"))
    key, why = shared_key(opts)                             # type: ignore[arg-type]
    assert key is not None and len(key) == 32 and why is None
    assert shared_key(SimpleNamespace(cache_dir=None)) == (None, None)     # type: ignore[arg-type]
