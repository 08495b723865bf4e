"""`october_setup fleet` on a real local multi-node Ray cluster (``ray.cluster_utils.Cluster``:
separate raylet processes, each its own node id, labelled ``october-node=nK``), with a kit made
from the fixture world of tests/test_kit.py.  The fleet CLI runs as a subprocess and connects to
the cluster by its address, as a user's would.

The fixture stacks promise no smoke level (their forks are neither FlashInfer nor vLLM), so these
runs install with ``--no-smoke`` (the receipt then never passes: "installed", not "passed"), and
one run with the smoke shows the smoke's own refusal reported as the node's failure.  A passing
verdict with identical nodes is covered without Ray in test_fleet_plan.py.

Node n2 of the lost-node test runs with a ``git`` on its PATH that sleeps 4 s before running the
real git while the file slowbin/on exists (a stand-in for a slow network or disk, nothing else), so that
it is still installing when it is killed, interrupted or timed out.
"""

from __future__ import annotations

import json
import os
import signal
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from october.installer.core.hashing import sha256_file
from october.installer.core.schemas import validate
from october.installer.recipe import PROJECT_ROOT
from tests.fixtures.world import make_world
from tests.test_kit import _recipe_copy

pytestmark = pytest.mark.slow
ray_cluster_utils = pytest.importorskip("ray.cluster_utils")


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "october.installer.october_setup", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _node_args(name: str) -> dict[str, Any]:
    return {"num_cpus": 1, "labels": {"october-node": name}, "resources": {f"fleetnode_{name}": 1},
            "object_store_memory": 80 * 1024 * 1024}


@pytest.fixture()
def cluster() -> Iterator[Any]:
    c = ray_cluster_utils.Cluster(initialize_head=True,
                                  head_node_args={**_node_args("n0"), "include_dashboard": False})
    try:
        c.add_node(**_node_args("n1"))
        yield c
    finally:
        c.shutdown()


@pytest.fixture()
def kit(tmp_path: Path) -> dict[str, Path]:
    """A fixture world, its kit, and the lock of a single-node install from that kit."""
    world = make_world(tmp_path / "world")
    recipe = _recipe_copy(world, tmp_path / "recipe")
    made = cli("kit", "--recipe", str(recipe), str(tmp_path / "kit"), "--cache-dir", str(tmp_path / "cache-kit"), "-q")
    assert made.returncode == 0, made.stderr
    single = cli(str(tmp_path / "single"), "--recipe", str(recipe), "--kit", str(tmp_path / "kit"),
                 "--cache-dir", str(tmp_path / "cache-single"), "-q")
    assert single.returncode == 0, single.stderr
    return {"recipe": recipe, "kit": tmp_path / "kit", "lock": tmp_path / "single" / "pylock.toml"}


def fleet_args(c: Any, k: dict[str, Path], tmp: Path, *extra: str) -> list[str]:
    return ["fleet", "--address", c.address, "--recipe", str(k["recipe"]), "--kit", str(k["kit"]),
            "--lock-file", str(k["lock"]), "--receipt", str(tmp / "fleet.json"), "--cache-dir", str(tmp / "cache-{name}"),
            "--timeout", "300", *extra, str(tmp / "stacks" / "{name}")]


def receipt(tmp: Path) -> dict[str, Any]:
    doc = json.loads((tmp / "fleet.json").read_text())
    validate("fleet", doc)
    return doc


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in doc["nodes"]}


