"""The real tier's sources are present and are what ../shared/real-forks/README.md says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

FLASHINFER_PR3812_HEAD = "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"
CCCL_PINNED = "876867684f7fac130e0f5911236e0a92a970d4fd"


def _rev(git_dir: Path, ref: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", ref], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_real_mirror_holds_the_20260702_flashinfer_and_its_cccl(real_mirror: Path) -> None:
    fi = real_mirror / "github.com" / "flashinfer-ai" / "flashinfer.git"
    assert _rev(fi, "refs/pull/3812/head") == FLASHINFER_PR3812_HEAD
    cccl = real_mirror / "github.com" / "NVIDIA" / "cccl.git"
    assert _rev(cccl, "HEAD") == CCCL_PINNED
