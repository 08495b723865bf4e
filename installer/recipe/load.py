"""A recipe file (``recipes/<name>.toml``) loaded into one frozen :class:`Recipe`: validated with its
forks.toml against the models first (:mod:`.spec`), then built section by section."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.errors import RecipeError, RecipeNotFound
from ..core.hashing import sha256_file
from ..core.resources import DATA_ROOT
from .cuda import CudaPin, parse_cuda
from .env import Sources, TorchPin, parse_build, parse_python, parse_sources, parse_torch
from .forks import ForkUse, forks_of, parse_fork_uses
from .install import InstallPolicy, parse_install
from .jit import derive_jit, parse_jit
from .jitmodules import DEFAULT_ROUTES, JitModule
from .models import ModelSelection, parse_models
from .preflight import PreflightLimits, parse_preflight
from .smoke import SmokeConfig, parse_smoke
from .tomlcheck import SharedMark, read_toml, remember, validated
from .wheel import BaseWheel, parse_wheel

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
    kit: str | None = None          # the kit whose wheels are the sources (:func:`with_kit`): its folder
    # the digest of this content when this process validated it or a signed shared mark vouched for it (None: a
    # stack's marker was trusted instead)
    validated_digest: str | None = field(default=None, compare=False, repr=False)
    validated_here: bool = field(default=False, compare=False, repr=False)     # by the models, in this process

    def fork(self, name: str) -> ForkUse:
        return {f.name: f for f in self.forks}[name]


def resolve_recipe_path(name_or_path: str, root: Path = DATA_ROOT) -> Path:
    """``current`` -> ``<root>/recipes/current.toml``; a path ending in .toml is used as is."""
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        return Path(name_or_path).expanduser().resolve()
    return root / "recipes" / f"{name_or_path}.toml"


def load_recipe(name_or_path: str, root: Path = DATA_ROOT, *, checked: Path | None = None,
                shared: SharedMark | Callable[[], SharedMark | None] | None = None) -> Recipe:
    """The recipe, validated against its models unless ``checked`` (a stack's ``.state/recipe-checked``)
    records that this content passed there before, or ``shared`` (the cache's marks) holds a mark signed for it
    (:func:`.tomlcheck.validated`)."""
    path = resolve_recipe_path(name_or_path, root)
    if not path.exists():
        available = sorted(p.stem for p in (root / "recipes").glob("*.toml"))
        raise RecipeNotFound(name_or_path, path, available=available)
    top = read_toml(path)
    forks_path = _forks_path(path, top, root)
    try:
        forks_data, forks_error = read_toml(forks_path), None
    except RecipeError as exc:     # reported once the recipe itself is known to be well formed
        forks_data, forks_error = None, exc
        if not forks_path.exists():        # named by the recipe's forks_file (or the default beside recipes/)
            said = top.get("forks_file")
            forks_error = RecipeError(path, "forks_file", expected=f"the forks file {forks_path} (forks_file = "
                                      f"{said!r}, relative to the recipe)" if isinstance(said, str) and said else
                                      f"the forks file {forks_path} (no forks_file in the recipe: the default)",
                                      found="no such file",
                                      fix=f"set forks_file in {path} to the path of your forks.toml, relative to "
                                          "the recipe, or put forks.toml there")
    digest, source = validated([(path, top, "RecipeFile"), (forks_path, forks_data, "ForksFile")], checked, shared)
    if forks_error is not None:
        raise forks_error
    assert forks_data is not None
    forks = parse_fork_uses(path, top["forks"], forks_of(forks_data), forks_path.name)
    jit, models = parse_jit(top), parse_models(top)
    modules: tuple[JitModule, ...] = ()
    if jit is not None:
        modules, models = derive_jit(path, jit.modules, models, jit.routes)
    return Recipe(name=top["name"], path=path, sha256=sha256_file(path), description=top.get("description", ""),
                  python=parse_python(top), torch=parse_torch(top), build_requirements=parse_build(top),
                  sources=parse_sources(path, top), forks=forks, cuda=parse_cuda(top), wheel=parse_wheel(top),
                  preflight=parse_preflight(top), jit=modules, models=models, smoke=parse_smoke(top),
                  jit_builder=jit.builder if jit is not None else None, install=parse_install(top),
                  jit_routes=jit.routes if jit is not None else DEFAULT_ROUTES,
                  # a load writes nothing (remember_checked does)
                  validated_digest=digest if source != "stack" else None, validated_here=source == "models")


def remember_checked(recipe: Recipe, checked: Path, shared: SharedMark | None = None) -> None:
    """Mark in a stack (``checked``: its ``.state/recipe-checked``) that ``recipe`` passed the models (in this
    process, or as a signed shared mark says), so its no-op re-runs skip them; nothing when the load trusted
    the stack's own marker.  Content the models passed in this process is marked in ``shared`` too."""
    if recipe.validated_digest is not None:
        remember(checked, recipe.validated_digest)
        if recipe.validated_here and shared is not None:
            shared.add(recipe.validated_digest)


def _forks_path(path: Path, top: Mapping[str, Any], root: Path) -> Path:
    """``forks_file`` (relative to the recipe; default ``<root>/forks.toml``)."""
    forks_file = top.get("forks_file")
    return (path.parent / forks_file).resolve() if isinstance(forks_file, str) and forks_file else root / "forks.toml"


def with_kit(recipe: Recipe, kit_root: Path) -> Recipe:
    """The recipe with packages from the kit's wheels only (no index, no torch index).  Reads nothing in the
    kit: the no-op fast path uses it too (the full command verifies the kit first)."""
    return replace(recipe, sources=Sources(no_index=True, find_links=(str(kit_root / "wheels"),)),
                   torch=replace(recipe.torch, index_url=None), kit=str(kit_root))
