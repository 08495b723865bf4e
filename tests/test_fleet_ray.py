"""`october_setup fleet` on a real local multi-node Ray cluster (``ray.cluster_utils.Cluster``:
separate raylet processes, each its own node id, labelled ``october-node=nK``), with a kit made
from the fixture world of tests/test_kit.py.  The fleet CLI runs as a subprocess and connects to
the cluster by its address, as a user's would.

Two fixture kits.  The kernel kit (tests/fixtures/kernel_kit.py) is a stack that promises the kernel
level: its FlashInfer fork is the FlashInfer stand-in in a real git repo, torch is this interpreter's
real torch (``--system-python``), and on each node `current smoke` really runs the kernel checks
against the stack's own installed stand-in and the torch reference oracle.  On a CPU those checks pass
except the CUDA-graph check, which is skipped, so every node's smoke (and the fleet) does not pass,
for that reason alone; with CUDA the same test expects a passing fleet.  The world kit of
tests/test_kit.py (forks that promise no level) covers re-checks, resume, shipping, timeout and
Ctrl-C with ``--no-smoke`` (the receipt then never passes: "installed", not "passed").  A passing
verdict with identical nodes is also covered without Ray in test_fleet_plan.py.

Node n2 of the lost-node test runs with a ``git`` on its PATH that sleeps 4 s before running the
real git while the file slowbin/on exists (a stand-in for a slow network or disk, nothing else), so that
it is still installing when it is killed, interrupted or timed out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from october.installer.core.hashing import sha256_file
from october.installer.core.schemas import validate
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.kernel_kit import SKIP_PREFLIGHT, make_kernel_world, setup_args
from tests.fixtures.world import make_world
from tests.test_kit import _recipe_copy
from tests.test_progress_seen import ANSI, _argv, in_pipe, in_pty, raw_lines, screen_lines

pytestmark = pytest.mark.slow
ray_cluster_utils = pytest.importorskip("ray.cluster_utils")


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "october.installer.october_setup", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _node_args(name: str) -> dict[str, Any]:
    return {"num_cpus": 1, "labels": {"october-node": name}, "resources": {f"fleetnode_{name}": 1},
            "object_store_memory": 80 * 1024 * 1024}


def add_node(c: Any, name: str, **env: str) -> Any:
    """Start node ``name``.  Its processes get their own OCTOBER_LOCK_DIR (the GPU smoke lock's
    directory, /tmp on a real node): nodes of one machine must not share that machine-wide lock."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("OCTOBER_LOCK_DIR", str(c.locks / f"locks-{name}"))
        for k, v in env.items():
            m.setenv(k, v)
        return c.add_node(**_node_args(name))


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as m:
        m.setenv("OCTOBER_LOCK_DIR", str(tmp_path / "locks-n0"))
        c = ray_cluster_utils.Cluster(initialize_head=True,
                                      head_node_args={**_node_args("n0"), "include_dashboard": False})
    c.locks = tmp_path
    try:
        add_node(c, "n1")
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


@pytest.fixture()
def kernel_kit(tmp_path: Path) -> dict[str, Any]:
    """The kernel-level world, its kit (no torch in it: --system-torch), and the lock of a single-node
    install from that kit with this interpreter's torch (its own cache: the fleet builds its JIT anew)."""
    world = make_kernel_world(tmp_path / "kworld")
    kit = tmp_path / "kkit"
    made = cli("kit", "--recipe", str(world.recipe), str(kit), "--cache-dir", str(tmp_path / "cache-kit"),
               "--system-torch", "-q")
    assert made.returncode == 0, made.stderr
    single = cli(str(tmp_path / "single"), "--recipe", str(world.recipe), "--kit", str(kit),
                 "--cache-dir", str(tmp_path / "cache-single"), *setup_args(), "-q")
    assert single.returncode == 0, single.stderr
    return {"world": world, "recipe": world.recipe, "kit": kit, "lock": tmp_path / "single" / "pylock.toml"}


