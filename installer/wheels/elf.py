"""Read the DT_NEEDED entries of an ELF shared object, from any seekable binary stream.

Only what the wheel checks need: the ELF header, the program headers, the
PT_DYNAMIC segment and the dynamic string table (DT_NEEDED for the CUDA-variant
check, exported names such as ``PyInit_<module>`` for the extension list).  Works on 32/64-bit, little and
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
DT_STRSZ = 10
MAX_DYNAMIC_BYTES = 1 << 20   # a real .dynamic is a few KiB; refuse absurd sizes
MAX_NAME = 4096
MAX_STRTAB_BYTES = 256 << 20


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
    return read_dynamic(fh)[0]


def read_dynamic(fh: BinaryIO) -> tuple[list[str], bytes]:
    """(DT_NEEDED sonames, the dynamic string table) read with seeks."""
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
        return [], b""
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
        return [], b""
    if dynamic[1] > MAX_DYNAMIC_BYTES:
        raise ElfFormatError(f"PT_DYNAMIC of {dynamic[1]} bytes")
    dyn = _read_at(fh, dynamic[0], dynamic[1])
    step = struct.calcsize(dyn_fmt)
    needed_offsets: list[int] = []
    strtab_addr: int | None = None
    strsz: int | None = None
    for pos in range(0, len(dyn) - step + 1, step):
        tag, val = struct.unpack(dyn_fmt, dyn[pos:pos + step])
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed_offsets.append(val)
        elif tag == DT_STRTAB:
            strtab_addr = val
        elif tag == DT_STRSZ:
            strsz = val
    if strtab_addr is None:
        if needed_offsets:
            raise ElfFormatError("DT_NEEDED entries without DT_STRTAB")
        return [], b""
    strtab_off = _vaddr_to_offset(loads, strtab_addr)
    if strsz is None:
        strsz = max(needed_offsets, default=0) + MAX_NAME
    if strsz > MAX_STRTAB_BYTES:
        raise ElfFormatError(f"a dynamic string table of {strsz} bytes")
    fh.seek(strtab_off)
    strtab = fh.read(strsz)
    names: list[str] = []
    for off in needed_offsets:
        nul = strtab.find(b"\0", off)
        if off >= len(strtab) or nul < 0:
            raise ElfFormatError(f"unterminated DT_NEEDED name at string offset {off}")
        names.append(strtab[off:nul].decode("utf-8", errors="replace"))
    return names, strtab


def _vaddr_to_offset(loads: list[tuple[int, int, int]], addr: int) -> int:
    for vaddr, offset, filesz in loads:
        if vaddr <= addr < vaddr + filesz:
            return addr - vaddr + offset
    raise ElfFormatError(f"DT_STRTAB address {addr:#x} is in no PT_LOAD segment")


# ------------------------------------------------------------------ one forward pass


DEFAULT_KEEP = 32 << 20       # bytes kept from the start of a file for a string table seen before .dynamic


class DynamicScanner:
    """The same facts as :func:`needed_libraries`, learned from bytes fed in file order (one pass).

    The caller streams a file through :meth:`feed` (for instance while hashing a zip
    member); nothing seeks.  The ELF header and program headers sit at the start, the
    ``PT_DYNAMIC`` segment is captured when its bytes pass by, and the dynamic string
    table it points to is taken from the first ``keep`` bytes, which are held for
    that purpose (linkers put ``.dynstr`` near the start: 2.5 MiB into vLLM 0.18.0's
    450 MiB ``_C.abi3.so``, ``.dynamic`` near the end).  A table outside that window
    and already streamed past makes :attr:`lost` true: the caller then falls back to
    the seeking reader.  The table's bytes are kept (:attr:`strtab`) so callers can
    look for exported names such as ``PyInit_<module>``.
    """

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self._keep = keep
        self._head = bytearray()
        self._pos = 0
        self._wants: list[tuple[int, int, bytearray]] = []
        self._state = "header"
        self._error: str | None = None
        self.lost = False
        self.needed: list[str] = []
        self.strtab: bytes = b""
        # parsed facts
        self._end = "<"
        self._is64 = True
        self._loads: list[tuple[int, int, int]] = []
        self._dynamic: tuple[int, int] | None = None
        self._needed_offsets: list[int] = []

    @property
    def done(self) -> bool:
        return self._state in ("done", "error") or self.lost

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
        self._advance()

    def finish(self) -> list[str]:
        """The DT_NEEDED sonames; raises :class:`ElfFormatError` for a file this reader refuses."""
        if self._error is not None:
            raise ElfFormatError(self._error)
        if self._state != "done" and not self.lost:
            raise ElfFormatError(f"file ends at {self._pos} before its {self._state} was read")
        return self.needed

    # ---------------------------------------------------------------- internals

    def _range(self, start: int, size: int) -> bytes | None:
        """Bytes [start, start+size) if already held; else register a want (or mark lost); None until then."""
        end = start + size
        if end <= len(self._head):
            return bytes(self._head[start:end])
        for w_start, w_end, buf in self._wants:
            if (w_start, w_end) == (start, end):
                return bytes(buf) if len(buf) == size else None
        if start >= self._pos or (start <= len(self._head) and len(self._head) == self._pos):
            buf = bytearray(self._head[start:]) if start < len(self._head) else bytearray()
            self._wants.append((start, end, buf))
            return bytes(buf) if len(buf) == size else None
        self.lost = True
        return None

    def _fail(self, why: str) -> None:
        self._error, self._state = why, "error"

    def _advance(self) -> None:
        while not self.done:
            before = self._state
            getattr(self, f"_step_{self._state}")()
            if self._state == before:
                return

    def _step_header(self) -> None:
        ident = self._range(0, 16)
        if ident is None:
            return
        if ident[:4] != b"\x7fELF":
            return self._fail("no ELF magic")
        cls, data = ident[4], ident[5]
        if cls not in (1, 2) or data not in (1, 2):
            return self._fail(f"unknown ELF class/data ({cls}, {data})")
        self._is64, self._end = cls == 2, "<" if data == 1 else ">"
        self._state = "ehdr"

    def _step_ehdr(self) -> None:
        size = 48 if self._is64 else 36
        raw = self._range(16, size)
        if raw is None:
            return
        fmt = self._end + ("HHIQQQIHHHHHH" if self._is64 else "HHIIIIIHHHHHH")
        hdr = struct.unpack(fmt, raw)
        self._phoff, self._phentsize, self._phnum = hdr[4], hdr[8], hdr[9]
        self._ph_fmt = self._end + ("IIQQQQQQ" if self._is64 else "IIIIIIII")
        self._dyn_fmt = self._end + ("qQ" if self._is64 else "iI")
        if self._phnum == 0:
            self._state = "done"
            return
        if self._phentsize < struct.calcsize(self._ph_fmt) or self._phnum > 4096:
            return self._fail(f"implausible program header table ({self._phnum} x {self._phentsize} bytes)")
        self._state = "phdrs"

    def _step_phdrs(self) -> None:
        table = self._range(self._phoff, self._phentsize * self._phnum)
        if table is None:
            return
        one = struct.calcsize(self._ph_fmt)
        for i in range(self._phnum):
            fields = struct.unpack(self._ph_fmt, table[i * self._phentsize:i * self._phentsize + one])
            if self._is64:
                p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = fields[:6]
            else:
                p_type, p_offset, p_vaddr, _paddr, p_filesz = fields[:5]
            if p_type == PT_LOAD:
                self._loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == PT_DYNAMIC:
                self._dynamic = (p_offset, p_filesz)
        if self._dynamic is None:
            self._state = "done"
            return
        if self._dynamic[1] > MAX_DYNAMIC_BYTES:
            return self._fail(f"PT_DYNAMIC of {self._dynamic[1]} bytes")
        self._state = "dynamic"

    def _step_dynamic(self) -> None:
        assert self._dynamic is not None
        dyn = self._range(*self._dynamic)
        if dyn is None:
            return
        step = struct.calcsize(self._dyn_fmt)
        strtab_addr: int | None = None
        strsz: int | None = None
        for pos in range(0, len(dyn) - step + 1, step):
            tag, val = struct.unpack(self._dyn_fmt, dyn[pos:pos + step])
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                self._needed_offsets.append(val)
            elif tag == DT_STRTAB:
                strtab_addr = val
            elif tag == DT_STRSZ:
                strsz = val
        if strtab_addr is None:
            if self._needed_offsets:
                return self._fail("DT_NEEDED entries without DT_STRTAB")
            self._state = "done"
            return
        try:
            self._strtab_off = _vaddr_to_offset(self._loads, strtab_addr)
        except ElfFormatError as exc:
            return self._fail(str(exc))
        if strsz is None:                        # not in a well-formed object; read what the names need
            strsz = max(self._needed_offsets, default=0) + MAX_NAME
        if strsz > MAX_STRTAB_BYTES:
            return self._fail(f"a dynamic string table of {strsz} bytes")
        self._strsz = strsz
        self._state = "strtab"

    def _step_strtab(self) -> None:
        table = self._range(self._strtab_off, self._strsz)
        if table is None:
            return
        names: list[str] = []
        for off in self._needed_offsets:
            nul = table.find(b"\0", off)
            if off >= len(table) or nul < 0:
                return self._fail(f"unterminated DT_NEEDED name at string offset {off}")
            names.append(table[off:nul].decode("utf-8", errors="replace"))
        self.needed, self.strtab = names, table
        self._head = bytearray()
        self._wants = []
        self._state = "done"


def exports_symbol(strtab: bytes, name: str) -> bool:
    """Whether a dynamic string table holds ``name`` as a whole string (e.g. ``PyInit__C``)."""
    return (b"\0" + name.encode() + b"\0") in strtab
