"""The wheel's RECORD and path checks one rule at a time (bench/mutate.py's `wheel-record` module).

Each zip is built here with :mod:`zipfile` (a real archive, read by the real scan); only the
RECORD and path rules run, so a fault caught by another check cannot hide a rule that stopped
working (tests/test_wheel_verify.py runs every check on whole wheels).
"""

from __future__ import annotations

import base64
import hashlib
import stat
import zipfile
from pathlib import Path

import pytest

from october.installer.wheels.expect import Problems
from october.installer.wheels.record import (
    RECORD_HASHES,
    SIGNATURES,
    check_paths,
    check_record,
    record_algorithms,
    record_rows,
)
from october.installer.wheels.scan import scan_members

INFO = "pkg-1.0.dist-info"


def _digest(data: bytes, algo: str = "sha256", pad: bool = False) -> str:
    raw = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).decode()
    return f"{algo}={raw if pad else raw.rstrip('=')}"


def _zip(tmp: Path, members: dict[str, bytes], record: str | None, *, dirs: tuple[str, ...] = (),
         dup: str | None = None) -> Path:
    path = tmp / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for d in dirs:
            zf.writestr(zipfile.ZipInfo(d), b"")
        for name, data in members.items():
            zf.writestr(name, data)
        if record is not None:
            zf.writestr(f"{INFO}/RECORD", record)
        if dup is not None:
            with pytest.warns(UserWarning, match="Duplicate name"):
                zf.writestr(dup, b"second copy")
    return path


def _record(members: dict[str, bytes], algo: str = "sha256", extra: str = "") -> str:
    rows = [f"{n},{_digest(d, algo)},{len(d)}" for n, d in members.items()]
    return "\n".join([*rows, f"{INFO}/RECORD,,", extra]) + "\n"


def _check(path: Path) -> tuple[int, list[tuple[str, str]]]:
    problems = Problems()
    with zipfile.ZipFile(path) as zf:
        rows, bad = record_rows(zf, INFO, problems)
        assert rows is not None
        scan = scan_members(zf, record_algorithms(rows))
        files = check_record(zf, INFO, rows, bad, scan, problems)
        check_paths(zf, zf.read(f"{INFO}/RECORD"), problems)
    return files, problems.items


MEMBERS = {"pkg/__init__.py": b"x = 1\n", f"{INFO}/METADATA": b"Name: pkg\nVersion: 1.0\n"}


def test_a_good_wheel_has_no_record_or_path_problem(tmp_path: Path) -> None:
    files, items = _check(_zip(tmp_path, MEMBERS, _record(MEMBERS), dirs=("pkg/",)))
    assert items == [] and files == 3                       # directory entries are not files


@pytest.mark.parametrize("algo", RECORD_HASHES)
def test_every_accepted_hash_verifies(tmp_path: Path, algo: str) -> None:
    files, items = _check(_zip(tmp_path, MEMBERS, _record(MEMBERS, algo)))
    assert items == []
    assert set(RECORD_HASHES) == {"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b"}


def test_a_padded_digest_verifies(tmp_path: Path) -> None:
    rec = "\n".join(f"{n},{_digest(d, 'sha512', pad=True)},{len(d)}" for n, d in MEMBERS.items()) + f"\n{INFO}/RECORD,,\n"
    assert _check(_zip(tmp_path, MEMBERS, rec))[1] == []


@pytest.mark.parametrize("field", ["md5=abc", "sha1=abc", "sha256", "sha256=", "", "SHA256=abc"])
def test_a_weak_or_malformed_hash_is_refused(tmp_path: Path, field: str) -> None:
    rec = f"pkg/__init__.py,{field},6\n{INFO}/METADATA,{_digest(MEMBERS[f'{INFO}/METADATA'])},23\n{INFO}/RECORD,,\n"
    items = _check(_zip(tmp_path, MEMBERS, rec))[1]
    assert items == [("record", f"pkg/__init__.py: expected a sha256 (or stronger) hash in RECORD, found {field!r}")]


