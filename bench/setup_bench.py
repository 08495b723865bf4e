"""Benchmark (not a test): cold setup, no-op re-run, and a second stack sharing the cache.

Runs ``october_setup`` as a user would (a subprocess of this interpreter) on the offline
fixture world from tests/fixtures/world.py and prints the three wall times and their ratios,
all measured in one run.

    uv run python bench/setup_bench.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.world import make_world  # noqa: E402


def timed_setup(stack: Path, recipe: Path, cache: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "installer.october_setup", str(stack), "--recipe", str(recipe),
                    "--cache-dir", str(cache), "--quiet"], cwd=ROOT, check=True)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="october-bench-"))
    try:
        world = make_world(work / "world")
        cache = work / "cache"
        cold = timed_setup(work / "stack1", world.recipe, cache)
        noop = timed_setup(work / "stack1", world.recipe, cache)
        second = timed_setup(work / "stack2", world.recipe, cache)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"cold setup         {cold:8.3f} s")
    print(f"no-op re-run       {noop:8.3f} s   cold/no-op   = {cold / noop:6.1f}x")
    print(f"second stack       {second:8.3f} s   cold/second  = {cold / second:6.1f}x")
    ok = noop < 1.0 and cold / second >= 3.0
    print("goals (no-op < 1 s, second stack >= 3x faster than cold):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
