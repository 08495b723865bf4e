"""Atomic file writes (temp file in the same directory, fsync, then replace), re-exported from the
stdlib-only :mod:`october.checks.contract`, which the checks in the stack env use too."""

from __future__ import annotations

from ...checks.contract import write_bytes_atomic, write_json_atomic, write_text_atomic

__all__ = ["write_bytes_atomic", "write_json_atomic", "write_text_atomic"]
