"""``[preflight]``: what the machine must have before anything is fetched or built."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from .tomlcheck import Table

GB_BOUNDS = (0.0, 1e6)      # GB: nothing below zero, nothing past a petabyte (NaN and inf are refused)


@dataclass(frozen=True)
class PreflightLimits:
    os: str = "Linux"
    arch: str = "x86_64"
    min_ram_gb: float = 0.0
    min_disk_gb: float = 0.0
    min_compute_capability: str | None = None
    uv: str | None = None   # a specifier, e.g. ">=0.8.17"
    need_compiler: bool = True


def parse_preflight(top: Table) -> PreflightLimits:
    pt = top.table("preflight", required=False)
    if pt is None:
        return PreflightLimits()
    uvspec = pt.get("uv", str, required=False)
    if uvspec is not None:
        try:
            SpecifierSet(uvspec)
        except InvalidSpecifier:
            raise pt.err("uv", "a version specifier such as '>=0.8.17'", uvspec) from None
    limits = PreflightLimits(
        os=pt.get("os", str, required=False, default="Linux"),
        arch=pt.get("arch", str, required=False, default="x86_64"),
        min_ram_gb=pt.get("min_ram_gb", float, required=False, default=0.0, bounds=GB_BOUNDS),
        min_disk_gb=pt.get("min_disk_gb", float, required=False, default=0.0, bounds=GB_BOUNDS),
        min_compute_capability=pt.get("min_compute_capability", str, required=False),
        uv=uvspec,
        need_compiler=pt.get("need_compiler", bool, required=False, default=True))
    mcc = limits.min_compute_capability
    if mcc is not None and not re.match(r"^\d+\.\d+$", mcc):
        raise pt.err("min_compute_capability", "a compute capability major.minor such as '8.9'", mcc)
    pt.done()
    return limits
