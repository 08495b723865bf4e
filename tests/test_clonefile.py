"""A stack's private copy of a cache file (core/clonefile.py): its own inode with the same bytes and
mode, made by the kernel where it can, by a plain copy where it cannot -- never an empty or short
copy.  Real files on this machine's filesystems (ext4 /tmp: no reflinks, copy_file_range works;
tmpfs /dev/shm: another filesystem, so the kernel refuses with EXDEV; /proc: sizes that say 0)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from october.installer.core.clonefile import clone_or_copy


def _same_copy(src: Path, dest: Path) -> None:
    assert dest.read_bytes() == src.read_bytes()
    assert os.stat(dest).st_ino != os.stat(src).st_ino
    assert os.stat(dest).st_mode & 0o777 == os.stat(src).st_mode & 0o777


def test_a_copy_is_private_with_the_same_bytes_and_mode(tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    data = os.urandom(3 << 20) + b"tail"                  # over the 1 MiB step
    src.write_bytes(data)
    os.chmod(src, 0o751)
    how = clone_or_copy(src, tmp_path / "copy.bin")
    assert how in {"reflink", "copy_file_range", "copy"}
    _same_copy(src, tmp_path / "copy.bin")
    with open(tmp_path / "copy.bin", "r+b") as fh:        # an edit of the copy never reaches the source
        fh.write(b"X")
    assert src.read_bytes() == data and (tmp_path / "copy.bin").read_bytes()[:1] == b"X"
    with pytest.raises(FileExistsError):
        clone_or_copy(src, tmp_path / "copy.bin")


def test_the_kernel_copies_where_the_filesystem_lets_it(tmp_path: Path) -> None:
    if not hasattr(os, "copy_file_range"):
        pytest.skip("no copy_file_range on this platform")
    src = tmp_path / "a.bin"
    src.write_bytes(os.urandom(1 << 20))
    assert clone_or_copy(src, tmp_path / "b.bin") in {"reflink", "copy_file_range"}
    _same_copy(src, tmp_path / "b.bin")


@pytest.mark.parametrize("where", ["another filesystem", "a size that says 0", "an empty file"])
def test_where_the_kernel_cannot_the_copy_is_whole_anyway(tmp_path: Path, where: str) -> None:
    if where == "another filesystem":
        if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("no second filesystem at /dev/shm")
        src = Path("/dev/shm") / f"october-clonefile-{os.getpid()}.bin"
        src.write_bytes(os.urandom(2 << 20))
    elif where == "a size that says 0":
        src = Path("/proc/self/status")     # st_size 0, content there: copy_file_range copies nothing
        assert os.stat(src).st_size == 0
    else:
        src = tmp_path / "empty"
        src.write_bytes(b"")
    try:
        dest = tmp_path / "copy"
        # the kernel refuses the first two here (EXDEV; Linux 5.3-5.18 copied across filesystems)
        assert clone_or_copy(src, dest) in {"reflink", "copy_file_range", "copy"}
        if where == "a size that says 0":
            text = dest.read_text()
            assert text.startswith("Name:") and "\nPid:" in text
        else:
            _same_copy(src, dest)
    finally:
        if where == "another filesystem":
            src.unlink()
