"""Verify a downloaded base wheel against what the recipe expects.

:func:`verify_wheel` runs every check (the names in :data:`~october.installer.wheels.expect.CHECKS`;
each lives in its own module beside this one), collects every problem, then raises one
:class:`WheelError` listing them all.  It reads the wheel and nothing else, every member once
(:mod:`october.installer.wheels.scan`).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import WheelError
from .cuda import CudaFacts, check_cuda, wheel_cuda_facts
from .expect import CHECKS, Problems, WheelExpectation, read_member
from .extensions import Extension, extension_modules
from .metadata import check_filename, check_metadata, check_torch, check_wheel_file, dist_info_dir
from .record import check_paths, check_record, record_algorithms, record_rows
from .retag import Retag
from .scan import scan_members
from .version_info import VERSION_FILE, VersionInfo, parse_version_file

__all__ = ["CHECKS", "WheelExpectation", "WheelReport", "verify_wheel"]


@dataclass(frozen=True)
class WheelReport:
    filename: str
    tags: tuple[str, ...]
    checks: tuple[str, ...]                       # the checks that ran and passed
    name: str = ""
    version: str = ""
    torch_requirement: str | None = None
    cuda: CudaFacts | None = None
    files: int = 0
    wheel_tags: tuple[str, ...] = ()              # the Tag lines of WHEEL
    retag: tuple[Retag, ...] = ()                 # accepted linux -> manylinux/musllinux retags
    extensions: tuple[Extension, ...] = ()        # compiled extension modules the stack Python loads
    version_info: VersionInfo | None = None       # vllm/_version.py, parsed (None when absent)
    rereads: int = 0                              # shared objects read twice by the ELF scan


def verify_wheel(path: Path, expect: WheelExpectation) -> WheelReport:
    """Run every check on ``path``; raise one :class:`WheelError` listing every problem."""
    problems = Problems()
    file_tags = check_filename(path.name, expect, problems)
    found: dict[str, Any] = {}                    # the WheelReport fields learned from the file
    ran = {"filename", "tags"}
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        problems.add("zip", f"expected a zip archive, found an unreadable file ({exc}); "
                            "a truncated or damaged download looks like this")
        zf = None
    if zf is not None:
        ran |= {"zip", "metadata", "record", "paths"}
        with zf:
            info_dir = dist_info_dir(zf, problems)
            rows: dict[str, tuple[str, str]] | None = None
            bad: list[str] = []
            if info_dir is not None:
                found["wheel_tags"], found["retag"] = check_wheel_file(zf, info_dir, file_tags, problems)
                meta = check_metadata(zf, info_dir, expect, problems)
                if meta is not None:
                    found["name"], found["version"], requires = meta
                    if expect.torch is not None:
                        ran.add("torch-pin")
                        found["torch_requirement"] = check_torch(requires, expect, problems)
                rows, bad = record_rows(zf, info_dir, problems)
            # the one pass: RECORD hashes, the ELF scan and vllm/_version.py from a single read of each member
            scan = scan_members(zf, record_algorithms(rows or {}), keep=(VERSION_FILE,))
            found["rereads"] = scan.rereads
            if info_dir is not None and rows is not None:
                found["files"] = check_record(zf, info_dir, rows, bad, scan, problems)
            check_paths(zf, read_member(zf, f"{info_dir}/RECORD") if info_dir else None, problems)
            if expect.cuda_variant or expect.cudart_major:
                ran.add("cuda-variant")
                found["cuda"] = wheel_cuda_facts(scan, found.get("version") or None)
                check_cuda(found["cuda"], expect, problems)
            found["extensions"] = extension_modules(scan, set(rows or {}), expect.python_version)
            if (kept := scan.kept.get(VERSION_FILE)) is not None:
                try:
                    found["version_info"] = parse_version_file(kept.decode("utf-8", errors="replace"))
                except WheelError as exc:
                    problems.add("metadata", f"{exc.what}: expected {exc.expected}, found {exc.found}")
    if problems.items:
        failed = sorted({c for c, _ in problems.items}, key=CHECKS.index)
        lines = "\n".join(f"  - [{c}] {t}" for c, t in problems.items)
        raise WheelError(
            f"the base wheel {path.name} failed {len(failed)} check(s) ({', '.join(failed)}):\n{lines}",
            fix="nothing was installed; point [wheel] in the recipe at the right release wheel "
                "(url, filename, version, sha256) for this stack, then re-run")
    passed = tuple(c for c in CHECKS if c in ran)
    return WheelReport(path.name, tuple(sorted(file_tags)), passed, **found)
