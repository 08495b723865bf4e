"""Fuzz the recipe, forks.toml and lock loaders with any seed and any number of cases.

    uv run python bench/recipe_fuzz.py [--seed N] [--cases N] [--keep DIR]

The test (tests/test_recipe_fuzz.py) runs 2,000 cases with one fixed seed; this runs more, or
others.  Prints the counts, the slowest case (CPU seconds) and the longest error line, then every
finding (a traceback, a message that is not one bounded line, a case over one CPU second, a loaded
recipe with an unbounded value); ``--keep`` saves each finding's input.  Exit 1 when there is one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz_toml import fuzz  # noqa: E402  (the project root first on the path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--cases", type=int, default=20_000)
    ap.add_argument("--keep", type=Path, default=None, help="save the input of each finding here")
    args = ap.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="october-fuzz-") as work:
        f = fuzz(Path(work), args.seed, args.cases, keep=args.keep)
    s = f.stats
    print(f"seed {args.seed}: {s.cases} cases in {time.monotonic() - started:.1f} s; {s.loaded} loaded, {s.refused} "
          f"refused; slowest {s.slowest_s * 1000:.0f} ms CPU (case {s.slowest_case}), {s.slowest_wall_s * 1000:.0f} ms "
          f"wall; longest error line "
          f"{s.longest_line} characters; {len(f.findings)} finding(s)")
    for x in f.findings:
        print(f"  case {x.case} ({x.target}, {x.how}): {x.problem}" + (f" [{x.sample}]" if x.sample else ""))
    return 1 if f.findings else 0


if __name__ == "__main__":
    sys.exit(main())
