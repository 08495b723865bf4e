"""The code paths the docs and the recipes' comments name exist (issue 21).

README.md, docs/*.md, recipes/*.toml and forks.toml name our modules as ``installer/...py``,
``checks/...py``, ``october/...``, ``tests/...py``, or short, from a folder of installer/ or checks/
(``steps/wheel.py`` is installer/steps/wheel.py, ``probes/torch_facts.py`` checks/probes/torch_facts.py).
A module moved without its mentions fails here, naming the file, the line and the path.  Other projects'
paths (``vllm/_version.py``) and paths inside a longer one (``/scratch/october/stack``) are not ours.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixtures.root import PROJECT_ROOT

TEXTS = [PROJECT_ROOT / "README.md", PROJECT_ROOT / "forks.toml", *sorted((PROJECT_ROOT / "docs").glob("*.md")),
         *sorted((PROJECT_ROOT / "recipes").glob("*.toml"))]
TOPS = {"installer", "checks", "october", "tests"}
# a short path starts at a folder of installer/ or checks/: its first part -> the top it is under
SHORT = {d.name: top for top in ("installer", "checks") for d in (PROJECT_ROOT / top).iterdir()
         if d.is_dir() and not d.name.startswith("__")}
# a path starts a word (not inside a longer path or a dotted name) and ends with a letter, digit, _ or /
PATH = re.compile(r"(?<![\w./-])([a-z_]+/(?:[\w./-]*[\w/])?)")


def stale_paths(text: Path) -> list[tuple[int, str]]:
    """(line, path) for each path of ours that ``text`` names and the checkout does not have.  A path is
    checked when it names a module (``.py``), a folder (``/`` at its end) or is under october/: prose
    such as ``recipe/format/level`` or ``core/resources.stack_script`` (a module's attribute) is not."""
    stale = []
    for number, line in enumerate(text.read_text(encoding="utf-8").splitlines(), 1):
        for path in PATH.findall(line):
            first = path.split("/")[0]
            if first not in TOPS and first not in SHORT:
                continue
            if not (path.endswith((".py", "/")) or first == "october"):
                continue
            full = path if first in TOPS else f"{SHORT[first]}/{path}"
            if not (PROJECT_ROOT / full).exists():
                stale.append((number, path))
    return stale


def test_every_code_path_the_docs_and_recipes_name_exists() -> None:
    stale = [f"{text.relative_to(PROJECT_ROOT)}:{line}: {path}" for text in TEXTS for line, path in stale_paths(text)]
    assert not stale, "paths that no longer exist (find where the code lives now):\n" + "\n".join(stale)


@pytest.mark.parametrize(("planted", "reported"), [
    ("(installer/steps/jit/derive.py): the modules", "installer/steps/jit/derive.py"),
    ("file by file (`installer/steps/wheel/sdistmatch.py`).", "installer/steps/wheel/sdistmatch.py"),
    ("the tag probe (`steps/wheel/tags.py`) loads", "steps/wheel/tags.py"),
    ("by path: `checks/probes/gone.py`", "checks/probes/gone.py"),
    ("`october/gone/` holds", "october/gone/"),
    ("(`vllm/_version.py` names the commit)", None),
    ("a stack at /scratch/october/stack", None),
    ("`core/resources.stack_script`, recipe/format/level", None),
])
def test_a_planted_stale_path_is_reported(tmp_path: Path, planted: str, reported: str | None) -> None:
    text = (PROJECT_ROOT / "recipes" / "current.toml").read_text(encoding="utf-8")
    copy = tmp_path / "current.toml"
    copy.write_text(f"{text}\n# {planted}\n", encoding="utf-8")
    line = len(copy.read_text(encoding="utf-8").splitlines())
    assert stale_paths(copy) == ([(line, reported)] if reported else [])
