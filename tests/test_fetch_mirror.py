"""The shared bare mirror: layout, fetch-only-when-missing, fallback, clear errors, no secrets."""

from __future__ import annotations

import socket
from pathlib import Path

import git
import pytest

from october.installer.core.cpus import available_cpus
from october.installer.core.errors import FetchError
from october.installer.core.paths import default_cache_dir
from october.installer.core.runner import Runner
from october.installer.git.mirror import (
    PIN_REFS,
    ensure_commit,
    fetch_branch,
    has_commit,
    has_complete,
    mirror_path,
    open_mirror,
    pinned,
)
from tests.fixtures.gitrepos import add_commit, bare_path, make_repo


def _runner(tmp: Path) -> Runner:
    return Runner(tmp / "logs")


def _log(tmp: Path) -> str:
    p = tmp / "logs" / "fetch.log"
    return p.read_text() if p.exists() else ""


def test_mirror_path_layout_and_credentials_do_not_matter(tmp_path: Path) -> None:
    p = mirror_path(tmp_path, "https://github.com/mcgrof/vllm.git")
    assert p.parent == tmp_path / "git"
    digest, _, rest = p.name.partition("-")
    assert len(digest) == 16 and rest == "vllm.git"
    with_token = mirror_path(tmp_path, "https://user:tok3n@github.com/mcgrof/vllm.git")
    assert with_token == mirror_path(tmp_path, "https://other:x@github.com/mcgrof/vllm.git")
    assert "tok3n" not in str(with_token)
    assert mirror_path(tmp_path, "https://github.com/mcgrof/flashinfer.git") != p
    assert default_cache_dir({}).name == "october"


def test_open_mirror_creates_one_bare_repo_with_cachedir_tag(tmp_path: Path) -> None:
    m = open_mirror(tmp_path / "cache", "file:///nowhere/x.git", "x")
    with git.Repo(m.path) as repo:
        assert repo.bare
    tag = (tmp_path / "cache" / "git" / "CACHEDIR.TAG").read_text()
    assert tag.startswith("Signature: 8a477f597d28d172789f06886806bc55")
    again = open_mirror(tmp_path / "cache", "file:///nowhere/x.git", "x")
    assert again.path == m.path


def test_open_mirror_refuses_a_foreign_directory(tmp_path: Path) -> None:
    path = mirror_path(tmp_path, "file:///nowhere/x.git")
    path.mkdir(parents=True)
    (path / "HEAD").write_text("not a repo")
    with pytest.raises(FetchError) as err:
        open_mirror(tmp_path, "file:///nowhere/x.git", "x")
    assert "not a bare git mirror" in str(err.value) and f"remove {path}" in str(err.value)


def test_a_mirror_that_borrows_objects_through_alternates_is_refused(tmp_path: Path) -> None:
    """Session 18's audit: ``objects/info/alternates`` planted in a cache mirror is copied by ``git clone``,
    so the stack's clone read objects from elsewhere (and a commit found there was never fetched, so never
    hashed by objcheck).  october never writes one: a mirror that has one is refused, naming it."""
    url, ids = make_repo(tmp_path, "alpha", commits=2)
    m = open_mirror(tmp_path / "cache", url, "alpha")
    ensure_commit(_runner(tmp_path), "fetch", m, ids[0])
    alternates = m.path / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(str(bare_path(url) / "objects") + "\n")
    with pytest.raises(FetchError) as err:
        open_mirror(tmp_path / "cache", url, "alpha")
    assert "borrows objects from another repository" in str(err.value) and str(alternates) in str(err.value)
    assert f"remove {m.path}" in str(err.value)


