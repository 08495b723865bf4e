"""The fetch step reads submodule states from each repository's index and each submodule's HEAD
(:func:`october.installer.git.clonecheck.submodule_heads`) instead of ``git submodule status --recursive``
(a shell script in git before 2.45: about 15 processes per repository and four ``git describe`` per
submodule).  Real git repositories here, with nested submodules, each state git names planted: the
reader must say what git says, line for line and in git's order (tests/test_fetch_real.py holds the
same on the real FlashInfer and CCCL)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from october.installer.git import clonecheck
from october.installer.git.clonecheck import submodule_heads, submodule_states
from tests.fixtures.gitrepos import bare_path, git_env, make_repo
from tests.fixtures.gitrepos import git as fixture_git

FILE = ("-c", "protocol.file.allow=always")


def _two_commits(tmp: Path, name: str) -> tuple[str, str, str]:
    """A bare repo with two commits on main: (URL, first, second)."""
    url, _ = make_repo(tmp, name, files={"a.txt": f"{name} one\n"})
    work = tmp / f"work-{name}"
    fixture_git("clone", "--quiet", str(bare_path(url)), str(work))
    first = fixture_git("rev-parse", "HEAD", cwd=work)
    (work / "a.txt").write_text(f"{name} two\n")
    fixture_git("commit", "--quiet", "-am", "two", cwd=work)
    fixture_git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=work)
    return url, first, fixture_git("rev-parse", "HEAD", cwd=work)


def _with_subs(tmp: Path, name: str, subs: dict[str, str]) -> str:
    """A bare repo whose tip records each ``path -> URL`` submodule at that URL's tip."""
    url, _ = make_repo(tmp, name, files={"top.txt": name})
    work = tmp / f"work-{name}"
    fixture_git("clone", "--quiet", str(bare_path(url)), str(work))
    for path, sub in subs.items():
        fixture_git(*FILE, "submodule", "add", "--quiet", sub, path, cwd=work)
    fixture_git("commit", "--quiet", "-m", "subs", cwd=work)
    fixture_git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=work)
    return url


