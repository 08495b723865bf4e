"""Benchmark (not a test): what a new user pays before ``uv run october_setup --help`` prints.

Clones this repository (a git ref, default HEAD) into a fresh directory, points uv at an empty
cache (``UV_CACHE_DIR``), and runs the README's run command with ``--help`` once, timed.  Bytes
downloaded are the machine's non-loopback receive counters (/proc/net/dev) before and after, so
run it on an otherwise quiet machine; the uv cache and the venv sizes are printed beside them.

    uv run python bench/cold_help.py [--ref main] [--keep]
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


def rx_bytes() -> int:
    """Bytes received on every interface but loopback, from /proc/net/dev."""
    total = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() != "lo":
            total += int(rest.split()[0])
    return total


def tree_bytes(path: Path) -> int:
    seen: set[int] = set()
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_size
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--ref", default="HEAD", help="git ref of this repository to clone (default HEAD)")
    ap.add_argument("--keep", action="store_true", help="keep the clone and the cache")
    args = ap.parse_args()
    uv = shutil.which("uv")
    if uv is None:
        print("error: uv not on PATH", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="october-cold-help-"))
    clone, cache = work / "clone", work / "uv-cache"
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", args.ref], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
        env["UV_CACHE_DIR"] = str(cache)
        rx0, t0 = rx_bytes(), time.perf_counter()
        done = subprocess.run([uv, "run", "october_setup", "--help"], cwd=clone, env=env,
                              capture_output=True, text=True)
        seconds, rx = time.perf_counter() - t0, rx_bytes() - rx0
        if done.returncode != 0 or "Usage" not in done.stdout:
            print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
            print(f"error: `uv run october_setup --help` exited {done.returncode}", file=sys.stderr)
            return 1
        rev = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        print(f"ref {args.ref} ({rev}): cold `uv run october_setup --help`")
        print(f"  wall time        {seconds:8.1f} s")
        print(f"  downloaded       {rx / 1e6:8.1f} MB (non-loopback receive counters)")
        print(f"  uv cache         {tree_bytes(cache) / 1e6:8.1f} MB")
        print(f"  .venv            {tree_bytes(clone / '.venv') / 1e6:8.1f} MB")
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
