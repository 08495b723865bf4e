"""The shapes of git commit ids and sha256 digests, from the stdlib-only contract both interpreters
share (``checks/scales.py`` checks the same revision shape inside the stack env)."""

from __future__ import annotations

from ...checks.contract import FULL_SHA, SHA256

__all__ = ["FULL_SHA", "SHA256"]