def test_fleet_installs_each_node_pinned_identical_and_names_a_planted_lock(cluster: Any, kit: dict[str, Path],
                                                                           tmp_path: Path) -> None:
    cluster.add_node(**_node_args("n2"))
    cluster.wait_for_nodes()
    done = cli(*fleet_args(cluster, kit, tmp_path, "--no-smoke", "--max-parallel", "2"))
    doc = receipt(tmp_path)
    nodes = by_name(doc)
    assert sorted(nodes) == ["n0", "n1", "n2"], done.stdout + done.stderr
    assert all(n["status"] == "installed" for n in nodes.values()), json.dumps(doc, indent=1)
    assert len({n["node_id"] for n in nodes.values()}) == 3                     # three real Ray nodes
    live = {n["NodeID"]: n["Labels"]["october-node"] for n in cluster_nodes(cluster)}
    assert {n["node_id"]: name for name, n in nodes.items()} == live            # each ran where it was pinned
    shas = {n["lock_sha256"] for n in nodes.values()}
    assert shas == {sha256_file(tmp_path / "stacks" / name / "pylock.toml") for name in nodes} and len(shas) == 1
    assert doc["consistent"] is True and doc["passed"] is False and done.returncode == 1   # no smoke: not proven
    assert any("no smoke ran" in r for r in doc["reasons"])

    # a re-run re-installs nothing: every node finished, its facts are re-read on the node
    again = cli(*fleet_args(cluster, kit, tmp_path, "--no-smoke"))
    nodes = by_name(receipt(tmp_path))
    assert all(n["resumed"] and n["setup"] is None and n["status"] == "installed" for n in nodes.values()), again.stdout

    # a node whose lock differs is named, with what differs
    lock = tmp_path / "stacks" / "n1" / "pylock.toml"
    lock.write_text(lock.read_text() + "\n# planted\n")
    planted = cli(*fleet_args(cluster, kit, tmp_path, "--no-smoke"))
    doc = receipt(tmp_path)
    assert planted.returncode == 1 and doc["consistent"] is False
    assert [n["name"] for n in doc["nodes"] if n["differs"]] == ["n1"]
    assert "lock sha256 " + sha256_file(lock) in by_name(doc)["n1"]["differs"][0]
    assert any(r.startswith("n1 differs: lock sha256") for r in doc["reasons"]) and "n1 differs" in planted.stdout

    # with the smoke: these stacks promise no level, and the fleet reports each node's smoke refusal
    smoked = cli(*fleet_args(cluster, kit, tmp_path, "--node", "n0"))
    n0 = by_name(receipt(tmp_path))["n0"]
    assert smoked.returncode == 1 and n0["status"] == "failed" and n0["smoke"]["exit_code"] == 17
    assert "promises nothing to check" in n0["detail"]


def cluster_nodes(c: Any) -> list[dict[str, Any]]:
    code = ("import json, ray; ray.init(address=%r, logging_level='ERROR'); "
            "print(json.dumps([n for n in ray.nodes() if n['Alive']]))" % c.address)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_shipped_kit_reaches_nodes_through_ray_verified(cluster: Any, kit: dict[str, Path], tmp_path: Path) -> None:
    ship = tmp_path / "node-local-kit"
    done = cli(*fleet_args(cluster, kit, tmp_path, "--no-smoke", "--ship-kit", "--ship-dir", str(ship)))
    doc = receipt(tmp_path)
    assert doc["kit"]["shipped"] and all(n["status"] == "installed" for n in doc["nodes"]), done.stdout + done.stderr
    assert doc["consistent"] and sum(n["kit_received_bytes"] for n in doc["nodes"]) > 0
    assert sorted(p.name for p in ship.iterdir()) == sorted(p.name for p in kit["kit"].iterdir())
    # the nodes installed from the shipped copy, not the driver's kit
    assert str(ship / "wheels") in (tmp_path / "stacks" / "n0" / "pylock.toml").read_text()


