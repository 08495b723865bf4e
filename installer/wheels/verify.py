"""Verify a downloaded base wheel against what the recipe expects.

:func:`verify_wheel` runs every check, collects every problem, then raises one
:class:`WheelError` listing them all, each line naming its check:

``zip``           the file is a readable zip archive
``filename``      the name parses as a wheel name and matches the recipe
``tags``          a filename tag is supported by the stack Python; WHEEL's tags agree, or
                  differ only by a recorded retag from ``linux_<arch>`` to a
                  ``manylinux``/``musllinux`` tag of the same interpreter, ABI and arch
``metadata``      one ``.dist-info``; METADATA name and version as the recipe says
``torch-pin``     ``Requires-Dist`` pins torch to the recipe's torch (public version)
``record``        every file is in RECORD with a matching hash and size, and vice versa
``paths``         no absolute path, no ``..`` component, no symlink entry
``cuda-variant``  the wheel's CUDA build matches the recipe (see :func:`wheel_cuda_facts`)

The function reads the wheel and nothing else: the stack's supported tags and
marker environment come in with the :class:`WheelExpectation`.  Every member is
decompressed once (:mod:`october.installer.wheels.scan`): that one read serves the RECORD
hashes, the ELF scan of the shared objects (CUDA variant, extension modules) and
``vllm/_version.py``.

The checks live beside this module, one job each: :mod:`~october.installer.wheels.metadata`
(filename, tags, metadata, torch-pin), :mod:`~october.installer.wheels.record` (record, paths),
:mod:`~october.installer.wheels.cuda` (cuda-variant); :mod:`~october.installer.wheels.expect`
holds what they share (the check names, :class:`WheelExpectation`, the problem list).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import WheelError
from .cuda import CudaFacts, check_cuda, expected_cudart_major, wheel_cuda_facts
from .expect import CHECKS, Problems, WheelExpectation, read_member
from .extensions import Extension, extension_modules
from .metadata import (
    check_filename,
    check_metadata,
    check_torch,
    check_wheel_file,
    dist_info_dir,
)
from .record import check_paths, check_record, record_algorithms, record_rows
from .retag import Retag
from .scan import scan_members
from .version_info import VERSION_FILE, VersionInfo, parse_version_file

__all__ = ["CHECKS", "CudaFacts", "WheelExpectation", "WheelReport", "expected_cudart_major", "verify_wheel",
           "wheel_cuda_facts"]


@dataclass(frozen=True)
class WheelReport:
    filename: str
    name: str
    version: str
    tags: tuple[str, ...]
    torch_requirement: str | None
    cuda: CudaFacts | None
    files: int
    checks: tuple[str, ...]                       # the checks that ran and passed
    wheel_tags: tuple[str, ...] = ()              # the Tag lines of WHEEL
    retag: tuple[Retag, ...] = ()                 # accepted linux -> manylinux/musllinux retags
    extensions: tuple[Extension, ...] = ()        # compiled extension modules the stack Python loads
    version_info: VersionInfo | None = None       # vllm/_version.py, parsed (None when absent)
    rereads: int = 0                              # shared objects read twice by the ELF scan


def verify_wheel(path: Path, expect: WheelExpectation) -> WheelReport:
    """Run every check on ``path``; raise one :class:`WheelError` listing every problem."""
    problems = Problems()
    file_tags = check_filename(path.name, expect, problems)
    name = version = ""
    torch_req: str | None = None
    cuda: CudaFacts | None = None
    files = 0
    wheel_tags: tuple[str, ...] = ()
    retag: tuple[Retag, ...] = ()
    extensions: tuple[Extension, ...] = ()
    info: VersionInfo | None = None
    rereads = 0
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
                wheel_tags, retag = check_wheel_file(zf, info_dir, file_tags, problems)
                meta = check_metadata(zf, info_dir, expect, problems)
                if meta is not None:
                    name, version, requires = meta
                    if expect.torch is not None:
                        ran.add("torch-pin")
                        torch_req = check_torch(requires, expect, problems)
                rows, bad = record_rows(zf, info_dir, problems)
            # the one pass: RECORD hashes, the ELF scan and vllm/_version.py from a single read of each member
            scan = scan_members(zf, record_algorithms(rows or {}), keep=(VERSION_FILE,))
            rereads = scan.rereads
            if info_dir is not None and rows is not None:
                files = check_record(zf, info_dir, rows, bad, scan, problems)
            check_paths(zf, read_member(zf, f"{info_dir}/RECORD") if info_dir else None, problems)
            if expect.cuda_variant or expect.cudart_major:
                ran.add("cuda-variant")
                cuda = wheel_cuda_facts(scan, version or None)
                check_cuda(cuda, expect, problems)
            extensions = extension_modules(scan, set(rows or {}), expect.python_version)
            if VERSION_FILE in scan.kept:
                try:
                    info = parse_version_file(scan.kept[VERSION_FILE].decode("utf-8", errors="replace"))
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
    return WheelReport(path.name, name, version, tuple(sorted(file_tags)), torch_req, cuda, files, passed,
                       wheel_tags=wheel_tags, retag=retag, extensions=extensions, version_info=info,
                       rereads=rereads)
