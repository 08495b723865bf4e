"""What a killed fetch leaves, planted by hand, and the plain re-run that finishes it.

Each state here is one a SIGKILL can leave (tests/test_fetch_kill_resume.py finds them by
killing real runs); planting them makes each recovery rule fail on its own when broken.
Real git throughout, origins made by the fixtures.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import git
import pytest

from october.installer.core.errors import FetchError
from october.installer.core.runner import Runner
from october.installer.engine import run_pipeline
from october.installer.git.mirror import (
    PIN_REFS,
    ensure_commit,
    has_commit,
    has_complete,
    mirror_path,
    open_mirror,
)
from october.installer.git.recover import MARKER, mark_incomplete
from october.installer.steps.fetch import FetchStep
from tests.fixtures.fetchctx import fork_use, make_ctx, make_recipe
from tests.fixtures.gitrepos import bare_path, make_repo, make_repo_with_submodule
from tests.fixtures.gitrepos import git as fixture_git

SUB = "3rdparty/sub"


def _fetch(tmp: Path, url: str, commit: str, **kw: object) -> None:
    recipe = make_recipe([fork_use("fork", url, commit)])
    run_pipeline([FetchStep()], make_ctx(tmp / "stack", recipe, tmp / "cache", **kw))  # type: ignore[arg-type]


def _with_sub(tmp: Path) -> tuple[str, str, str]:
    url, ids, _, sub_ids = make_repo_with_submodule(tmp, "fork", "sub", sub_path=SUB, relative_url=False)
    return url, ids[-1], sub_ids[0]


def _sub_status(dest: Path) -> str:
    return subprocess.run(["git", "-C", str(dest), "submodule", "status", "--recursive"],
                          capture_output=True, text=True, check=True).stdout


# ------------------------------------------------------------------------------ mirrors


def test_a_mirror_a_killed_git_init_left_half_made_is_made_again(tmp_path: Path) -> None:
    path = mirror_path(tmp_path, "file:///nowhere/x.git")
    fixture_git("init", "--quiet", "--bare", str(path))
    (path / "config").unlink()                  # git init cut before it wrote its config
    with git.Repo(path) as repo:
        assert not repo.bare                    # what made the old code refuse it for good
    m = open_mirror(tmp_path, "file:///nowhere/x.git", "x")
    with git.Repo(m.path) as repo:
        assert repo.bare


def test_a_half_made_mirror_with_objects_in_it_is_not_removed(tmp_path: Path) -> None:
    path = mirror_path(tmp_path, "file:///nowhere/x.git")
    fixture_git("init", "--quiet", "--bare", str(path))
    (path / "objects" / "ab").mkdir()
    (path / "objects" / "ab" / "cdef").write_bytes(b"someone's object")
    (path / "config").unlink()
    with pytest.raises(FetchError, match="not a bare git mirror"):
        open_mirror(tmp_path, "file:///nowhere/x.git", "x")
    assert (path / "objects" / "ab" / "cdef").exists()


def test_what_a_killed_mirror_creation_left_beside_the_mirror_is_removed(tmp_path: Path) -> None:
    path = mirror_path(tmp_path, "file:///nowhere/x.git")
    stale = path.parent / f".{path.name}.new-4242"
    stale.mkdir(parents=True)
    (stale / "HEAD").write_text("ref: refs/heads/main\n")
    open_mirror(tmp_path, "file:///nowhere/x.git", "x")
    assert not stale.exists() and (path / "HEAD").exists()


def test_a_commit_whose_fetch_was_cut_before_its_history_is_fetched_again(tmp_path: Path) -> None:
    """A fetch killed after writing its pack, before the shallow roots and refs: the commit
    object is there, its parents are not."""
    url, ids = make_repo(tmp_path, "alpha", commits=3)
    m = open_mirror(tmp_path / "cache", url, "alpha")
    fixture_git("-C", str(m.path), "fetch", "--quiet", "--depth=1", str(bare_path(url)), ids[-1])
    (m.path / "shallow").unlink()
    assert has_commit(m.path, ids[-1]) and not has_complete(m.path, ids[-1])
    assert ensure_commit(Runner(tmp_path / "logs"), "fetch", m, ids[-1]) is True
    assert has_complete(m.path, ids[-1])
    fixture_git("-C", str(m.path), "fsck", "--connectivity-only", "--no-progress")
    assert fixture_git("-C", str(m.path), "rev-parse", f"{PIN_REFS}/{ids[-1]}") == ids[-1]


# ------------------------------------------------------------------------------ clones


def test_a_submodule_left_without_a_checked_out_commit_is_cloned_again(tmp_path: Path) -> None:
    """The issue's `Unable to find current revision in submodule path '3rdparty/sub'`: the
    submodule's clone was cut before its checkout (HEAD unborn, no files)."""
    url, commit, sub = _with_sub(tmp_path)
    _fetch(tmp_path, url, commit)
    dest = tmp_path / "stack" / "src" / "fork"
    gd = dest / ".git" / "modules" / SUB
    (gd / "HEAD").write_text("ref: refs/heads/unborn\n")
    for p in (dest / SUB).iterdir():
        if p.name != ".git":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    (gd / "index").unlink()
    mark_incomplete(dest, commit)               # the killed run had not finished
    (tmp_path / "stack" / ".state" / "fetch.json").unlink()
    _fetch(tmp_path, url, commit)
    assert _sub_status(dest).split()[:2] == [sub, SUB]
    assert not (dest / ".git" / MARKER).exists()
    assert "a submodule repository with no usable commit" in (tmp_path / "stack" / "logs" / "fetch.log").read_text()


