"""Read the DT_NEEDED entries of an ELF shared object, from any seekable binary stream.

Only what the CUDA-variant check needs: the ELF header, the program headers, the
PT_DYNAMIC segment and the dynamic string table.  Works on 32/64-bit, little and
big endian, so a foreign or malformed file is reported rather than misread.
The reads go forward except one short seek back to the string table, so a zip
member (``ZipFile.open``) can be read without extracting it.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

PT_LOAD = 1
PT_DYNAMIC = 2
DT_NULL = 0
DT_NEEDED = 1
DT_STRTAB = 5
MAX_DYNAMIC_BYTES = 1 << 20   # a real .dynamic is a few KiB; refuse absurd sizes
MAX_NAME = 4096


class ElfFormatError(ValueError):
    """The bytes are not an ELF file this reader understands."""


def _read_at(fh: BinaryIO, offset: int, size: int) -> bytes:
    fh.seek(offset)
    data = fh.read(size)
    if len(data) != size:
        raise ElfFormatError(f"file ends at {offset + len(data)}, expected {size} bytes at offset {offset}")
    return data


def needed_libraries(fh: BinaryIO) -> list[str]:
    """The DT_NEEDED sonames, in file order (empty for a static object)."""
    ident = _read_at(fh, 0, 16)
    if ident[:4] != b"\x7fELF":
        raise ElfFormatError("no ELF magic")
    cls, data = ident[4], ident[5]
    if cls not in (1, 2) or data not in (1, 2):
        raise ElfFormatError(f"unknown ELF class/data ({cls}, {data})")
    is64 = cls == 2
    end = "<" if data == 1 else ">"
    if is64:
        hdr = struct.unpack(end + "HHIQQQIHHHHHH", _read_at(fh, 16, 48))
        phoff, phentsize, phnum = hdr[4], hdr[8], hdr[9]
        ph_fmt, dyn_fmt = end + "IIQQQQQQ", end + "qQ"
    else:
        hdr = struct.unpack(end + "HHIIIIIHHHHHH", _read_at(fh, 16, 36))
        phoff, phentsize, phnum = hdr[4], hdr[8], hdr[9]
        ph_fmt, dyn_fmt = end + "IIIIIIII", end + "iI"
    if phnum == 0:
        return []
    if phentsize < struct.calcsize(ph_fmt) or phnum > 4096:
        raise ElfFormatError(f"implausible program header table ({phnum} x {phentsize} bytes)")
    table = _read_at(fh, phoff, phentsize * phnum)
    loads: list[tuple[int, int, int]] = []          # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None          # (offset, filesz)
    for i in range(phnum):
        raw = table[i * phentsize:i * phentsize + struct.calcsize(ph_fmt)]
        fields = struct.unpack(ph_fmt, raw)
        if is64:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = fields[:6]
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz = fields[:5]
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []
    if dynamic[1] > MAX_DYNAMIC_BYTES:
        raise ElfFormatError(f"PT_DYNAMIC of {dynamic[1]} bytes")
    dyn = _read_at(fh, dynamic[0], dynamic[1])
    step = struct.calcsize(dyn_fmt)
    needed_offsets: list[int] = []
    strtab_addr: int | None = None
    for pos in range(0, len(dyn) - step + 1, step):
        tag, val = struct.unpack(dyn_fmt, dyn[pos:pos + step])
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed_offsets.append(val)
        elif tag == DT_STRTAB:
            strtab_addr = val
    if not needed_offsets:
        return []
    if strtab_addr is None:
        raise ElfFormatError("DT_NEEDED entries without DT_STRTAB")
    strtab_off = _vaddr_to_offset(loads, strtab_addr)
    names: list[str] = []
    for off in needed_offsets:
        fh.seek(strtab_off + off)
        raw = fh.read(MAX_NAME)
        nul = raw.find(b"\0")
        if nul < 0:
            raise ElfFormatError(f"unterminated DT_NEEDED name at string offset {off}")
        names.append(raw[:nul].decode("utf-8", errors="replace"))
    return names


def _vaddr_to_offset(loads: list[tuple[int, int, int]], addr: int) -> int:
    for vaddr, offset, filesz in loads:
        if vaddr <= addr < vaddr + filesz:
            return addr - vaddr + offset
    raise ElfFormatError(f"DT_STRTAB address {addr:#x} is in no PT_LOAD segment")
