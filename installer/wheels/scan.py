"""One pass over a wheel's members: every byte is decompressed once and serves every check.

Each chunk feeds the member's RECORD hash, the ELF scanner for a shared object and the kept bytes of
the members named in ``keep``; a shared object whose string table lay outside the scanner's window is
read a second time (:attr:`WheelScan.rereads` counts those).
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from dataclasses import dataclass
from typing import Collection, Mapping

from ..core.hashing import CHUNK, record_digest
from .elf import DEFAULT_KEEP, DynamicScanner, ElfFormatError, read_dynamic

SO_NAME = re.compile(r"\.so(\.\d+)*$")


@dataclass(frozen=True)
class SharedObject:
    needed: tuple[str, ...]          # DT_NEEDED sonames, in file order
    strtab: bytes                    # the dynamic string table


@dataclass(frozen=True)
class MemberScan:
    name: str
    size: int                        # bytes after decompression
    digest: str | None               # urlsafe base64 of the RECORD algorithm's digest, no padding
    error: str | None                # why the member could not be read (zip damage)
    elf: SharedObject | None = None
    elf_error: str | None = None     # why a .so member is not a readable ELF object


@dataclass(frozen=True)
class WheelScan:
    members: Mapping[str, MemberScan]
    kept: Mapping[str, bytes]        # the bytes of the members named in ``keep``
    rereads: int                     # shared objects read twice (string table outside the window)


def _scan_one(zf: zipfile.ZipFile, info: zipfile.ZipInfo, algo: str | None, keep: bool, elf: bool,
              elf_window: int) -> tuple[MemberScan, bytes | None, bool]:
    """(facts, the member's bytes when ``keep``, whether the ELF scan had to read it twice)."""
    name = info.filename
    h = hashlib.new(algo) if algo else None
    scanner = DynamicScanner(elf_window) if elf else None
    held = bytearray() if keep else None
    size = 0
    try:
        with zf.open(info) as fh:
            while chunk := fh.read(CHUNK):
                size += len(chunk)
                if h is not None:
                    h.update(chunk)
                if scanner is not None and not scanner.done:
                    scanner.feed(chunk)
                if held is not None:
                    held += chunk
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        return MemberScan(name, size, None, str(exc) or type(exc).__name__), None, False
    so: SharedObject | None = None
    so_error: str | None = None
    reread = False
    if scanner is not None:
        try:
            needed, strtab = scanner.finish(), scanner.strtab   # finish may find a range already streamed past: lost
            if scanner.lost:
                reread = True
                with zf.open(info) as fh:
                    needed, strtab = read_dynamic(fh)  # type: ignore[arg-type]
            so = SharedObject(tuple(needed), strtab)
        except (ElfFormatError, zipfile.BadZipFile, OSError, EOFError) as exc:
            so_error = str(exc) or type(exc).__name__
    digest = record_digest(h.digest()) if h is not None else None
    member = MemberScan(name, size, digest, None, so, so_error)
    return member, bytes(held) if held is not None else None, reread


def scan_members(zf: zipfile.ZipFile, algorithms: Mapping[str, str], *, keep: Collection[str] = (),
                 elf_window: int = DEFAULT_KEEP) -> WheelScan:
    """Read every file member of ``zf`` once; ``algorithms``: member -> the hash RECORD names for it
    (a member absent from it is read, sized and scanned, not hashed)."""
    out: dict[str, MemberScan] = {}
    kept: dict[str, bytes] = {}
    rereads = 0
    for info in zf.infolist():
        if info.is_dir() or info.filename in out:
            continue
        member, held, reread = _scan_one(zf, info, algorithms.get(info.filename), info.filename in keep,
                                         bool(SO_NAME.search(info.filename)), elf_window)
        out[member.name] = member
        if held is not None:
            kept[member.name] = held
        rereads += reread
    return WheelScan(out, kept, rereads)
