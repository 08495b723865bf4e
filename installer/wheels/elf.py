"""The DT_NEEDED entries and dynamic string table of an ELF shared object, parsed by pyelftools.

The dynamic segment is found through the program headers, as the dynamic loader does (section
headers are never read); absurd sizes and offsets are capped and every failure becomes
:class:`ElfFormatError`, so a foreign or malformed file is reported rather than misread.
"""

from __future__ import annotations

import io
from typing import BinaryIO

MAX_PHNUM = 4096
MAX_PHENTSIZE = 1024          # 56 bytes in ELF64, 32 in ELF32
MAX_DYNAMIC_BYTES = 1 << 20   # a real .dynamic is a few KiB; refuse absurd sizes
MAX_NAME = 4096
MAX_STRTAB_BYTES = 256 << 20
MAX_OFFSET = 1 << 40          # 1 TiB: past any real object; ext4 refuses lseek past 16 TiB with an OSError
DEFAULT_KEEP = 32 << 20       # bytes kept from the start of a file for a string table seen before .dynamic


class ElfFormatError(ValueError):
    """The bytes are not an ELF file this reader understands."""


class _Missing(Exception):
    """The forward scanner does not hold the bytes the reader asked for (not yet, or no longer)."""


def needed_libraries(fh: BinaryIO) -> list[str]:
    """The DT_NEEDED sonames, in file order (empty for a static object)."""
    return read_dynamic(fh)[0]


def read_dynamic(fh: BinaryIO) -> tuple[list[str], bytes]:
    """(DT_NEEDED sonames, the dynamic string table) of the ELF object in a seekable stream."""
    from elftools.common.exceptions import ELFError   # pyelftools is imported when first needed (~0.3 s)

    try:
        return _read(fh)
    except ELFError as exc:        # pyelftools' own, and ELFParseError wrapping construct's and struct's
        raise ElfFormatError(f"{type(exc).__name__}: {exc}") from exc


def _seek(fh: BinaryIO, offset: int) -> None:
    if offset > MAX_OFFSET:
        raise ElfFormatError(f"an offset of {offset:#x}")
    fh.seek(offset)


def _exact(fh: BinaryIO, offset: int, size: int) -> bytes:
    _seek(fh, offset)
    data = fh.read(size)
    if len(data) != size:
        raise ElfFormatError(f"file ends at {offset + len(data)}, expected {size} bytes at offset {offset}")
    return data


def _read(fh: BinaryIO) -> tuple[list[str], bytes]:
    from elftools.common.utils import struct_parse
    from elftools.elf.elffile import ELFFile

    fh.seek(0)
    elf = ELFFile(io.BytesIO(fh.read(64)))    # the ELF header (52 or 64 bytes): no seek to the end of fh
    phdr, phnum, phentsize = elf.structs.Elf_Phdr, elf["e_phnum"], elf["e_phentsize"]
    if phnum == 0:
        return [], b""
    if not phdr.sizeof() <= phentsize <= MAX_PHENTSIZE or phnum > MAX_PHNUM:
        raise ElfFormatError(f"implausible program header table ({phnum} x {phentsize} bytes)")
    table = io.BytesIO(_exact(fh, elf["e_phoff"], phentsize * phnum))
    headers = [struct_parse(phdr, table, i * phentsize) for i in range(phnum)]
    loads = [h for h in headers if h["p_type"] == "PT_LOAD"]
    dynamic = next((h for h in headers if h["p_type"] == "PT_DYNAMIC"), None)
    if dynamic is None:
        return [], b""
    if dynamic["p_filesz"] > MAX_DYNAMIC_BYTES:
        raise ElfFormatError(f"PT_DYNAMIC of {dynamic['p_filesz']} bytes")
    raw = io.BytesIO(_exact(fh, dynamic["p_offset"], dynamic["p_filesz"]))
    step = elf.structs.Elf_Dyn.sizeof()
    tags: dict[str, list[int]] = {}
    for pos in range(0, dynamic["p_filesz"] - step + 1, step):
        tag = struct_parse(elf.structs.Elf_Dyn, raw, pos)
        if tag["d_tag"] == "DT_NULL":
            break
        tags.setdefault(tag["d_tag"], []).append(tag["d_val"])
    needed = tags.get("DT_NEEDED", [])
    if "DT_STRTAB" not in tags:
        if needed:
            raise ElfFormatError("DT_NEEDED entries without DT_STRTAB")
        return [], b""
    addr = tags["DT_STRTAB"][0]
    strtab_off = next((addr - h["p_vaddr"] + h["p_offset"] for h in loads
                       if h["p_vaddr"] <= addr < h["p_vaddr"] + h["p_filesz"]), None)
    if strtab_off is None:
        raise ElfFormatError(f"DT_STRTAB address {addr:#x} is in no PT_LOAD segment")
    strsz = tags["DT_STRSZ"][0] if "DT_STRSZ" in tags else max(needed, default=0) + MAX_NAME
    if strsz > MAX_STRTAB_BYTES:
        raise ElfFormatError(f"a dynamic string table of {strsz} bytes")
    _seek(fh, strtab_off)
    strtab = fh.read(strsz)
    names: list[str] = []
    for off in needed:
        nul = strtab.find(b"\0", off)
        if off >= len(strtab) or nul < 0:
            raise ElfFormatError(f"unterminated DT_NEEDED name at string offset {off}")
        names.append(strtab[off:nul].decode("utf-8", errors="replace"))
    return names, strtab


