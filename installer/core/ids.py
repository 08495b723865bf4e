"""The shapes of the identifiers the tool checks: git commit ids and sha256 digests (standard library only)."""

from __future__ import annotations

import re

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")   # a full git commit id (or hub revision): 40 lowercase hex
SHA256 = re.compile(r"^[0-9a-f]{64}$")     # a sha256 digest: 64 lowercase hex
