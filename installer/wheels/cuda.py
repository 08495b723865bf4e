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
    """What a vLLM wheel tells about the CUDA it was built for: the ``+cuNNN`` local version (appended
    when the build's CUDA is not vLLM's main one; the PyPI wheel has none) gives the exact variant, the
    ``libcudart.so.N`` its extensions need gives the CUDA major; a wheel showing neither fails closed."""
    try:
        local = (Version(metadata_version).local or "") if metadata_version else ""
    except InvalidVersion:
        local = ""
    local_variant = next((p for p in reversed(local.split(".")) if _CU_LOCAL.match(p)), None)   # the last one
    unreadable = {name: m.elf_error for name, m in scan.members.items() if m.elf_error is not None}
    cudart = {name: found for name, m in scan.members.items() if m.elf_error is None and m.elf is not None
              and (found := tuple(lib for lib in m.elf.needed if _CUDART.match(lib)))}
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
