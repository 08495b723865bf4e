"""The checks of what a wheel says it is: ``filename`` (the name parses and matches the recipe),
``tags`` (a tag the stack Python supports; WHEEL's tags agree, or differ by a recorded retag),
``metadata`` (one ``.dist-info``; METADATA name and version) and ``torch-pin`` (``Requires-Dist``
pins the recipe's torch).
"""

from __future__ import annotations

import re
import zipfile
from email.parser import BytesParser

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .expect import Problems, WheelExpectation, read_member
from .retag import Retag, match_tags


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def check_filename(name: str, expect: WheelExpectation, problems: Problems) -> frozenset[str]:
    if name != expect.filename:
        problems.add("filename", f"expected the file {expect.filename}, found {name}")
    try:
        pname, pversion, _build, tags = parse_wheel_filename(name)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        problems.add("filename", f"{name} is not a valid wheel file name ({exc})")
        return frozenset()
    if pname != canonicalize_name(expect.name):
        problems.add("filename", f"expected the project {expect.name} in the file name, found {pname}")
    if str(pversion) != expect.version and str(pversion) != str(_version(expect.version) or expect.version):
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


def dist_info_dir(zf: zipfile.ZipFile, problems: Problems) -> str | None:
    tops = sorted({n.split("/", 1)[0] for n in zf.namelist() if "/" in n and n.split("/", 1)[0].endswith(".dist-info")})
    if len(tops) != 1:
        problems.add("metadata", f"expected exactly one .dist-info directory, found {len(tops)}"
                                 f"{': ' + ', '.join(tops) if tops else ''}")
        return None
    return tops[0]


def check_wheel_file(zf: zipfile.ZipFile, info_dir: str, file_tags: frozenset[str],
                      problems: Problems) -> tuple[tuple[str, ...], tuple[Retag, ...]]:
    raw = read_member(zf, f"{info_dir}/WHEEL")
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


def check_metadata(zf: zipfile.ZipFile, info_dir: str, expect: WheelExpectation,
                    problems: Problems) -> tuple[str, str, list[str]] | None:
    raw = read_member(zf, f"{info_dir}/METADATA")
    if raw is None:
        problems.add("metadata", f"expected {info_dir}/METADATA, found no such file")
        return None
    msg = BytesParser().parsebytes(raw)
    name, version = str(msg.get("Name", "")).strip(), str(msg.get("Version", "")).strip()
    if canonicalize_name(name) != canonicalize_name(expect.name):
        problems.add("metadata", f"METADATA Name: expected {expect.name}, found {name or 'nothing'}")
    got = _version(version)
    if got is None or got != _version(expect.version):
        problems.add("metadata", f"METADATA Version: expected {expect.version}, found {version or 'nothing'}")
    return name, version, [str(r) for r in (msg.get_all("Requires-Dist") or [])]


def check_torch(requires: list[str], expect: WheelExpectation, problems: Problems) -> str | None:
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
        if canonicalize_name(req.name) == "torch" and (req.marker is None or req.marker.evaluate(env)):
            pins.append(req)
    if not pins:
        problems.add("torch-pin", f"expected Requires-Dist: torch=={want} (the ABI its extensions were built "
                                  "against), found no torch requirement for the stack Python")
        return None
    for req in pins:
        specs = list(req.specifier)
        exact = [s for s in specs if s.operator in ("==", "===") and not s.version.endswith(".*")]
        pinned = _version(exact[0].version) if len(specs) == 1 and len(exact) == 1 else None
        if pinned is None or pinned.public != want:
            problems.add("torch-pin", f"expected Requires-Dist: torch=={want} (the recipe's torch), found {req}")
    return str(pins[0])
