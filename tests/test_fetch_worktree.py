"""Working-clone edge cases and the mirror lock: each check planted and watched failing."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

import git
import pytest
from filelock import FileLock

import october.installer.git.mirror as mirror_mod
from october.installer.core.errors import FileSystemError, FetchError
from october.installer.core.runner import Runner
from october.installer.engine import run_pipeline
from october.installer.git.mirror import ensure_commit, open_mirror
from october.installer.git.worktree import check_clone, sync_clone
from october.installer.steps.fetch import FetchStep
from october.installer.steps.results import FetchResult
from tests.fixtures.fetchctx import fork_use, make_ctx, make_recipe
from tests.fixtures.gitrepos import bare_path, make_repo, make_repo_with_submodule
from tests.fixtures.gitrepos import git as fixture_git


def _head(path: Path) -> str:
    with git.Repo(path) as repo:
        return repo.head.commit.hexsha


def test_submodule_moved_off_its_recorded_commit_is_caught(tmp_path: Path) -> None:
    s_url, s_ids, sub_url, sub_ids = make_repo_with_submodule(tmp_path, "beta", "gamma", sub_commits=3, sub_at=2)
    recipe = make_recipe([fork_use("beta", s_url, s_ids[-1])])
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    [rec] = run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    sub = stack / "src" / "beta" / "third_party" / "sub"
    with git.Repo(sub) as repo:
        # the submodule was fetched shallow (its recorded commit only): bring an older one by hand
        repo.git.fetch("--quiet", "--unshallow", str(bare_path(sub_url)), "+refs/heads/*:refs/remotes/full/*")
        repo.git.checkout("--detach", sub_ids[0])
    out = rec.outputs["forks"]["beta"]
    assert check_clone(Path(out["path"]), out["commit"], allow_dirty=False, submodules=out["submodules"])
    reason = check_clone(Path(out["path"]), out["commit"], allow_dirty=True, submodules=out["submodules"])
    assert reason is not None and "submodules" in reason
    with pytest.raises(FetchError, match="third_party/sub"):
        run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    # --allow-dirty lets the step move the submodule back to its recorded commit
    [rec2] = run_pipeline([FetchStep()], make_ctx(stack, recipe, cache, allow_dirty=True))
    assert _head(sub) == sub_ids[2]
    assert rec2.outputs["forks"]["beta"]["dirty"] is False


def test_gitlink_without_gitmodules_is_a_clear_error(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "alpha")
    work = tmp_path / "w"
    fixture_git("clone", "--quiet", str(bare_path(url)), str(work))
    fixture_git("update-index", "--add", "--cacheinfo", f"160000,{ids[0]},vendor/lib", cwd=work)
    fixture_git("commit", "--quiet", "-m", "orphan gitlink", cwd=work)
    fixture_git("push", "--quiet", "origin", "HEAD:main", cwd=work)
    broken = fixture_git("rev-parse", "HEAD", cwd=work)
    recipe = make_recipe([fork_use("alpha", url, broken)])
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], make_ctx(tmp_path / "stack", recipe, tmp_path / "cache"))
    msg = str(err.value)
    assert "git cannot read the clone" in msg and "no submodule mapping" in msg and "vendor/lib" in msg


def test_allow_dirty_moves_a_clone_when_changes_do_not_conflict(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "alpha", commits=3)
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    run_pipeline([FetchStep()], make_ctx(stack, make_recipe([fork_use("alpha", url, ids[0])]), cache))
    (stack / "src" / "alpha" / "scratch.txt").write_text("mine\n")
    recipe = make_recipe([fork_use("alpha", url, ids[2])])
    with pytest.raises(FetchError, match="local changes"):
        run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    assert _head(stack / "src" / "alpha") == ids[0]        # refused: nothing moved
    [rec] = run_pipeline([FetchStep()], make_ctx(stack, recipe, cache, allow_dirty=True))
    assert _head(stack / "src" / "alpha") == ids[2]
    assert rec.outputs["forks"]["alpha"]["dirty"] is True
    assert (stack / "src" / "alpha" / "scratch.txt").read_text() == "mine\n"


def test_allow_dirty_with_conflicting_changes_fails_clearly(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "alpha", commits=3)
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    run_pipeline([FetchStep()], make_ctx(stack, make_recipe([fork_use("alpha", url, ids[1])]), cache))
    (stack / "src" / "alpha" / "history.txt").write_text("my own history\n")   # ids[2] changes it too
    recipe = make_recipe([fork_use("alpha", url, ids[2])])
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], make_ctx(stack, recipe, cache, allow_dirty=True))
    msg = str(err.value)
    assert f"checking out {ids[2]}" in msg and "fetch.log" in msg and "history.txt" in msg


def test_origin_follows_a_changed_fork_url(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "alpha")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    run_pipeline([FetchStep()], make_ctx(stack, make_recipe([fork_use("alpha", url, ids[0])]), cache))
    moved = tmp_path / "elsewhere" / "alpha.git"
    moved.parent.mkdir()
    shutil.copytree(bare_path(url), moved)
    new_url = f"file://{moved}"
    [rec] = run_pipeline([FetchStep()], make_ctx(stack, make_recipe([fork_use("alpha", new_url, ids[0])]), cache))
    assert rec.status == "ran" and rec.outputs["forks"]["alpha"]["url"] == new_url
    with git.Repo(stack / "src" / "alpha") as repo:
        assert repo.remotes.origin.url == new_url


def test_a_held_mirror_lock_times_out_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, ids = make_repo(tmp_path, "alpha")
    m = open_mirror(tmp_path / "cache", url, "alpha")
    monkeypatch.setattr(mirror_mod, "LOCK_TIMEOUT_S", 0.2)
    other = FileLock(str(m.path) + ".lock")          # another stack, as far as flock can tell
    with other:
        with pytest.raises(FetchError) as err:
            ensure_commit(Runner(tmp_path / "logs"), "fetch", m, ids[0])
    assert "stayed locked" in str(err.value) and "another process" in str(err.value)


def test_a_second_user_of_the_mirror_waits_for_the_lock(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "alpha")
    m = open_mirror(tmp_path / "cache", url, "alpha")
    other = FileLock(str(m.path) + ".lock", thread_local=False)   # released by the timer thread
    other.acquire()
    threading.Timer(0.3, other.release).start()
    start = time.monotonic()
    assert ensure_commit(Runner(tmp_path / "logs"), "fetch", m, ids[0]) is True
    assert time.monotonic() - start >= 0.25


def test_cache_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    """Exit 19 (a path that cannot be written), the README's code, not 8 (git)."""
    bad = tmp_path / "cache"
    bad.write_text("not a directory\n")
    with pytest.raises(FileSystemError, match="cannot use the cache directory") as err:
        open_mirror(bad, "file:///nowhere/x.git", "x")
    assert err.value.exit_code == 19


