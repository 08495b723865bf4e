"""Where the tool finds what it ships, in one place.

The repository keeps the folders its layout names: ``recipes/``, ``forks.toml``, ``receipts/``
(JSON Schemas) and ``locks/`` beside the ``installer`` and ``checks`` packages.  A wheel of the
project (``uv tool install .``, ``pipx install .``) carries the same files inside the package as
``installer/_shipped/...`` (hatch ``force-include`` in pyproject.toml).  Every other module asks
here; nothing else derives a data path from ``__file__``.

The stack env runs two of our modules (``checks.smoke``, ``installer.jit.flashinfer_builder``)
with its own Python.  :func:`stack_code_root` gives the directory to put on its ``PYTHONPATH``:
the checkout itself, or, for an installed tool, a directory holding links to just our two
packages (the tool env's site-packages must not shadow the stack's own packages).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKS_DIR = PACKAGE_DIR.parent / "checks"
SHIPPED_DIR = PACKAGE_DIR / "_shipped"
SHIPPED_NAMES = ("recipes", "forks.toml", "receipts", "locks")


def _data_root() -> Path:
    if (SHIPPED_DIR / "forks.toml").is_file():
        return SHIPPED_DIR
    return PACKAGE_DIR.parent


DATA_ROOT = _data_root()


def recipes_dir() -> Path:
    return DATA_ROOT / "recipes"


def forks_file() -> Path:
    return DATA_ROOT / "forks.toml"


def schema_path(name: str) -> Path:
    """``receipts/<name>.schema.json``."""
    return DATA_ROOT / "receipts" / f"{name}.schema.json"


def locks_dir() -> Path:
    return DATA_ROOT / "locks"


def checkout_root() -> Path | None:
    """The git checkout the tool runs from, or None for an installed tool."""
    root = PACKAGE_DIR.parent
    if DATA_ROOT == SHIPPED_DIR or not (root / ".git").exists():
        return None
    return root


def shipped_recipes() -> list[Path]:
    return sorted(recipes_dir().glob("*.toml"))


def stack_code_root(cache_dir: Path) -> Path:
    """A directory whose only packages are ours, for the stack env's ``PYTHONPATH``.

    A checkout is used as it is.  An installed tool's packages live in a site-packages full of
    the tool's own dependencies, so the directory is ``CACHE/tool-code/<hash>/`` with links to
    ``installer`` and ``checks`` (made once, atomically, per installed copy)."""
    if DATA_ROOT != SHIPPED_DIR:
        return PACKAGE_DIR.parent
    key = hashlib.sha256(str(PACKAGE_DIR).encode()).hexdigest()[:16]
    root = cache_dir / "tool-code" / key
    for name, target in (("installer", PACKAGE_DIR), ("checks", CHECKS_DIR)):
        link = root / name
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".{name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target, target_is_directory=True)
        os.replace(tmp, link)
    return root
