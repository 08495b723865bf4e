"""Recipe data for the install: build-time knobs of each fork, what its build backend may not install
by itself, what the forks need that the index must supply, and the intended conflicts of the env.

Recipe keys (parsed here, called from :func:`october.installer.recipe.load_recipe`)::

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
from dataclasses import dataclass
from typing import Any, Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .tomlcheck import Table

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


def _name(t: Table, key: str, value: Any) -> str:
    if not isinstance(value, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", value):
        raise t.err(key, "a distribution name such as 'flashinfer-python'", value)
    return str(canonicalize_name(value))


def parse_build_env(ft: Table) -> dict[str, str]:
    """``[forks.build_env]``: variable -> string value."""
    if "build_env" not in ft.data:
        ft.seen.add("build_env")
        return {}
    bt = ft.table("build_env")
    assert bt is not None
    out: dict[str, str] = {}
    for key in bt.data:
        if not ENV_NAME.match(key) or key in RESERVED_ENV:
            raise bt.err(key, "an environment variable name the tool does not set itself "
                         f"(not {', '.join(RESERVED_ENV)})", key)
        out[key] = bt.get(key, str, what="a string value (quote numbers: BUILD_NVEP = \"0\")")
    return out


def parse_nested_installs(ft: Table) -> dict[str, str]:
    """``[forks.nested_installs]``: package the fork's build backend may *try* to install -> why not needed."""
    if "nested_installs" not in ft.data:
        ft.seen.add("nested_installs")
        return {}
    nt = ft.table("nested_installs")
    assert nt is not None
    out: dict[str, str] = {}
    for key in nt.data:
        why = nt.get(key, str, what="the reason the stack does not need it, as a non-empty string")
        if not why.strip():
            raise nt.err(key, "the reason the stack does not need it, as a non-empty string", why)
        out[_name(nt, key, key)] = why
    return out


def parse_install(top: Table) -> InstallPolicy:
    """``[install]``: ``supply`` (requirements) and ``[[install.exceptions]]``."""
    it = top.table("install", required=False)
    if it is None:
        return InstallPolicy()
    supply = it.str_list("supply", required=False)
    for i, req in enumerate(supply):
        try:
            Requirement(req)
        except InvalidRequirement:
            raise it.err(f"supply[{i}]", "a requirement such as 'nccl4py>=0.3.1'", req) from None
    raw = it.get("exceptions", list, required=False, default=[], what="an array of tables [[install.exceptions]]")
    exceptions: list[DeclaredException] = []
    for i, entry in enumerate(raw):
        et = Table(it.file, entry, f"install.exceptions[{i}]")
        package = _name(et, "package", et.get("package", str))
        requires = _name(et, "requires", et.get("requires", str))
        why = et.get("why", str)
        if not why.strip():
            raise et.err("why", "the reason this requirement is left unmet", why)
        et.done()
        exceptions.append(DeclaredException(package, requires, why))
    pairs = [(e.package, e.requires) for e in exceptions]
    if len(set(pairs)) != len(pairs):
        raise it.err("exceptions", "each (package, requires) pair at most once", pairs)
    it.done()
    return InstallPolicy(supply=supply, exceptions=tuple(exceptions))


def as_json(policy: InstallPolicy) -> Mapping[str, Any]:
    return {"supply": list(policy.supply),
            "exceptions": [{"package": e.package, "requires": e.requires, "why": e.why} for e in policy.exceptions]}
