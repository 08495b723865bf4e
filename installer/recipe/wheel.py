"""``[wheel]``: the upstream base wheel the vLLM fork's compiled parts come from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What vLLM's build compiles into the base wheel's .so files: csrc/ (kernels, bindings), CMakeLists.txt and
# cmake/ (flags, arch lists, the external projects pinned by GIT_TAG); setup.py only drives CMake.
DEFAULT_COMPILED_SOURCES = ("csrc", "CMakeLists.txt", "cmake")


@dataclass(frozen=True)
class BaseWheel:
    url: str
    filename: str
    name: str
    version: str
    sha256: str | None      # None: trust on first use, recorded in the lock
    cuda_variant: str | None = None
    cudart_major: str | None = None
    requires_torch: str | None = None
    compiled_sources: tuple[str, ...] = DEFAULT_COMPILED_SOURCES   # compared at wheel and fork commits


def parse_wheel(top: Mapping[str, Any]) -> BaseWheel | None:
    if "wheel" not in top:
        return None
    wt = top["wheel"]       # validated: its keys are BaseWheel's fields
    return BaseWheel(**{"sha256": None, **wt,
                        "compiled_sources": tuple(wt.get("compiled_sources") or DEFAULT_COMPILED_SOURCES)})
