"""Build uv command lines for the stack env (sources, cache, constraints) in one place."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from october.installer.core.atomic import write_text_atomic
from october.installer.core.paths import StackPaths
from october.installer.pipeline.engine import StepContext
from october.installer.recipe import Recipe


def uv_exe() -> str:
    """The uv that belongs to the tool env (the ``uv`` dependency), else the one on PATH."""
    candidate = Path(sys.executable).parent / "uv"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("uv")
    return found or "uv"


def choose_uv_cache(cache_dir: Path, paths: StackPaths) -> Path:
    """uv's cache on the same filesystem as the stack, so installs hard-link instead of copying:
    ``CACHE/uv`` (shared by every stack), or, when the cache is on another filesystem,
    ``STACK/.uv-cache`` (removed with the stack).  Never anywhere else."""
    preferred = cache_dir / "uv"
    preferred.mkdir(parents=True, exist_ok=True)
    paths.root.mkdir(parents=True, exist_ok=True)
    if os.stat(preferred).st_dev == os.stat(paths.root).st_dev:
        return preferred
    fallback = paths.uv_cache
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def uv_cache_dir(ctx: StepContext) -> Path:
    return choose_uv_cache(ctx.options.cache_dir, ctx.paths)


def uv_env(ctx: StepContext) -> dict[str, str]:
    env = dict(os.environ)
    env["UV_CACHE_DIR"] = str(uv_cache_dir(ctx))
    env["UV_LINK_MODE"] = "hardlink"
    env["UV_PYTHON_DOWNLOADS"] = env.get("UV_PYTHON_DOWNLOADS", "automatic")
    env.pop("VIRTUAL_ENV", None)
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    return env


def recipe_source_args(recipe: Recipe, *, torch_index: bool = True) -> list[str]:
    """The recipe's own package sources as uv arguments (index, extra indexes, find-links), plus the
    torch index when ``torch_index`` is set and the recipe names one."""
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


def source_args(ctx: StepContext, *, torch_index: bool = False) -> list[str]:
    """The step's sources; a site-provided torch never takes the torch index."""
    return recipe_source_args(ctx.recipe, torch_index=torch_index and not ctx.recipe.torch.from_system)


def constraints_args(ctx: StepContext) -> list[str]:
    """Always pin torch (nothing may move it); under --locked pin everything the lock lists."""
    lines = [ctx.recipe.torch.requirement]
    locked = ctx.options.locked
    if locked is not None:
        lines += [f"{name}=={version}" for name, version in sorted(locked.packages.items())
                  if name != "torch"]
    path = ctx.paths.state / "constraints.txt"
    text = "\n".join(lines) + "\n"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_text_atomic(path, text)
    return ["--constraint", str(path)]


def pip_install(ctx: StepContext, step: str, args: Sequence[str], *, torch_index: bool = False,
                extra_env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    """``uv pip install`` into the stack env with the recipe's sources and the torch constraint."""
    argv = [uv_exe(), "pip", "install", "--python", str(ctx.paths.python),
            *source_args(ctx, torch_index=torch_index), *constraints_args(ctx), *args]
    env = uv_env(ctx)
    if extra_env:
        env.update(extra_env)
    ctx.runner.run(argv, step=step, env=env, cwd=cwd)
