"""The stack directory layout, in one place."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .stackmutex import holder_file


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The shared cache (git mirrors, wheels, models, uv's cache): ``$OCTOBER_CACHE_DIR``, else
    platformdirs' per-user cache (``~/.cache/october`` on Linux).  The one definition."""
    from platformdirs import user_cache_path

    env = os.environ if environ is None else environ
    value = env.get("OCTOBER_CACHE_DIR")
    return Path(value).expanduser() if value else user_cache_path("october")


def remove(p: Path, *, missing_ok: bool = False) -> None:
    """Remove a file, a link (never what it points to) or a whole directory."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink(missing_ok=missing_ok)


def inside(base: Path, name: str) -> Path:
    """``base / name``, refusing a name that would lead outside ``base`` (recipe data names paths)."""
    path = base / name
    if not name or name in (".", "..") or "/" in name or "\\" in name or \
            not os.path.normpath(path).startswith(os.path.normpath(base) + os.sep):
        from .errors import UsageError

        raise UsageError(f"the name {name!r} would make a path outside {base}",
                         expected="a plain name (letters, digits, '.', '_', '-')", found=repr(name),
                         fix="fix the name in the recipe or forks.toml")
    return path


def _under(*parts: str) -> property:
    return property(lambda self: self.root.joinpath(*parts))


@dataclass(frozen=True)
class StackPaths:
    root: Path

    src = _under("src")
    env = _under("env")
    python = _under("env", "bin", "python")
    wheels = _under("wheels")
    jit = _under("jit")
    pylock = _under("pylock.toml")
    receipts = _under("receipts")
    setup_receipt = _under("receipts", "setup.json")
    state = _under(".state")
    # digests of recipe + forks.toml content that passed the recipe models (no-op re-runs skip pydantic)
    recipe_checked = _under(".state", "recipe-checked")
    recipe_record = _under(".state", "recipe-used.json")   # the recipe the last run began with (pipeline/plan.py)
    run_pycache = _under(".state", "pycache")       # this run's bytecode (pycache_args); removed as it ends
    # the RECORD digests the last finished install left; removed when the env step makes the env again
    install_records = _under(".state", "install-records.json")
    logs = _under("logs")
    uv_cache = _under(".uv-cache")      # uv's cache when --cache-dir is on another filesystem than the stack
    lockfile = _under(".october.lock")

    def fork(self, name: str) -> Path:
        return inside(self.src, name)

    def marker(self, step: str) -> Path:
        return self.state / f"{step}.json"

    def parts(self) -> tuple[Path, ...]:
        """The stack's own parts: a step makes, replaces or rewrites each (nothing of another's belongs in them)."""
        return (self.src, self.env, self.jit, self.wheels, self.receipts, self.state, self.logs, self.uv_cache)

    def foreign(self) -> list[str]:
        """The names in ``root`` that keep october_setup from taking it over (sorted): in a directory that is
        no stack, everything but the stack lock, its holder file and an empty ``.state/`` (a run stopped as it
        began).  A stack: ``.state/`` holds a record, or (``.state/`` lost) the setup receipt says so.  Empty
        for a stack, an empty directory or none."""
        if not self.root.is_dir() or self.is_stack():
            return []
        ours = (self.lockfile, holder_file(self.lockfile), self.state)
        return sorted(p.name for p in self.root.iterdir() if p not in ours)

    def is_stack(self) -> bool:
        """Made by october_setup: its ``.state/`` holds a record of ours (the recipe every run writes before its
        first step, or a step's marker: a directory named so, or one with another tool's files, is not enough:
        files of the user's beside it are not ours to replace), or its setup receipt is one."""
        from . import jsonread

        def ours(path: Path, kind: str | None = None) -> bool:
            try:
                doc = jsonread.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return False
            return isinstance(doc, dict) and (doc.get("kind") == kind if kind else
                                              "name" in doc and "sha256" in doc or "step" in doc)

        if self.state.is_dir() and any(ours(m) for m in self.state.glob("*.json")):    # recipe-used.json, markers
            return True
        return ours(self.setup_receipt, "october-setup-receipt")

    def pycache_args(self) -> list[str]:
        """``-X pycache_prefix=...`` for a stack-env Python this run starts to import torch.  A site torch
        without bytecode is compiled again by every import (2-4 s each); with one prefix per run the first
        import writes it there, and no later run ever executes bytecode it did not compile itself."""
        return ["-X", f"pycache_prefix={self.run_pycache}"]
