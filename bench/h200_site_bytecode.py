"""Benchmark (not a test): the env step's ``import torch`` under this run's pycache prefix, with and without
the site torch's own bytecode offered to it (:mod:`october.installer.pyenv.sitebytecode`).

Each round, in one run (the stack-env probe runs ``python -X pycache_prefix=NEW -I``; a new prefix each time):

  fresh prefix   nothing in it: Python compiles every torch module again (and writes it there)
  seeded         the site's compiled torch and standard-library modules linked into it first (the seeding timed too)
  beside source  no prefix: the bytecode beside the sources (what a plain ``import torch`` runs; -B, so the
                 bench never writes bytecode into the site it measures)

    python bench/h200_site_bytecode.py [--python /opt/torch/.venv/bin/python] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from october.installer.pyenv.sitebytecode import roots, seed  # noqa: E402


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--python", default="/opt/torch/.venv/bin/python")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    py = args.python
    init, tag, stdlib = subprocess.run([py, "-I", "-c", "import importlib.util as u, sys, sysconfig; print(u.find_spec("
                                        "'torch').origin); print(sys.implementation.cache_tag); "
                                        "print(sysconfig.get_path('stdlib'))"],
                                       capture_output=True, text=True, check=True).stdout.split()
    rows: dict[str, list[float]] = {"fresh prefix": [], "seeded": [], "beside source": []}
    seeding: list[float] = []
    work = Path(tempfile.mkdtemp(prefix="october-bytecode-"))
    try:
        for i in range(args.rounds):
            rows["fresh prefix"].append(timed([py, "-X", f"pycache_prefix={work}/fresh{i}", "-I", "-c", "import torch"]))
            start = time.perf_counter()
            linked = sum(seed(roots(Path(init), stdlib), tag, work / f"seeded{i}", work / "no-stack"))
            seeding.append(time.perf_counter() - start)
            rows["seeded"].append(seeding[-1] + timed(
                [py, "-X", f"pycache_prefix={work}/seeded{i}", "-I", "-c", "import torch"]))
            rows["beside source"].append(timed([py, "-I", "-B", "-c", "import torch"]))   # -B: writes nothing there
        # where the seeded import's modules came from: the linked bytecode, or compiled from source
        seed(roots(Path(init), stdlib), tag, work / "coverage", work / "no-stack")
        said = subprocess.run([py, "-v", "-X", f"pycache_prefix={work}/coverage", "-I", "-c", "import torch"],
                              capture_output=True, text=True, check=True).stderr.splitlines()
        loaded = [ln for ln in said if ln.startswith("# code object from ")]
        hits = sum(1 for ln in loaded if ln.endswith(".pyc'"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{py}: torch at {Path(init).parent}, standard library {stdlib}; {linked} compiled modules linked, in "
          f"{statistics.median(seeding):.3f} s (median; counted in 'seeded')")
    print(f"a newly seeded import loaded {len(loaded)} modules from files: {hits} from the site's bytecode, "
          f"{len(loaded) - hits} compiled from source (no bytecode beside them, or stale)")
    base = statistics.median(rows["fresh prefix"])
    for name, times in rows.items():
        med = statistics.median(times)
        print(f"{name:<14} median {med:6.2f} s  ({', '.join(f'{t:.2f}' for t in times)})  fresh/this = {base / med:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
