"""Recipes and forks as data: TOML files validated against the typed models of :mod:`.spec` (which also
publish the JSON Schema, :mod:`.schema`), then built into frozen dataclasses by one module per section
(:mod:`.forks`, :mod:`.env`, :mod:`.cuda`, :mod:`.wheel`, :mod:`.preflight`, :mod:`.smoke`, :mod:`.jit`,
:mod:`.models`, :mod:`.install`); :mod:`.load` ties them together in :func:`load_recipe`.
"""

from __future__ import annotations

from .cuda import ComputeCapability, CudaPin, parse_arch_list
from .env import Sources, TorchPin
from .forks import FORK_MODES, Fork, ForkMode, ForkUse, ModeTraits, Pin, SdistSource, load_forks
from .jitmodules import JitModule
from .load import Recipe, load_recipe, remember_checked, resolve_recipe_path, with_kit
from .models import MODEL_FORMATS, ModelSelection
from .preflight import PreflightLimits
from .smoke import SmokeConfig
from .tomlcheck import SharedMark
from .wheel import DEFAULT_COMPILED_SOURCES, BaseWheel

__all__ = ["with_kit", "FORK_MODES", "ForkMode", "ModeTraits", "DEFAULT_COMPILED_SOURCES", "MODEL_FORMATS",
           "BaseWheel", "ComputeCapability", "CudaPin", "Fork", "ForkUse", "JitModule",
           "ModelSelection", "Pin", "PreflightLimits", "Recipe", "SdistSource", "SharedMark", "SmokeConfig", "Sources", "TorchPin",
           "load_forks", "load_recipe", "remember_checked", "parse_arch_list", "resolve_recipe_path"]
