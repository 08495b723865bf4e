"""How a message shows a list that may be long: the first few, then how many more."""

from __future__ import annotations

from typing import Sequence


def first(items: Sequence[str], most: int, sep: str = ", ") -> str:
    """The first ``most`` of ``items`` joined by ``sep``, then ``<sep>... N more`` when there are more."""
    return sep.join(items[:most]) + (f"{sep}... {len(items) - most} more" if len(items) > most else "")
