"""october.installer.wheels.elf (pyelftools underneath) against binutils on real shared objects.

Drift: the DT_NEEDED list and the exported ``PyInit_<name>`` of real extension modules and
libraries from this environment, read from disk, from a zip member with seeks and through the
one-pass scan, must equal what ``readelf -d`` and ``nm -D`` say.  Planted faults: truncated,
random and mutated bytes are refused with ElfFormatError and nothing else.
"""

from __future__ import annotations

import importlib.util
import io
import random
import shutil
import struct
import subprocess
import sysconfig
import zipfile
from pathlib import Path

import pytest

from october.installer.wheels.elf import (
    DynamicScanner,
    ElfFormatError,
    exports_symbol,
    needed_libraries,
    read_dynamic,
)
from october.installer.wheels.scan import scan_members
from tests.fixtures.base_wheels import elf_so

READELF, NM = shutil.which("readelf"), shutil.which("nm")


def _real_objects() -> list[Path]:
    """A few real shared objects here: torch's extension module and libraries, one more extension."""
    found: list[Path] = []
    spec = importlib.util.find_spec("torch")          # located, not imported
    if spec is not None and spec.submodule_search_locations:
        torch_dir = Path(list(spec.submodule_search_locations)[0])
        found += sorted(torch_dir.glob("_C.cpython-*.so"))[:1]
        found += [p for p in (torch_dir / "lib" / "libc10.so", torch_dir / "lib" / "libshm.so") if p.exists()]
    purelib = Path(sysconfig.get_paths()["purelib"])
    found += sorted(purelib.glob("yaml/_yaml.cpython-*.so"))[:1]
    return found