def test_sync_clone_into_an_empty_directory(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "alpha")
    m = open_mirror(tmp_path / "cache", url, "alpha")
    runner = Runner(tmp_path / "logs")
    ensure_commit(runner, "fetch", m, ids[0])
    dest = tmp_path / "src" / "alpha"
    dest.mkdir(parents=True)
    out = sync_clone(runner, "fetch", dest, m, ids[0], cache_dir=tmp_path / "cache", submodules=True,
                     allow_dirty=False)
    assert out.commit == _head(dest) == ids[0] and out.dirty == () and dict(out.submodules) == {}


def test_verify_without_records_asks_for_a_rerun(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "alpha")
    ctx = make_ctx(tmp_path / "stack", make_recipe([fork_use("alpha", url, ids[0])]), tmp_path / "cache")
    for unknown in ({}, {"forks": []}, {"forks": {"alpha": {"commit": ids[0]}}}):   # not a result: not done
        with pytest.raises(ValueError):
            FetchStep().load(unknown)
    assert FetchStep().verify(ctx, FetchResult(forks={})) == "fork 'alpha' has no record"
    missing = FetchStep().load({"forks": {"alpha": {"path": str(tmp_path / "nope"), "commit": ids[0], "url": url,
                                                    "pin": "test", "upstream": None, "requested": ids[0],
                                                    "branch": None}}})
    assert "not a git clone" in (FetchStep().verify(ctx, missing) or "")


