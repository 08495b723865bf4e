"""Benchmark (not a test): this checkout's tool against an earlier commit's, on one fixture world, interleaved.

Second stacks and no-op re-runs on a quiet laptop move by 10-20% from one run to the next (disk writeback, other
processes); a change worth a few percent shows only when the two tools take turns in the same minutes.  The
earlier tool is a git worktree of ``--base`` (its own ``october`` package, run from its own folder with this
checkout's venv); each tool gets its own cold stack in the shared cache (the cache key names the tool's code, so
each takes its own entry), then ``--rounds`` rounds of: a new second stack and a no-op re-run of its cold stack,
base then new.  Prints every wall time, the medians and the ratio base/new of each, measured in this one run.

    uv run --group test python bench/fixture_ab.py --base b8de4a5 [--rounds 15] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.setup_bench import bench_world, served_from  # noqa: E402
from tests.fixtures.findlinks_server import serve_find_links  # noqa: E402


def run(tree: Path, stack: Path, recipe: Path, cache: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe", str(recipe),
                    "--cache-dir", str(cache), "--quiet"], cwd=tree, check=True,
                   env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--base", required=True, help="the earlier commit (any git revision of this repository)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--torch-mb", type=int, default=64, help="payload of the torch stand-in wheel, MB")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="october-ab-"))
    base_tree = work / "base-tree"
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach", str(base_tree), args.base],
                       check=True)
        trees = {"base": base_tree, "new": ROOT}
        world = bench_world(work / "world", args.torch_mb)
        with serve_find_links(world.wheels, ranges=True) as links:      # not throttled: only cold runs download
            recipe = served_from(world, links.url)
            cache = work / "cache"
            cold = {name: run(tree, work / f"{name}-cold", recipe, cache) for name, tree in trees.items()}
            for name, tree in trees.items():       # the first of each: bytecode written, the entry's first copy,
                run(tree, work / f"{name}-warm", recipe, cache)     # the cold stack's first no-op (it settles)
                run(tree, work / f"{name}-cold", recipe, cache)
            second: dict[str, list[float]] = {name: [] for name in trees}
            noop: dict[str, list[float]] = {name: [] for name in trees}
            for i in range(args.rounds):
                for name, tree in trees.items():
                    second[name].append(run(tree, work / f"{name}-s{i}", recipe, cache))
                    shutil.rmtree(work / f"{name}-s{i}")
                    noop[name].append(run(tree, work / f"{name}-cold", recipe, cache))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], check=False)
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"base {args.base} against this checkout; {args.rounds} rounds, interleaved; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"cold: base {cold['base']:.2f} s, new {cold['new']:.2f} s")
    for what, times in (("second stack", second), ("no-op re-run", noop)):
        med = {name: statistics.median(v) for name, v in times.items()}
        for name, v in times.items():
            print(f"{what:<13} {name:<5} median {med[name]:.3f} s  min {min(v):.3f} s  all {' '.join(f'{x:.2f}' for x in v)}")
        print(f"{what:<13} base/new = {med['base'] / med['new']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
