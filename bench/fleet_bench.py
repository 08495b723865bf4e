"""Benchmark (not a test): `october_setup fleet` wall time on 1, 2 and 4 local Ray nodes against
the single-node kit setup time, all in one run.

The fixture world of tests/fixtures/world.py gives the recipe and its kit; the single-node time is
`october_setup STACK --recipe R --kit KIT --locked` with a cold cache.  Each fleet size gets a fresh
``ray.cluster_utils.Cluster`` (real raylets, ``--num-cpus 1`` each, all on this machine) and fresh
stacks; cluster start-up is timed apart from the fleet command.  ``--ship-kit`` sends the kit
through the object store instead of the shared path.  Nodes of one machine share its cores: the
fleet numbers here measure the fleet layer's overhead and the machine's contention, not a cluster's
scaling (docs/fleet.md works out a 64-node rollout on paper).

    uv run python bench/fleet_bench.py [--sizes 1,2,4] [--ship-kit] [--torch-mb 0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.wheels import build_wheel  # noqa: E402
from tests.fixtures.world import make_world  # noqa: E402
from tests.test_kit import _recipe_copy  # noqa: E402


def run(*args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "october.installer.october_setup", *args], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"october_setup {' '.join(args[:2])} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="1,2,4")
    ap.add_argument("--ship-kit", action="store_true")
    ap.add_argument("--torch-mb", type=int, default=0, help="incompressible payload in the torch stand-in (kit size)")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    from ray.cluster_utils import Cluster

    tmp = Path(tempfile.mkdtemp(prefix="october-fleet-bench-"))
    try:
        world = make_world(tmp / "world")
        if a.torch_mb:
            import os
            for old in world.wheels.glob("torch-*.whl"):
                old.unlink()
            build_wheel(world.wheels, "torch", "2.10.0+fixture",
                        {"torch/__init__.py": '__version__ = "2.10.0+fixture"\n',
                         "torch/payload.bin": os.urandom(a.torch_mb << 20)})
        recipe = _recipe_copy(world, tmp / "recipe")
        kit_s = run("kit", "--recipe", str(recipe), str(tmp / "kit"), "--cache-dir", str(tmp / "cache-kit"), "-q")
        first = run(str(tmp / "first"), "--recipe", str(recipe), "--kit", str(tmp / "kit"),
                    "--cache-dir", str(tmp / "cache-first"), "-q")
        lock = tmp / "first" / "pylock.toml"
        single = run(str(tmp / "single"), "--recipe", str(recipe), "--kit", str(tmp / "kit"), "--locked",
                     "--lock-file", str(lock), "--cache-dir", str(tmp / "cache-single"), "-q")
        kit_mb = sum(p.stat().st_size for p in (tmp / "kit").rglob("*") if p.is_file()) / 1e6
        print(f"kit: {kit_mb:.1f} MB, made in {kit_s:.1f} s; single-node --kit --locked setup (cold cache): {single:.2f} s")
        print(f"{'nodes':>5} {'cluster up s':>12} {'fleet s':>8} {'fleet/single':>12} {'node setup s (max)':>18} "
              f"{'overhead s':>10}")
        for n in [int(x) for x in a.sizes.split(",")]:
            t0 = time.perf_counter()
            c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                              "labels": {"october-node": "n0"}})
            for i in range(1, n):
                c.add_node(num_cpus=1, labels={"october-node": f"n{i}"})
            c.wait_for_nodes()
            up = time.perf_counter() - t0
            try:
                out = tmp / f"fleet{n}"
                args = ["fleet", "--address", c.address, "--recipe", str(recipe), "--kit", str(tmp / "kit"),
                        "--lock-file", str(lock), "--receipt", str(out / "fleet.json"), "--cache-dir",
                        str(out / "cache-{name}"), "--no-smoke", "-q", str(out / "stacks" / "{name}")]
                if a.ship_kit:
                    args[1:1] = ["--ship-kit", "--ship-dir", str(out / "shipped")]
                wall = run(*args)
                doc = json.loads((out / "fleet.json").read_text())
                bad = [x["name"] for x in doc["nodes"] if x["status"] != "installed"]
                if bad or len(doc["nodes"]) != n:
                    sys.exit(f"fleet of {n}: nodes not installed: {bad} ({doc['reasons']})")
                node_max = max(x["setup"]["seconds"] for x in doc["nodes"])
                print(f"{n:>5} {up:>12.1f} {wall:>8.2f} {wall / single:>12.2f} {node_max:>18.2f} {wall - node_max:>10.2f}")
            finally:
                c.shutdown()
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
