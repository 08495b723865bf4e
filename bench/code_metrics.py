"""Issue 12's code measures, for a before/after table: module count and size, longest function,
and repeated blocks (the `duplicates` command, when it is on PATH).

    uv run python bench/code_metrics.py [--repo DIR]

Counts the Python modules under installer/ and checks/ (links are followed once: a module reached
through october/ is the same file).  Prints a JSON object.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import statistics
import subprocess
from pathlib import Path

PACKAGES = ("installer", "checks")


def modules(repo: Path) -> list[Path]:
    out: list[Path] = []
    for pkg in PACKAGES:
        out += sorted(p for p in (repo / pkg).rglob("*.py") if "__pycache__" not in p.parts)
    return out


def longest_functions(paths: list[Path], repo: Path, top: int = 5) -> list[dict[str, object]]:
    found: list[tuple[int, str]] = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
                found.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(repo)}:{node.name}"))
    found.sort(reverse=True)
    return [{"lines": n, "function": name} for n, name in found[:top]]


def repeated_blocks(repo: Path) -> dict[str, int] | None:
    """Pairs of places sharing six or more lines (same lines or same shape), from `duplicates`,
    split into pairs inside the code (installer/, checks/), inside tests/, and across the two."""
    if shutil.which("duplicates") is None:
        return None
    out = subprocess.run(["duplicates", "--repo", str(repo), "--most", "200", "--seconds", "120"],
                         capture_output=True, text=True, check=False).stdout
    counts = {"code": 0, "tests": 0, "across": 0, "other": 0}
    for line in out.splitlines():
        m = re.match(r"D\d+ (\S+):\d+-\d+ ~ (\S+):\d+-\d+", line)
        if not m:
            continue
        sides = {p.split("/")[0] for p in m.groups()}
        if sides <= set(PACKAGES):
            counts["code"] += 1
        elif sides == {"tests"}:
            counts["tests"] += 1
        elif "tests" in sides and sides & set(PACKAGES):
            counts["across"] += 1
        else:
            counts["other"] += 1
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args()
    repo = args.repo.resolve()
    paths = modules(repo)
    sizes = [len(p.read_text(encoding="utf-8").splitlines()) for p in paths]
    report = {
        "modules": len(paths),
        "lines": sum(sizes),
        "median_lines": statistics.median(sizes),
        "max_lines": max(sizes),
        "largest": [str(p.relative_to(repo)) for p, n in sorted(zip(paths, sizes), key=lambda x: -x[1])[:5]],
        "modules_over_400": sum(1 for n in sizes if n > 400),
        "modules_under_65": sum(1 for n in sizes if n < 65),
        "longest_functions": longest_functions(paths, repo),
        "repeated_blocks": repeated_blocks(repo),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
