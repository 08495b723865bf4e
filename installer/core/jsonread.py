"""JSON from a file someone else may have written (a shared cache, a kit, a stack's records): malformed is
malformed however it is malformed.  ``json.loads`` raises RecursionError, not ValueError, on deep nesting, so a
planted ``[[[[...`` of a few thousand brackets slipped past every ``except ValueError`` and ended a run with a
traceback (exit 70) for every stack that read it.  The reader is the stdlib-only contract's, shared with the
stack side (``checks/``)."""

from __future__ import annotations

from ...checks.contract import json_loads as loads

__all__ = ["loads"]
