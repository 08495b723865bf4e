"""Ignored files inside a fork's submodules (:func:`october.installer.git.clonecheck.ignored_files`), on real git
repositories: listed in checked-out and nested submodules, and a gitlink without a ``.gitmodules`` mapping is no
internal error (the review: ``git submodule status`` failed on one, exit 70 in the install step)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from october.installer.git.clonecheck import ignored_files


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "protocol.file.allow=always", "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    _git("init", "-q", cwd=path)
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    _git("add", "-A", cwd=path)
    _git("commit", "-q", "-m", "c", cwd=path)
    return path


def test_ignored_files_of_checked_out_and_nested_submodules_are_listed(tmp_path: Path) -> None:
    inner = _repo(tmp_path / "inner", {"i.txt": "i\n"})
    sub = _repo(tmp_path / "sub", {"s.txt": "s\n"})
    _git("submodule", "add", "-q", str(inner), "deep", cwd=sub)
    _git("commit", "-q", "-m", "deep", cwd=sub)
    fork = _repo(tmp_path / "fork", {"f.txt": "f\n", ".gitignore": "build/\n"})
    _git("submodule", "add", "-q", str(sub), "3rdparty/sub", cwd=fork)
    _git("submodule", "add", "-q", str(inner), "my lib", cwd=fork)       # its name has a space (the review)
    _git("commit", "-q", "-m", "sub", cwd=fork)
    _git("submodule", "update", "--init", "--recursive", "-q", cwd=fork)
    # an unmapped gitlink (no .gitmodules entry), checked out: `git submodule status` failed on it, .gitmodules
    # does not name it
    _git("clone", "-q", str(inner), "vendor/orphan", cwd=fork)
    _git("update-index", "--add", "--cacheinfo", f"160000,{_git('rev-parse', 'HEAD', cwd=inner).strip()},vendor/orphan",
         cwd=fork)
    for where in (fork / "my lib" / "_C", fork / "vendor" / "orphan" / "_C"):
        where.mkdir()
        (where / ".gitignore").write_text("*\n")
    (fork / "build").mkdir()
    (fork / "build" / "out.so").write_text("x")
    for where in (fork / "3rdparty" / "sub" / "_cache", fork / "3rdparty" / "sub" / "deep" / "_cache"):
        where.mkdir()
        (where / ".gitignore").write_text("*\n")
        (where / "evil.py").write_text("x = 1\n")
    assert sorted(ignored_files(fork)) == ["3rdparty/sub/_cache/.gitignore", "3rdparty/sub/_cache/evil.py",
                                           "3rdparty/sub/deep/_cache/.gitignore", "3rdparty/sub/deep/_cache/evil.py",
                                           "build/out.so", "my lib/_C/.gitignore", "vendor/orphan/_C/.gitignore"]
