"""``[smoke]``: the level the smoke run checks at by default, and the size of its generation."""

from __future__ import annotations

from dataclasses import dataclass

from ...checks.contract import LEVELS
from .tomlcheck import Table

MAX_TOKENS = 1 << 20        # a smoke prompt or generation longer than this is a typo, not a test


@dataclass(frozen=True)
class SmokeConfig:
    level: str | None = None
    prompt_tokens: int = 8192
    max_new_tokens: int = 128
    seed: int = 0


def parse_smoke(top: Table) -> SmokeConfig:
    smt = top.table("smoke", required=False)
    if smt is None:
        return SmokeConfig()
    level = smt.get("level", str, required=False)
    if level is not None and level not in LEVELS:
        raise smt.err("level", "one of kernel, engine, reference", level)
    smoke = SmokeConfig(level=level,
                        prompt_tokens=smt.get("prompt_tokens", int, required=False, default=8192),
                        max_new_tokens=smt.get("max_new_tokens", int, required=False, default=128),
                        seed=smt.get("seed", int, required=False, default=0, bounds=(0, 2**32 - 1)))
    for key in ("prompt_tokens", "max_new_tokens"):
        if getattr(smoke, key) <= 0:
            raise smt.err(key, "a positive number of tokens", getattr(smoke, key))
        if getattr(smoke, key) > MAX_TOKENS:
            raise smt.err(key, f"at most {MAX_TOKENS} tokens", getattr(smoke, key))
    smt.done()
    return smoke
