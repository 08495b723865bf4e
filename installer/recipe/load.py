"""A recipe file (``recipes/<name>.toml``) loaded into one frozen :class:`Recipe`.

Each section has its parser next to its dataclass (:mod:`.forks`, :mod:`.env`, :mod:`.cuda`,
:mod:`.wheel`, :mod:`.preflight`, :mod:`.jit`, :mod:`.models`, :mod:`.smoke`, :mod:`.install`); this module reads the top level and calls them in file order, so
the first problem found is the one reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..core.errors import RecipeNotFound
from ..core.hashing import sha256_file
from ..core.resources import DATA_ROOT
from .cuda import CudaPin, parse_cuda
from .env import Sources, TorchPin, parse_build, parse_python, parse_sources, parse_torch
from .forks import SAFE_NAME, Fork, ForkUse, load_forks, parse_fork_uses
from .install import InstallPolicy, parse_install
from .jit import derive_jit, parse_jit
from .jitmodules import DEFAULT_ROUTES, JitModule
from .models import ModelSelection, parse_models
from .preflight import PreflightLimits, parse_preflight
from .smoke import SmokeConfig, parse_smoke
from .tomlcheck import Table, check_format, read_toml
from .wheel import BaseWheel, parse_wheel

PROJECT_ROOT = DATA_ROOT  # recipes/, forks.toml, receipts/, locks/: see october.installer.core.resources


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    sha256: str
    description: str
    python: str
    torch: TorchPin
    build_requirements: tuple[str, ...]
    sources: Sources
    forks: tuple[ForkUse, ...]
    cuda: CudaPin | None
    wheel: BaseWheel | None
    preflight: PreflightLimits
    jit: tuple[JitModule, ...]
    models: Mapping[str, ModelSelection]
    smoke: SmokeConfig
    jit_builder: str | None = None  # module run as `python -m` in the stack env; None: the FlashInfer builder
    install: InstallPolicy = field(default_factory=InstallPolicy)  # [install]: supply, exceptions
    jit_routes: tuple[str, ...] = DEFAULT_ROUTES

    def fork(self, name: str) -> ForkUse:
        for f in self.forks:
            if f.name == name:
                return f
        raise KeyError(name)


def resolve_recipe_path(name_or_path: str, root: Path = PROJECT_ROOT) -> Path:
    """``current`` -> ``<root>/recipes/current.toml``; a path ending in .toml is used as is."""
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        return Path(name_or_path).expanduser().resolve()
    return root / "recipes" / f"{name_or_path}.toml"


def load_recipe(name_or_path: str, root: Path = PROJECT_ROOT) -> Recipe:
    path = resolve_recipe_path(name_or_path, root)
    if not path.exists():
        available = sorted(p.stem for p in (root / "recipes").glob("*.toml"))
        raise RecipeNotFound(name_or_path, path, available=available)
    top = Table(path, read_toml(path), "")
    check_format(top)
    name = _recipe_name(top)
    description = top.get("description", str, required=False, default="")
    forks_path, known_forks = _known_forks(top, root)
    python, torch = parse_python(top), parse_torch(top)
    build_requirements, sources = parse_build(top), parse_sources(top)
    forks = parse_fork_uses(top, known_forks, forks_path.name)
    cuda, wheel, preflight = parse_cuda(top), parse_wheel(top), parse_preflight(top)
    jit = parse_jit(top)
    models = parse_models(top, for_jit=jit is not None)
    smoke, install = parse_smoke(top), parse_install(top)
    top.done()
    modules: tuple[JitModule, ...] = ()
    if jit is not None:
        modules, models = derive_jit(path, jit.modules, models, jit.routes)
    return Recipe(name=name, path=path, sha256=sha256_file(path), description=description, python=python,
                  torch=torch, build_requirements=build_requirements, sources=sources, forks=forks, cuda=cuda,
                  wheel=wheel, preflight=preflight, jit=modules, models=models, smoke=smoke,
                  jit_builder=jit.builder if jit is not None else None, install=install,
                  jit_routes=jit.routes if jit is not None else DEFAULT_ROUTES)


def _recipe_name(top: Table) -> str:
    name: str = top.get("name", str)
    if not SAFE_NAME.match(name):
        raise top.err("name", "a plain name: letters, digits, '.', '_' or '-', starting with a letter or "
                      "digit, at most 64 characters (it names files: locks/<name>.pylock.toml)", name)
    return name


def _known_forks(top: Table, root: Path) -> tuple[Path, dict[str, Fork]]:
    """``forks_file`` (relative to the recipe; default ``<root>/forks.toml``) and the forks it defines."""
    forks_file = top.get("forks_file", str, required=False, default=None)
    forks_path = (top.file.parent / forks_file).resolve() if forks_file else root / "forks.toml"
    return forks_path, load_forks(forks_path)


def with_kit(recipe: Recipe, kit_root: Path) -> Recipe:
    """The recipe as a stack set up from the kit at ``kit_root`` uses it: packages from the kit's wheels
    only (no index, no torch index); nothing else changes.  Reads nothing in the kit (the no-op fast path
    uses it too; the full command line verifies the kit first, :func:`october.installer.kit.use.open_kit`)."""
    import dataclasses

    from .env import Sources

    return dataclasses.replace(recipe, sources=Sources(no_index=True, find_links=(str(kit_root / "wheels"),)),
                               torch=dataclasses.replace(recipe.torch, index_url=None))
