"""JSON from a file someone else may have written (a shared cache, a kit, a stack's records): malformed is
malformed however it is malformed.  ``json.loads`` raises RecursionError, not ValueError, on deep nesting, so a
planted ``[[[[...`` of a few thousand brackets slipped past every ``except ValueError`` and ended a run with a
traceback (exit 70) for every stack that read it."""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; nesting too deep to decode is a :class:`json.JSONDecodeError` too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to decode", text if isinstance(text, str) else "", 0) from None
