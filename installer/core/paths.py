"""The stack directory layout, in one place."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The shared cache (git mirrors, wheels, models, uv's cache): ``$OCTOBER_CACHE_DIR``, else
    platformdirs' per-user cache (``~/.cache/october`` on Linux).  The one definition."""
    from platformdirs import user_cache_path

    env = os.environ if environ is None else environ
    value = env.get("OCTOBER_CACHE_DIR")
    return Path(value).expanduser() if value else user_cache_path("october")


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


@dataclass(frozen=True)
class StackPaths:
    root: Path

    @property
    def src(self) -> Path:
        return self.root / "src"

    def fork(self, name: str) -> Path:
        return inside(self.src, name)

    @property
    def env(self) -> Path:
        return self.root / "env"

    @property
    def python(self) -> Path:
        return self.env / "bin" / "python"

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    @property
    def jit(self) -> Path:
        return self.root / "jit"

    @property
    def pylock(self) -> Path:
        return self.root / "pylock.toml"

    @property
    def receipts(self) -> Path:
        return self.root / "receipts"

    @property
    def setup_receipt(self) -> Path:
        return self.receipts / "setup.json"

    @property
    def state(self) -> Path:
        return self.root / ".state"

    def marker(self, step: str) -> Path:
        return self.state / f"{step}.json"

    @property
    def recipe_checked(self) -> Path:
        """Digests of recipe + forks.toml content that passed the recipe models in this stack (its no-op
        re-runs skip pydantic: :func:`october.installer.recipe.tomlcheck.validated`)."""
        return self.state / "recipe-checked"

    @property
    def run_pycache(self) -> Path:
        """This run's bytecode for the stack env's imports (see :func:`pycache_args`); removed when the run ends."""
        return self.state / "pycache"

    def pycache_args(self) -> list[str]:
        """``-X pycache_prefix=...`` for a stack-env Python this run starts to import torch (the env probe,
        install's import check, the JIT builder).  A site torch without bytecode (the H200 image's:
        ``torch/__pycache__`` empty, ``PYTHONDONTWRITEBYTECODE=1``) is compiled again by every import,
        2-4 s each; with one prefix per run the first import writes the bytecode there and the next ones
        read it.  Nothing is written beside the interpreter's own files, and nothing outlives the run, so
        no later stack, smoke or verify ever runs bytecode the run did not compile from the sources."""
        return ["-X", f"pycache_prefix={self.run_pycache}"]

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def uv_cache(self) -> Path:
        """uv's cache when ``--cache-dir`` is on another filesystem than the stack."""
        return self.root / ".uv-cache"

    @property
    def lockfile(self) -> Path:
        return self.root / ".october.lock"
