"""Where the tool puts things: the one default cache, uv's cache beside the stack."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from october.installer.core.paths import StackPaths, default_cache_dir
from october.installer.pyenv.uvcmd import choose_uv_cache


def test_default_cache_dir_honours_the_environment(tmp_path: Path) -> None:
    assert default_cache_dir({"OCTOBER_CACHE_DIR": str(tmp_path / "c")}) == tmp_path / "c"
    assert default_cache_dir({}).name == "october"
    assert default_cache_dir({"OCTOBER_CACHE_DIR": ""}).name == "october"


def test_uv_cache_is_in_the_cache_on_one_filesystem(tmp_path: Path) -> None:
    paths = StackPaths(tmp_path / "stack")
    assert choose_uv_cache(tmp_path / "cache", paths) == tmp_path / "cache" / "uv"
    assert not paths.uv_cache.exists()


def test_uv_cache_moves_under_the_stack_across_filesystems(tmp_path: Path) -> None:
    """/dev/shm (tmpfs) is another filesystem than the test's tmp dir: uv's cache must then live in
    the stack (found and removed with it), never beside it."""
    if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a filesystem of its own")
    other = Path(tempfile.mkdtemp(prefix="october-cache-", dir="/dev/shm"))
    try:
        paths = StackPaths(tmp_path / "stack")
        got = choose_uv_cache(other, paths)
        assert got == paths.root / ".uv-cache" and got.is_dir()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["stack"]   # nothing beside the stack
    finally:
        shutil.rmtree(other, ignore_errors=True)