def _slow_git(where: Path) -> Path:
    where.mkdir(parents=True)
    real = shutil.which("git")
    assert real
    wrapper = where / "git"
    (where / "on").touch()                  # removed to make it fast again
    wrapper.write_text(f"#!/bin/sh\n[ -e {where / 'on'} ] && sleep 4\nexec {real} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return where


def test_a_node_killed_mid_install_is_lost_then_resumed_by_a_rerun(cluster: Any, kit: dict[str, Path],
                                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = _slow_git(tmp_path / "slowbin")
    with monkeypatch.context() as m:                 # only n2's processes see the slow git
        m.setenv("PATH", f"{slow}{os.pathsep}{os.environ['PATH']}")
        n2 = cluster.add_node(**_node_args("n2"))
    cluster.wait_for_nodes()
    proc = subprocess.Popen([sys.executable, "-m", "october.installer.october_setup",
                             *fleet_args(cluster, kit, tmp_path, "--no-smoke")],
                            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = tmp_path / "stacks" / "n2.fleet-logs" / "fleet-setup.log"
    deadline = time.monotonic() + 240
    while not log.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert log.exists(), "n2 never started installing"
    time.sleep(2)                                    # inside its first (slow) git call
    cluster.remove_node(n2, allow_graceful=False)
    out, _ = proc.communicate(timeout=300)
    doc = receipt(tmp_path)
    nodes = by_name(doc)
    assert proc.returncode == 1, out
    assert nodes["n2"]["status"] == "lost" and "died" in nodes["n2"]["detail"], json.dumps(nodes["n2"])
    assert nodes["n0"]["status"] == nodes["n1"]["status"] == "installed"
    assert not (tmp_path / "stacks" / "n2" / "receipts" / "setup.json").exists()   # really stopped mid-install

    cluster.add_node(**_node_args("n2"))             # the node is back (a new Ray node id, the same name)
    cluster.wait_for_nodes()
    again = cli(*fleet_args(cluster, kit, tmp_path, "--no-smoke"))
    doc = receipt(tmp_path)
    nodes = by_name(doc)
    assert all(n["status"] == "installed" for n in nodes.values()), again.stdout + again.stderr
    assert nodes["n0"]["resumed"] and nodes["n1"]["resumed"] and not nodes["n2"]["resumed"]
    assert nodes["n2"]["setup"]["exit_code"] == 0 and doc["consistent"]


def test_per_node_timeout_and_ctrl_c_leave_the_node_resumable(cluster: Any, kit: dict[str, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    slow = _slow_git(tmp_path / "slowbin")
    with monkeypatch.context() as m:
        m.setenv("PATH", f"{slow}{os.pathsep}{os.environ['PATH']}")
        cluster.add_node(**_node_args("n2"))
    cluster.wait_for_nodes()
    args = fleet_args(cluster, kit, tmp_path, "--no-smoke")
    short = [a if a != "300" else "6" for a in args]                 # --timeout 6: n2's slow git cannot make it
    timed = cli(*short)
    nodes = by_name(receipt(tmp_path))
    assert timed.returncode == 1 and nodes["n2"]["status"] == "timeout", timed.stdout + timed.stderr
    assert "killed after the node's 6 s" in nodes["n2"]["detail"]
    assert nodes["n0"]["status"] == nodes["n1"]["status"] == "installed"

    # Ctrl-C while n2 installs: its task is cancelled, its children die, the receipt says cancelled
    proc = subprocess.Popen([sys.executable, "-m", "october.installer.october_setup", *args], cwd=PROJECT_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    seen = "n2: install on"
    buf = ""
    assert proc.stdout is not None
    while seen not in buf and time.monotonic() < deadline:
        buf += proc.stdout.readline()
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out = buf + proc.communicate(timeout=120)[0]
    nodes = by_name(receipt(tmp_path))
    assert proc.returncode == 130, out
    assert nodes["n2"]["status"] == "cancelled" and nodes["n0"]["resumed"] and nodes["n1"]["resumed"]

    # nothing left holding n2's stack: a re-run finishes it
    (slow / "on").unlink()
    resumed = cli(*args)
    nodes = by_name(receipt(tmp_path))
    assert all(n["status"] == "installed" for n in nodes.values()), resumed.stdout + resumed.stderr