def kernel_fleet_args(c: Any, k: dict[str, Any], tmp: Path, *extra: str) -> list[str]:
    """One cache every node shares (so the first node builds the JIT and the others restore it)."""
    return ["fleet", "--address", c.address, "--recipe", str(k["recipe"]), "--kit", str(k["kit"]),
            "--lock-file", str(k["lock"]), "--receipt", str(tmp / "fleet.json"), "--cache-dir", str(tmp / "shared-cache"),
            "--timeout", "300", "--system-python", sys.executable,
            *(f"--setup-arg=--skip-preflight={c}" for c in SKIP_PREFLIGHT), *extra, str(tmp / "stacks" / "{name}")]


def fleet_args(c: Any, k: dict[str, Path], tmp: Path, *extra: str, stack: str | None = None) -> list[str]:
    return ["fleet", "--address", c.address, "--recipe", str(k["recipe"]), "--kit", str(k["kit"]),
            "--lock-file", str(k["lock"]), "--receipt", str(tmp / "fleet.json"), "--cache-dir", str(tmp / "cache-{name}"),
            "--timeout", "300", *extra, stack or str(tmp / "stacks" / "{name}")]


def receipt(tmp: Path, done: subprocess.CompletedProcess[str] | None = None) -> dict[str, Any]:
    path = tmp / "fleet.json"
    assert path.is_file(), (f"no fleet receipt (exit {done.returncode}): {done.stdout}{done.stderr}"
                            if done is not None else "no fleet receipt")
    doc = json.loads(path.read_text())
    validate("fleet", doc)
    return doc


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in doc["nodes"]}


CUDA = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True,
                      text=True).stdout.strip().endswith("True")
KERNEL_CHECKS = ("physical_k16v8", "calibrated_scales", "mixed_prefill", "decode_graphs", "clean_memory",
                 "deterministic_generation")