class DynamicScanner:
    """The same facts as :func:`read_dynamic`, learned from bytes fed in file order (nothing seeks).

    It holds the first ``keep`` bytes (linkers put ``.dynstr`` near the start, ``.dynamic`` near the end)
    plus each range the reader asked for while it still lay ahead; a range already streamed past sets
    :attr:`lost`, and the caller then falls back to :func:`read_dynamic`."""

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self._keep = keep
        self._head = bytearray()
        self._pos = 0                 # bytes fed so far
        self._wants: list[tuple[int, int, bytearray]] = []
        self._eof = False
        self._error: str | None = None
        self._done = False
        self.lost = False
        self.needed: list[str] = []
        self.strtab: bytes = b""

    @property
    def done(self) -> bool:
        return self._done or self._error is not None or self.lost

    def feed(self, data: bytes) -> None:
        if self.done:
            return
        start, end = self._pos, self._pos + len(data)
        self._pos = end
        if start < self._keep:
            self._head += data[:self._keep - start]
        for w_start, w_end, buf in self._wants:
            lo, hi = max(start, w_start + len(buf)), min(end, w_end)
            if lo < hi:
                buf += data[lo - start:hi - start]
        if all(len(buf) == w_end - w_start for w_start, w_end, buf in self._wants):
            self._attempt()

    def finish(self) -> list[str]:
        """The DT_NEEDED sonames; raises :class:`ElfFormatError` for a file this reader refuses."""
        if not self.done:
            self._eof = True
            self._attempt()
        if self._error is not None:
            raise ElfFormatError(self._error)
        return self.needed

    def _attempt(self) -> None:
        try:
            self.needed, self.strtab = read_dynamic(_Held(self))  # type: ignore[arg-type]
        except _Missing:
            return
        except ElfFormatError as exc:
            self._error = str(exc)
            return
        self._done = True
        self._head, self._wants = bytearray(), []

    def _get(self, start: int, size: int) -> bytes:
        """Bytes [start, start+size), short only past the end of a finished file; else :class:`_Missing`."""
        end = min(start + size, self._pos) if self._eof else start + size
        if end <= start:
            return b""
        if end <= len(self._head):
            return bytes(self._head[start:end])
        for w_start, w_end, buf in self._wants:
            if w_start <= start and end <= w_start + len(buf):
                return bytes(buf[start - w_start:end - w_start])
        if start >= self._pos or start <= len(self._head) == self._pos:
            self._wants.append((start, start + size, bytearray(self._head[start:])))
        else:
            self.lost = True
        raise _Missing(start)


class _Held:
    """The bytes a :class:`DynamicScanner` holds, as the stream :func:`read_dynamic` seeks in and reads."""

    def __init__(self, scanner: DynamicScanner) -> None:
        self._scanner, self._pos = scanner, 0

    def seek(self, offset: int) -> None:
        self._pos = offset

    def read(self, size: int) -> bytes:
        data = self._scanner._get(self._pos, size)
        self._pos += len(data)
        return data


def exports_symbol(strtab: bytes, name: str) -> bool:
    """Whether a dynamic string table holds ``name`` as a whole string (e.g. ``PyInit__C``)."""
    return (b"\0" + name.encode() + b"\0") in strtab
