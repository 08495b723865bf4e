"""Atomic file writes (temp file in the same directory, fsync, then replace).

One implementation for both interpreters: it lives in :mod:`october.checks.contract` (standard library
only, so the checks in the stack env write their receipt with it too) and is re-exported here
for the tool's modules.
"""

from __future__ import annotations

from ...checks.contract import write_bytes_atomic, write_json_atomic, write_text_atomic

__all__ = ["write_bytes_atomic", "write_json_atomic", "write_text_atomic"]
