"""Recipes and forks as data: TOML files loaded into frozen, validated objects.

Every key's type, bound and rule is a typed model in :mod:`.spec` (pydantic; imported only to validate,
see :mod:`.tomlcheck`), which also publishes the recipe's JSON Schema (:mod:`.schema`).  One module per
part of the recipe file holds its dataclass and the builder of its section from the validated table:

- :mod:`.load`: the top level (``name``, ``description``, ``forks_file``) and :func:`load_recipe`;
- :mod:`.forks`: ``forks.toml`` (forks, pins) and the recipe's ``[[forks]]``;
- :mod:`.env`: ``[python]``, ``[torch]``, ``[build]``, ``[sources]``;
- :mod:`.cuda`: ``[cuda]``, with ``arch_list`` parsed into :class:`ComputeCapability` values;
- :mod:`.wheel`: ``[wheel]``; :mod:`.preflight`: ``[preflight]``; :mod:`.smoke`: ``[smoke]``;
- :mod:`.jit`: ``[jit]`` and the modules derived from the model selections (:mod:`.jitmodules`: the JIT
  module types and their derivation); :mod:`.models`: ``[models.*]``;
- :mod:`.install`: ``[install]`` and the install keys of ``[[forks]]`` (the install policy).
"""

from __future__ import annotations

from .cuda import ComputeCapability, CudaPin, parse_arch_list
from .env import Sources, TorchPin
from .forks import FORK_MODES, Fork, ForkMode, ForkUse, ModeTraits, Pin, SdistSource, load_forks
from .jitmodules import JitModule
from .load import PROJECT_ROOT, Recipe, load_recipe, remember_checked, resolve_recipe_path, with_kit
from .models import MODEL_FORMATS, ModelSelection
from .preflight import PreflightLimits
from .smoke import SmokeConfig
from .wheel import DEFAULT_COMPILED_SOURCES, BaseWheel

__all__ = ["with_kit", "FORK_MODES", "ForkMode", "ModeTraits", "DEFAULT_COMPILED_SOURCES", "MODEL_FORMATS", "PROJECT_ROOT", "BaseWheel", "ComputeCapability", "CudaPin",
           "Fork", "ForkUse", "JitModule", "ModelSelection", "Pin", "PreflightLimits", "Recipe", "SdistSource", "SmokeConfig",
           "Sources", "TorchPin", "load_forks", "load_recipe", "remember_checked", "parse_arch_list", "resolve_recipe_path"]
