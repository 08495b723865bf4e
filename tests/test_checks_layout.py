"""``checks/`` is grouped by level (issue 21): the two ``-m`` entries and the shared modules at the top, one
folder per smoke level, and the probes the tool runs by path.  No level imports another level, the shared
modules import no level, the probes import nothing of ours, and the tool imports only the four stdlib-only
modules docs/architecture.md names.  Read with ``ast``, nothing imported."""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

from october.checks.contract import LEVELS
from tests.fixtures.imports import imported_module

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "october.checks"

ENTRIES = {"smoke", "jit_build"}                     # python -m october.checks.<entry>
SHARED = {"contract", "results", "receipt", "inputs", "scales", "workspace", "memory", "torch_reference",
          "flashinfer_asym"}
LEVEL_DIRS = set(LEVELS)                             # reference/, kernel/, engine/
PROBES = "probes"                                    # PYTHON -I checks/probes/<name>.py: stdlib (+ torch) only
PROBE_MAY_IMPORT = {"torch"}
TOOL_IMPORTS = {"contract", "results", "scales", "jit_build"}   # what installer/ may import of checks/


def _group(rel: Path) -> str:
    """The group a module of ``checks/`` belongs to: a folder's name, ``entry``, ``shared`` or ``?``."""
    if len(rel.parts) == 2 and (rel.parts[0] in LEVEL_DIRS or rel.parts[0] == PROBES):
        return rel.parts[0]
    if len(rel.parts) == 1:
        stem = rel.stem
        return "entry" if stem in ENTRIES else "shared" if stem in SHARED or stem == "__init__" else "?"
    return "?"


def _module_group(dotted: str) -> str | None:
    """The group of ``october.checks.<...>``, or None for anything else (the package itself included)."""
    if not dotted.startswith(PACKAGE + "."):
        return None
    parts = dotted[len(PACKAGE) + 1:].split(".")
    if parts[0] in LEVEL_DIRS or parts[0] == PROBES:
        return parts[0]
    return "entry" if parts[0] in ENTRIES else "shared" if parts[0] in SHARED else "?"


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Every module ``path`` imports (``from a.b import c`` counts as ``a.b.c`` when ``a.b`` is ours, so
    ``from october.checks.engine import oracles`` is the engine level); inside functions too unless
    ``top_level_only``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes: list[ast.AST] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        for child in ast.iter_child_nodes(node):
            if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            todo.append(child)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
            module = imported_module(node, path)
            if module == PACKAGE or module.startswith(PACKAGE + "."):
                found.update(f"{module}.{a.name}" for a in node.names)
            else:
                found.add(module)
    return found


def layout_problems(checks: Path) -> list[str]:
    """What breaks the grouping in the ``checks/`` folder at ``checks``; empty when it holds."""
    problems: list[str] = []
    dirs = {p.name for p in checks.iterdir() if p.is_dir() and p.name != "__pycache__"}
    if dirs != LEVEL_DIRS | {PROBES}:
        problems.append(f"folders: expected {sorted(LEVEL_DIRS | {PROBES})}, found {sorted(dirs)}")
    for name in sorted(dirs & (LEVEL_DIRS | {PROBES})):
        if not (checks / name / "__init__.py").is_file():
            problems.append(f"{name}/: no __init__.py")
    for path in sorted(p for p in checks.rglob("*.py") if "__pycache__" not in p.parts):
        rel = path.relative_to(checks)
        group = _group(rel)
        if group == "?":
            problems.append(f"{rel}: neither in a level folder {sorted(LEVEL_DIRS)} or {PROBES}/, nor a declared "
                            f"entry {sorted(ENTRIES)} or shared module")
            continue
        for name in sorted(_imports(path)):
            target = _module_group(name)
            if group == PROBES:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in PROBE_MAY_IMPORT:
                    problems.append(f"{rel} imports {name}: a probe runs by path with -I (stdlib and torch only)")
            elif target is None:
                continue
            elif target == "?":
                problems.append(f"{rel} imports {name}: no such group")
            elif target == PROBES:
                problems.append(f"{rel} imports {name}: the probes run by path, never imported")
            elif group in LEVEL_DIRS and target != group and target not in ("shared",):
                problems.append(f"{rel} imports {name}: the {group} level imports only its own folder and the "
                                "shared modules")
            elif group == "shared" and target != "shared":
                problems.append(f"{rel} imports {name}: a shared module imports only shared modules")
            elif group == "entry" and rel.stem == "jit_build" and target != "shared":
                problems.append(f"{rel} imports {name}: the jit builder imports only shared modules")
    return problems


def test_checks_are_grouped_by_level_and_no_level_imports_another() -> None:
    assert layout_problems(ROOT / "checks") == []


def test_the_guard_sees_a_planted_violation(tmp_path: Path) -> None:
    checks = tmp_path / "checks"
    shutil.copytree(ROOT / "checks", checks, ignore=shutil.ignore_patterns("__pycache__"))
    assert layout_problems(checks) == []
    (checks / "kernel" / "planted.py").write_text(
        "from october.checks.engine import oracles\n"
        "def f():\n    from october.checks.engine.driver import run_engine_level\n", encoding="utf-8")
    (checks / "engine" / "planted.py").write_text("from .. import kernel\n", encoding="utf-8")   # relative too
    (checks / "results.py").write_text((checks / "results.py").read_text(encoding="utf-8")
                                       + "from october.checks.reference.backend import Request\n", encoding="utf-8")
    (checks / "probes" / "planted.py").write_text("from october.checks import contract\n", encoding="utf-8")
    (checks / "kernel_extra.py").write_text("", encoding="utf-8")
    found = layout_problems(checks)
    for want in ("kernel/planted.py imports october.checks.engine.oracles",
                 "kernel/planted.py imports october.checks.engine.driver.run_engine_level",
                 "engine/planted.py imports october.checks.kernel",
                 "results.py imports october.checks.reference.backend.Request",
                 "probes/planted.py imports october.checks.contract",
                 "kernel_extra.py: neither in a level folder"):
        assert any(p.startswith(want) for p in found), (want, found)
    assert len(found) == 6, found


def test_the_tool_imports_only_the_declared_stdlib_only_modules() -> None:
    """installer/ imports of checks/ only ``TOOL_IMPORTS``; each, and every module of ours it imports at
    import time, imports nothing but the standard library at import time (the tool env has no torch)."""
    used: set[str] = set()
    for path in (ROOT / "installer").rglob("*.py"):
        for name in _imports(path):
            if name.startswith(PACKAGE + "."):
                parts = name[len(PACKAGE) + 1:].split(".")
                used.add(parts[0])
    assert used <= TOOL_IMPORTS, sorted(used - TOOL_IMPORTS)
    seen: set[str] = set()
    todo = sorted(TOOL_IMPORTS)
    while todo:
        stem = todo.pop()
        if stem in seen:
            continue
        seen.add(stem)
        for name in _imports(ROOT / "checks" / f"{stem}.py", top_level_only=True):
            if name.startswith(PACKAGE + "."):
                todo.append(name[len(PACKAGE) + 1:].split(".")[0])
            else:
                assert name.split(".")[0] in sys.stdlib_module_names, (stem, name)
    assert seen <= SHARED | ENTRIES, sorted(seen)
