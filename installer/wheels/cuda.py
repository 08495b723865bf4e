"""The ``cuda-variant`` check: which CUDA a vLLM wheel was built for (its ``+cuNNN`` local version
and the ``libcudart`` its shared objects need), against the recipe's CUDA variant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from packaging.version import InvalidVersion, Version

from .expect import Problems, WheelExpectation
from .scan import WheelScan

# "libcudart.so.12", or an auditwheel-style bundled copy "libcudart-1a2b3c4d.so.12"
_CUDART = re.compile(r"^libcudart(?:-[0-9a-f]+)?\.so\.(\d+)(?:\.|$)")
_CU_LOCAL = re.compile(r"^cu(\d+)$")


@dataclass(frozen=True)
class CudaFacts:
    local_variant: str | None                     # "cu129" from a "+cu129" local version
    cudart: Mapping[str, tuple[str, ...]]         # .so member -> the libcudart sonames it needs
    unreadable: Mapping[str, str]                 # .so member -> why its ELF could not be read

    @property
    def cudart_majors(self) -> frozenset[str]:
        return frozenset(m.group(1) for libs in self.cudart.values() for lib in libs
                         if (m := _CUDART.match(lib)))


def expected_cudart_major(expect: WheelExpectation) -> str | None:
    if expect.cudart_major:
        return expect.cudart_major
    m = _CU_LOCAL.match(expect.cuda_variant or "")
    return m.group(1)[:-1] if m and len(m.group(1)) >= 3 else None   # cu129 -> "12", cu130 -> "13"


def wheel_cuda_facts(scan: WheelScan, metadata_version: str | None) -> CudaFacts:
    """What a vLLM wheel tells about the CUDA it was built for.

    This is the one place that encodes that assumption.  A vLLM CUDA wheel shows
    its CUDA build in two ways:

    * the ``+cuNNN`` local version segment, which vLLM's ``setup.py`` appends
      when the build's CUDA differs from ``VLLM_MAIN_CUDA_VERSION`` (wheels on the
      GitHub release / wheels.vllm.ai, e.g. ``0.18.0+cu130``); the PyPI wheel is
      the main-CUDA build and carries no local segment;
    * the ``DT_NEEDED`` entries of its compiled extensions (``vllm/_C.abi3.so`` on
      0.18.0, ``vllm/_C_stable_libtorch.abi3.so`` on 0.24.0, ``_moe_C``, the
      flash-attention modules, ...): CUDA 12 builds need ``libcudart.so.12``, CUDA 13
      builds ``libcudart.so.13``.

    So the local segment (when present) gives the exact variant and the ELF
    entries give the CUDA runtime major; a wheel showing neither fails closed.
    """
    try:
        local = (Version(metadata_version).local or "") if metadata_version else ""
    except InvalidVersion:
        local = ""
    local_variant = next((p for p in reversed(local.split(".")) if _CU_LOCAL.match(p)), None)   # the last one
    cudart: dict[str, tuple[str, ...]] = {}
    unreadable: dict[str, str] = {}
    for name, member in scan.members.items():
        if member.elf_error is not None:
            unreadable[name] = member.elf_error
        elif member.elf is not None:
            found = tuple(lib for lib in member.elf.needed if _CUDART.match(lib))
            if found:
                cudart[name] = found
    return CudaFacts(local_variant, cudart, unreadable)


def check_cuda(facts: CudaFacts, expect: WheelExpectation, problems: Problems) -> None:
    variant, major = expect.cuda_variant, expected_cudart_major(expect)
    if facts.local_variant and variant and facts.local_variant != variant:
        problems.add("cuda-variant", f"the wheel's version says CUDA variant {facts.local_variant}: "
                                     f"expected {variant}, found {facts.local_variant}")
    majors = facts.cudart_majors
    if major and majors and majors != {major}:
        wrong = [f"{so} needs {', '.join(libs)}" for so, libs in sorted(facts.cudart.items())
                 if any((m := _CUDART.match(lib)) and m.group(1) != major for lib in libs)]
        problems.add_many("cuda-variant", [f"expected libcudart.so.{major} ({variant or 'recipe'}), found: {w}"
                                           for w in wrong])
    for so, why in sorted(facts.unreadable.items()):
        problems.add("cuda-variant", f"{so} is not a readable ELF shared object ({why}): expected one")
    if not majors and not facts.local_variant:
        problems.add("cuda-variant", f"cannot tell the wheel's CUDA build: expected libcudart.so.{major or 'N'} "
                                     "in the DT_NEEDED of its .so files or a +cuNNN local version, found neither")
