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
        from october.installer.core.errors import UsageError

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
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def uv_cache(self) -> Path:
        """uv's cache when ``--cache-dir`` is on another filesystem than the stack."""
        return self.root / ".uv-cache"

    @property
    def lockfile(self) -> Path:
        return self.root / ".october.lock"
