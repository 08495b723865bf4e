"""Benchmark (not a test): cold setup, no-op re-run, and a second stack sharing the cache.

Runs ``october_setup`` as a user would (a subprocess of this interpreter) on the offline
fixture world from tests/fixtures/world.py, and prints the three wall times and their ratios,
all measured in one run.  To model what makes a real cold setup slow (downloads), the wheels
are served from a loopback find-links server throttled to ``--link-mbps``, and the torch
stand-in carries ``--torch-mb`` of incompressible payload (the real cu128 torch wheel is
~900 MB).  Fork clones come from local bare repos (git over file://, not throttled).

    env -u PYTHONDONTWRITEBYTECODE uv run python bench/setup_bench.py [--link-mbps 400] [--torch-mb 64]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.findlinks_server import serve_find_links  # noqa: E402
from tests.fixtures.wheels import build_wheel  # noqa: E402
from tests.fixtures.world import make_world  # noqa: E402


def timed_setup(stack: Path, recipe: Path, cache: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe", str(recipe),
                    "--cache-dir", str(cache), "--quiet"], cwd=ROOT, check=True)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    ap.add_argument("--link-mbps", type=float, default=400.0, help="simulated download link, Mbit/s")
    ap.add_argument("--torch-mb", type=int, default=64, help="payload of the torch stand-in wheel, MB")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="october-bench-"))
    try:
        world = make_world(work / "world")
        build_wheel(world.wheels, "torch", "2.10.0+fixture",
                    {"torch/__init__.py": '__version__ = "2.10.0+fixture"\n',
                     "torch/lib/payload.bin": os.urandom(args.torch_mb << 20)})
        with serve_find_links(world.wheels, rate=args.link_mbps * 1e6 / 8) as links:
            text = world.recipe.read_text().replace('find_links = ["wheels"]', f'find_links = ["{links.url}"]')
            world.recipe.write_text(text)
            cache = work / "cache"
            cold = timed_setup(work / "stack1", world.recipe, cache)
            noop = timed_setup(work / "stack1", world.recipe, cache)
            second = timed_setup(work / "stack2", world.recipe, cache)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"world: torch stand-in {args.torch_mb} MB over a {args.link_mbps:.0f} Mbit/s loopback link; 2 forks, 1 submodule")
    print(f"cold setup         {cold:8.3f} s")
    print(f"no-op re-run       {noop:8.3f} s   cold/no-op   = {cold / noop:6.1f}x")
    print(f"second stack       {second:8.3f} s   cold/second  = {cold / second:6.1f}x")
    ok = noop < 1.0 and cold / second >= 3.0
    print("goals (no-op < 1 s, second stack >= 3x faster than cold):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
