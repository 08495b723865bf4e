"""The lines a reporter prints that other code reads back (a fleet node's progress parses them)."""

from __future__ import annotations


def skip_line(name: str) -> str:
    """What a reporter says for a step that is already done."""
    return f"==> {name}: already done (inputs unchanged)"