def test_a_submodule_git_dir_a_killed_clone_left_half_made_is_removed(tmp_path: Path) -> None:
    url, commit, sub = _with_sub(tmp_path)
    dest = tmp_path / "stack" / "src" / "fork"
    _fetch(tmp_path, url, commit)
    shutil.rmtree(dest / SUB)
    (dest / SUB).mkdir()
    gd = dest / ".git" / "modules" / SUB
    shutil.rmtree(gd)
    gd.mkdir(parents=True)
    (gd / "HEAD").write_text("ref: refs/heads/main\n")   # the clone got no further
    mark_incomplete(dest, commit)
    _fetch(tmp_path, url, commit)
    assert _sub_status(dest).split()[:2] == [sub, SUB]


def _moved_pair(tmp: Path) -> tuple[str, list[str]]:
    url, ids = make_repo(tmp, "fork", commits=3)
    return url, ids


def test_a_checkout_cut_half_way_is_reset_when_the_clone_is_marked(tmp_path: Path) -> None:
    url, ids = _moved_pair(tmp_path)
    _fetch(tmp_path, url, ids[0])
    dest = tmp_path / "stack" / "src" / "fork"
    (dest / "history.txt").write_text("change 1\n")    # a file of the next commit, written
    (dest / "fork" / "__init__.py").write_text("half")  # a file cut mid-write
    (dest / ".git" / "index.lock").write_text("")       # the index it never committed
    mark_incomplete(dest, ids[2])
    _fetch(tmp_path, url, ids[2])
    assert fixture_git("rev-parse", "HEAD", cwd=dest) == ids[2]
    assert fixture_git("status", "--porcelain", "--untracked-files=all", cwd=dest) == ""
    assert not (dest / ".git" / "index.lock").exists() and not (dest / ".git" / MARKER).exists()


def test_the_same_changes_without_the_mark_are_the_users_and_are_refused(tmp_path: Path) -> None:
    url, ids = _moved_pair(tmp_path)
    _fetch(tmp_path, url, ids[0])
    dest = tmp_path / "stack" / "src" / "fork"
    assert not (dest / ".git" / MARKER).exists()       # a finished fetch leaves no mark
    (dest / "history.txt").write_text("mine\n")
    with pytest.raises(FetchError, match="has local changes"):
        _fetch(tmp_path, url, ids[2])
    assert (dest / "history.txt").read_text() == "mine\n"


def test_a_dirty_fork_message_names_the_command_that_fixes_it(tmp_path: Path) -> None:
    """The fix line's command is run as written; the plain re-run then passes and the
    changes are still there, in the place the message named."""
    url, commit, sub = _with_sub(tmp_path)
    _fetch(tmp_path, url, commit)
    dest = tmp_path / "stack" / "src" / "fork"
    (dest / "fork" / "__init__.py").write_text("# mine\n")
    (dest / "notes.txt").write_text("untracked\n")
    (dest / SUB / "history.txt").write_text("inside the submodule\n")
    (Path(f"{dest}.local-changes")).mkdir()              # taken: the message must not nest into it
    (tmp_path / "stack" / ".state" / "fetch.json").unlink()
    with pytest.raises(FetchError) as err:
        _fetch(tmp_path, url, commit)
    fix = err.value.fix or ""
    [cmd] = re.findall(r"`([^`]+)`", fix)
    assert cmd.startswith("mv ") and "re-run the same october_setup command" in fix and "--allow-dirty" in fix
    subprocess.run(cmd, shell=True, check=True)
    _fetch(tmp_path, url, commit)
    assert fixture_git("status", "--porcelain", "--ignore-submodules=none", "--untracked-files=all", cwd=dest) == ""
    assert _sub_status(dest).split()[:2] == [sub, SUB]
    kept = Path(f"{dest}.local-changes-2")
    assert (kept / "notes.txt").read_text() == "untracked\n"
    assert (kept / "fork" / "__init__.py").read_text() == "# mine\n"
    assert (kept / SUB / "history.txt").read_text() == "inside the submodule\n"
