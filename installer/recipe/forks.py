"""``forks.toml`` (the forks october knows, with named pins) and a recipe's ``[[forks]]`` entries."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from packaging.utils import canonicalize_name

from ...checks.contract import PROMISES
from ..core.errors import RecipeError
from .tomlcheck import describe, read_toml, validated


class ForkMode(StrEnum):
    """How a recipe's fork is installed (``mode = "..."`` in its ``[[forks]]`` entry)."""

    EDITABLE = "editable"                   # an editable install, built as its build backend says
    VLLM_PRECOMPILED = "vllm-precompiled"   # vLLM's editable install over the recipe's verified base wheel
    FLASHINFER = "flashinfer"               # FlashInfer's editable install, whose kernels the jit step builds


@dataclass(frozen=True)
class ModeTraits:
    """What a fork's install mode means to every step (:data:`FORK_MODES`: a new mode is one row there)."""

    promise: str | None = None          # the smoke level a stack with such a fork promises
    base_wheel: bool = False            # built over the verified vLLM base wheel (VLLM_USE_PRECOMPILED): the
                                        # wheel step verifies it, a kit carries it, its upstream base is fetched
    own_deps: bool = True               # installed with its dependencies (else --no-deps, after the others)
    jit_checkout: bool = False          # the checkout the jit step builds from and whose AOT directory it fills
    import_check: bool = False          # ``import <fork name>`` after install must load this checkout
    replaces_dist: str | None = None    # the index distribution the fork's install replaces (lock check)


FORK_MODES: Mapping[ForkMode, ModeTraits] = MappingProxyType({
    ForkMode.EDITABLE: ModeTraits(),
    ForkMode.VLLM_PRECOMPILED: ModeTraits(promise="engine", base_wheel=True),
    ForkMode.FLASHINFER: ModeTraits(promise="kernel", own_deps=False, jit_checkout=True, import_check=True,
                                    replaces_dist="flashinfer-python"),
})
INSTALL_MODES = tuple(m.value for m in ForkMode)


def traits_of(mode: str) -> ModeTraits:
    """The traits of a recorded mode (an install result's); one this tool does not know has none."""
    try:
        return FORK_MODES[ForkMode(mode)]
    except ValueError:
        return ModeTraits()

# What a stack promises the smoke, in ascending order, and what says so: a fork's install mode, its name,
# or the distribution it installed as (one rule for the setup receipt and the smoke: :func:`promise_of`).
PROMISE_LEVELS = PROMISES
_PROMISE_BY = {"mode": {m.value: t.promise for m, t in FORK_MODES.items() if t.promise},
               "name": {"vllm": "engine", "flashinfer": "kernel"},
               "dist": {"vllm": "engine", "flashinfer-python": "kernel"}}


def promise_of(forks: "list[Mapping[str, Any]] | tuple[Mapping[str, Any], ...]") -> str | None:
    """The highest level any fork's ``mode``, ``name`` or ``dist`` gives (None: nothing to check).  Taking
    the highest means no one piece of evidence can lower the promise: a vLLM fork in mode ``editable``
    under another name is still the engine when it installed the ``vllm`` distribution."""
    return highest({_PROMISE_BY[key].get(str(canonicalize_name(str(f.get(key) or ""))) if key == "dist"
                                         else str(f.get(key) or "").lower()) for f in forks for key in _PROMISE_BY})


def highest(levels: "set[Any]") -> str | None:
    """The highest of ``levels`` that is a promise level (None: none is)."""
    return next((lv for lv in reversed(PROMISE_LEVELS) if lv in levels), None)


