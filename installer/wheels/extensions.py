"""The compiled extension modules a wheel ships, from its RECORD and the ELF scan.

A module is a member RECORD lists, named with a suffix CPython loads on Linux (``.abi3.so``, ``.so``,
or ``.cpython-<XY>[t]-<platform>.so`` for the stack Python's XY only: vLLM 0.24.0 ships ``deep_gemm/_C``
for 3.10 ... 3.14), whose dynamic string table names ``PyInit_<module>`` (so a plain shared library is
not taken for one).  The install step's import guard is built from this list.
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Collection

from .elf import exports_symbol
from .scan import WheelScan

_CPYTHON = re.compile(r"^(?P<mod>[A-Za-z_][A-Za-z0-9_]*)\.cpython-(?P<ver>\d)(?P<minor>\d+)t?-[\w-]+\.so$")
_ABI3_OR_BARE = re.compile(r"^(?P<mod>[A-Za-z_][A-Za-z0-9_]*)(?:\.abi3)?\.so$")


@dataclass(frozen=True)
class Extension:
    module: str           # vllm._C
    path: str             # vllm/_C.abi3.so (as RECORD names it)

    def as_json(self) -> dict[str, str]:
        return {"module": self.module, "path": self.path}


def module_of(path: str, python: tuple[int, int] | None) -> str | None:
    """``vllm/_C.abi3.so`` -> ``vllm._C``; None when the stack Python would not load that file."""
    parts = path.split("/")
    base = parts[-1]
    m = _ABI3_OR_BARE.match(base) or _CPYTHON.match(base)
    if m is None or (m.re is _CPYTHON and python is not None and (int(m["ver"]), int(m["minor"])) != python):
        return None
    if not all(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", p) for p in parts[:-1]) or ".dist-info" in path:
        return None
    return ".".join([*parts[:-1], m.group("mod")])


def extension_modules(scan: WheelScan, recorded: Collection[str], python: tuple[int, int] | None
                      ) -> tuple[Extension, ...]:
    found: dict[str, Extension] = {}
    for name, member in sorted(scan.members.items()):
        if name in recorded and member.elf is not None and (module := module_of(name, python)) is not None \
                and exports_symbol(member.elf.strtab, "PyInit_" + module.rsplit(".", 1)[-1]):
            found.setdefault(module, Extension(module, name))
    return tuple(found.values())


def extensions_from_record(wheel: Path, python: tuple[int, int] | None = None) -> tuple[Extension, ...]:
    """By file name alone, from RECORD (for wheel-step outputs recorded before ``extensions`` existed);
    without ``python`` every ``cpython-XY`` build is listed, so a module may appear with several files."""
    with zipfile.ZipFile(wheel) as zf:
        record = next((n for n in zf.namelist() if n.endswith(".dist-info/RECORD") and n.count("/") == 1), None)
        text = zf.read(record).decode("utf-8", errors="replace") if record else ""
    return tuple(Extension(module, row[0]) for row in csv.reader(io.StringIO(text))
                 if row and (module := module_of(row[0], python)) is not None)