def test_a_mirror_url_left_by_a_killed_run_is_put_back(tmp_path: Path) -> None:
    s_url, s_ids, sub_url, _ = make_repo_with_submodule(tmp_path, "beta", "gamma")
    recipe = make_recipe([fork_use("beta", s_url, s_ids[-1])])
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    ctx = make_ctx(stack, recipe, cache)
    run_pipeline([FetchStep()], ctx)
    log = ctx.paths.logs / "fetch.log"
    # a clone this run made holds nothing a killed run left: init only, no sync
    assert "submodule --quiet init" in log.read_text() and "submodule --quiet sync" not in log.read_text()
    beta = stack / "src" / "beta"
    fixture_git("config", "submodule.third_party/sub.url", "/killed/run/mirror.git", cwd=beta)
    ctx.paths.marker("fetch").unlink()
    run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    assert "submodule --quiet sync" in log.read_text()          # an existing clone is synced
    assert fixture_git("config", "--get", "submodule.third_party/sub.url", cwd=beta) == sub_url
    assert not list((cache / "git").glob("*-mirror.git"))


def test_strip_credentials_keeps_tokens_out_of_origin() -> None:
    from october.installer.git import strip_credentials
    assert strip_credentials("https://user:tok@github.com/mcgrof/vllm.git") == "https://github.com/mcgrof/vllm.git"
    assert strip_credentials("HTTP://tok@host/x.git") == "HTTP://host/x.git"
    assert strip_credentials("ssh://git@github.com/mcgrof/vllm.git") == "ssh://git@github.com/mcgrof/vllm.git"
    assert strip_credentials("file:///tmp/x.git") == "file:///tmp/x.git"


def _after_checkout(monkeypatch: pytest.MonkeyPatch, plant: str) -> None:
    """Run ``plant`` (a shell command, in the clone) right after the tool's checkout: what a user's global
    post-checkout hook did here until session 18 (our git commands now run no hooks: core.hooksPath is
    /dev/null at command scope), or another process touching the fresh clone behind the tool's back."""
    import subprocess

    from october.installer.git.gitcmd import ForkGit

    call = ForkGit.__call__

    def then_plant(self: ForkGit, args: Any, *, doing: str, fix: str) -> None:
        call(self, args, doing=doing, fix=fix)
        if "checkout" in args and "--detach" in args and "-C" in args:
            subprocess.run(["sh", "-c", plant], cwd=args[args.index("-C") + 1], check=True)

    monkeypatch.setattr(ForkGit, "__call__", then_plant)


def test_a_tree_dirty_right_after_checkout_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, ids = make_repo(tmp_path, "alpha", commits=2)
    recipe = make_recipe([fork_use("alpha", url, ids[-1])])
    _after_checkout(monkeypatch, 'echo planted > "$(git rev-parse --show-toplevel)/planted.txt"')
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], make_ctx(tmp_path / "stack", recipe, tmp_path / "cache"))
    assert "is not clean after checkout" in err.value.message and "planted.txt" in err.value.message
    assert "--allow-dirty" in err.value.message


def test_head_moved_off_the_pin_after_checkout_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, ids = make_repo(tmp_path, "alpha", commits=2)
    recipe = make_recipe([fork_use("alpha", url, ids[-1])])
    _after_checkout(monkeypatch, "git checkout -q --detach HEAD~1")
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], make_ctx(tmp_path / "stack", recipe, tmp_path / "cache"))
    assert "is not at the pinned commit" in err.value.message
    assert f"HEAD = {ids[-1]}" in err.value.message and f"HEAD = {ids[0]}" in err.value.message


def _new_clone_with_submodule(tmp_path: Path) -> tuple[Runner, Path, Callable[[], Any]]:
    """A fork with a submodule cloned by sync_clone into tmp_path/src/beta -> (its runner, the clone, a function
    that runs the same sync_clone again over it)."""
    s_url, s_ids, _, _ = make_repo_with_submodule(tmp_path, "beta", "gamma", sub_commits=1, sub_at=0)
    m = open_mirror(tmp_path / "cache", s_url, "beta")
    runner = Runner(tmp_path / "logs")
    ensure_commit(runner, "fetch", m, s_ids[-1])
    dest = tmp_path / "src" / "beta"

    def again() -> Any:
        return sync_clone(runner, "fetch", dest, m, s_ids[-1], cache_dir=tmp_path / "cache", submodules=True,
                          allow_dirty=False)

    again()
    return runner, dest, again


