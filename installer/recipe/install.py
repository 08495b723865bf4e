"""Recipe data for the install: build-time knobs of each fork, what its build backend may not install
by itself, what the forks need that the index must supply, and the intended conflicts of the env.

Recipe keys (validated by :mod:`.spec`, built here for :func:`october.installer.recipe.load_recipe`)::

    [[forks]]
    name = "flashinfer"
    ...
    [forks.build_env]            # set for this fork's `uv pip install` (its build backend reads them)
    BUILD_NVEP = "0"
    [forks.nested_installs]      # packages its build backend tries to install on its own, refused,
    "nvidia-cuda-nvcc" = "why"   # each with the reason the stack does not need it

    [install]
    supply = ["nccl4py>=0.3.1"]  # runtime needs of a --no-deps fork, installed with the torch constraint
    [[install.exceptions]]       # a requirement the finished env leaves unmet on purpose
    package = "vllm"
    requires = "flashinfer-python"
    why = "the FlashInfer fork supersedes vLLM's pin"
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from packaging.utils import canonicalize_name

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables a recipe may not set for a build: they belong to the tool (the nested-install guard, the
# target env) and would switch it off.
RESERVED_ENV = ("PATH", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_CACHE_DIR", "PIP_NO_INDEX",
                "OCTOBER_NESTED_LOG")


@dataclass(frozen=True)
class DeclaredException:
    """``package``'s requirement on ``requires`` is left unmet in the finished env, on purpose."""

    package: str            # canonical distribution name of the requirer
    requires: str           # canonical name of the required distribution
    why: str


@dataclass(frozen=True)
class InstallPolicy:
    supply: tuple[str, ...] = ()
    exceptions: tuple[DeclaredException, ...] = ()


def parse_install(top: Mapping[str, Any]) -> InstallPolicy:
    """``[install]`` (validated): ``supply`` (requirements) and ``[[install.exceptions]]``."""
    it = top.get("install", {})
    return InstallPolicy(supply=tuple(it.get("supply", ())), exceptions=tuple(
        DeclaredException(str(canonicalize_name(e["package"])), str(canonicalize_name(e["requires"])), e["why"])
        for e in it.get("exceptions", ())))


def as_json(policy: InstallPolicy) -> Mapping[str, Any]:
    return {"supply": list(policy.supply), "exceptions": [asdict(e) for e in policy.exceptions]}
