"""Benchmark (not a test): the real FlashInfer-only stack on this CPU machine, cold and again as a
second stack from the same cache (issue 20 item 2: the second stack at least 10x faster than the first).

The stack is tests/test_verify_real.py's: the shipped flashinfer-pr3812 recipe on this machine's torch
(``--system-python`` = this interpreter), the real PR #3812 fork with its cccl submodule from the real
fork mirror (../shared/real-forks, read through git's insteadOf as the H200 run reads GitHub), the real
editable install with its real build backend, PyPI for the supplied requirements, no JIT modules (no
nvcc here).  Prints each run's wall time, its steps (from STACK/receipts/setup.json), the no-op
re-runs of both stacks, the ratio cold/second measured in this run, and whether `current verify`
passes on both stacks.

    uv run --group test python bench/real_second_stack.py [--keep DIR] [--noops 3]
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

from tests.conftest import real_forks_dir  # noqa: E402
from tests.fixtures.realstack import SKIP_PREFLIGHT, git_env, here_recipe, unpack_mirror  # noqa: E402

SECOND_GOAL_X = 10.0
NOOP_GOAL_S = 0.5


def setup(stack: Path, recipe: Path, cache: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe", str(recipe),
                           "--system-python", sys.executable, "--cache-dir", str(cache), "--skip-preflight",
                           SKIP_PREFLIGHT, "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"october_setup {stack} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return wall


def steps(stack: Path) -> str:
    data = json.loads((stack / "receipts" / "setup.json").read_text())
    return ", ".join(f"{s['name']} {s['seconds']:.2f}" for s in data["steps"] if s["status"] == "ran")


def verify(stack: Path) -> int:
    return subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=ROOT,
                          capture_output=True, text=True).returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    ap.add_argument("--noops", type=int, default=3, help="no-op re-runs of each stack (the best counts)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="october-real-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(git_env(unpack_mirror(real_forks_dir(), work / "mirror")), PYTHONDONTWRITEBYTECODE="1")
    recipe = here_recipe(work)
    cache = work / "cache"
    try:
        cold = setup(work / "stack1", recipe, cache, env)
        cold_steps = steps(work / "stack1")
        noop1 = [setup(work / "stack1", recipe, cache, env) for _ in range(args.noops)]
        second = setup(work / "stack2", recipe, cache, env)
        second_steps = steps(work / "stack2")
        noop2 = [setup(work / "stack2", recipe, cache, env) for _ in range(args.noops)]
        verified = (verify(work / "stack1"), verify(work / "stack2"))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    ratio = cold / second
    print(f"real FlashInfer-only stack, system torch, on {os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f})")
    print(f"cold setup     {cold:7.2f} s   ({cold_steps})")
    print(f"second stack   {second:7.2f} s   ({second_steps})")
    print(f"no-op stack1   {min(noop1):7.3f} s   (all: {', '.join(f'{n:.3f}' for n in noop1)})")
    print(f"no-op stack2   {min(noop2):7.3f} s   (all: {', '.join(f'{n:.3f}' for n in noop2)})")
    print(f"current verify exit codes: stack1 {verified[0]}, stack2 {verified[1]}")
    ok_second, ok_noop = ratio >= SECOND_GOAL_X, max(min(noop1), min(noop2)) < NOOP_GOAL_S
    print(f"RATIO cold/second = {ratio:.1f}x; goal: second stack >= {SECOND_GOAL_X:.0f}x faster: "
          f"{'met' if ok_second else 'NOT met'}; no-op < {NOOP_GOAL_S} s: {'met' if ok_noop else 'NOT met'}")
    return 0 if ok_second and ok_noop and verified == (0, 0) else 1


if __name__ == "__main__":
    raise SystemExit(main())