@dataclass(frozen=True)
class SdistSource:
    """A released source distribution a pin is made from (``{sdist = URL, ...}``): the fetch step commits its
    files into a local repository tagged ``v<version>`` (:mod:`october.installer.git.sdist`), deterministically."""

    url: str
    sha256: str
    version: str

    @property
    def filename(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Pin:
    """A commit: a full 40-hex id, or a prefix that must be resolved on ``branch``."""

    name: str
    commit: str
    branch: str | None = None
    fetch_from: str = "fork"   # "upstream": the commit lives in the upstream repo (e.g. a PR head)
    sdist: SdistSource | None = None   # the fork is made from this sdist; ``commit`` is what that makes

    @property
    def is_prefix(self) -> bool:
        return len(self.commit) < 40


@dataclass(frozen=True)
class Fork:
    name: str
    url: str
    upstream: str | None
    pins: Mapping[str, Pin]


@dataclass(frozen=True)
class ForkUse:
    """A fork as a recipe uses it: which pin, and how it is installed."""

    name: str
    url: str
    upstream: str | None
    pin: Pin
    mode: ForkMode = ForkMode.EDITABLE
    deps: bool = True
    build_isolation: bool = True
    submodules: bool = True
    build_env: Mapping[str, str] = field(default_factory=dict)        # [forks.build_env]
    nested_installs: Mapping[str, str] = field(default_factory=dict)  # [forks.nested_installs]: name -> why
    # Which top-level submodules are fetched (each with its nested ones); None: all of them.
    submodule_paths: tuple[str, ...] | None = None
    # Submodules checked out sparse: path -> the directories it keeps.  Fetched as a partial clone in cone
    # mode, so a commit whose copies lack an unused file (a PNG under ``media/``) still checks out; a sparse
    # submodule's nested submodules are not fetched.
    sparse: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def traits(self) -> ModeTraits:
        return FORK_MODES[ForkMode(self.mode)]

    def wants_submodule(self, path: str) -> bool:
        """Whether the submodule at ``path`` (relative to the fork) is fetched."""
        return self.submodules and (self.submodule_paths is None
                                    or any(path == p or path.startswith(p + "/") for p in self.submodule_paths))

    @property
    def fetch_url(self) -> str:
        """The fork's URL, its upstream for pins that say so, or an sdist-made fork's sdist URL (its mirror key)."""
        if self.pin.sdist is not None:
            return self.pin.sdist.url
        if self.pin.fetch_from == "upstream" and self.upstream:
            return self.upstream
        return self.url


# ------------------------------------------------------------------------- forks.toml


def load_forks(path: Path) -> dict[str, Fork]:
    """The forks ``path`` (a forks.toml) defines, validated (:class:`.spec.ForksFile`)."""
    data = read_toml(path)
    validated([(path, data, "ForksFile")], None)
    return forks_of(data)


def forks_of(data: Mapping[str, Any]) -> dict[str, Fork]:
    return {name: Fork(name=name, url=f["url"], upstream=f.get("upstream"),
                       pins={pin: _pin(pin, value) for pin, value in f["pins"].items()})
            for name, f in data["forks"].items()}


def _pin(name: str, value: str | Mapping[str, Any]) -> Pin:
    """``"<40 hex>"``, or a table ``{commit}`` / ``{prefix, branch}`` / ``{sdist, sha256, version, commit}``."""
    if isinstance(value, str):
        return Pin(name=name, commit=value)
    if "sdist" in value:
        return Pin(name=name, commit=value["commit"],
                   sdist=SdistSource(url=value["sdist"], sha256=value["sha256"], version=value["version"]))
    return Pin(name=name, commit=value.get("commit") or value["prefix"], branch=value.get("branch"),
               fetch_from=value.get("fetch_from", "fork"))


# ------------------------------------------------------------------- recipe [[forks]]


def parse_fork_uses(recipe_path: Path, entries: list[Mapping[str, Any]], known: Mapping[str, Fork],
                    forks_file: str) -> tuple[ForkUse, ...]:
    """The recipe's validated ``[[forks]]``, each a fork of ``forks_file`` at one of its pins."""
    return tuple(_fork_use(recipe_path, f"forks[{i}]", entry, known, forks_file) for i, entry in enumerate(entries))


def _fork_use(recipe_path: Path, key: str, ft: Mapping[str, Any], known: Mapping[str, Fork],
              forks_file: str) -> ForkUse:
    fname, pin_name = ft["name"], ft["pin"]
    if fname not in known:
        raise RecipeError(recipe_path, f"{key}.name", expected=f"a fork defined in {forks_file} "
                          f"({', '.join(sorted(known))})", found=describe(fname))
    fork = known[fname]
    if pin_name not in fork.pins:
        raise RecipeError(recipe_path, f"{key}.pin", expected=f"a pin of fork '{fname}' in {forks_file} "
                          f"({', '.join(sorted(fork.pins)) or 'none'})", found=describe(pin_name))
    pin = fork.pins[pin_name]
    submodules = ft.get("submodules", True)
    paths = tuple(p.strip().strip("/") for p in submodules) if isinstance(submodules, list) else None
    return ForkUse(name=fname, url=pin.sdist.url if pin.sdist else fork.url, upstream=fork.upstream, pin=pin,
                   mode=ForkMode(ft.get("mode", ForkMode.EDITABLE.value)), deps=ft.get("deps", True),
                   build_isolation=ft.get("build_isolation", True), build_env=dict(ft.get("build_env", {})),
                   nested_installs={str(canonicalize_name(k)): v for k, v in ft.get("nested_installs", {}).items()},
                   submodules=bool(paths) if paths is not None else submodules, submodule_paths=paths,
                   sparse={k.strip().strip("/"): tuple(d.strip().strip("/") for d in dirs)
                           for k, dirs in ft.get("sparse", {}).items()})