def _readelf_needed(path: Path) -> list[str]:
    assert READELF is not None
    out = subprocess.run([READELF, "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return [ln.split("[", 1)[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln]


def _nm_pyinit(path: Path) -> set[str]:
    assert NM is not None
    out = subprocess.run([NM, "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout
    return {ln.split()[-1] for ln in out.splitlines() if ln.split() and ln.split()[-1].startswith("PyInit_")}


def _streamed(data: bytes, chunk: int, keep: int | None = None) -> DynamicScanner:
    sc = DynamicScanner() if keep is None else DynamicScanner(keep)
    for i in range(0, len(data), chunk):
        sc.feed(data[i:i + chunk])
        if sc.done:
            break
    return sc


@pytest.mark.skipif(READELF is None or NM is None, reason="needs binutils' readelf and nm")
def test_real_shared_objects_match_readelf_and_nm(tmp_path: Path) -> None:
    objects = _real_objects()
    if not objects:
        pytest.skip("no real shared objects in this environment")
    whl = tmp_path / "real-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as zf:
        for i, path in enumerate(objects):
            zf.write(path, f"real/{i}/{path.name}")
    pyinit_seen = 0
    with zipfile.ZipFile(whl) as zf:
        normal, small = scan_members(zf, {}), scan_members(zf, {}, elf_window=16)
        for i, path in enumerate(objects):
            member = f"real/{i}/{path.name}"
            want = _readelf_needed(path)
            with open(path, "rb") as fh:
                needed, strtab = read_dynamic(fh)
            with zf.open(member) as fh:
                assert read_dynamic(fh) == (needed, strtab), member      # a zip member, with seeks
            assert needed == want, path
            scanned = normal.members[member].elf
            assert scanned is not None and list(scanned.needed) == want and scanned.strtab == strtab
            assert small.members[member].elf == scanned                  # the fallback reader: same facts
            pyinit = _nm_pyinit(path)
            pyinit_seen += bool(pyinit)
            for name in pyinit:
                assert exports_symbol(strtab, name), (path, name)
            assert not exports_symbol(strtab, "PyInit_no_such_module_here")
        assert normal.rereads == 0 and small.rereads == len(objects)
    assert pyinit_seen or not any(".cpython-" in p.name for p in objects)


def _elf(needed: list[str], *, is64: bool, little: bool, base: int = 0x400000,
         after_null: tuple[tuple[int, int], ...] = ()) -> bytes:
    """elf_so's layout in any class and byte order: one PT_LOAD, one PT_DYNAMIC, strings first.

    ``after_null``: (tag, value) entries left in the segment after DT_NULL, which ends the table.
    """
    e = "<" if little else ">"
    ehsize, phentsize = (64, 56) if is64 else (52, 32)
    strtab, offsets = b"\0", []
    for lib in needed:
        offsets.append(len(strtab))
        strtab += lib.encode() + b"\0"
    str_off = ehsize + 2 * phentsize
    dyn_off = (str_off + len(strtab) + 7) // 8 * 8
    dfmt = e + ("qQ" if is64 else "iI")
    dyn = b"".join(struct.pack(dfmt, t, v) for t, v in
                   [(1, o) for o in offsets] + [(5, base + str_off), (10, len(strtab)), (0, 0), *after_null])
    total = dyn_off + len(dyn)
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1 if little else 2, 1, 0]) + b"\0" * 8
    if is64:
        ehdr = struct.pack(e + "HHIQQQIHHHHHH", 3, 62, 1, 0, ehsize, 0, 0, ehsize, phentsize, 2, 64, 0, 0)
        load = struct.pack(e + "IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x1000)
        dynamic = struct.pack(e + "IIQQQQQQ", 2, 6, dyn_off, base + dyn_off, base + dyn_off, len(dyn), len(dyn), 8)
    else:
        ehdr = struct.pack(e + "HHIIIIIHHHHHH", 3, 8 if not little else 3, 1, 0, ehsize, 0, 0, ehsize,
                           phentsize, 2, 40, 0, 0)
        load = struct.pack(e + "IIIIIIII", 1, 0, base, base, total, total, 5, 0x1000)
        dynamic = struct.pack(e + "IIIIIIII", 2, dyn_off, base + dyn_off, base + dyn_off, len(dyn), len(dyn), 6, 4)
    out = ident + ehdr + load + dynamic + strtab
    return out + b"\0" * (dyn_off - len(out)) + dyn


@pytest.mark.parametrize("is64", [True, False])
@pytest.mark.parametrize("little", [True, False])
def test_both_classes_and_byte_orders(tmp_path: Path, is64: bool, little: bool) -> None:
    data = _elf(["libfoo.so.1", "libcudart.so.12"], is64=is64, little=little)
    assert needed_libraries(io.BytesIO(data)) == ["libfoo.so.1", "libcudart.so.12"]
    for chunk in (1, 13, len(data)):
        assert _streamed(data, chunk).finish() == ["libfoo.so.1", "libcudart.so.12"]
    ended = _elf(["libfoo.so.1"], is64=is64, little=little, after_null=((1, 1), (1, 1)))
    assert needed_libraries(io.BytesIO(ended)) == _streamed(ended, 5).finish() == ["libfoo.so.1"]
    if READELF is not None:
        so = tmp_path / "x.so"
        so.write_bytes(data)
        assert _readelf_needed(so) == ["libfoo.so.1", "libcudart.so.12"]     # the hand-made file is sound
        so.write_bytes(ended)
        assert _readelf_needed(so) == ["libfoo.so.1"]


def _refused_or_read(data: bytes) -> None:
    """Every outcome is a result or ElfFormatError, from both readers alike."""
    try:
        want: object = read_dynamic(io.BytesIO(data))
    except ElfFormatError:
        want = ElfFormatError
    sc = _streamed(data, 7)
    try:
        got: object = (sc.finish(), sc.strtab)
    except ElfFormatError:
        got = ElfFormatError
    if not sc.lost:
        assert got == want


def test_truncated_random_and_mutated_bytes_raise_elf_format_error() -> None:
    rng = random.Random(21)
    good = elf_so(["libtorch.so", "libcudart.so.12"], exports=["PyInit__C"])
    for cut in (0, 3, 16, 40, 63, 64, 100, 170, len(good) - 9, len(good) - 1):
        with pytest.raises(ElfFormatError):
            read_dynamic(io.BytesIO(good[:cut]))
        with pytest.raises(ElfFormatError):
            _streamed(good[:cut], 5).finish()
    for _ in range(50):
        noise = rng.randbytes(rng.randrange(0, 4096))
        with pytest.raises(ElfFormatError):
            read_dynamic(io.BytesIO(noise))
        with pytest.raises(ElfFormatError):
            read_dynamic(io.BytesIO(b"\x7fELF" + noise))
        _refused_or_read(b"\x7fELF\x02\x01\x01" + noise)
    for _ in range(400):                        # flip bytes of a good object: a result or ElfFormatError
        bad = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        _refused_or_read(bytes(bad))


def test_absurd_sizes_and_offsets_are_refused(tmp_path: Path) -> None:
    good = bytearray(elf_so(["libc.so.6"]))
    phnum = bytearray(good)
    struct.pack_into("<H", phnum, 56, 60000)                    # e_phnum
    phentsize = bytearray(good)
    struct.pack_into("<H", phentsize, 54, 65535)                # e_phentsize
    dyn_size = bytearray(good)
    struct.pack_into("<QQ", dyn_size, 64 + 56 + 32, 1 << 40, 1 << 40)   # PT_DYNAMIC p_filesz / p_memsz
    strsz = bytearray(good)
    struct.pack_into("<Q", strsz, len(good) - 4 * 16 + 2 * 16 + 8, 1 << 30)   # DT_STRSZ (3rd of 4 entries)
    phoff = bytearray(good)
    struct.pack_into("<Q", phoff, 32, 1 << 47)                  # e_phoff: lseek says EINVAL on ext4
    for data, why in ((phnum, "program header"), (phentsize, "program header"), (dyn_size, "PT_DYNAMIC"),
                      (strsz, "string table"), (phoff, "offset")):
        with pytest.raises(ElfFormatError, match=why):
            read_dynamic(io.BytesIO(bytes(data)))
        with pytest.raises(ElfFormatError, match=why):
            _streamed(bytes(data), 64).finish()
        on_disk = tmp_path / "x.so"
        on_disk.write_bytes(data)
        with open(on_disk, "rb") as fh, pytest.raises(ElfFormatError, match=why):
            read_dynamic(fh)                   # a real file, not only BytesIO: no OSError escapes
