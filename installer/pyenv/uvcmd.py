"""Build uv command lines for the stack env (sources, cache, constraints) in one place."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..core.atomic import write_text_atomic
from ..core.clonefile import reflinks_work
from ..core.paths import StackPaths
from ..core.runner import Runner
from ..recipe import Recipe


def link_mode(uv_cache: Path) -> str:
    """"clone" where the cache's filesystem has reflinks, else "copy"; never "hardlink": an edit in one stack
    would reach the cache and the next stack.  uv's own "clone" falls back to a hard link where reflinks fail."""
    return "clone" if reflinks_work(uv_cache) else "copy"


def uv_exe() -> str:
    """The uv that belongs to the tool env (the ``uv`` dependency), else the one on PATH."""
    candidate = Path(sys.executable).parent / "uv"
    return str(candidate) if candidate.exists() else shutil.which("uv") or "uv"


def choose_uv_cache(cache_dir: Path, paths: StackPaths) -> Path:
    """uv's cache on the stack's filesystem, so installs can reflink: ``CACHE/uv``, else ``STACK/.uv-cache``."""
    preferred = cache_dir / "uv"
    preferred.mkdir(parents=True, exist_ok=True)
    paths.root.mkdir(parents=True, exist_ok=True)
    if os.stat(preferred).st_dev == os.stat(paths.root).st_dev:
        return preferred
    fallback = paths.uv_cache
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


@dataclass(frozen=True)
class StackUv:
    """What uv needs to install into one stack's env (``locked_packages``: name -> version under ``--locked``;
    ``after_install``: run after every ``uv pip install`` into the env, with the step's name, before anything else
    starts its Python)."""

    paths: StackPaths
    recipe: Recipe
    cache_dir: Path
    locked_packages: Mapping[str, str] | None = None
    after_install: Callable[[str], None] | None = None

    def env(self) -> dict[str, str]:
        cache = choose_uv_cache(self.cache_dir, self.paths)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
        env.update(UV_CACHE_DIR=str(cache), UV_LINK_MODE=link_mode(cache),
                   UV_PYTHON_DOWNLOADS=env.get("UV_PYTHON_DOWNLOADS", "automatic"),
                   # uv runs in a process group of its own (the guard): git asking at the terminal for a
                   # git+https requirement's credentials would stop it (SIGTTIN) and hang the run
                   GIT_TERMINAL_PROMPT="0", GCM_INTERACTIVE="never")
        return env

    def sources(self, *, torch_index: bool = False) -> list[str]:
        """The recipe's sources; a site-provided torch never takes the torch index."""
        return recipe_source_args(self.recipe, torch_index=torch_index and not self.recipe.torch.from_system)

    def constraints(self) -> list[str]:
        """Always pin torch (nothing may move it); under --locked pin everything the lock lists."""
        lines = [self.recipe.torch.requirement]
        if self.locked_packages is not None:
            lines += [f"{name}=={version}" for name, version in sorted(self.locked_packages.items())
                      if name != "torch"]
        path = self.paths.state / "constraints.txt"
        text = "\n".join(lines) + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            write_text_atomic(path, text)
        return ["--constraint", str(path)]

    def pip_install(self, runner: Runner, step: str, args: Sequence[str], *, torch_index: bool = False,
                    extra_env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        """``uv pip install`` into the stack env with the recipe's sources and the torch constraint."""
        argv = [uv_exe(), "pip", "install", "--python", str(self.paths.python),
                *self.sources(torch_index=torch_index), *self.constraints(), *args]
        runner.run(argv, step=step, env={**self.env(), **(extra_env or {})}, cwd=cwd, guard=True)
        if self.after_install is not None:
            self.after_install(step)


def recipe_source_args(recipe: Recipe, *, torch_index: bool = True) -> list[str]:
    """The recipe's package sources as uv arguments, plus the torch index when ``torch_index`` and it names one."""
    s = recipe.sources
    args: list[str] = []
    if s.no_index:
        args.append("--no-index")
    if s.index_url:
        args += ["--index-url", s.index_url]
    for url in s.extra_index_urls:
        args += ["--extra-index-url", url]
    if torch_index and recipe.torch.index_url:
        args += ["--extra-index-url", recipe.torch.index_url, "--index-strategy", "unsafe-best-match"]
    for link in s.find_links:
        args += ["--find-links", link]
    return args


def missing_find_links(recipe: Recipe) -> list[Path]:
    """The local ``[sources] find_links`` folders that are not there (relative paths were made absolute
    against the recipe file; ``file://`` URLs read as uv reads them).  Asked when uv failed: uv itself minds
    a missing folder only when it needs a package from it."""
    from urllib.parse import urlsplit
    from urllib.request import url2pathname

    missing: list[Path] = []
    for link in recipe.sources.find_links:
        parts = urlsplit(link)
        if "://" not in link:
            path: Path | None = Path(link)
        elif parts.scheme == "file" and parts.netloc in ("", "localhost"):
            path = Path(url2pathname(parts.path))          # file:///a%20b and file://localhost/a as uv reads them
        else:
            path = None
        if path is not None and not path.is_dir():
            missing.append(path)
    return missing
