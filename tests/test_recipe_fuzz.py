"""Issue 22 (7): thousands of generated and mutated recipes, forks.toml files and lock files through the
loaders the tool uses (in-process): no traceback, no case over a second of CPU, every refusal an
``OctoberError`` of the loader's exit code (3 for recipes and forks.toml, 13 for locks, 20 for the
kit's reading of a lock) whose message is one bounded line plus the optional fix line, and no loaded
recipe holding an unbounded value.  The fuzzer is ``tests/fuzz_toml.py``; ``bench/recipe_fuzz.py``
runs it with any seed and count."""

from __future__ import annotations

from pathlib import Path

from tests.fuzz_toml import TIME_LIMIT_S, fuzz

SEED = 20261201
CASES = 2000


def test_fuzzed_recipes_forks_and_locks_never_crash_hang_or_flood(tmp_path: Path) -> None:
    f = fuzz(tmp_path / "work", SEED, CASES, keep=tmp_path / "findings")
    shown = "\n".join(f"case {x.case} ({x.target}, {x.how}): {x.problem} [{x.sample}]" for x in f.findings[:20])
    assert not f.findings, f"{len(f.findings)} finding(s):\n{shown}"
    assert f.stats.cases == CASES
    # the cases reach past the file reader: some load, most are refused, by many different checks
    assert f.stats.loaded >= CASES // 50 and f.stats.refused >= CASES // 2, f.stats
    assert f.stats.slowest_s < TIME_LIMIT_S