@pytest.fixture()
def clone(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A clone with ``a`` (which nests ``a/inner``), ``a-c`` (sorts between ``a`` and ``a/inner``)
    and ``z``, all checked out recursively at their tips (each the second commit); the ids of
``z``'s two commits and ``inner``'s first."""
    inner, inner1, _ = _two_commits(tmp_path, "inner")
    mid = _with_subs(tmp_path, "mid", {"inner": inner})
    side, _, _ = _two_commits(tmp_path, "side")
    zed, zed1, zed2 = _two_commits(tmp_path, "zed")
    top = _with_subs(tmp_path, "top", {"a": mid, "a-c": side, "z": zed})
    dest = tmp_path / "clone"
    fixture_git(*FILE, "clone", "--quiet", "--recurse-submodules", str(bare_path(top)), str(dest))
    return dest, {"zed1": zed1, "zed2": zed2, "inner1": inner1}


def _same(dest: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """What git says equals what the reader says; the reader asked no ``git submodule`` for it."""
    git_says = submodule_states(dest)

    def asked(path: Path) -> list:
        raise AssertionError(f"`git submodule status` was run in {path}")

    with monkeypatch.context() as m:
        m.setattr(clonecheck, "submodule_states", asked)
        assert submodule_heads(dest) == git_says
        for selection in (("a",), ("z",), ("a-c", "z"), ("a/inner",), ()):
            assert submodule_heads(dest, selection) == [s for s in git_says
                                                        if any(s.path == p or s.path.startswith(p + "/")
                                                               for p in selection)]
    return [(s.flag, s.path, s.commit) for s in git_says]


def test_every_submodule_at_its_recorded_commit_nested_and_in_gits_order(clone, monkeypatch: pytest.MonkeyPatch) -> None:
    dest, _ = clone
    said = _same(dest, monkeypatch)
    assert [(f, p) for f, p, _ in said] == [(" ", "a"), (" ", "a/inner"), (" ", "a-c"), (" ", "z")]


def test_a_submodule_at_another_commit_reads_plus_with_its_head(clone, monkeypatch: pytest.MonkeyPatch) -> None:
    dest, ids = clone
    fixture_git("-C", str(dest / "z"), "checkout", "--quiet", "--detach", ids["zed1"])
    fixture_git("-C", str(dest / "a" / "inner"), "checkout", "--quiet", "--detach", ids["inner1"])
    said = _same(dest, monkeypatch)
    assert ("+", "z", ids["zed1"]) in said and ("+", "a/inner", ids["inner1"]) in said


def test_a_submodule_not_checked_out_reads_minus_with_the_recorded_commit(clone, monkeypatch: pytest.MonkeyPatch) -> None:
    dest, _ = clone
    fixture_git("-C", str(dest), "submodule", "deinit", "--quiet", "--force", "a")
    said = _same(dest, monkeypatch)
    assert [(f, p) for f, p, _ in said] == [("-", "a"), (" ", "a-c"), (" ", "z")]


def test_an_unmerged_submodule_reads_u_once(clone, monkeypatch: pytest.MonkeyPatch) -> None:
    dest, ids = clone
    recorded = fixture_git("-C", str(dest), "rev-parse", "HEAD:z")
    fixture_git("-C", str(dest), "update-index", "--force-remove", "z")
    entries = "".join(f"160000 {c} {stage}\tz\n" for stage, c in ((1, recorded), (2, ids["zed1"]), (3, ids["zed2"])))
    subprocess.run(["git", "-C", str(dest), "update-index", "--index-info"], input=entries, text=True,
                   check=True, env=git_env())
    said = _same(dest, monkeypatch)
    assert ("U", "z", "0" * 40) in said and [p for _, p, _ in said].count("z") == 1


def test_a_gitlink_its_gitmodules_does_not_name_is_left_to_git(clone, monkeypatch: pytest.MonkeyPatch) -> None:
    """git refuses such a repository ("no submodule mapping"); the reader hands it to git, whose error
    the fetch step shows (tests/test_fetch_worktree.py::test_gitlink_without_gitmodules_is_a_clear_error)."""
    dest, ids = clone
    fixture_git("-C", str(dest), "update-index", "--add", "--cacheinfo", f"160000,{ids['zed1']},vendor/lib")
    with pytest.raises(clonecheck.GitInspectError, match="no submodule mapping"):
        submodule_heads(dest)
    assert [s.path for s in submodule_heads(dest, ("z",))] == ["z"]     # not selected: not looked at


def test_left_to_git_the_answer_is_still_the_selection(clone, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the reader hands a repository to git's command, the answer is git's, cut to the selection."""
    dest, _ = clone
    git_says = submodule_states(dest)
    monkeypatch.setattr(clonecheck, "_gitmodules_paths", lambda repo: set())      # nothing named: git answers
    assert submodule_heads(dest) == git_says
    assert submodule_heads(dest, ("z",)) == [s for s in git_says if s.path == "z"]
    assert submodule_heads(dest, ("a",)) == [s for s in git_says if s.path in ("a", "a/inner")]


def test_check_clone_with_local_changes_allowed_still_compares_the_recorded_submodules(clone) -> None:
    """``--allow-dirty``: no ``git status`` verdict, so the states git gives are compared with the record
    (bench/mutate.py: deleting either return of that comparison survived)."""
    dest, _ = clone
    head = fixture_git("-C", str(dest), "rev-parse", "HEAD")
    recorded = {s.path: s.commit for s in submodule_states(dest)}
    assert clonecheck.check_clone(dest, head, allow_dirty=True, submodules=recorded) is None
    wrong = dict(recorded, z="0" * 40)
    assert "submodules are" in (clonecheck.check_clone(dest, head, allow_dirty=True, submodules=wrong) or "")


def test_check_clone_says_so_when_git_cannot_read_the_clone(clone) -> None:
    """A clone git cannot read (its index overwritten) is never called clean."""
    dest, _ = clone
    head = fixture_git("-C", str(dest), "rev-parse", "HEAD")
    (dest / ".git" / "index").write_bytes(b"not an index")
    for allow_dirty in (False, True):
        said = clonecheck.check_clone(dest, head, allow_dirty=allow_dirty, submodules={"z": "0" * 40})
        assert said is not None and "git cannot inspect" in said, said


def test_a_submodule_whose_git_directory_is_broken_fails_and_is_not_read_from_the_superproject(
        clone, monkeypatch: pytest.MonkeyPatch) -> None:
    """A submodule whose ``.git`` holds a HEAD and nothing else (review, session 15): git would climb to
    the superproject and list its index as the submodule's; GIT_CEILING_DIRECTORIES stops it, so the
    reader fails on that submodule itself (no hand-over to git's command needed)."""
    dest, _ = clone
    head = (dest / ".git" / "modules" / "z" / "HEAD").read_text()
    (dest / "z" / ".git").unlink()
    (dest / "z" / ".git").mkdir()
    (dest / "z" / ".git" / "HEAD").write_text(head)
    monkeypatch.setattr(clonecheck, "submodule_states", lambda path: pytest.fail("handed to git"))
    with pytest.raises(clonecheck.GitInspectError, match="not a git repository"):
        submodule_heads(dest)


def test_a_gitmodules_this_reader_cannot_decode_is_left_to_git(clone) -> None:
    """A byte that is not UTF-8 in .gitmodules (a comment; git reads bytes): git's answer, not a traceback."""
    dest, _ = clone
    with open(dest / ".gitmodules", "ab") as fh:
        fh.write(b"# caf\xe9\n")
    assert submodule_heads(dest) == submodule_states(dest)


def test_a_dirty_clone_names_its_first_ten_changes_and_counts_the_rest(clone) -> None:
    """(bench/mutate.py survivors: the cut at ``MAX_LISTED``.)  Twelve untracked files: ten named, two
    counted; ten: all named, no count."""
    dest, _ = clone
    head = fixture_git("-C", str(dest), "rev-parse", "HEAD")
    for n in range(12):
        (dest / f"extra{n:02d}.txt").write_text("x")
    said = clonecheck.check_clone(dest, head, allow_dirty=False) or ""
    assert said.count("extra") == clonecheck.MAX_LISTED and "; ... 2 more)" in said, said
    for n in (10, 11):
        (dest / f"extra{n:02d}.txt").unlink()
    said = clonecheck.check_clone(dest, head, allow_dirty=False) or ""
    assert said.count("extra") == 10 and "more" not in said, said


def test_no_git_on_path_is_said_not_a_traceback(clone, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(bench/mutate.py survivor: ``_git`` when git itself cannot be started.)  A PATH without git: the
    reader raises its own error, naming that git cannot be run, and check_clone never calls the clone clean."""
    dest, _ = clone
    head = fixture_git("-C", str(dest), "rev-parse", "HEAD")
    empty = tmp_path / "no-git-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(clonecheck.GitInspectError, match="cannot run git"):
        clonecheck.dirty_entries(dest)
    said = clonecheck.check_clone(dest, head, allow_dirty=False)
    assert said is not None and "cannot run git" in said, said
