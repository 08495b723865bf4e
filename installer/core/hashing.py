"""sha256 helpers shared by every step."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from ...checks.contract import sha256_file  # one definition, shared with the stack side

__all__ = ["CHUNK", "fingerprint", "sha256_bytes", "sha256_file", "sha256_or_none"]

CHUNK = 1 << 20     # read size for streamed hashing and copying


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_digest(raw: bytes) -> str:
    """A raw digest as a wheel's RECORD writes it: urlsafe base64, no padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def fingerprint(obj: Any) -> str:
    """Stable sha256 of a JSON-able value (keys sorted, no whitespace)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_or_none(path: Path) -> str | None:
    """The sha256 of a regular file (not a link), or None when there is none or it cannot be read."""
    try:
        return sha256_file(path) if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None
