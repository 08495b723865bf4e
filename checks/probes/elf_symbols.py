"""Would a shared object's symbols resolve?  A static check for machines without a GPU driver.

Standard library only (it runs inside the stack's Python, from ``checks/probes/install_facts.py``).  On a
machine without ``libcuda.so.1`` every vLLM extension fails to load at the missing driver, before the
dynamic loader resolves a single symbol, so an import cannot tell whether torch is the build the wheel
was compiled against.  This reads the ELF instead: the extension's undefined dynamic symbols against
the symbols defined by every library it needs (transitively, found as the loader would: RUNPATH with
``$ORIGIN``, then the given directories such as ``torch/lib``), plus all of torch's own libraries.
What stays unresolved is reported: C++ names from torch (``c10::``, ``at::``, ``torch::``) mean ABI
drift; ``cu*`` names belong to the missing driver.
"""

from __future__ import annotations

import os
import struct

SHT_DYNSYM = 11
SHT_DYNAMIC = 6
DT_NEEDED, DT_RPATH, DT_RUNPATH = 1, 15, 29
STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 1, 2, 10
SYSTEM_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
               "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")


class ElfInfo:
    def __init__(self, needed, paths, defined, undefined):
        self.needed = needed          # DT_NEEDED sonames
        self.paths = paths            # RUNPATH/RPATH entries
        self.defined = defined        # exported names
        self.undefined = undefined    # names that must come from elsewhere (weak ones left out)


def _sections(fh, end, is64):
    fh.seek(0)
    head = fh.read(64)
    if is64:
        shoff, = struct.unpack(end + "Q", head[40:48])
        shentsize, shnum = struct.unpack(end + "HH", head[58:62])
        fmt = end + "IIQQQQIIQQ"
    else:
        shoff, = struct.unpack(end + "I", head[32:36])
        shentsize, shnum = struct.unpack(end + "HH", head[46:50])
        fmt = end + "IIIIIIIIII"
    fh.seek(shoff)
    raw = fh.read(shentsize * shnum)
    out = []
    for i in range(shnum):
        f = struct.unpack(fmt, raw[i * shentsize:i * shentsize + struct.calcsize(fmt)])
        # name, type, flags, addr, offset, size, link, info, align, entsize
        out.append(f)
    return out


def _read(fh, offset, size):
    fh.seek(offset)
    return fh.read(size)


def _cstr(table, i):
    j = table.find(b"\0", i)
    return table[i:j if j >= 0 else len(table)].decode("utf-8", "replace")


_CACHE = {}


def read_elf(path):
    """(cached by real path) Needed libraries, RUNPATH entries, defined and undefined dynamic symbols."""
    key = os.path.realpath(path)
    if key not in _CACHE:
        _CACHE[key] = _read_elf(key)
    return _CACHE[key]


def _read_elf(path):
    """Needed libraries, RUNPATH entries, defined and (strongly) undefined dynamic symbols."""
    with open(path, "rb") as fh:
        ident = fh.read(16)
        if ident[:4] != b"\x7fELF":
            raise ValueError(f"{path}: not an ELF file")
        is64, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
        secs = _sections(fh, end, is64)
        needed, paths, defined, undefined = [], [], set(), set()
        sym_fmt, sym_size = (end + "IBBHQQ", 24) if is64 else (end + "IIIBBH", 16)
        for s in secs:
            stype, offset, size, link = s[1], s[4], s[5], s[6]
            if stype == SHT_DYNAMIC:
                strtab = _read(fh, secs[link][4], secs[link][5])
                data = _read(fh, offset, size)
                step = 16 if is64 else 8
                for k in range(0, len(data) - step + 1, step):
                    tag, val = struct.unpack(end + ("qQ" if is64 else "iI"), data[k:k + step])
                    if tag == 0:
                        break
                    if tag == DT_NEEDED:
                        needed.append(_cstr(strtab, val))
                    elif tag in (DT_RPATH, DT_RUNPATH):
                        paths += [p for p in _cstr(strtab, val).split(":") if p]
            elif stype == SHT_DYNSYM:
                strtab = _read(fh, secs[link][4], secs[link][5])
                data = _read(fh, offset, size)
                for k in range(sym_size, len(data) - sym_size + 1, sym_size):
                    f = struct.unpack(sym_fmt, data[k:k + sym_size])
                    if is64:
                        name_i, info, other, shndx = f[0], f[1], f[2], f[3]
                    else:
                        name_i, info, other, shndx = f[0], f[3], f[4], f[5]
                    bind = info >> 4
                    name = _cstr(strtab, name_i)
                    if not name or bind not in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE):
                        continue
                    if shndx == 0:
                        if bind != STB_WEAK:
                            undefined.add(name)
                    elif other & 3 in (0, 3):
                        defined.add(name)
        return ElfInfo(needed, paths, defined, undefined)


def _find(soname, origin, runpath, dirs):
    for d in [p.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for p in runpath] + list(dirs):
        cand = os.path.join(d, soname)
        if os.path.isfile(cand):
            return os.path.realpath(cand)
    return None


def unresolved(path, dirs, extra_providers=()):
    """(symbols nobody defines, sonames not found, number of undefined symbols checked) for ``path``."""
    top = read_elf(path)
    search = list(dirs) + [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(SYSTEM_DIRS)
    provided, missing, seen = set(), [], set()
    queue = [(path, top)]
    for extra in extra_providers:
        if os.path.isfile(extra) and os.path.realpath(extra) not in seen:
            seen.add(os.path.realpath(extra))
            queue.append((extra, None))
    while queue:
        p, info = queue.pop()
        info = info or read_elf(p)
        if p != path:
            provided |= info.defined
        origin = os.path.dirname(os.path.realpath(p))
        for soname in info.needed:
            found = _find(soname, origin, info.paths, search)
            if found is None:
                if soname not in missing:
                    missing.append(soname)
            elif found not in seen:
                seen.add(found)
                queue.append((found, None))
    left = sorted(s for s in top.undefined if s not in provided and not s.startswith(("Py", "_Py")))
    return left, missing, len(top.undefined)


def is_driver_symbol(name):
    """CUDA driver API names (``cuInit``, ``cuGetProcAddress_v2``): what ``libcuda.so.1`` would define."""
    return name.startswith("cu") and len(name) > 2 and name[2].isupper()
