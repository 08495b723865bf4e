"""Recipes and forks as data: TOML files loaded into frozen, validated objects.

One module per part of the recipe file, each holding its dataclass and the parser of its section:

- :mod:`.load`: the top level (``name``, ``description``, ``forks_file``) and :func:`load_recipe`;
- :mod:`.forks`: ``forks.toml`` (forks, pins) and the recipe's ``[[forks]]``;
- :mod:`.env`: ``[python]``, ``[torch]``, ``[build]``, ``[sources]``;
- :mod:`.cuda`: ``[cuda]``, with ``arch_list`` parsed into :class:`ComputeCapability` values;
- :mod:`.wheel`: ``[wheel]``; :mod:`.preflight`: ``[preflight]``; :mod:`.smoke`: ``[smoke]``;
- :mod:`.jit`: ``[jit]`` and the modules derived from the model selections (:mod:`.jitmodules`: the JIT
  module types and their derivation); :mod:`.models`: ``[models.*]``;
- :mod:`.install`: ``[install]`` and the install keys of ``[[forks]]`` (the install policy).

Key-by-key validation lives in :mod:`october.installer.recipe.tomlcheck`.
"""

from __future__ import annotations

from october.installer.recipe.cuda import ComputeCapability, CudaPin, parse_arch_list
from october.installer.recipe.env import Sources, TorchPin
from october.installer.recipe.forks import FORK_MODES, Fork, ForkMode, ForkUse, ModeTraits, Pin, SdistSource, load_forks
from october.installer.recipe.jitmodules import JitModule
from october.installer.recipe.load import PROJECT_ROOT, Recipe, load_recipe, resolve_recipe_path, with_kit
from october.installer.recipe.models import MODEL_FORMATS, ModelSelection
from october.installer.recipe.preflight import PreflightLimits
from october.installer.recipe.smoke import SmokeConfig
from october.installer.recipe.wheel import DEFAULT_COMPILED_SOURCES, BaseWheel

__all__ = ["with_kit", "FORK_MODES", "ForkMode", "ModeTraits", "DEFAULT_COMPILED_SOURCES", "MODEL_FORMATS", "PROJECT_ROOT", "BaseWheel", "ComputeCapability", "CudaPin",
           "Fork", "ForkUse", "JitModule", "ModelSelection", "Pin", "PreflightLimits", "Recipe", "SdistSource", "SmokeConfig",
           "Sources", "TorchPin", "load_forks", "load_recipe", "parse_arch_list", "resolve_recipe_path"]
