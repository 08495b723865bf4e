"""Option values both command lines read (the typer one, and the no-op fast path of
:mod:`october.installer.noop`, which must not import typer)."""

from __future__ import annotations

from typing import Sequence


def split_skips(values: Sequence[str]) -> tuple[str, ...]:
    """``--skip-preflight a,b --skip-preflight c`` -> (a, b, c)."""
    return tuple(s for item in values for s in item.split(",") if s)