def test_only_a_clone_this_run_made_has_its_index_rewritten_by_the_clean_check(tmp_path: Path) -> None:
    """sync_clone's clean check rewrites the indexes of a clone it has just made (racily clean entries
    recorded: installer/git/clonecheck.py dirty_entries(refresh=True)); on a clone that was already there (a
    re-fetch of the user's working clone) it leaves every index byte for byte, racy entries and all."""
    from tests.test_clone_settler import _make_racy, _racy
    from october.installer.git.settle import index_files

    runner, dest, again = _new_clone_with_submodule(tmp_path)
    indexes = index_files(dest)
    assert len(indexes) == 2
    _make_racy(dest)
    assert _racy(dest) > 0
    before = [ix.read_bytes() for ix in indexes]
    out = again()
    assert out.dirty == () and [ix.read_bytes() for ix in indexes] == before and _racy(dest) > 0


def _racy_by_second(repo: Path) -> list[str]:
    """Index entries of files whose mtime is not older than the index by the whole second, as git built without
    nanosecond stat data (Debian's 2.39, here) judges them: git hashes each again on every status."""
    index_s = Path(fixture_git("rev-parse", "--absolute-git-dir", cwd=repo).strip(), "index").stat().st_mtime_ns // 10**9
    racy, name = [], ""
    for ln in fixture_git("ls-files", "--debug", cwd=repo).splitlines():
        if not ln.startswith("  "):
            name = ln
        elif ln.strip().startswith("mtime:") and int(ln.split()[1].split(":")[0]) >= index_s and \
                (repo / name).is_file():        # a submodule's gitlink: git reads its HEAD, never hashes it
            racy.append(name)
    return racy


def test_a_new_clone_leaves_no_entry_racily_clean_and_an_existing_one_keeps_its_times(tmp_path: Path) -> None:
    """A clone this run made has its files set back (git/settle.py age_checkout) before its clean check rewrites
    the indexes, so no entry of it or its submodule is racily clean: the install and lock steps' statuses do not
    hash every file again.  A clone that was already there (the user's working clone) keeps its files' times."""
    runner, dest, again = _new_clone_with_submodule(tmp_path)
    sub = dest / "third_party" / "sub"
    assert fixture_git("ls-files", cwd=dest).strip() and fixture_git("ls-files", cwd=sub).strip()
    assert _racy_by_second(dest) == [] and _racy_by_second(sub) == []
    # set back by age_checkout, not by chance (a checkout that crossed a second): whole seconds, where this
    # machine's filesystem stamps nanoseconds
    files = [p for p in dest.rglob("*") if p.is_file() and ".git" not in p.relative_to(dest).parts]
    assert files and all(p.stat().st_mtime_ns % 10**9 == 0 for p in files)
    mine = dest / fixture_git("ls-files", cwd=dest).splitlines()[0]
    os.utime(mine, ns=(time.time_ns(), time.time_ns()))
    stamp = mine.stat().st_mtime_ns
    out = again()
    assert out.dirty == () and mine.stat().st_mtime_ns == stamp


def test_a_file_whose_times_cannot_be_set_keeps_them_and_the_rest_of_the_clone_is_set_back(tmp_path: Path) -> None:
    """age_checkout is for speed only: a file whose times cannot be set (here an immutable one, ``chattr +i``: not even
    root may change its times; elsewhere a filesystem that refuses it) keeps them, the others are set back, and
    nothing is raised (before, the fetch of a new clone failed with a traceback)."""
    import subprocess

    from october.installer.git.settle import age_checkout

    (tmp_path / "d").mkdir()
    for name in ("a.txt", "d/b.txt", "d/c.txt"):
        (tmp_path / name).write_text(name)
    fixed = tmp_path / "d" / "b.txt"
    before = fixed.stat().st_mtime_ns
    if subprocess.run(["chattr", "+i", str(fixed)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not possible here (not root, or a filesystem without it)")
    try:
        assert age_checkout(tmp_path) == 2
        assert fixed.stat().st_mtime_ns == before
        aged = [(tmp_path / n).stat().st_mtime_ns for n in ("a.txt", "d/c.txt")]
        assert all(ns % 10**9 == 0 and ns < time.time_ns() - 10**9 for ns in aged)
    finally:
        subprocess.run(["chattr", "-i", str(fixed)], check=True)
