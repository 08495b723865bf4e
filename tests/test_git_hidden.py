"""Tracked files git status does not look at (:mod:`october.installer.git.hidden`): the index reader
against real git, each bit planted by ``git update-index`` in every index version git writes (2, 3, 4)
and in a split index (handed to git), long and non-ASCII names included; the reader's answer is held
equal to ``git ls-files -v`` so a drift between the two fails here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from october.installer.git import hidden
from october.installer.git.hidden import hidden_entries, read_index_flags
from tests.fixtures.gitrepos import git_env


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=git_env(), check=True, capture_output=True,
                          text=True).stdout


def _repo(tmp: Path, n: int = 40) -> Path:
    repo = tmp / "repo"
    (repo / "d" / "e").mkdir(parents=True)
    (repo / "o").mkdir()
    _git("init", "--quiet", "-b", "main", str(repo), cwd=tmp)
    names = [f"f{i:03d}.txt" for i in range(n)] + ["d/e/" + "long" * 60 + ".txt", "d/naïve ü.txt", "d/x", "o/y.txt"]
    for name in names:
        (repo / name).write_text(name[:20] + "\n")
    _git("add", "-A", cwd=repo)
    _git("commit", "--quiet", "-m", "one", cwd=repo)
    return repo


def _git_says(repo: Path) -> list[tuple[str, str]]:
    out = []
    for entry in subprocess.run(["git", "-c", "core.quotePath=false", "ls-files", "-v", "-z"], cwd=repo,
                                env=git_env(), check=True, capture_output=True).stdout.split(b"\0"):
        if len(entry) > 2 and (entry[:1].islower() or entry[:1] == b"S"):
            out.append((entry[2:].decode(), "assume-unchanged" if entry[:1].islower() else "skip-worktree"))
    return out


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_the_reader_says_what_git_says_in_each_index_version(tmp_path: Path, version: str) -> None:
    repo = _repo(tmp_path)
    long_name = next(p for p in _git("ls-files", cwd=repo).splitlines() if p.startswith("d/e/long"))
    _git("update-index", "--index-version", version, cwd=repo)
    assert read_index_flags(repo / ".git" / "index") == [] == _git_says(repo)

    _git("update-index", "--assume-unchanged", "f007.txt", long_name, cwd=repo)
    _git("update-index", "--skip-worktree", "f031.txt", "d/naïve ü.txt", cwd=repo)
    (repo / "f007.txt").write_text("an edit git status does not see\n")
    (repo / "f031.txt").write_text("another\n")
    assert _git("status", "--porcelain", cwd=repo) == ""          # the point: git status says clean
    git_answer = sorted(_git_says(repo))
    assert len(git_answer) == 4
    ours = read_index_flags(repo / ".git" / "index")
    assert ours is not None and sorted(ours) == git_answer
    shown = hidden_entries(repo)
    assert "f007.txt (assume-unchanged)" in shown and "f031.txt (skip-worktree)" in shown and len(shown) == 4


def test_a_split_index_is_asked_of_git(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _git("update-index", "--split-index", cwd=repo)
    _git("update-index", "--skip-worktree", "f003.txt", cwd=repo)
    assert read_index_flags(repo / ".git" / "index") is None          # not ours to read
    assert hidden_entries(repo) == ["f003.txt (skip-worktree)"]


def test_a_file_that_is_not_an_index_is_asked_of_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncated or foreign index is never read as "nothing hidden": git answers (here, that it cannot)."""
    repo = _repo(tmp_path)
    data = (repo / ".git" / "index").read_bytes()
    for bad in (data[:len(data) // 2], b"XXXX" + data[4:], data[:8] + b"\xff\xff\xff\xff" + data[12:]):
        (tmp_path / "bad").write_bytes(bad)
        assert read_index_flags(tmp_path / "bad") is None
    asked: list[Path] = []
    monkeypatch.setattr(hidden, "_asked_of_git", lambda work: asked.append(work) or [("x", "skip-worktree")])
    (repo / ".git" / "index").write_bytes(data[:len(data) // 2])
    assert hidden_entries(repo) == ["x (skip-worktree)"] and asked == [repo]


def test_submodules_are_read_and_a_sparse_cone_is_not_hidden(tmp_path: Path) -> None:
    """In a sparse submodule git sets skip-worktree outside the cone (files absent): not hidden; a
    skip-worktree file inside the cone, or one put back on disk, is."""
    sub_src = _repo(tmp_path / "src")
    top = tmp_path / "top"
    top.mkdir()
    _git("init", "--quiet", "-b", "main", cwd=top)
    _git("-c", "protocol.file.allow=always", "submodule", "add", "--quiet", str(sub_src), "third/sub", cwd=top)
    sub = top / "third" / "sub"
    _git("sparse-checkout", "set", "--cone", "d", cwd=sub)
    assert not (sub / "o" / "y.txt").exists() and (sub / "d" / "x").exists()
    assert hidden_entries(top, ["third/sub"]) == []
    _git("update-index", "--skip-worktree", "d/x", cwd=sub)
    (sub / "d" / "x").write_text("hidden\n")
    (sub / "o").mkdir()
    (sub / "o" / "y.txt").write_text("put back outside the cone\n")
    assert hidden_entries(top, ["third/sub"]) == ["third/sub/d/x (skip-worktree)",
                                                  "third/sub/o/y.txt (skip-worktree)"]
    assert hidden_entries(top) == []                 # the submodule is read only when named


def _sparse_repo(tmp: Path, *extra: str) -> Path:
    repo = _repo(tmp)
    for args in extra:
        _git(*args.split(), cwd=repo)
    _git("sparse-checkout", "set", "--cone", "d", cwd=repo)
    return repo


def test_a_file_of_the_cone_deleted_under_skip_worktree_is_hidden(tmp_path: Path) -> None:
    """Review finding: in a sparse checkout a skip-worktree file inside the cone, deleted, is a change git
    status does not show (the cone's own files are read from the cone file, not from the disk)."""
    repo = _sparse_repo(tmp_path)
    _git("update-index", "--skip-worktree", "d/x", cwd=repo)
    (repo / "d" / "x").unlink()
    assert _git("status", "--porcelain", cwd=repo) == ""
    assert hidden_entries(repo) == ["d/x (skip-worktree)"]
    # a file outside the cone, absent, is git's own sparse bookkeeping
    assert not any("o/y.txt" in h for h in hidden_entries(repo))


def test_a_file_put_back_outside_the_cone_through_a_link_or_as_a_dangling_link_is_hidden(tmp_path: Path) -> None:
    """The out-of-cone look answers per folder (a sparse cccl leaves ~6,000 paths out): a folder put back as a
    link to a folder holding the file, a dangling link put back, and a nested file are each named; a file
    where the folder belongs hides nothing under it."""
    repo = _sparse_repo(tmp_path)
    assert hidden_entries(repo) == []
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "y.txt").write_text("o/y.txt\n")
    (repo / "o").symlink_to(elsewhere, target_is_directory=True)
    assert hidden_entries(repo) == ["o/y.txt (skip-worktree)"]
    (repo / "o").unlink()
    (repo / "o").write_text("a file where the folder was\n")
    assert hidden_entries(repo) == []
    (repo / "o").unlink()
    (repo / "o").mkdir()
    (repo / "o" / "y.txt").symlink_to(tmp_path / "nowhere")
    assert hidden_entries(repo) == ["o/y.txt (skip-worktree)"]


def test_a_path_outside_the_cone_that_cannot_be_looked_at_is_named_not_taken_as_absent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review finding: a folder put back without search permission made the per-folder look answer "absent" (the
    old pathlib look raised, exit 19 naming the file).  Root (this test's user, as in CI) searches every folder,
    so the denial is a stand-in: ``os.stat``/``os.lstat`` raising EACCES for that folder's paths."""
    import errno as errno_mod
    import os

    repo = _sparse_repo(tmp_path)
    (repo / "o").mkdir()
    real_stat, real_lstat = os.stat, os.lstat

    def denied(real):
        def look(path, *args, **kwargs):
            if str(path).startswith(str(repo / "o") + "/"):
                raise PermissionError(errno_mod.EACCES, "Permission denied", str(path))
            return real(path, *args, **kwargs)
        return look
    monkeypatch.setattr(hidden.os, "stat", denied(real_stat))
    monkeypatch.setattr(hidden.os, "lstat", denied(real_lstat))
    assert hidden_entries(repo) == ["o/y.txt (skip-worktree)"]


def test_sparse_mode_is_read_from_config_not_from_a_leftover_cone_file(tmp_path: Path) -> None:
    """Review finding: `git sparse-checkout disable` leaves info/sparse-checkout behind; the repository is
    whole again, so every skip-worktree entry counts."""
    repo = _sparse_repo(tmp_path)
    _git("sparse-checkout", "disable", cwd=repo)
    assert (repo / ".git" / "info" / "sparse-checkout").is_file() and (repo / "o" / "y.txt").is_file()
    _git("update-index", "--skip-worktree", "o/y.txt", cwd=repo)
    (repo / "o" / "y.txt").unlink()
    assert _git("status", "--porcelain", cwd=repo) == ""
    assert hidden_entries(repo) == ["o/y.txt (skip-worktree)"]


def test_a_sparse_index_directory_on_disk_is_not_a_hidden_file(tmp_path: Path) -> None:
    """Review finding: with index.sparse the index holds directory entries (``o/``) for what lies outside
    the cone; a directory of that name on disk (a build's output) is not a hidden edit."""
    repo = _sparse_repo(tmp_path, "config index.sparse true")
    assert any(p.endswith("/") for p, _ in read_index_flags(repo / ".git" / "index") or [])   # a sparse index
    (repo / "o").mkdir()
    (repo / "o" / "build.o").write_text("made by a build\n")
    assert hidden_entries(repo) == []
    _git("update-index", "--skip-worktree", "d/x", cwd=repo)
    (repo / "d" / "x").unlink()
    assert hidden_entries(repo) == ["d/x (skip-worktree)"]


def test_an_unreadable_index_is_asked_of_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(tmp_path)
    index = repo / ".git" / "index"
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes",
                        lambda self: (_ for _ in ()).throw(PermissionError(13, "denied")) if self == index
                        else real_read(self))
    assert read_index_flags(index) is None
    _git("update-index", "--assume-unchanged", "f001.txt", cwd=repo)
    assert hidden_entries(repo) == ["f001.txt (assume-unchanged)"]


def test_a_hidden_edit_in_a_submodule_of_an_existing_clone_is_refused_before_anything_moves(tmp_path: Path) -> None:
    """Review finding: a re-run of fetch on an existing clone looked at the fork's own index only, so a
    hidden edit in a checked-out submodule went on to the checkout (and a submodule cleared for a changed
    selection took the edit with it).  Now the re-run is refused as a local change, the edit kept, the fix
    saying how to see it."""
    from october.installer.core.errors import FetchError
    from october.installer.engine import run_pipeline
    from october.installer.steps.fetch import FetchStep
    from tests.fixtures.fetchctx import fork_use, make_ctx, make_recipe
    from tests.fixtures.gitrepos import make_repo
    from tests.test_fetch_submodules import _super_with

    sub_url, _ = make_repo(tmp_path, "sub", commits=2)
    url, commit, _recorded = _super_with(tmp_path, {"3rdparty/sub": sub_url})
    recipe = make_recipe([fork_use("fi", url, commit)])
    run_pipeline([FetchStep()], make_ctx(tmp_path / "stack", recipe, tmp_path / "cache"))
    sub = tmp_path / "stack" / "src" / "fi" / "3rdparty" / "sub"
    tracked = _git("ls-files", cwd=sub).splitlines()[0]
    _git("update-index", "--skip-worktree", tracked, cwd=sub)
    (sub / tracked).write_text("MY HIDDEN EDIT\n")
    (tmp_path / "stack" / ".state" / "fetch.json").unlink()           # fetch runs again on the existing clone
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], make_ctx(tmp_path / "stack", recipe, tmp_path / "cache"))
    msg = str(err.value)
    assert "has local changes" in msg and f"3rdparty/sub/{tracked} (skip-worktree)" in msg, msg
    assert "ls-files -v" in msg and "--no-skip-worktree" in msg
    assert (sub / tracked).read_text() == "MY HIDDEN EDIT\n"


def test_the_undo_hint_follows_the_entry_type_not_its_wording(tmp_path: Path) -> None:
    """An untracked file git status shows, named like a hidden entry, gets no hint about hidden bits;
    a hidden entry does.  Planted: a file literally named ``x(skip-worktree)`` (git status quotes no part of it)."""
    from october.installer.git.clonecheck import dirty_entries
    from october.installer.git.worktree import _hidden_hint

    repo = _repo(tmp_path, n=2)
    (repo / "x(skip-worktree)").write_text("untracked\n")
    shown = dirty_entries(repo)
    assert "?? x(skip-worktree)" in shown, shown
    assert _hidden_hint(repo, shown) == ""
    _git("update-index", "--skip-worktree", "f000.txt", cwd=repo)
    hidden_too = dirty_entries(repo)
    assert "f000.txt (skip-worktree)" in hidden_too
    assert "--no-skip-worktree" in _hidden_hint(repo, hidden_too)


def test_a_sha256_repository_is_read_from_its_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: a wrong hash length only fell back to git, so nothing failed.  Here git may not answer:
    the index of a sha256 repository (objectformat in its config) must be read as such."""
    repo = tmp_path / "r256"
    _git("init", "--quiet", "-b", "main", "--object-format=sha256", str(repo), cwd=tmp_path)
    for name in ("a.txt", "b.txt"):
        (repo / name).write_text(name + "\n")
    _git("add", "-A", cwd=repo)
    _git("commit", "--quiet", "-m", "one", cwd=repo)
    _git("update-index", "--skip-worktree", "b.txt", cwd=repo)

    def refuse(work: Path) -> list[tuple[str, str]]:
        raise AssertionError("asked of git")

    monkeypatch.setattr(hidden, "_asked_of_git", refuse)
    assert hidden_entries(repo) == ["b.txt (skip-worktree)"]


def test_an_unreadable_index_gets_no_hint_about_hidden_bits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: the entry saying an index could not be read was typed as a hidden file, so the fix named
    skip-worktree bits nobody set."""
    from october.installer.git.hidden import Hidden
    from october.installer.git.worktree import _hidden_hint

    repo = _repo(tmp_path, n=2)
    monkeypatch.setattr(hidden, "read_index_flags", lambda index, hash_len=20: None)
    monkeypatch.setattr(hidden, "look", lambda work, *args: (b"", "fatal: index file corrupt"))
    [entry] = hidden_entries(repo)
    assert entry == "(the index) (unreadable: fatal: index file corrupt)" and not isinstance(entry, Hidden)
    assert _hidden_hint(repo, [entry]) == ""
