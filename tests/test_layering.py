"""The installer's layering (issue 21), read from the source with ``ast`` (nothing is imported).

- The steps (``installer/steps/``) are the pipeline's thin modules; ``installer/pipeline/`` plans and runs
  them.  Everything else is a library (``core``, ``recipe``, ``git``, ``wheels``, ``pyenv``, ``install``,
  ``jit``, ``lock``, ``machine``, ``download``, ``kit``, ``smoke``, ``verify``, ...) and
  never imports a step or the pipeline (``fleet/``, whose nodes each run ``october_setup``, names the steps through
  ``engine.STEP_ORDER``).  Only the command line (``cli/``, ``october_setup.py``) and the pipeline may import the
  pipeline or a step.
- No import cycle between folders: every top-level package of ``installer/`` (and each top-level
  module) is one node; a module's imports, lazy ones included, are its folder's edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

INSTALLER = Path(__file__).resolve().parent.parent / "installer"
PREFIX = "october.installer"
COMMAND_LINE = {"cli", "october_setup"}
MAY_IMPORT_PIPELINE = COMMAND_LINE | {"steps", "pipeline"}
MAY_IMPORT_STEPS = COMMAND_LINE | {"steps", "pipeline"}


def module_name(path: Path, root: Path = INSTALLER) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PREFIX, *parts])


def imports(path: Path, root: Path = INSTALLER) -> list[tuple[int, str]]:
    """Every ``october.installer`` module ``path`` imports (absolute or relative, at any depth), with its
    line; ``from october.installer import git`` counts as ``october.installer.git``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            found += [(node.lineno, f"{mod}.{a.name}") for a in node.names]   # `from pkg import submodule`
    return [(line, m) for line, m in found if m == PREFIX or m.startswith(PREFIX + ".")]


def folder(module: str) -> str | None:
    """The node of ``installer``'s folder graph a module belongs to: its top-level package or module."""
    rest = module[len(PREFIX) + 1:] if module.startswith(PREFIX + ".") else ""
    return rest.split(".")[0] or None


def real_folders(root: Path) -> set[str]:
    return {p.stem for p in root.iterdir() if (p.suffix == ".py" or (p / "__init__.py").exists())} - {"__init__"}


def layering_problems(root: Path) -> list[str]:
    problems: dict[tuple[str, int], str] = {}    # one per import statement
    for path in sorted(root.rglob("*.py")):
        here = folder(module_name(path, root))
        for line, mod in imports(path, root):
            there = folder(mod)
            where = f"{path.relative_to(root.parent)}:{line}"
            if there == "steps" and here not in MAY_IMPORT_STEPS:
                problems.setdefault((where, line), f"{where} imports {mod} (a library imports a step)")
            elif there == "pipeline" and here not in MAY_IMPORT_PIPELINE:
                problems.setdefault((where, line), f"{where} imports {mod} (a library imports the pipeline)")
    return list(problems.values())


def folder_graph(root: Path) -> dict[str, set[str]]:
    known = real_folders(root)
    graph: dict[str, set[str]] = {f: set() for f in known}
    for path in root.rglob("*.py"):
        here = folder(module_name(path, root))
        for _, mod in imports(path, root):
            there = folder(mod)
            if here and there in known and there != here:
                graph.setdefault(here, set()).add(there)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_libraries_import_no_step_and_no_pipeline():
    assert layering_problems(INSTALLER) == []


def test_no_folder_level_import_cycle():
    assert cycles(folder_graph(INSTALLER)) == []


def test_the_domain_libraries_exist_and_the_steps_are_flat():
    """Each step is one module in ``installer/steps/``; the domain code lives in its own library."""
    for lib in ("git", "wheels", "pyenv", "install", "jit", "lock", "machine", "recipe", "core"):
        assert (INSTALLER / lib / "__init__.py").is_file(), lib
    assert [p.name for p in (INSTALLER / "steps").iterdir() if p.is_dir() and p.name != "__pycache__"] == []


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "installer"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


@pytest.mark.parametrize("line", [
    "from october.installer.steps.fetch import FetchStep\n",
    "import october.installer.steps.wheel\n",
    "from october.installer import steps\n",
    "from ..steps import fetch\n",
    "def f():\n    from october.installer.pipeline.plan import plan_steps\n",
])
def test_a_planted_upward_import_is_found(tmp_path, line):
    root = _plant(tmp_path, {"__init__.py": "", "steps/__init__.py": "", "steps/fetch.py": "",
                             "steps/wheel.py": "", "pipeline/__init__.py": "", "engine.py": "",
                             "git/__init__.py": "", "git/mirror.py": line,
                             "cli.py": "from october.installer.steps.fetch import FetchStep\n"})
    problems = layering_problems(root)
    assert len(problems) == 1 and problems[0].startswith("installer/git/mirror.py"), problems


def test_a_planted_folder_cycle_is_found(tmp_path):
    root = _plant(tmp_path, {"__init__.py": "", "git/__init__.py": "", "wheels/__init__.py": "",
                             "lock/__init__.py": "",
                             "git/sdist.py": "from october.installer.wheels.download import download_wheel\n",
                             "wheels/download.py": "from october.installer.lock import pylock\n",
                             "lock/pylock.py": "def f():\n    from october.installer.git import mirror\n"})
    assert cycles(folder_graph(root)) == [["git", "lock", "wheels"]]


DOCS = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def documented_graph(text: str) -> dict[str, set[str]]:
    """The folder graph docs/architecture.md states, between its folder-graph markers."""
    block = text.split("<!-- folder-graph:begin -->", 1)[1].split("<!-- folder-graph:end -->", 1)[0]
    graph: dict[str, set[str]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        graph[cells[0].strip("`")] = {c.strip().strip("`") for c in cells[1].split(",") if c.strip() not in ("", "-")}
    return graph


def graph_differences(documented: dict[str, set[str]], real: dict[str, set[str]]) -> list[str]:
    out = []
    for node in sorted(set(documented) | set(real)):
        for there in sorted(real.get(node, set()) - documented.get(node, set())):
            out.append(f"{node} imports {there}, which the table does not say")
        for there in sorted(documented.get(node, set()) - real.get(node, set())):
            out.append(f"the table says {node} imports {there}, which the code does not")
    return out


def test_the_documented_folder_graph_is_the_real_one():
    """Both ways: every import edge is in docs/architecture.md's table, and every edge there is real."""
    real = folder_graph(INSTALLER)
    documented = documented_graph(DOCS.read_text(encoding="utf-8"))
    assert graph_differences(documented, real) == []
    planted = {k: set(v) for k, v in documented.items()}
    planted["core"].add("steps")            # an edge the code does not have
    planted["wheels"].discard("core")       # an edge the code has
    assert graph_differences(planted, real) == ["the table says core imports steps, which the code does not",
                                                "wheels imports core, which the table does not say"]
