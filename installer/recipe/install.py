"""The install policy: ``[install]`` (``supply``: runtime needs of a ``--no-deps`` fork, installed with the
torch constraint; ``[[install.exceptions]]``: a requirement the finished env leaves unmet on purpose), and
the build environment a ``[[forks]]`` entry may set (``build_env``)."""

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
    it = top.get("install", {})
    return InstallPolicy(supply=tuple(it.get("supply", ())), exceptions=tuple(
        DeclaredException(str(canonicalize_name(e["package"])), str(canonicalize_name(e["requires"])), e["why"])
        for e in it.get("exceptions", ())))


def as_json(policy: InstallPolicy) -> Mapping[str, Any]:
    return {"supply": list(policy.supply), "exceptions": [asdict(e) for e in policy.exceptions]}
