"""``[preflight]``: what the machine must have before anything is fetched or built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PreflightLimits:
    os: str = "Linux"
    arch: str = "x86_64"
    min_ram_gb: float = 0.0
    min_disk_gb: float = 0.0
    min_compute_capability: str | None = None
    uv: str | None = None   # a specifier, e.g. ">=0.12.11"
    need_compiler: bool = True


def parse_preflight(top: Mapping[str, Any]) -> PreflightLimits:
    pt = top.get("preflight", {})
    return PreflightLimits(**{k: float(v) if k.endswith("_gb") else v for k, v in pt.items()})
