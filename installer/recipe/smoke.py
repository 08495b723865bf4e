"""``[smoke]``: the level the smoke run checks at by default, and the size of its generation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SmokeConfig:
    level: str | None = None
    prompt_tokens: int = 8192
    max_new_tokens: int = 128
    seed: int = 0


def parse_smoke(top: Mapping[str, Any]) -> SmokeConfig:
    return SmokeConfig(**top.get("smoke", {}))
