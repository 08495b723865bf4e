"""The kit check (``kit.json`` against the files on disk) rule by rule, on a small kit written here
(bench/mutate.py's `kit-check` module).  tests/test_kit.py makes and uses whole kits end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from october.installer.core.errors import KitError
from october.installer.kit import KIND, KIT_FORMAT, MANIFEST
from october.installer.kit.manifest import MAX_LISTED, check_files, file_table, listed, read_manifest, write_manifest


def _kit(root: Path) -> dict[str, Any]:
    (root / "wheels").mkdir(parents=True)
    (root / "wheels" / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"PK six")
    (root / "git" / "github.com" / "o").mkdir(parents=True)
    (root / "git" / "github.com" / "o" / "r.git").write_bytes(b"pack bytes")
    (root / "empty.txt").write_bytes(b"")
    files = file_table(root)
    doc = {"format_version": KIT_FORMAT, "kind": KIND, "tool": {"name": "october", "version": "0.1"},
           "recipe": {"name": "r", "sha256": "a" * 64}, "target": {"python": "3.12", "arch": "x86_64"},
           "torch": {"requirement": "torch==2.10.0", "from_system": False}, "lock": {"source": "lock"},
           "forks": {}, "repos": [], "base_wheel": None, "wheels": [], "files": files,
           "size_bytes": sum(f["size"] for f in files.values())}
    write_manifest(root / MANIFEST, doc)
    return doc


def test_file_table_lists_every_file_but_the_manifest(tmp_path: Path) -> None:
    doc = _kit(tmp_path)
    assert sorted(doc["files"]) == ["empty.txt", "git/github.com/o/r.git", "wheels/six-1.16.0-py2.py3-none-any.whl"]
    assert doc["files"]["empty.txt"] == {"sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                                         "size": 0}
    assert MANIFEST not in file_table(tmp_path)


def test_a_symbolic_link_in_a_kit_is_refused_when_it_is_made(tmp_path: Path) -> None:
    _kit(tmp_path)
    os.symlink("/etc/passwd", tmp_path / "wheels" / "link.whl")
    with pytest.raises(KitError, match="symbolic link") as info:
        file_table(tmp_path)
    assert info.value.found == "a link to /etc/passwd"


def test_a_good_kit_reads_and_matches(tmp_path: Path) -> None:
    doc = _kit(tmp_path)
    assert read_manifest(tmp_path) == doc
    assert check_files(tmp_path, doc) == []


def test_a_changed_file_of_the_same_size_is_named(tmp_path: Path) -> None:
    doc = _kit(tmp_path)
    (tmp_path / "wheels" / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"PK evl")
    (problem,) = check_files(tmp_path, doc)
    assert problem.startswith("wheels/six-1.16.0-py2.py3-none-any.whl: sha256 ")
    assert problem.endswith(f"manifest says {doc['files']['wheels/six-1.16.0-py2.py3-none-any.whl']['sha256']}")


def test_a_resized_missing_extra_or_linked_file_is_named(tmp_path: Path) -> None:
    doc = _kit(tmp_path)
    (tmp_path / "wheels" / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"PK six longer")
    (tmp_path / "git" / "github.com" / "o" / "r.git").unlink()
    (tmp_path / "empty.txt").unlink()
    os.symlink("/etc/hostname", tmp_path / "empty.txt")              # a link where a listed file was
    (tmp_path / "wheels" / "evil-1.0-py3-none-any.whl").write_bytes(b"PK evil")
    os.symlink("/etc/passwd", tmp_path / "wheels" / "link.whl")
    assert check_files(tmp_path, doc) == [
        "empty.txt: a link (to /etc/hostname), not the file the manifest lists",
        "git/github.com/o/r.git: missing",
        "wheels/six-1.16.0-py2.py3-none-any.whl: 13 bytes, manifest says 6",
        "wheels/evil-1.0-py3-none-any.whl: not in the manifest",
        "wheels/link.whl: not in the manifest",
    ]


def test_a_directory_where_a_file_was_is_missing(tmp_path: Path) -> None:
    doc = _kit(tmp_path)
    (tmp_path / "empty.txt").unlink()
    (tmp_path / "empty.txt").mkdir()
    assert check_files(tmp_path, doc) == ["empty.txt: missing"]


def test_no_manifest_or_an_unreadable_one(tmp_path: Path) -> None:
    with pytest.raises(KitError, match="is not a finished kit") as info:
        read_manifest(tmp_path)
    assert info.value.found == "no manifest there"
    (tmp_path / MANIFEST).write_text("{torn")
    with pytest.raises(KitError, match="cannot be read"):
        read_manifest(tmp_path)


@pytest.mark.parametrize("change,found", [
    ({"kind": "other"}, "kind 'other', format_version 1"),
    ({"format_version": 2}, "kind 'october-kit', format_version 2"),
    ({"format_version": "1"}, "kind 'october-kit', format_version '1'"),
])
def test_a_foreign_manifest_is_refused(tmp_path: Path, change: dict[str, Any], found: str) -> None:
    doc = _kit(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({**doc, **change}))
    with pytest.raises(KitError, match="is not a kit manifest this october reads") as info:
        read_manifest(tmp_path)
    assert info.value.found == found


def test_a_manifest_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text("[1]")
    with pytest.raises(KitError, match="is not a kit manifest") as info:
        read_manifest(tmp_path)
    assert info.value.found == "list"


def test_a_malformed_manifest_is_refused(tmp_path: Path) -> None:
    doc = _kit(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({**doc, "files": {"../escape": {"sha256": "0" * 64, "size": 1}}}))
    with pytest.raises(KitError, match="is malformed"):
        read_manifest(tmp_path)


def test_listed_shows_the_first_few(tmp_path: Path) -> None:
    items = [f"p{i}" for i in range(MAX_LISTED + 2)]
    assert listed(items) == "; ".join(items[:MAX_LISTED]) + "; ... 2 more"
    assert listed(items[:MAX_LISTED]) == "; ".join(items[:MAX_LISTED])
    assert MAX_LISTED == 8
