"""Where the tool finds what it ships (``recipes/``, ``forks.toml``, ``receipts/``, ``locks/``); nothing
else derives a data path from ``__file__``.

The data is always ``<october package>/_data/<name>``: links in a checkout (hatch follows them into the
wheel), folders in a copy that turned links into folders (the working dir Ray uploads for a fleet).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_HERE = Path(__file__).absolute()           # .../october/installer/core/resources.py, links kept
PACKAGE_ROOT = _HERE.parents[2]             # the `october` package (links kept)
IMPORT_ROOT = PACKAGE_ROOT.parent           # the directory that holds the `october` package
PACKAGE_DIR = _HERE.resolve().parents[1]    # the installer/ folder itself (links resolved)
CHECKS_DIR = PACKAGE_DIR.parent / "checks"  # code run by the stack's own Python
_FORKS_LINK = PACKAGE_ROOT / "_data" / "forks.toml"
_LINKED = _FORKS_LINK.is_symlink()
# an installed wheel (or a copy whose links became files) holds the data itself; a checkout links it
INSTALLED = not _LINKED and not (IMPORT_ROOT / "forks.toml").is_file()
# the folder holding the shipped data, through the link without resolving the folders above it (so
# recorded recipe paths read as they always have)
DATA_ROOT = (Path(os.path.normpath(_FORKS_LINK.parent / os.readlink(_FORKS_LINK))) if _LINKED
             else _FORKS_LINK).parent
SHIPPED_NAMES = ("recipes", "forks.toml", "receipts", "locks")


def recipes_dir() -> Path:
    return DATA_ROOT / "recipes"


def forks_file() -> Path:
    return DATA_ROOT / "forks.toml"


def schema_path(name: str) -> Path:
    return DATA_ROOT / "receipts" / f"{name}.schema.json"


def locks_dir() -> Path:
    return DATA_ROOT / "locks"


def checkout_root() -> Path | None:
    """The git checkout the tool runs from, or None for an installed tool."""
    root = PACKAGE_DIR.parent
    return root if (root / ".git").exists() else None


def shipped_recipes() -> list[Path]:
    return sorted(recipes_dir().glob("*.toml"))


def stack_script(name: str) -> Path:
    """A probe: a stdlib-only script of ``checks/probes/`` that the tool runs with another interpreter
    by path (``PYTHON -I checks/probes/<name>``: the stack's, or a candidate system Python)."""
    return CHECKS_DIR / "probes" / name


def stack_code_root(cache_dir: Path) -> Path:
    """A directory whose only package is ours, for the stack env's ``PYTHONPATH``: the checkout, or for
    an installed tool (whose site-packages must not shadow the stack's) ``CACHE/tool-code/<hash>/october``,
    a link made once, atomically."""
    if not INSTALLED:
        return IMPORT_ROOT
    package = PACKAGE_ROOT                # site-packages/october
    key = hashlib.sha256(str(package).encode()).hexdigest()[:16]
    root = cache_dir / "tool-code" / key
    link = root / "october"
    if link.is_symlink() and Path(os.readlink(link)) == package:
        return root
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".october.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(package, target_is_directory=True)
    os.replace(tmp, link)
    return root