def test_signature_files_need_no_record_row(tmp_path: Path) -> None:
    members = {**MEMBERS, **{f"{INFO}/{s}": b"signature" for s in SIGNATURES}}
    files, items = _check(_zip(tmp_path, members, _record(MEMBERS)))
    assert items == [] and files == 5
    assert SIGNATURES == ("RECORD.jws", "RECORD.p7s")
    other = {**MEMBERS, "pkg/RECORD.jws": b"not the signature"}      # only the dist-info's own signatures
    assert _check(_zip(tmp_path, other, _record(MEMBERS)))[1] == [
        ("record", "pkg/RECORD.jws is in the wheel but not in RECORD")]


def test_a_hash_mismatch_and_a_size_mismatch_are_both_named(tmp_path: Path) -> None:
    rec = _record(MEMBERS).replace("pkg/__init__.py," + _digest(b"x = 1\n") + ",6",
                                   "pkg/__init__.py," + _digest(b"x = 2\n") + ",6")
    assert _check(_zip(tmp_path, MEMBERS, rec))[1] == [
        ("record", f"pkg/__init__.py: hash mismatch, expected {_digest(b'x = 2' + bytes([10]))} (RECORD), "
                   f"found {_digest(b'x = 1' + bytes([10]))}")]
    rec = _record(MEMBERS).replace(f"{_digest(b'x = 1' + bytes([10]))},6", f"{_digest(b'x = 1' + bytes([10]))},7")
    assert _check(_zip(tmp_path, MEMBERS, rec))[1] == [
        ("record", "pkg/__init__.py: size mismatch, expected 7 bytes (RECORD), found 6")]
    rec = _record(MEMBERS).replace(f"{_digest(b'x = 1' + bytes([10]))},6", f"{_digest(b'x = 1' + bytes([10]))},")
    assert _check(_zip(tmp_path, MEMBERS, rec))[1] == []          # an empty size is allowed


def test_malformed_duplicate_and_blank_rows(tmp_path: Path) -> None:
    extra = "\n\npkg/two.py,sha256=abc\npkg/__init__.py," + _digest(b"x = 1\n") + ",6"
    items = _check(_zip(tmp_path, MEMBERS, _record(MEMBERS, extra=extra)))[1]
    assert items == [("record", "RECORD row ['pkg/two.py', 'sha256=abc']: expected 3 fields, found 2"),
                     ("record", "RECORD lists pkg/__init__.py twice")]


def test_members_not_in_record_and_rows_not_in_the_wheel(tmp_path: Path) -> None:
    members = {**MEMBERS, "pkg/smuggled.py": b"evil"}
    rec = _record(MEMBERS) + f"pkg/gone.py,{_digest(b'g')},1\n"
    assert _check(_zip(tmp_path, members, rec))[1] == [
        ("record", "pkg/smuggled.py is in the wheel but not in RECORD"),
        ("record", "RECORD lists pkg/gone.py, which is not in the wheel")]


def test_a_member_twice_in_the_zip_is_named(tmp_path: Path) -> None:
    files, items = _check(_zip(tmp_path, MEMBERS, _record(MEMBERS), dup="pkg/__init__.py"))
    assert ("record", "pkg/__init__.py appears twice in the zip") in items
    assert files == 3


def test_no_record_at_all(tmp_path: Path) -> None:
    problems = Problems()
    with zipfile.ZipFile(_zip(tmp_path, MEMBERS, None)) as zf:
        assert record_rows(zf, INFO, problems) == (None, [])
    assert problems.items == [("record", f"expected {INFO}/RECORD, found no such file")]