def test_our_git_commands_run_no_program_a_clone_s_config_or_hooks_name(tmp_path: Path) -> None:
    """A stack clone's .git/config naming an fsmonitor hook, and a post-checkout hook in .git/hooks: plain
    git runs both (shown first, so the plant is real); git under git_env() runs neither."""
    import os
    import subprocess

    from october.installer.git import git_env
    from october.installer.git.clonecheck import dirty_entries

    url, ids = make_repo(tmp_path, "alpha", commits=2)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", url, str(clone)], check=True)
    ran = tmp_path / "ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\necho \"$0\" >> {ran}\nexit 1\n")
    hook.chmod(0o755)
    post = clone / ".git" / "hooks" / "post-checkout"
    post.write_text(hook.read_text())
    post.chmod(0o755)
    subprocess.run(["git", "-C", str(clone), "config", "core.fsmonitor", str(hook)], check=True)
    subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, check=False)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", ids[0]], capture_output=True, check=False)
    assert len(ran.read_text().splitlines()) >= 2          # the plants run under plain git
    ran.unlink()
    assert dirty_entries(clone) == []
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", ids[1]], env=git_env(), check=True)
    assert not ran.exists(), ran.read_text()
    env = git_env()
    pairs = {(env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"]) for i in range(int(env["GIT_CONFIG_COUNT"]))}
    assert {("core.hooksPath", os.devnull), ("core.attributesFile", os.devnull), ("core.useReplaceRefs", "false"),
            ("core.fsmonitor", "false")} <= pairs, pairs


def test_commit_fetched_once_then_served_from_the_mirror(tmp_path: Path) -> None:
    """Proof of no second download: the origin is moved away after the first fetch."""
    url, ids = make_repo(tmp_path, "alpha", commits=3)
    m = open_mirror(tmp_path / "cache", url, "alpha")
    assert ensure_commit(_runner(tmp_path), "fetch", m, ids[1]) is True
    assert has_commit(m.path, ids[1])
    with git.Repo(m.path) as repo:
        assert repo.git.rev_parse(f"{PIN_REFS}/{ids[1]}") == ids[1]   # pinned against gc
    bare_path(url).rename(tmp_path / "gone.git")
    before = _log(tmp_path).count(" fetch ")
    assert ensure_commit(_runner(tmp_path), "fetch", m, ids[1]) is False
    assert _log(tmp_path).count(" fetch ") == before


def test_a_pin_whose_update_was_killed_is_written_again(tmp_path: Path) -> None:
    """Plant: what an ``update-ref`` killed part-way leaves -- the commit complete in the mirror, no pin,
    the pin's ``.lock`` file (git then refuses the ref: "cannot lock ref"; seen in CI's kill sweep).  The
    next run removes the stale lock under the mirror's own lock and pins the commit."""
    url, ids = make_repo(tmp_path, "alpha", commits=3)
    m = open_mirror(tmp_path / "cache", url, "alpha")
    assert ensure_commit(_runner(tmp_path), "fetch", m, ids[1]) is True
    pin = m.path / PIN_REFS / ids[1]
    pin.unlink()
    lock = pin.with_name(pin.name + ".lock")
    lock.write_text(ids[1] + "\n")
    assert not pinned(m.path, ids[1]) and has_complete(m.path, ids[1])
    assert ensure_commit(_runner(tmp_path), "fetch", m, ids[1]) is False
    assert pinned(m.path, ids[1]) and not lock.exists()


def test_a_pinned_commit_is_read_from_the_ref_without_writing_it_again(tmp_path: Path) -> None:
    """The pin ref is read as git reads it: a loose ref, then packed-refs (after `git pack-refs`); a pin
    that names another commit, or none, is not a pin, and ensure_commit then walks and writes it."""
    url, ids = make_repo(tmp_path, "alpha", commits=3)
    m = open_mirror(tmp_path / "cache", url, "alpha")
    assert ensure_commit(_runner(tmp_path), "fetch", m, ids[1]) is True
    assert pinned(m.path, ids[1]) and not pinned(m.path, ids[0])
    before = _log(tmp_path).count("update-ref")
    assert ensure_commit(_runner(tmp_path), "fetch", m, ids[1]) is False
    assert _log(tmp_path).count("update-ref") == before         # already pinned: nothing written

    with git.Repo(m.path) as repo:
        repo.git.pack_refs("--all")
        assert not (m.path / PIN_REFS / ids[1]).exists()
        assert pinned(m.path, ids[1])                                # packed
        # planted: the pin of ids[1] names ids[0]; it is no pin, and the commit is walked and re-pinned
        repo.git.update_ref(f"{PIN_REFS}/{ids[1]}", ids[0])
    assert not pinned(m.path, ids[1])
    assert has_complete(m.path, ids[1])
    assert ensure_commit(_runner(tmp_path), "fetch", m, ids[1]) is False
    assert _log(tmp_path).count("update-ref") == before + 1 and pinned(m.path, ids[1])
    # planted: the loose pin file empty (what a crash can leave on ext4), or not a ref at all
    for planted in ("", "not a commit id\n"):
        (m.path / PIN_REFS / ids[1]).write_text(planted)
        assert not pinned(m.path, ids[1])
        assert ensure_commit(_runner(tmp_path), "fetch", m, ids[1]) is False and pinned(m.path, ids[1])
    assert not pinned(tmp_path / "no-such-mirror.git", ids[1])


def test_missing_commit_names_fork_url_and_commit(tmp_path: Path) -> None:
    url, _ = make_repo(tmp_path, "alpha")
    m = open_mirror(tmp_path / "cache", url, "alpha")
    ghost = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(FetchError) as err:
        ensure_commit(_runner(tmp_path), "fetch", m, ghost)
    msg = str(err.value)
    assert "fork 'alpha'" in msg and url in msg and ghost in msg and "missing upstream" in msg
    assert err.value.exit_code == 8


def test_short_id_is_refused(tmp_path: Path) -> None:
    m = open_mirror(tmp_path / "cache", "file:///nowhere/x.git", "x")
    with pytest.raises(FetchError, match="40 lowercase hex"):
        ensure_commit(_runner(tmp_path), "fetch", m, "abc1234")


def test_fallback_to_all_branches_when_server_refuses_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protocol v0 (forced through git's env config) refuses unadvertised ids, like some servers."""
    url, ids = make_repo(tmp_path, "alpha", commits=3)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.version")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "0")
    m = open_mirror(tmp_path / "cache", url, "alpha")
    assert ensure_commit(_runner(tmp_path), "fetch", m, ids[0]) is True
    log = _log(tmp_path)
    assert "refs/heads/*:refs/heads/*" in log           # the fallback ran
    with git.Repo(m.path) as repo:
        assert repo.git.rev_parse(f"{PIN_REFS}/{ids[0]}") == ids[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_remote_is_clear_and_credentials_are_masked(tmp_path: Path) -> None:
    url = f"http://user:s3cr3tvalue@127.0.0.1:{_closed_port()}/fork.git"
    m = open_mirror(tmp_path / "cache", url, "vllm")
    with pytest.raises(FetchError) as err:
        ensure_commit(_runner(tmp_path), "fetch", m, "1" * 40)
    msg = str(err.value)
    assert "cannot fetch" in msg and "fork 'vllm'" in msg and "1" * 40 in msg
    assert "s3cr3tvalue" not in msg and "http://***@127.0.0.1" in msg
    assert "s3cr3tvalue" not in _log(tmp_path)
    assert "s3cr3tvalue" not in (m.path / "config").read_text()


def test_fetch_branch_returns_tip_and_follows_force_push(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "alpha", commits=2)
    m = open_mirror(tmp_path / "cache", url, "alpha")
    assert fetch_branch(_runner(tmp_path), "fetch", m, "main") == ids[-1]
    new = add_commit(url, {"x.txt": "x"}, branch="main")
    assert fetch_branch(_runner(tmp_path), "fetch", m, "main") == new
    with pytest.raises(FetchError) as err:
        fetch_branch(_runner(tmp_path), "fetch", m, "no-such-branch")
    assert "branch 'no-such-branch'" in str(err.value) and url in str(err.value)


def test_github_ssh_urls_are_fetched_over_https(tmp_path: Path) -> None:
    """FlashInfer's .gitmodules has spdlog as git@github.com:gabime/spdlog.git."""
    from october.installer.git.mirror import fetchable_url
    https = "https://github.com/gabime/spdlog.git"
    assert fetchable_url("git@github.com:gabime/spdlog.git") == https
    assert fetchable_url("ssh://git@github.com/gabime/spdlog.git") == https
    assert fetchable_url("git@gitlab.com:a/b.git") == "git@gitlab.com:a/b.git"
    assert fetchable_url("file:///tmp/x.git") == "file:///tmp/x.git"
    assert mirror_path(tmp_path, "git@github.com:gabime/spdlog.git") == mirror_path(tmp_path, https)
    m = open_mirror(tmp_path, "git@github.com:gabime/spdlog.git", "flashinfer/3rdparty/spdlog")
    assert m.fetch_url == https and m.url == "git@github.com:gabime/spdlog.git"


def test_git_env_adds_parallel_checkout_after_the_callers_own_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """git_env() appends checkout.workers (parallel checkout) to GIT_CONFIG_COUNT without dropping a pair the
    caller set there (the kit's insteadOf rewrites, a test's protocol.version): real git reads both."""
    import subprocess

    from october.installer.git import git_env

    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "url.file:///kit/x.git.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/o/x")
    env = git_env()
    got = subprocess.run(["git", "config", "--get-regexp", r"^(checkout\.workers|url\..*\.insteadof)$"], env=env,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert f"checkout.workers {available_cpus()}" in got
    assert "url.file:///kit/x.git.insteadof https://github.com/o/x" in got
    from october.installer.git import NO_REPO_CODE, parallel_checkout
    assert env["GIT_CONFIG_COUNT"] == str(1 + len(parallel_checkout()) + len(NO_REPO_CODE))
    assert (env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_VALUE_0"]) == ("url.file:///kit/x.git.insteadOf",
                                                                    "https://github.com/o/x")


def test_git_checks_out_with_the_cpus_this_process_may_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not ``checkout.workers=0`` (git would count the host's CPUs): a cgroup quota of one CPU is one worker.
    Mocked: the cgroup file (``core.cpus.CGROUP``), as one of the same format."""
    import subprocess

    from october.installer.core import cpus
    from october.installer.git import git_env, parallel_checkout

    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "cpu.max").write_text("100000 100000\n")
    monkeypatch.setattr(cpus, "CGROUP", tmp_path / "cg")
    monkeypatch.setattr(cpus, "PROC_CGROUP", tmp_path / "no-proc-self-cgroup")
    parallel_checkout.cache_clear()         # counted once per process: count again under the planted quota
    try:
        got = subprocess.run(["git", "config", "--get", "checkout.workers"], env=git_env(), capture_output=True,
                             text=True, check=True).stdout.strip()
    finally:
        parallel_checkout.cache_clear()
    assert got == "1"


def test_git_env_leaves_a_malformed_count_for_git_to_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GIT_CONFIG_COUNT git would refuse is not papered over (its pairs are not overwritten)."""
    import subprocess

    from october.installer.git import git_env

    for bad in ("abc", "-1", ""):
        monkeypatch.setenv("GIT_CONFIG_COUNT", bad)
        monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.name")
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", "theirs")
        env = git_env()
        assert env["GIT_CONFIG_COUNT"] == bad and env["GIT_CONFIG_VALUE_0"] == "theirs"
        assert "GIT_CONFIG_KEY_1" not in env
        if bad:
            done = subprocess.run(["git", "config", "--get", "user.name"], env=env, capture_output=True, text=True)
            assert done.returncode != 0 and "GIT_CONFIG_COUNT" in done.stderr
