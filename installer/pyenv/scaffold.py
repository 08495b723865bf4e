"""The venv's own files that decide which interpreter runs the stack and no RECORD owns: ``pyvenv.cfg`` (the
base interpreter's home, whether the system site packages are seen) and the ``bin/python*`` entries (links
to the base interpreter).  The env step records them as it leaves them (:func:`record`); its ``verify`` (so
the no-op re-run) and ``current verify`` compare them (:func:`changed`): an interpreter link pointed
elsewhere or removed, a planted ``bin/python3.X``, an edited or deleted ``pyvenv.cfg`` is named and the env
made again, never run.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from ..core.hashing import sha256_file

PYTHON = re.compile(r"python(3(\.\d+)?)?")          # the names `uv venv` gives the interpreter in bin/
CONFIG = "pyvenv.cfg"


def _describe(path: Path) -> str | None:
    if path.is_symlink():
        return "a link to " + os.readlink(path)
    if path.is_file():
        return "sha256 " + sha256_file(path)
    return "not a file" if os.path.lexists(path) else None


def _names(env: Path) -> list[str]:
    try:
        found = sorted(f"bin/{n}" for n in os.listdir(env / "bin") if PYTHON.fullmatch(n))
    except OSError:
        found = []
    return [CONFIG, *found]


def record(env: Path) -> dict[str, str]:
    """``pyvenv.cfg`` and each ``bin/python*`` of ``env``, relative path -> what it is (a link's target, a
    file's sha256)."""
    return {rel: what for rel in _names(env) if (what := _describe(env / rel)) is not None}


def changed(env: Path, rec: Mapping[str, str]) -> list[tuple[Path, str, str]]:
    """(path, expected, found) for each recorded entry that differs or is gone, and each one not recorded."""
    now = record(env)
    return [(env / rel, rec.get(rel) or "nothing (the env step made no such file)", now.get(rel) or "no such file")
            for rel in sorted(set(rec) | set(now)) if rec.get(rel) != now.get(rel)]


def clear_unfinished(env: Path) -> bool:
    """Remove ``env`` when it exists but is no venv (no ``pyvenv.cfg``): what a run killed while making it
    leaves (``uv venv --clear`` refuses to clear such a directory); and ``env.partial``, what a run killed
    while copying it from the cache leaves (a re-run that builds the env instead would never reach it).
    -> whether ``env`` was removed."""
    partial = env.with_name(env.name + ".partial")
    if os.path.lexists(partial):
        shutil.rmtree(partial) if partial.is_dir() and not partial.is_symlink() else partial.unlink()
    if not os.path.lexists(env) or (env / CONFIG).is_file():
        return False
    if env.is_symlink() or not env.is_dir():
        env.unlink()
    else:
        shutil.rmtree(env)
    return True
