"""The project's own install story: what a fresh clone's run command pulls in, what the README
and CI say, and the tool's wheel (built by real uv, installed into a real tool environment)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lock_packages() -> dict[str, dict]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    return {p["name"]: p for p in lock["package"]}


def _closure(packages: dict[str, dict], roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [d["name"] for d in packages[name].get("dependencies", [])]
    return seen


def test_the_run_command_installs_no_torch() -> None:
    """`uv run october_setup` syncs the project's dependencies plus the default groups; none of
    that may pull torch, CUDA or triton (the tool never imports them)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = _lock_packages()
    default_groups = pyproject.get("tool", {}).get("uv", {}).get("default-groups", ["dev"])
    roots = [d["name"] for d in packages["october"].get("dependencies", [])]
    for group in default_groups:
        roots += [d["name"] for d in packages["october"].get("dev-dependencies", {}).get(group, [])]
    needed = _closure(packages, roots)
    heavy = sorted(n for n in needed if n in ("torch", "triton") or n.startswith("nvidia-"))
    assert heavy == [], f"the run command would install {heavy}"
    tests = _closure(packages, [d["name"] for d in packages["october"]["dev-dependencies"]["test"]])
    assert {"torch", "pytest"} <= tests


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Tests", 1)[1]
    command = re.search(r"```\n(.+?)\n```", section, re.S)
    assert command is not None
    ci_lines = [ln for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if ln.strip()]
    assert ci_lines[-1] == command.group(1).strip()
    assert "--group test" in ci_lines[-1]


def test_every_imported_third_party_module_is_declared() -> None:
    """A module the tool imports must come from a declared dependency (not by luck, through
    another package's dependencies)."""
    import ast
    import sys

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower().replace("_", "-")
                for d in pyproject["project"]["dependencies"]}
    import_names = {"git": "gitpython", "yaml": "pyyaml", "tomli_w": "tomli-w", "huggingface_hub": "huggingface-hub"}
    ours = {"installer", "checks", "october", "tests"}
    # run inside the stack env (`python -m ...` with the stack's Python), where torch lives
    in_stack_env = {"installer/jit/flashinfer_builder.py"}
    found: set[str] = set()
    for path in (ROOT / "installer").rglob("*.py"):
        if path.relative_to(ROOT).as_posix() in in_stack_env:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top in ours or top in sys.stdlib_module_names or top == "__future__":
                    continue
                found.add(import_names.get(top, top).lower().replace("_", "-"))
    assert sorted(found - declared) == []
