"""What a checkout reads, hashed against the ids: :mod:`october.installer.git.objcheck` on real git repos
whose loose objects are rewritten (a blob's bytes, a tree's entries) or removed."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from october.installer.git.objcheck import mismatched
from tests.fixtures.gitrepos import git


def _repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "r"
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "top.py").write_text("A = 1\n")
    (repo / "pkg" / "mod.py").write_text("B = 2\n")
    (repo / "pkg" / "sub" / "deep.py").write_text("C = 3\n")
    git("init", "-q", str(repo))
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "init", cwd=repo)
    return repo, git("rev-parse", "HEAD", cwd=repo)


def _rewrite(repo: Path, oid: str, kind: bytes, data: bytes) -> None:
    obj = repo / ".git" / "objects" / oid[:2] / oid[2:]
    os.chmod(obj, 0o644)
    obj.write_bytes(zlib.compress(b"%s %d\0" % (kind, len(data)) + data))


def test_a_clean_commit_has_every_object_hashed(tmp_path: Path) -> None:
    repo, commit = _repo(tmp_path)
    assert mismatched(repo, commit) == ([], 1 + 3 + 3)      # the commit, three trees, three blobs


def test_a_changed_blob_is_named_with_its_path(tmp_path: Path) -> None:
    repo, commit = _repo(tmp_path)
    oid = git("rev-parse", "HEAD:pkg/sub/deep.py", cwd=repo)
    _rewrite(repo, oid, b"blob", b"C = 4  # planted\n")
    assert mismatched(repo, commit)[0] == [f"{oid} (pkg/sub/deep.py)"]


def test_a_changed_tree_is_named_and_still_walked(tmp_path: Path) -> None:
    """A tree rewritten to drop an entry: the tree itself does not hash to its id."""
    repo, commit = _repo(tmp_path)
    oid = git("rev-parse", "HEAD:pkg", cwd=repo)
    entries = git("cat-file", "-p", oid, cwd=repo).splitlines()
    blob = next(e for e in entries if e.endswith("mod.py")).split()[2]
    _rewrite(repo, oid, b"tree", b"100644 mod.py\0" + bytes.fromhex(blob))
    assert mismatched(repo, commit)[0] == [f"{oid} (pkg)"]


def test_a_missing_blob_is_named(tmp_path: Path) -> None:
    repo, commit = _repo(tmp_path)
    oid = git("rev-parse", "HEAD:top.py", cwd=repo)
    (repo / ".git" / "objects" / oid[:2] / oid[2:]).unlink()
    assert mismatched(repo, commit)[0] == [f"{oid} (top.py, missing)"]


def test_a_changed_commit_is_named(tmp_path: Path) -> None:
    repo, commit = _repo(tmp_path)
    data = git("cat-file", "commit", commit, cwd=repo).encode() + b"\n"
    _rewrite(repo, commit, b"commit", data.replace(b"init", b"tnit"))
    assert mismatched(repo, commit)[0] == [f"{commit} (the commit)"]
