"""The venv's own files that no RECORD owns: ``pyvenv.cfg`` (the base interpreter's home, whether the system
site packages are seen), the ``bin/python*`` entries (links to the base interpreter), the activation scripts
(``bin/activate*``, ``activate_this.py``: a user sources them) and the top-level ``lib64`` link (a site root
where ``sys.platlibdir`` is lib64).  The env step records them as it leaves them (:func:`record`, and
:func:`scripts` in a record of its own that an earlier version never reads); its ``verify`` (so the no-op
re-run) and ``current verify`` compare them (:func:`changed`, :func:`scripts_changed`): an interpreter link
pointed elsewhere or removed, a planted ``bin/python3.X``, an edited or deleted ``pyvenv.cfg`` or activation
script, a ``lib64`` pointed elsewhere is named and the env made again, never run; so is ``STACK/env`` itself
made a link (:func:`linked`: the re-run removes the link, never what it points at).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from ..core.hashing import sha256_file

PYTHON = re.compile(r"python(3(\.\d+)?)?")          # the names `uv venv` gives the interpreter in bin/
SCRIPTS = re.compile(r"activate(\.\w+)?|activate_this\.py|deactivate\.bat|pydoc\.bat")     # and its other files there
CONFIG = "pyvenv.cfg"
TOP = (CONFIG, ".gitignore", "CACHEDIR.TAG", "lib64")


def _describe(path: Path) -> str | None:
    if path.is_symlink():
        return "a link to " + os.readlink(path)
    if path.is_file():
        return "sha256 " + sha256_file(path)
    return "not a file" if os.path.lexists(path) else None


def _names(env: Path, kind: re.Pattern[str]) -> list[str]:
    try:
        return sorted(f"bin/{n}" for n in os.listdir(env / "bin") if kind.fullmatch(n))
    except OSError:
        return []


def record(env: Path) -> dict[str, str]:
    """``pyvenv.cfg`` and each ``bin/python*`` of ``env``, relative path -> what it is (a link's target, a
    file's sha256)."""
    return {rel: what for rel in [CONFIG, *_names(env, PYTHON)] if (what := _describe(env / rel)) is not None}


def scripts(env: Path) -> dict[str, str]:
    """The activation scripts in ``bin/`` and the top-level ``lib64``, ``.gitignore``, ``CACHEDIR.TAG``: a record of
    its own (``EnvResult.scripts``), beside :func:`record`'s, which an earlier version reads as it always did."""
    return {rel: what for rel in [*TOP[1:], *_names(env, SCRIPTS)] if (what := _describe(env / rel)) is not None}


def owns(rel: str) -> bool:
    """Whether the env's ``rel`` is one :func:`record` or :func:`scripts` describes."""
    name = rel[4:] if rel.startswith("bin/") else None
    return rel in TOP or (name is not None and bool(PYTHON.fullmatch(name) or SCRIPTS.fullmatch(name)))


def described(digest: str | None) -> str:
    """A ``link:<target>`` / ``sha256:<hex>`` digest (None: a folder) as :func:`record` says it."""
    if digest is None:
        return "not a file"
    kind, _, value = digest.partition(":")
    return f"a link to {value}" if kind == "link" else f"sha256 {value}"


def changed(env: Path, rec: Mapping[str, str], now: Mapping[str, str] | None = None) -> list[tuple[Path, str, str]]:
    """(path, expected, found) for each recorded entry that differs or is gone, and each one not recorded
    (``now``: :func:`scripts` for that record; else :func:`record`)."""
    now = record(env) if now is None else now
    return [(env / rel, rec.get(rel) or "nothing (the env step made no such file)", now.get(rel) or "no such file")
            for rel in sorted(set(rec) | set(now)) if rec.get(rel) != now.get(rel)]


def scripts_changed(env: Path, rec: Mapping[str, str] | None) -> list[tuple[Path, str, str]]:
    """:func:`changed` for the :func:`scripts` record; none for a record that has none (an earlier version's)."""
    return [] if rec is None else changed(env, rec, scripts(env))


def linked(env: Path) -> str | None:
    """What ``env`` is when it is a link, not the folder the env step made (a stack's env pointed at another's
    shares its writable bytes with it), or None."""
    return f"a link to {os.readlink(env)}" if env.is_symlink() else None


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
