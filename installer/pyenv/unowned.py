"""Files in the stack env that no distribution's RECORD owns (``current verify``), ``.pth`` files first: nothing
checks their bytes and some run code (a ``.pth`` ``import`` line runs at every interpreter start).
Legitimately unowned:

* the venv's scaffolding that ``uv venv`` writes, at the env's top and in ``bin/`` only (``pyvenv.cfg``,
  ``.gitignore``, ``.lock``, ``CACHEDIR.TAG``, the ``lib64`` link, ``bin/python*`` links, ``activate`` scripts);
* ``__pycache__/<name>.<tag>.pyc`` beside an existing ``<name>.py``: Python reads it only for that source and
  only while the source's mtime and size (or, for a checked hash-based file, its hash) are the ones it records, so
  its bytes are not checked; one whose source is gone is named, and so is an *unchecked* hash-based one (PEP 552:
  flags 1), which Python runs whatever the source holds;
* ``_october_system_site.pth`` of a stack on a site-provided torch, with exactly the text the env step writes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import scaffold
from .systorch import PTH_NAME, pth_text
from .bytecode import source_of

SCAFFOLD_TOP = {*scaffold.TOP, ".lock"}         # the venv's own files, as the env step records them (and uv's lock)
SCAFFOLD_BIN = re.compile(f"({scaffold.PYTHON.pattern}|{scaffold.SCRIPTS.pattern})")
BYTECODE = re.compile(r"[^.]+\.[\w-]+(\.opt-\d+)?\.pyc")


def owned_paths(rows: Iterable[tuple[Path, str]]) -> set[str]:
    """Normalized absolute paths of (site directory, RECORD path) rows."""
    return {os.path.normpath(Path(site) / rel) for site, rel in rows}


def _bytecode_ok(path: Path) -> bool:
    return (path.parent.name == "__pycache__" and BYTECODE.fullmatch(path.name) is not None
            and source_of(path).is_file() and _checked(path))


def _checked(pyc: Path) -> bool:
    """Whether Python holds ``pyc`` to its source before it runs it: PEP 552's flags word is 0 (the source's mtime
    and size) or 3 (its hash); 1 (a hash never checked) or a file too short to say: no."""
    try:
        with open(pyc, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return len(head) == 8 and int.from_bytes(head[4:8], "little") in (0, 3)


def _scaffold(env: Path, path: Path) -> bool:
    rel = path.relative_to(env)
    if len(rel.parts) == 1:
        return rel.name in SCAFFOLD_TOP and (rel.name != "lib64" or path.is_symlink())
    if len(rel.parts) == 2 and rel.parts[0] == "bin" and SCAFFOLD_BIN.fullmatch(rel.name):
        return not rel.name.startswith("python") or path.is_symlink()
    return False


def _our_pth(path: Path, system_torch: Mapping[str, Any] | None) -> bool:
    if path.name != PTH_NAME or not system_torch or path.parent.name != "site-packages":
        return False
    try:
        return path.read_text(encoding="utf-8") == pth_text(system_torch)
    except (OSError, UnicodeDecodeError):
        return False


def unowned(env: Path, owned: set[str], system_torch: Mapping[str, Any] | None = None) -> list[Path]:
    """Every file (or link) under ``env`` that no RECORD owns and that is not legitimately unowned
    (the module docstring), ``.pth`` files first."""
    found: list[Path] = []
    for top, dirs, files in os.walk(env, followlinks=False):
        here = Path(top)
        links = [d for d in dirs if (here / d).is_symlink()]          # a linked directory is an entry
        for name in [*files, *links]:
            path = here / name
            if (os.path.normpath(path) in owned or _scaffold(env, path) or _bytecode_ok(path)
                    or _our_pth(path, system_torch)):
                continue
            found.append(path)
    return sorted(found, key=lambda p: (p.suffix != ".pth", str(p)))


def describe(path: Path) -> str:
    if path.suffix == ".pth":
        return f"{path} (a .pth: runs at every interpreter start)"
    return str(path) + (" (a link)" if path.is_symlink() else "")