def test_a_kernel_level_fleet_smokes_every_node_and_names_a_node_with_its_own_jit_build(
        cluster: Any, kernel_kit: dict[str, Any], tmp_path: Path) -> None:
    add_node(cluster, "n2")
    cluster.wait_for_nodes()
    done = cli(*kernel_fleet_args(cluster, kernel_kit, tmp_path))
    doc = receipt(tmp_path, done)
    nodes = by_name(doc)
    assert sorted(nodes) == ["n0", "n1", "n2"], done.stdout + done.stderr
    stacks = tmp_path / "stacks"
    for name, n in nodes.items():
        smoke = n["smoke"]
        assert smoke is not None and n["setup"]["exit_code"] == 0, json.dumps(n, indent=1)
        # the smoke ran at the level the stack promises, on the stack's own receipt of what it is
        # (on a CPU the CUDA-graph check is skipped, so the receipt proves nothing: it never over-claims)
        assert smoke["level"] == "kernel" and smoke["proves"] == ("stack" if CUDA else "nothing"), json.dumps(n, indent=1)
        sm = json.loads((stacks / name / "receipts" / "smoke" / "receipt.json").read_text())
        assert sm["promised_level"] == "kernel" and sm["stack"]["forks"] == {"flashinfer": kernel_kit["world"].commit}
        assert sm["stack"]["lock_sha256"] == n["lock_sha256"] == sha256_file(stacks / name / "pylock.toml")
        physical = next(c for c in sm["checks"] if c["name"] == "physical_k16v8")["measured"]
        assert physical["jit_record"] == "sha256 equals the jit step's record"    # the node's own JIT modules ran
        assert sm["jit_workspace"]["unchanged"] is True and sm["jit_workspace"]["modules_before"] == 2
        # and the flashinfer it imported is the fork october_setup installed into that stack
        where = subprocess.run([str(stacks / name / "env" / "bin" / "python"), "-c",
                                "import flashinfer; print(flashinfer.__file__)"], capture_output=True, text=True,
                               env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert where.stdout.strip().startswith(str(stacks / name / "src" / "flashinfer")), where.stderr[-800:]
        if CUDA:
            assert n["status"] == "passed" and smoke["checks"] == dict.fromkeys(KERNEL_CHECKS, "passed")
        else:       # a CPU runs every check but the CUDA-graph one: the smoke, so the node, did not pass
            assert smoke["device"] == "cpu" and n["status"] == "failed" and smoke["exit_code"] == 1
            assert smoke["checks"] == dict.fromkeys(KERNEL_CHECKS, "passed") | {"decode_graphs": "skipped"}
            assert smoke["reasons"] == [r for r in smoke["reasons"] if r.startswith("changing decode graphs: skipped")]
            assert len(smoke["reasons"]) == 1 and "current smoke exit 1" in n["detail"]
    # identical stacks: one lock, one set of JIT hashes (built once by the first node, restored by the others)
    assert len({n["lock_sha256"] for n in nodes.values()}) == 1
    jits = {json.dumps(n["jit"], sort_keys=True) for n in nodes.values()}
    assert len(jits) == 1 and len(nodes["n0"]["jit"]) == 2 and doc["consistent"] is True
    assert len({n["node_id"] for n in nodes.values()}) == 3                     # three real Ray nodes
    live = {n["NodeID"]: n["Labels"]["october-node"] for n in cluster_nodes(cluster)}
    assert {n["node_id"]: name for name, n in nodes.items()} == live            # each ran where it was pinned
    sources = {name: sorted(m["source"] for m in json.loads((stacks / name / ".state" / "jit.json").read_text())
                            ["outputs"]["modules"]) for name in nodes}
    assert sorted(sources.values()) == [["built", "built"], ["shared-cache", "shared-cache"],
                                        ["shared-cache", "shared-cache"]], sources
    assert doc["options"]["seed"] is True
    assert doc["passed"] is CUDA and done.returncode == (0 if CUDA else 1)
    if not CUDA:
        assert [r.split(":")[0] for r in doc["reasons"]] == ["n0", "n1", "n2"], doc["reasons"]

    # n1's JIT modules built again on their own (its workspace and the shared entries gone, n1 alone):
    # a rebuild's bytes differ, so n1's lock and JIT hashes differ from the fleet's, and it is named
    shutil.rmtree(stacks / "n1" / "jit")
    shutil.rmtree(tmp_path / "shared-cache" / "jit")
    (tmp_path / "fleet.json").unlink()                    # no earlier receipt: n1 runs its setup again
    alone = cli(*kernel_fleet_args(cluster, kernel_kit, tmp_path, "--no-smoke", "--node", "n1"))
    assert by_name(receipt(tmp_path))["n1"]["status"] == "installed", alone.stdout + alone.stderr
    again = cli(*kernel_fleet_args(cluster, kernel_kit, tmp_path, "--no-smoke"))
    doc = receipt(tmp_path)
    nodes = by_name(doc)
    assert again.returncode == 1 and doc["passed"] is False and doc["consistent"] is False, again.stdout
    assert nodes["n1"]["resumed"] and not nodes["n0"]["resumed"]        # n1 re-checked: its stack is as it was
    assert [n["name"] for n in doc["nodes"] if n["differs"]] == ["n1"], json.dumps(doc["reasons"], indent=1)
    what = nodes["n1"]["differs"]
    assert what[0].startswith("lock sha256 " + sha256_file(stacks / "n1" / "pylock.toml"))
    assert what[1].startswith("JIT modules for arch None differ from the fleet's in batch_decode_")
    assert any(r.startswith("n1 differs: lock sha256") for r in doc["reasons"]) and "n1 differs" in again.stdout


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
                                                                   tmp_path: Path) -> None:
    slow = _slow_git(tmp_path / "slowbin")
    n2 = add_node(cluster, "n2", PATH=f"{slow}{os.pathsep}{os.environ['PATH']}")   # only n2 sees the slow git
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
    assert nodes["n0"]["status"] == nodes["n1"]["status"] == "installed", json.dumps(nodes, indent=1) + out
    assert not (tmp_path / "stacks" / "n2" / "receipts" / "setup.json").exists()   # really stopped mid-install

    add_node(cluster, "n2")             # the node is back (a new Ray node id, the same name)
    cluster.wait_for_nodes()
    again = cli(*fleet_args(cluster, kit, tmp_path, "--no-smoke"))
    doc = receipt(tmp_path)
    nodes = by_name(doc)
    assert all(n["status"] == "installed" for n in nodes.values()), \
        json.dumps(nodes, indent=1) + again.stdout + again.stderr
    assert nodes["n0"]["resumed"] and nodes["n1"]["resumed"] and not nodes["n2"]["resumed"]
    assert nodes["n2"]["setup"]["exit_code"] == 0 and doc["consistent"]
    assert len({n["lock_sha256"] for n in nodes.values()}) == 1

    # a finished node is verified on every run (the scenario hunt: its env removed or its lock changed since,
    # and the re-run said "installed", resumed, consistent): it fails, named with what verify says, and the
    # next run installs it again
    lock = tmp_path / "stacks" / "n1" / "pylock.toml"
    lock.write_text(lock.read_text() + "\n# planted\n")
    shutil.rmtree(tmp_path / "stacks" / "n2" / "env")
    planted = cli(*fleet_args(cluster, kit, tmp_path, "--no-smoke"))
    doc = receipt(tmp_path)
    nodes = by_name(doc)
    seen = json.dumps(doc["nodes"], indent=1) + planted.stdout + planted.stderr
    assert planted.returncode == 1 and all(n["resumed"] for n in doc["nodes"]), seen
    assert nodes["n0"]["status"] == "installed" and nodes["n1"]["status"] == nodes["n2"]["status"] == "failed", seen
    for name in ("n1", "n2"):
        assert "its stack no longer verifies (current verify exit 13" in nodes[name]["detail"], seen
        assert "this node is installed again" in nodes[name]["detail"], seen
    assert any(r.startswith("n1: failed") for r in doc["reasons"]) and "n2: failed" in planted.stdout
    repaired = cli(*fleet_args(cluster, kit, tmp_path, "--no-smoke"))
    doc = receipt(tmp_path)
    nodes = by_name(doc)
    seen = json.dumps(doc["nodes"], indent=1) + repaired.stdout + repaired.stderr
    assert all(n["status"] == "installed" for n in nodes.values()) and doc["consistent"], seen
    assert nodes["n0"]["resumed"] and not nodes["n1"]["resumed"] and not nodes["n2"]["resumed"], seen
    assert len({n["lock_sha256"] for n in nodes.values()}) == 1, seen
    # another STACK (or cache, interpreter, setup or smoke options) than the receipt's nodes were finished with:
    # nothing is resumed (it was: every node then failed with "no lock at" the new STACK)
    moved = cli(*fleet_args(cluster, kit, tmp_path, "--no-smoke", stack=str(tmp_path / "stacks-new" / "{name}")))
    doc = receipt(tmp_path)
    seen = json.dumps(doc["nodes"], indent=1) + moved.stdout + moved.stderr
    assert moved.returncode == 1 and not any(n["resumed"] for n in doc["nodes"]), seen
    assert all(n["status"] == "installed" for n in doc["nodes"]) and "with other options" in moved.stderr, seen


