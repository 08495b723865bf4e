"""What the checks of :func:`october.installer.wheels.verify.verify_wheel` share: the check
names, what the recipe and the stack Python expect of the wheel, the list every check adds its
problems to, and the one way to read a member of the zip.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from typing import Mapping

CHECKS = ("zip", "filename", "tags", "metadata", "torch-pin", "record", "paths", "cuda-variant")
MAX_LISTED = 12


@dataclass(frozen=True)
class WheelExpectation:
    filename: str
    name: str
    version: str
    supported_tags: frozenset[str]
    marker_env: Mapping[str, str] | None = None   # the stack Python's PEP 508 environment
    torch: str | None = None                      # torch version the wheel must pin ("2.10.0+cu128" ok)
    cuda_variant: str | None = None               # "cu129"
    cudart_major: str | None = None               # "12"; derived from cuda_variant when None
    python_version: tuple[int, int] | None = None # the stack Python, for which extension files it loads


@dataclass
class Problems:
    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, check: str, text: str) -> None:
        self.items.append((check, text))

    def add_many(self, check: str, texts: list[str]) -> None:
        for text in texts[:MAX_LISTED]:
            self.add(check, text)
        if len(texts) > MAX_LISTED:
            self.add(check, f"... and {len(texts) - MAX_LISTED} more")


def read_member(zf: zipfile.ZipFile, name: str) -> bytes | None:
    try:
        return zf.read(name)
    except KeyError:
        return None
