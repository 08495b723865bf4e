"""The ``record`` check (every file is in RECORD with a matching hash and size, and vice versa) and the
``paths`` check (no absolute path, no ``..`` component, no symlink entry), on the one read of each member.

Not PyPA's ``installer``: ``validate_record`` reads every member again, passes a row for a missing file,
a file listed twice, an ``md5`` hash and a ``../`` path, and stops at the first malformed row (and under
pytest ``import installer`` finds this project's folder).  Not :mod:`importlib.metadata` either: its
``Distribution.files`` misreads or raises on malformed rows.
"""

from __future__ import annotations

import csv
import io
import re
import stat
import zipfile
from typing import Mapping

from .expect import Problems, read_member
from .scan import WheelScan

RECORD_HASHES = ("sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b")
SIGNATURES = ("RECORD.jws", "RECORD.p7s")


def _record_digest(data_hash: str) -> tuple[str, str] | None:
    algo, sep, digest = data_hash.partition("=")
    return (algo, digest) if sep and digest else None


def record_rows(zf: zipfile.ZipFile, info_dir: str, problems: Problems
                 ) -> tuple[dict[str, tuple[str, str]] | None, list[str]]:
    record_name = f"{info_dir}/RECORD"
    raw = read_member(zf, record_name)
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


def record_algorithms(rows: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """member -> the hash RECORD names for it, where that hash is one we accept."""
    return {path: parsed[0] for path, (digest_field, _size) in rows.items()
            if (parsed := _record_digest(digest_field)) is not None and parsed[0] in RECORD_HASHES}


def check_record(zf: zipfile.ZipFile, info_dir: str, rows: Mapping[str, tuple[str, str]], bad: list[str],
                  scan: WheelScan, problems: Problems) -> int:
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


def check_paths(zf: zipfile.ZipFile, record: bytes | None, problems: Problems) -> None:
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