@pytest.mark.parametrize("name,why", [
    ("../escape.py", "has a '..' component that escapes the install tree"),
    ("pkg/../../escape.py", "has a '..' component that escapes the install tree"),
    ("pkg\\..\\..\\escape.py", "has a '..' component that escapes the install tree"),
    ("/etc/cron.d/evil", "is an absolute path"),
    ("\\windows\\evil", "is an absolute path"),
    ("C:/evil.py", "is an absolute path"),
])
def test_an_escaping_path_in_the_zip_or_only_in_record_is_refused(tmp_path: Path, name: str, why: str) -> None:
    # in the zip (and RECORD): named once, as a zip path
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    members = {**MEMBERS, name: b"x"}
    items = _check(_zip(tmp_path / "a", members, _record(members)))[1]
    assert ("paths", f"{name} {why}: expected a relative path inside the wheel") in items
    # only in RECORD: the path rule alone names it (the record rule says it is missing)
    rec = _record(MEMBERS) + f"{name},{_digest(b'x')},1\n"
    items = _check(_zip(tmp_path / "b", MEMBERS, rec))[1]
    assert [i for i in items if i[0] == "paths"] == [
        ("paths", f"{name} {why} (in RECORD): expected a relative path inside the wheel")]


def test_dots_inside_names_are_not_an_escape(tmp_path: Path) -> None:
    members = {**MEMBERS, "pkg/..data/a..b.py": b"x", "pkg/C_dir/x.py": b"y"}
    assert _check(_zip(tmp_path, members, _record(members)))[1] == []


def test_a_symlink_entry_is_refused(tmp_path: Path) -> None:
    path = _zip(tmp_path, MEMBERS, _record(MEMBERS))
    with zipfile.ZipFile(path, "a") as zf:
        info = zipfile.ZipInfo("pkg/link.py")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "../../etc/passwd")
    problems = Problems()
    with zipfile.ZipFile(path) as zf:
        check_paths(zf, None, problems)
    assert problems.items == [("paths", "pkg/link.py is a symbolic link entry (a wheel holds regular files only): "
                                        "expected a relative path inside the wheel")]


def test_a_member_that_cannot_be_read_is_named_not_hashed(tmp_path: Path) -> None:
    path = _zip(tmp_path, MEMBERS, _record(MEMBERS))
    raw = path.read_bytes()
    assert raw.count(b"x = 1\n") == 1
    path.write_bytes(raw.replace(b"x = 1\n", b"x = 9\n"))          # the stored bytes no longer match their CRC
    files, items = _check(path)
    assert items == [("record", "pkg/__init__.py cannot be read from the zip (Bad CRC-32 for file 'pkg/__init__.py')")]
    assert files == 3


# ------------------------------------------------------------------ whole wheels (the rules wired in verify_wheel)

from october.installer.core.errors import WheelError  # noqa: E402
from october.installer.wheels.verify import verify_wheel  # noqa: E402
from tests.fixtures.base_wheels import vllm_wheel  # noqa: E402
from tests.test_wheel_verify import expect_for, facts, tags  # noqa: E402,F401  (module fixtures)


def _rewrite_record(path: Path, extra_row: str) -> None:
    with zipfile.ZipFile(path) as zf:
        items = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for info, data in items:
            zf.writestr(info, data + extra_row.encode() if info.filename.endswith(".dist-info/RECORD") else data)


def test_verify_wheel_checks_paths_that_only_record_lists(tmp_path: Path, tags, facts) -> None:  # noqa: F811
    whl = vllm_wheel(tmp_path)
    _rewrite_record(whl, f"../../etc/evil.py,{_digest(b'x')},1\n")
    with pytest.raises(WheelError) as err:
        verify_wheel(whl, expect_for(whl, tags, facts))
    assert "[paths] ../../etc/evil.py has a '..' component that escapes the install tree (in RECORD)" in str(err.value)


def test_verify_wheel_names_a_version_file_that_is_not_python(tmp_path: Path, tags, facts) -> None:  # noqa: F811
    whl = vllm_wheel(tmp_path, version_file="def (:\n")
    with pytest.raises(WheelError) as err:
        verify_wheel(whl, expect_for(whl, tags, facts))
    assert "[metadata] vllm/_version.py in the base wheel is not valid Python" in str(err.value)
