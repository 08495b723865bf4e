"""Benchmark (not a test): the wheel step on the real vLLM base wheels, against a plain-read anchor.

For each recipe's [wheel] (vLLM 0.18.0 for ``current``, 0.24.0 for ``20260702``), in one run:

* ``step cold``    the wheel step (download from the recipe URL into an empty cache, verify, place);
* ``step cached``  the wheel step again on a new stack with that cache (re-hash the cached file, verify, place);
* ``verify``       :func:`october.installer.wheels.verify.verify_wheel` alone (every check, one pass over the members);
* ``anchor``       one plain pass that decompresses every member and sha256-hashes it (zipfile + hashlib).

``verify`` and ``anchor`` run interleaved ``--repeat`` times, alternating which goes first; the
best of each and the median of the paired ratios are printed (the machine is shared).  The goal is
verify <= 1.2x anchor.  The recipe's forks are left out (source equivalence needs the fork's git
history, not the wheel).

    uv run python bench/wheel_bench.py [--recipes current 20260702] [--repeat 3] [--offline]

``--offline`` skips the cold download and takes the wheels from the real-tier cache
(``$OCTOBER_REAL_CACHE`` or ``~/.cache/october-real-tier``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from october.installer.core.hashing import CHUNK  # noqa: E402
from october.installer.core.paths import StackPaths  # noqa: E402
from october.installer.core.runner import Runner  # noqa: E402
from october.installer.engine import SetupOptions, SilentReporter, StepContext  # noqa: E402
from october.installer.recipe import Recipe, load_recipe  # noqa: E402
from october.installer.steps.wheel import WheelStep, expectation  # noqa: E402
from october.installer.wheels.tags import probe_python, supported_tags  # noqa: E402
from october.installer.wheels.verify import verify_wheel  # noqa: E402


def anchor(path: Path) -> int:
    """Decompress and sha256 every member once; return the bytes read."""
    total = 0
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            h = hashlib.sha256()
            with zf.open(info) as fh:
                while chunk := fh.read(CHUNK):
                    h.update(chunk)
                    total += len(chunk)
    return total


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def step_run(work: Path, recipe: Recipe, cache: Path, label: str) -> tuple[float, dict[str, Any]]:
    paths = StackPaths(work / label)
    paths.python.parent.mkdir(parents=True, exist_ok=True)
    paths.python.symlink_to(sys.executable)
    ctx = StepContext(options=SetupOptions(stack=paths.root, recipe=recipe, cache_dir=cache), paths=paths,
                      runner=Runner(paths.logs), ui=SilentReporter())
    seconds, out = timed(lambda: WheelStep().run(ctx).to_json())
    return seconds, out


def real_cache() -> Path:
    return Path(os.environ.get("OCTOBER_REAL_CACHE") or Path.home() / ".cache" / "october-real-tier")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--recipes", nargs="+", default=["current", "20260702"])
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--offline", action="store_true", help="no cold download: use the real-tier cache")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="october-wheel-bench-"))
    runner = Runner(work / "probe-logs")
    facts = probe_python(runner, Path(sys.executable), step="wheel")
    tags = supported_tags(facts)
    rows = []
    try:
        for name in args.recipes:
            recipe = dataclasses.replace(load_recipe(name), forks=())
            assert recipe.wheel is not None
            cold_s: float | None = None
            if args.offline:
                cache = real_cache()
            else:
                cache = work / f"cache-{name}"
                cold_s, out = step_run(work, recipe, cache, f"{name}-cold")
            cached_s, out = step_run(work, recipe, cache, f"{name}-cached")
            path = Path(out["path"])
            expect = expectation(recipe, tags, facts)
            vs: list[float] = []
            anchors: list[float] = []
            rereads = nbytes = 0
            for i in range(args.repeat):           # interleaved, alternating which goes first
                for which in (("verify", "anchor") if i % 2 == 0 else ("anchor", "verify")):
                    if which == "verify":
                        t, report = timed(lambda: verify_wheel(path, expect))
                        vs.append(t)
                        rereads = report.rereads
                    else:
                        t, nbytes = timed(lambda: anchor(path))
                        anchors.append(t)
            rows.append((name, recipe.wheel.filename, path.stat().st_size, nbytes, cold_s, cached_s, min(vs),
                         min(anchors), rereads, statistics.median(v / a for v, a in zip(vs, anchors))))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, best of {args.repeat} for verify/anchor")
    print(f"{'recipe':10} {'wheel MB':>8} {'unzipped MB':>11} {'step cold':>9} {'step cached':>11} "
          f"{'verify':>7} {'anchor':>7} {'best/best':>9} {'median ratio':>12} {'ELF re-reads':>12}")
    for name, _fn, size, nbytes, cold_s, cached_s, v, a, rereads, med in rows:
        cold = f"{cold_s:8.2f}s" if cold_s is not None else "  offline"
        print(f"{name:10} {size / 1e6:8.0f} {nbytes / 1e6:11.0f} {cold} {cached_s:10.2f}s "
              f"{v:6.2f}s {a:6.2f}s {v / a:8.2f}x {med:11.2f}x {rereads:12d}")
    worst = max(row[6] / row[7] for row in rows)
    print(f"goal verify <= 1.2x anchor: {'met' if worst <= 1.2 else 'NOT met'} (worst {worst:.2f}x)")
    return 0 if worst <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
