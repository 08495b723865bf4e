"""Build outputs of the stack are not source changes.

An editable install writes ``*.egg-info/``, ``build/``, ``*.so`` and ``__pycache__`` into the fork; they are
listed in the clone's own ``.git/info/exclude`` (never committed), so the next run does not refuse the clone
as dirty.  Only untracked files can be excluded: a change to a tracked file is still caught.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core.version import git_dir

BEGIN = "# >>> october: build outputs of the stack's own installs (not source changes)"
END = "# <<< october"
BUILD_OUTPUTS = (
    "*.egg-info",
    "/build/",
    "/dist/",
    "/.eggs/",
    "__pycache__/",
    "*.py[cod]",
    "*.so",
)


def exclude_build_outputs(repo: Path) -> Path | None:
    """Write (or refresh) our block in ``<git dir>/info/exclude``; keep every other line."""
    gd = git_dir(repo)
    if gd is None:
        return None
    path = gd / "info" / "exclude"
    old = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    kept: list[str] = []
    inside = False
    for line in old.splitlines():
        if line == BEGIN:
            inside = True
        elif line == END and inside:
            inside = False
        elif not inside:
            kept.append(line)
    text = "\n".join([*kept, BEGIN, *BUILD_OUTPUTS, END]) + "\n"
    if text != old:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".october-tmp")      # renamed into place: a kill never truncates it
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return path
