"""``[cuda]``: the toolkit nvcc must report, the architectures the JIT modules are built for (parsed once,
here, into :class:`ComputeCapability` values), the wheel variant."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ARCH_ITEM = re.compile(r"^(\d+)\.(\d+)([a-z]?)(\+PTX)?$")
ARCH_SEPARATORS = re.compile(r"[\s;,]+")


@dataclass(frozen=True, order=True)
class ComputeCapability:
    """One entry of ``[cuda].arch_list``: ``9.0``, ``9.0a`` (arch-specific features), ``10.0+PTX``."""

    major: int
    minor: int
    suffix: str = ""        # "a" / "f": nvcc's sm_90a-style variant; "" the plain architecture
    ptx: bool = False       # "+PTX": PTX embedded as well

    @classmethod
    def parse(cls, text: str) -> ComputeCapability:
        m = ARCH_ITEM.match(text)
        if m is None:
            raise ValueError(f"{text!r} is not a compute capability such as '9.0' or '9.0a'")
        return cls(int(m.group(1)), int(m.group(2)), m.group(3), m.group(4) is not None)

    @property
    def pair(self) -> tuple[int, int]:
        """(major, minor): what a GPU reports; the suffixes only say how the code is built for it."""
        return (self.major, self.minor)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}{'+PTX' if self.ptx else ''}"


def parse_arch_list(text: str) -> tuple[ComputeCapability, ...]:
    """``"8.9 9.0a"`` (spaces, ';' or ',' between) -> the capabilities, in order; ValueError when empty or bad."""
    items = [x for x in ARCH_SEPARATORS.split(text.strip()) if x]
    if not items:
        raise ValueError("no compute capability")
    return tuple(ComputeCapability.parse(x) for x in items)


@dataclass(frozen=True)
class CudaPin:
    version: str                                # toolkit major.minor nvcc must report, e.g. "12.9"
    arch_list: tuple[ComputeCapability, ...]    # what the JIT modules are built for, e.g. (9.0,)
    variant: str                                # wheel CUDA variant, e.g. "cu129"

    @property
    def flashinfer_arch_list(self) -> str:
        """The ``FLASHINFER_CUDA_ARCH_LIST`` value: the capabilities joined by single spaces (FlashInfer
        splits the variable on " ")."""
        return " ".join(str(c) for c in self.arch_list)

    def as_recipe(self) -> dict[str, str]:
        """The table as the recipe states it (arch_list in its canonical spelling): JSON for fingerprints."""
        return {"version": self.version, "arch_list": self.flashinfer_arch_list, "variant": self.variant}


def parse_cuda(top: Mapping[str, Any]) -> CudaPin | None:
    if "cuda" not in top:
        return None
    ct = top["cuda"]
    return CudaPin(version=ct["version"], arch_list=parse_arch_list(ct["arch_list"]), variant=ct["variant"])
