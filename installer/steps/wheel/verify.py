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
decompressed once (:mod:`october.installer.steps.wheel.scan`): that one read serves the RECORD
hashes, the ELF scan of the shared objects (CUDA variant, extension modules) and
``vllm/_version.py``.
"""

from __future__ import annotations

import csv
import io
import re
import stat
import zipfile
from dataclasses import dataclass, field
from email.parser import BytesParser
from pathlib import Path
from typing import Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from october.installer.core.errors import WheelError
from october.installer.steps.wheel.extensions import Extension, extension_modules
from october.installer.steps.wheel.retag import Retag, match_tags
from october.installer.steps.wheel.scan import WheelScan, scan_members
from october.installer.steps.wheel.version_info import VERSION_FILE, VersionInfo, parse_version_file

CHECKS = ("zip", "filename", "tags", "metadata", "torch-pin", "record", "paths", "cuda-variant")
RECORD_HASHES = ("sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b")
SIGNATURES = ("RECORD.jws", "RECORD.p7s")
MAX_LISTED = 12
# "libcudart.so.12", or an auditwheel-style bundled copy "libcudart-1a2b3c4d.so.12"
_CUDART = re.compile(r"^libcudart(?:-[0-9a-f]+)?\.so\.(\d+)(?:\.|$)")
_CU_LOCAL = re.compile(r"^cu(\d+)$")


@dataclass(frozen=True)
class WheelExpectation:
    filename: str
    name: str
    version: str
    supported_tags: frozenset[str]
    marker_env: Mapping[str, str] | None = None   # the stack Python's PEP 508 environment
    torch: str | None = None                      # torch version the wheel must pin ("2.10.0+cu128" ok)
    cuda_variant: str | None = None               # "cu129"
    cudart_major: str | None = None               # "12"; derived from cuda_variant when None
    python_version: tuple[int, int] | None = None # the stack Python, for which extension files it loads


@dataclass(frozen=True)
class CudaFacts:
    local_variant: str | None                     # "cu129" from a "+cu129" local version
    cudart: Mapping[str, tuple[str, ...]]         # .so member -> the libcudart sonames it needs
    unreadable: Mapping[str, str]                 # .so member -> why its ELF could not be read

    @property
    def cudart_majors(self) -> frozenset[str]:
        return frozenset(m.group(1) for libs in self.cudart.values() for lib in libs
                         if (m := _CUDART.match(lib)))


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


@dataclass
class _Problems:
    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, check: str, text: str) -> None:
        self.items.append((check, text))

    def add_many(self, check: str, texts: list[str]) -> None:
        for text in texts[:MAX_LISTED]:
            self.add(check, text)
        if len(texts) > MAX_LISTED:
            self.add(check, f"... and {len(texts) - MAX_LISTED} more")

    def failed(self, check: str) -> bool:
        return any(c == check for c, _ in self.items)


# ------------------------------------------------------------------------- CUDA


def expected_cudart_major(expect: WheelExpectation) -> str | None:
    if expect.cudart_major:
        return expect.cudart_major
    m = _CU_LOCAL.match(expect.cuda_variant or "")
    return m.group(1)[:-1] if m and len(m.group(1)) >= 3 else None   # cu129 -> "12", cu130 -> "13"


def wheel_cuda_facts(scan: WheelScan, metadata_version: str | None) -> CudaFacts:
    """What a vLLM wheel tells about the CUDA it was built for.

    This is the one place that encodes that assumption.  A vLLM CUDA wheel shows
    its CUDA build in two ways:

    * the ``+cuNNN`` local version segment, which vLLM's ``setup.py`` appends
      when the build's CUDA differs from ``VLLM_MAIN_CUDA_VERSION`` (wheels on the
      GitHub release / wheels.vllm.ai, e.g. ``0.18.0+cu130``); the PyPI wheel is
      the main-CUDA build and carries no local segment;
    * the ``DT_NEEDED`` entries of its compiled extensions (``vllm/_C.abi3.so`` on
      0.18.0, ``vllm/_C_stable_libtorch.abi3.so`` on 0.24.0, ``_moe_C``, the
      flash-attention modules, ...): CUDA 12 builds need ``libcudart.so.12``, CUDA 13
      builds ``libcudart.so.13``.

    So the local segment (when present) gives the exact variant and the ELF
    entries give the CUDA runtime major; a wheel showing neither fails closed.
    """
    local_variant = None
    if metadata_version:
        try:
            local = Version(metadata_version).local or ""
        except InvalidVersion:
            local = ""
        for part in local.split("."):
            if _CU_LOCAL.match(part):
                local_variant = part
    cudart: dict[str, tuple[str, ...]] = {}
    unreadable: dict[str, str] = {}
    for name, member in scan.members.items():
        if member.elf_error is not None:
            unreadable[name] = member.elf_error
        elif member.elf is not None:
            found = tuple(lib for lib in member.elf.needed if _CUDART.match(lib))
            if found:
                cudart[name] = found
    return CudaFacts(local_variant, cudart, unreadable)


def _check_cuda(facts: CudaFacts, expect: WheelExpectation, problems: _Problems) -> None:
    variant, major = expect.cuda_variant, expected_cudart_major(expect)
    if facts.local_variant and variant and facts.local_variant != variant:
        problems.add("cuda-variant", f"the wheel's version says CUDA variant {facts.local_variant}: "
                                     f"expected {variant}, found {facts.local_variant}")
    majors = facts.cudart_majors
    if major and majors and majors != {major}:
        wrong = [f"{so} needs {', '.join(libs)}" for so, libs in sorted(facts.cudart.items())
                 if any((m := _CUDART.match(lib)) and m.group(1) != major for lib in libs)]
        problems.add_many("cuda-variant", [f"expected libcudart.so.{major} ({variant or 'recipe'}), found: {w}"
                                           for w in wrong])
    for so, why in sorted(facts.unreadable.items()):
        problems.add("cuda-variant", f"{so} is not a readable ELF shared object ({why}): expected one")
    if not majors and not facts.local_variant:
        problems.add("cuda-variant", f"cannot tell the wheel's CUDA build: expected libcudart.so.{major or 'N'} "
                                     "in the DT_NEEDED of its .so files or a +cuNNN local version, found neither")


# ------------------------------------------------------------------------- pieces


def _normal(version: str) -> str:
    try:
        return str(Version(version))
    except InvalidVersion:
        return version


def _check_filename(name: str, expect: WheelExpectation, problems: _Problems) -> frozenset[str]:
    if name != expect.filename:
        problems.add("filename", f"expected the file {expect.filename}, found {name}")
    try:
        pname, pversion, _build, tags = parse_wheel_filename(name)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        problems.add("filename", f"{name} is not a valid wheel file name ({exc})")
        return frozenset()
    if pname != canonicalize_name(expect.name):
        problems.add("filename", f"expected the project {expect.name} in the file name, found {pname}")
    if str(pversion) != expect.version and str(pversion) != _normal(expect.version):
        problems.add("filename", f"expected version {expect.version} in the file name, found {pversion}")
    names = frozenset(str(t) for t in tags)
    if not names & expect.supported_tags:
        problems.add("tags", f"expected a tag the stack Python supports ({_platform_hint(expect.supported_tags)}), "
                             f"found only {', '.join(sorted(names))}")
    return names


def _platform_hint(supported: frozenset[str]) -> str:
    platforms = {t.rsplit("-", 1)[-1] for t in supported}
    many = [(int(m.group(1)), m.group(2)) for p in platforms if (m := re.match(r"^manylinux_2_(\d+)_(\w+)$", p))]
    if many:
        minor, arch = max(many)
        return f"platforms up to manylinux_2_{minor}_{arch}, i.e. glibc 2.{minor} on {arch}"
    return f"platforms {', '.join(sorted(platforms)[:4])}"


def _dist_info(zf: zipfile.ZipFile, problems: _Problems) -> str | None:
    tops = sorted({n.split("/", 1)[0] for n in zf.namelist() if "/" in n and n.split("/", 1)[0].endswith(".dist-info")})
    if len(tops) != 1:
        problems.add("metadata", f"expected exactly one .dist-info directory, found {len(tops)}"
                                 f"{': ' + ', '.join(tops) if tops else ''}")
        return None
    return tops[0]


def _read(zf: zipfile.ZipFile, name: str) -> bytes | None:
    try:
        return zf.read(name)
    except KeyError:
        return None


def _check_wheel_file(zf: zipfile.ZipFile, info_dir: str, file_tags: frozenset[str],
                      problems: _Problems) -> tuple[tuple[str, ...], tuple[Retag, ...]]:
    raw = _read(zf, f"{info_dir}/WHEEL")
    if raw is None:
        problems.add("metadata", f"expected {info_dir}/WHEEL, found no such file")
        return (), ()
    msg = BytesParser().parsebytes(raw)
    declared = frozenset(str(t).strip() for t in (msg.get_all("Tag") or []))
    if not file_tags:
        return tuple(sorted(declared)), ()
    retags, problem = match_tags(declared, file_tags)
    if problem is not None:
        problems.add("tags", problem)
    return tuple(sorted(declared)), retags


def _check_metadata(zf: zipfile.ZipFile, info_dir: str, expect: WheelExpectation,
                    problems: _Problems) -> tuple[str, str, list[str]] | None:
    raw = _read(zf, f"{info_dir}/METADATA")
    if raw is None:
        problems.add("metadata", f"expected {info_dir}/METADATA, found no such file")
        return None
    msg = BytesParser().parsebytes(raw)
    name, version = str(msg.get("Name", "")).strip(), str(msg.get("Version", "")).strip()
    if canonicalize_name(name) != canonicalize_name(expect.name):
        problems.add("metadata", f"METADATA Name: expected {expect.name}, found {name or 'nothing'}")
    try:
        same = Version(version) == Version(expect.version)
    except InvalidVersion:
        same = False
    if not same:
        problems.add("metadata", f"METADATA Version: expected {expect.version}, found {version or 'nothing'}")
    return name, version, [str(r) for r in (msg.get_all("Requires-Dist") or [])]


def _check_torch(requires: list[str], expect: WheelExpectation, problems: _Problems) -> str | None:
    assert expect.torch is not None
    try:
        want = Version(expect.torch).public
    except InvalidVersion:
        problems.add("torch-pin", f"the recipe's torch {expect.torch!r} is not a version: expected one like 2.10.0")
        return None
    env = dict(expect.marker_env or {})
    env.setdefault("extra", "")
    pins: list[Requirement] = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            problems.add("torch-pin", f"Requires-Dist {line!r} does not parse ({exc})")
            continue
        if canonicalize_name(req.name) != "torch":
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        pins.append(req)
    if not pins:
        problems.add("torch-pin", f"expected Requires-Dist: torch=={want} (the ABI its extensions were built "
                                  "against), found no torch requirement for the stack Python")
        return None
    for req in pins:
        specs = list(req.specifier)
        exact = [s for s in specs if s.operator in ("==", "===") and not s.version.endswith(".*")]
        ok = len(specs) == 1 and len(exact) == 1
        if ok:
            try:
                ok = Version(exact[0].version).public == want
            except InvalidVersion:
                ok = False
        if not ok:
            problems.add("torch-pin", f"expected Requires-Dist: torch=={want} (the recipe's torch), found {req}")
    return str(pins[0])


def _record_digest(data_hash: str) -> tuple[str, str] | None:
    algo, sep, digest = data_hash.partition("=")
    return (algo, digest) if sep and digest else None


def _record_rows(zf: zipfile.ZipFile, info_dir: str, problems: _Problems
                 ) -> tuple[dict[str, tuple[str, str]] | None, list[str]]:
    record_name = f"{info_dir}/RECORD"
    raw = _read(zf, record_name)
    if raw is None:
        problems.add("record", f"expected {record_name}, found no such file")
        return None, []
    rows: dict[str, tuple[str, str]] = {}
    bad: list[str] = []
    for row in csv.reader(io.StringIO(raw.decode("utf-8", errors="replace"))):
        if not row:
            continue
        if len(row) != 3:
            bad.append(f"RECORD row {row!r}: expected 3 fields, found {len(row)}")
            continue
        path, digest, recorded_size = row
        if path in rows:
            bad.append(f"RECORD lists {path} twice")
        rows[path] = (digest, recorded_size)
    return rows, bad


def _algorithms(rows: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """member -> the hash RECORD names for it, where that hash is one we accept."""
    out: dict[str, str] = {}
    for path, (digest_field, _size) in rows.items():
        parsed = _record_digest(digest_field)
        if parsed is not None and parsed[0] in RECORD_HASHES:
            out[path] = parsed[0]
    return out


def _check_record(zf: zipfile.ZipFile, info_dir: str, rows: Mapping[str, tuple[str, str]], bad: list[str],
                  scan: WheelScan, problems: _Problems) -> int:
    record_name = f"{info_dir}/RECORD"
    signatures = {f"{info_dir}/{s}" for s in SIGNATURES}
    seen: set[str] = set()
    files = 0
    for info in zf.infolist():
        if info.is_dir():
            continue
        name = info.filename
        if name in seen:
            bad.append(f"{name} appears twice in the zip")
            continue
        seen.add(name)
        files += 1
        if name == record_name or name in signatures:
            continue
        if name not in rows:
            bad.append(f"{name} is in the wheel but not in RECORD")
            continue
        digest_field, size_field = rows[name]
        parsed = _record_digest(digest_field)
        if parsed is None or parsed[0] not in RECORD_HASHES:
            bad.append(f"{name}: expected a sha256 (or stronger) hash in RECORD, found {digest_field!r}")
            continue
        algo, want = parsed
        member = scan.members.get(name)
        if member is None or member.error is not None or member.digest is None:
            why = member.error if member is not None else "not read"
            bad.append(f"{name} cannot be read from the zip ({why})")
            continue
        if member.digest != want.rstrip("="):
            bad.append(f"{name}: hash mismatch, expected {algo}={want} (RECORD), found {algo}={member.digest}")
        if size_field and size_field != str(member.size):
            bad.append(f"{name}: size mismatch, expected {size_field} bytes (RECORD), found {member.size}")
    for path in sorted(set(rows) - seen):
        bad.append(f"RECORD lists {path}, which is not in the wheel")
    problems.add_many("record", bad)
    return files


def _unsafe_path(name: str) -> str | None:
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "is an absolute path"
    if ".." in re.split(r"[/\\]", name):
        return "has a '..' component that escapes the install tree"
    return None


def _check_paths(zf: zipfile.ZipFile, record: bytes | None, problems: _Problems) -> None:
    bad: dict[str, str] = {}
    for info in zf.infolist():
        why = _unsafe_path(info.filename)
        if why:
            bad[info.filename] = why
        elif stat.S_ISLNK(info.external_attr >> 16):
            bad[info.filename] = "is a symbolic link entry (a wheel holds regular files only)"
    if record is not None:
        for row in csv.reader(io.StringIO(record.decode("utf-8", errors="replace"))):
            if row and (why := _unsafe_path(row[0])):
                bad.setdefault(row[0], f"{why} (in RECORD)")
    problems.add_many("paths", [f"{name} {why}: expected a relative path inside the wheel"
                                for name, why in sorted(bad.items())])


# ------------------------------------------------------------------------- entry


def verify_wheel(path: Path, expect: WheelExpectation) -> WheelReport:
    """Run every check on ``path``; raise one :class:`WheelError` listing every problem."""
    problems = _Problems()
    file_tags = _check_filename(path.name, expect, problems)
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
            info_dir = _dist_info(zf, problems)
            rows: dict[str, tuple[str, str]] | None = None
            bad: list[str] = []
            if info_dir is not None:
                wheel_tags, retag = _check_wheel_file(zf, info_dir, file_tags, problems)
                meta = _check_metadata(zf, info_dir, expect, problems)
                if meta is not None:
                    name, version, requires = meta
                    if expect.torch is not None:
                        ran.add("torch-pin")
                        torch_req = _check_torch(requires, expect, problems)
                rows, bad = _record_rows(zf, info_dir, problems)
            # the one pass: RECORD hashes, the ELF scan and vllm/_version.py from a single read of each member
            scan = scan_members(zf, _algorithms(rows or {}), keep=(VERSION_FILE,))
            rereads = scan.rereads
            if info_dir is not None and rows is not None:
                files = _check_record(zf, info_dir, rows, bad, scan, problems)
            _check_paths(zf, _read(zf, f"{info_dir}/RECORD") if info_dir else None, problems)
            if expect.cuda_variant or expect.cudart_major:
                ran.add("cuda-variant")
                cuda = wheel_cuda_facts(scan, version or None)
                _check_cuda(cuda, expect, problems)
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
