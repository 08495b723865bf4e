"""Benchmark (not a test): `october_setup fleet` wall time on 1, 2 and 4 local Ray nodes against
the single-node time, all in one run.

Default (``--world kernel``): the kernel-level fixture of tests/fixtures/kernel_kit.py (the FlashInfer
stand-in as the fork, this interpreter's torch as the system torch), so every node runs what a real
node runs: `october_setup STACK --recipe R --kit KIT --locked` (preflight, fetch, env, install, jit,
lock), then `current smoke` at the kernel level.  The single-node time is the same two commands on
one stack with a cold cache.  The fleet's nodes share one cache directory, so the first node
installs alone and the others restore its JIT modules (the recommended set-up: one JIT build).  On
a CPU the smoke runs every check but the CUDA-graph one (skipped), so no node passes; the bench
reports the verdicts and times all the same.  ``--world plain`` is the fixture world of
tests/fixtures/world.py with ``--no-smoke`` (no fork to smoke, no JIT; per-node caches).

Each fleet size gets a fresh ``ray.cluster_utils.Cluster`` (real raylets, ``--num-cpus 1`` each, all
on this machine) and fresh stacks; cluster start-up is timed apart from the fleet command.
``--ship-kit`` sends the kit through the object store instead of the shared path.  Nodes of one
machine share its cores: the fleet numbers here measure the fleet layer's overhead and the
machine's contention, not a cluster's scaling (docs/fleet.md works out a 64-node rollout on paper).

    uv run python bench/fleet_bench.py [--sizes 1,2,4] [--world kernel|plain] [--ship-kit] [--torch-mb 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.kernel_kit import SKIP_PREFLIGHT, make_kernel_world, setup_args  # noqa: E402
from tests.fixtures.wheels import build_wheel  # noqa: E402
from tests.fixtures.world import make_world  # noqa: E402
from tests.test_kit import _recipe_copy  # noqa: E402


def run(*args: str, smoke: bool = False) -> float:
    start = time.perf_counter()
    argv = ["-c", "from october.installer.cli.main import current_app; current_app()"] if smoke else ["-m", "october.installer.october_setup"]
    done = subprocess.run([sys.executable, *argv, *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        sys.exit(f"{'current' if smoke else 'october_setup'} {' '.join(args[:2])} failed ({done.returncode}):\n"
                 f"{done.stdout}{done.stderr}")
    return time.perf_counter() - start


def make_recipe(tmp: Path, world: str, torch_mb: int) -> tuple[Path, list[str], list[str]]:
    """The recipe; extra october_setup arguments (kit, single node); extra kit arguments."""
    if world == "kernel":
        return make_kernel_world(tmp / "world").recipe, setup_args(), ["--system-torch"]
    w = make_world(tmp / "world")
    if torch_mb:
        for old in w.wheels.glob("torch-*.whl"):
            old.unlink()
        build_wheel(w.wheels, "torch", "2.10.0+fixture", {"torch/__init__.py": '__version__ = "2.10.0+fixture"\n',
                                                          "torch/payload.bin": os.urandom(torch_mb << 20)})
    return _recipe_copy(w, tmp / "recipe"), [], []


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="1,2,4")
    ap.add_argument("--world", choices=("kernel", "plain"), default="kernel")
    ap.add_argument("--ship-kit", action="store_true")
    ap.add_argument("--torch-mb", type=int, default=0,
                    help="--world plain: incompressible payload in the torch stand-in (kit size)")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    from ray.cluster_utils import Cluster

    tmp = Path(tempfile.mkdtemp(prefix="october-fleet-bench-"))
    kernel = a.world == "kernel"
    try:
        recipe, extra, kit_extra = make_recipe(tmp, a.world, a.torch_mb)
        kit_s = run("kit", "--recipe", str(recipe), str(tmp / "kit"), "--cache-dir", str(tmp / "cache-kit"), "-q",
                    *kit_extra)
        run(str(tmp / "first"), "--recipe", str(recipe), "--kit", str(tmp / "kit"),      # the lock every node uses
            "--cache-dir", str(tmp / "cache-first"), "-q", *extra)
        lock = tmp / "first" / "pylock.toml"
        single = run(str(tmp / "single"), "--recipe", str(recipe), "--kit", str(tmp / "kit"), "--locked",
                     "--lock-file", str(lock), "--cache-dir", str(tmp / "cache-single"), "-q", *extra)
        single_smoke = run("smoke", "--install", str(tmp / "single"), "--format", "fp16", "--output",
                           str(tmp / "single-smoke"), "--recipe", str(recipe), smoke=True) if kernel else 0.0
        kit_mb = sum(p.stat().st_size for p in (tmp / "kit").rglob("*") if p.is_file()) / 1e6
        print(f"world {a.world}: kit {kit_mb:.1f} MB, made in {kit_s:.1f} s; single node (cold cache): "
              f"october_setup --kit --locked {single:.2f} s" + (f" + current smoke {single_smoke:.2f} s" if kernel else ""))
        single += single_smoke
        print(f"{'nodes':>5} {'cluster up s':>12} {'fleet s':>8} {'fleet/single':>12} {'node setup s (max)':>18} "
              f"{'node smoke s (max)':>18} {'overhead s':>10}  verdicts   (overhead: wall - the nodes' critical path)")
        for n in [int(x) for x in a.sizes.split(",")]:
            t0 = time.perf_counter()
            # each node its own OCTOBER_LOCK_DIR (the smoke's GPU lock lives in /tmp, per machine on a real
            # cluster); the raylets and their workers inherit the environment they start with
            os.environ["OCTOBER_LOCK_DIR"] = str(tmp / f"locks{n}-n0")
            c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                              "labels": {"october-node": "n0"}})
            for i in range(1, n):
                os.environ["OCTOBER_LOCK_DIR"] = str(tmp / f"locks{n}-n{i}")
                c.add_node(num_cpus=1, labels={"october-node": f"n{i}"})
            os.environ.pop("OCTOBER_LOCK_DIR")
            c.wait_for_nodes()
            up = time.perf_counter() - t0
            try:
                out = tmp / f"fleet{n}"
                args = ["fleet", "--address", c.address, "--recipe", str(recipe), "--kit", str(tmp / "kit"),
                        "--lock-file", str(lock), "--receipt", str(out / "fleet.json"), "-q"]
                if kernel:
                    args += ["--cache-dir", str(out / "shared-cache"), "--system-python", sys.executable,
                             *(f"--setup-arg=--skip-preflight={s}" for s in SKIP_PREFLIGHT)]
                else:
                    args += ["--cache-dir", str(out / "cache-{name}"), "--no-smoke"]
                if a.ship_kit:
                    args += ["--ship-kit", "--ship-dir", str(out / "shipped")]
                wall = run(*args, str(out / "stacks" / "{name}"))
                doc = json.loads((out / "fleet.json").read_text())
                bad = [x["name"] for x in doc["nodes"] if not x["setup"] or x["setup"]["exit_code"] != 0
                       or (kernel and (x["smoke"] or {}).get("level") != "kernel")]
                if bad or len(doc["nodes"]) != n:
                    sys.exit(f"fleet of {n}: nodes not installed or not smoked: {bad} ({doc['reasons']})")
                setup_max = max(x["setup"]["seconds"] for x in doc["nodes"])
                smoke_max = max((x["smoke"] or {}).get("seconds") or 0.0 for x in doc["nodes"])
                secs = [x["seconds"] for x in doc["nodes"]]       # plan order: with a seed, the first ran alone
                critical = secs[0] + max(secs[1:], default=0.0) if doc["options"].get("seed") else max(secs)
                verdicts = ",".join(sorted({x["status"] for x in doc["nodes"]}))
                print(f"{n:>5} {up:>12.1f} {wall:>8.2f} {wall / single:>12.2f} {setup_max:>18.2f} {smoke_max:>18.2f} "
                      f"{wall - critical:>10.2f}  {verdicts}; fleet passed={doc['passed']}")
            finally:
                c.shutdown()
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