def test_per_node_timeout_and_ctrl_c_leave_the_node_resumable(cluster: Any, kit: dict[str, Path], tmp_path: Path) -> None:
    slow = _slow_git(tmp_path / "slowbin")
    add_node(cluster, "n2", PATH=f"{slow}{os.pathsep}{os.environ['PATH']}")
    cluster.wait_for_nodes()
    args = fleet_args(cluster, kit, tmp_path, "--no-smoke")
    # --timeout 6 for n2 alone: its slow git cannot make it (the others are left out: on a loaded CI
    # machine their ordinary setup may take longer than 6 s too)
    short = [a if a != "300" else "6" for a in args[:-1]] + ["--node", "n2", args[-1]]
    timed = cli(*short)
    nodes = by_name(receipt(tmp_path))
    assert timed.returncode == 1 and nodes["n2"]["status"] == "timeout", timed.stdout + timed.stderr
    assert "killed after the node's 6 s" in nodes["n2"]["detail"] and sorted(nodes) == ["n2"]

    # Ctrl-C while n2 installs: its task is cancelled, its children die, the receipt says cancelled.
    # SIGINT at its default in the run, as a terminal starts it: a test process started as a background
    # job of a shell without job control (`cmd &` in a script) ignores SIGINT, and the run would inherit it
    proc = subprocess.Popen([sys.executable, "-m", "october.installer.october_setup", *args], cwd=PROJECT_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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
    assert nodes["n2"]["status"] == "cancelled"
    assert {nodes["n0"]["status"], nodes["n1"]["status"]} <= {"installed", "cancelled"}     # as far as they got

    # nothing left holding n2's stack: a re-run finishes it
    (slow / "on").unlink()
    resumed = cli(*args)
    nodes = by_name(receipt(tmp_path))
    assert all(n["status"] == "installed" for n in nodes.values()), resumed.stdout + resumed.stderr


RAY_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+[A-Z]+ \S+:\d+ -- ")   # Ray's own log format
# every line a fleet of two fresh nodes may print in a pipe (--no-smoke): progress, then the verdict
FLEET_PIPE_LINES = (
    re.compile(r"==> fleet: 2 node\(s\): 2 to install"),
    re.compile(r"    shipping the lock"),
    re.compile(r"    n[01]: install on [0-9a-f]{8} \(.+\)"),
    re.compile(r"    n[01]: installed \([12] of 2 node\(s\) done: 0 ok, [12] installed without a smoke, 0 failed\)"),
    re.compile(r"    fleet: 2 node\(s\) in [\d.]+s: 0 ok, 2 installed without a smoke, 0 failed"),
    re.compile(r"  - no smoke ran \(--no-smoke\): .*"),
    re.compile(r"fleet did not pass: 2 node\(s\); receipt: .*fleet\.json"),
)


def test_fleet_progress_on_a_terminal_and_in_a_pipe(cluster: Any, kit: dict[str, Path], tmp_path: Path) -> None:
    """What a user sees of a fleet (issue 19, item 2), as tests/test_progress_seen.py records it for a setup
    and a kit: on a terminal (a real pty) live bars, one per node at its phase and one for the nodes done;
    in a pipe a few plain lines, each one of FLEET_PIPE_LINES; with -v the nodes' phases as lines; with -q
    nothing.  Never Ray's own log lines (its working-dir upload warnings) or raw JSON."""
    cluster.wait_for_nodes()
    seen: dict[str, tuple[int, str]] = {}
    for name, how, extra in (("terminal", in_pty, ()), ("pipe", in_pipe, ()), ("verbose", in_pipe, ("-v",))):
        out = tmp_path / name
        out.mkdir()
        seen[name] = how(_argv(*fleet_args(cluster, kit, out, "--no-smoke", *extra)))
        code, text = seen[name]
        assert code == 1 and all(n["status"] == "installed" for n in receipt(out)["nodes"]), (name, text[-3000:])
        lines = screen_lines(text)
        assert raw_lines(lines) == [] and not any(RAY_LOG_LINE.match(ln) for ln in lines), (name, lines)
        assert "Traceback" not in text and "WARNING" not in text, (name, text[-3000:])

    _, text = seen["terminal"]
    lines = screen_lines(text)
    assert "\x1b[" in text and "==> fleet: 2 node(s): 2 to install" in lines, lines
    bars = [ln for ln in lines if "━" in ln]
    # the nodes done: installed without a smoke (--no-smoke) is not "ok"
    assert any(re.match(r"nodes: 0 ok, 1 installed without a smoke, 0 failed\s+━+.* 1/2", ln) for ln in bars), bars
    assert any(re.match(r"n[01]: setup: [a-z]+\s+━+.* \d/6", ln) for ln in bars), bars       # a node at its step
    assert "n0: install on" in text and "fleet: 2 node(s) in" in text and "fleet did not pass" in text

    _, text = seen["pipe"]
    assert "\x1b[" not in text and "\r" not in text
    odd = [ln for ln in text.splitlines() if not any(p.fullmatch(ln) for p in FLEET_PIPE_LINES)]
    assert odd == [], odd
    assert sum(ln.startswith("    n") for ln in text.splitlines()) == 4          # each node: started, ended

    _, text = seen["verbose"]
    plain = ANSI.sub("", text)
    order = ["preflight", "fetch", "env", "install", "lock", "receipt"]      # the world recipe's steps
    for node in ("n0", "n1"):        # each node's phases, in order (one reported as it ends may come too late)
        steps = re.findall(rf"^      {node}: setup: ([a-z]+) \(\d/6\)$", plain, re.M)
        assert len(steps) >= 3 and steps == order[:len(steps)], (node, plain)

    quiet = in_pipe(_argv(*fleet_args(cluster, kit, tmp_path / "verbose", "--no-smoke", "-q")))
    assert quiet == (1, ""), quiet                       # re-checked, not passed (--no-smoke); nothing said
    assert all(n["resumed"] for n in receipt(tmp_path / "verbose")["nodes"])
