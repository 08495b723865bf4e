"""A project folder's ``pyproject.toml``, read one way wherever the tool needs it (a fork checkout's name, its
dependencies and ``[tool.uv.sources]``, a local project a requirement names)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


def pyproject(folder: Path) -> dict[str, Any]:
    """The folder's ``pyproject.toml`` as a table; {} where there is none, or it cannot be read as TOML."""
    try:
        with open(folder / "pyproject.toml", "rb") as fh:
            return tomllib.load(fh)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def table(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``doc[keys[0]][keys[1]]...`` where each is a table, else {}."""
    for key in keys:
        doc = doc.get(key) if isinstance(doc.get(key), dict) else {}
    return doc


def project_name(folder: Path) -> str | None:
    """The ``[project] name`` the folder declares (None where it declares none)."""
    name = table(pyproject(folder), "project").get("name")
    return name if isinstance(name, str) and name else None


def dependencies(folder: Path) -> list[str]:
    """The static ``[project] dependencies`` and ``optional-dependencies`` lines the folder declares."""
    project = table(pyproject(folder), "project")
    groups = [project.get("dependencies"), *table(project, "optional-dependencies").values()]
    return [line for group in groups if isinstance(group, list) for line in group if isinstance(line, str)]
