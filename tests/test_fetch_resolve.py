"""Prefix pins: resolved once on their branch; absent/ambiguous refused; --locked uses the full id."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from october.installer.core.errors import FetchError, LockError
from october.installer.core.runner import Runner
from october.installer.git.mirror import open_mirror
from october.installer.git.resolve import match_prefix, resolve_pin, resolve_prefix
from october.installer.recipe import Pin
from tests.fixtures.gitrepos import add_commit, bare_path, make_repo


def _runner(tmp: Path) -> Runner:
    return Runner(tmp / "logs")


def test_match_prefix_is_pure_and_deduplicates() -> None:
    ids = ["abc1" + "0" * 36, "abd2" + "0" * 36, "abc1" + "0" * 36, "ffff" + "0" * 36]
    assert match_prefix(ids, "abc") == [ids[0]]
    assert match_prefix(ids, "ab") == [ids[0], ids[1]]
    assert match_prefix(ids, "9") == []


def test_unique_prefix_on_its_branch_resolves_to_the_full_id(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "vllm", commits=5)
    feature = add_commit(url, {"f.txt": "f"}, branch="k16fp8", base=ids[2])
    m = open_mirror(tmp_path / "cache", url, "vllm")
    assert resolve_prefix(_runner(tmp_path), "fetch", m, feature[:9], "k16fp8") == feature
    assert resolve_prefix(_runner(tmp_path), "fetch", m, ids[1][:9], "k16fp8") == ids[1]   # an ancestor


def test_prefix_not_on_the_branch_is_refused(tmp_path: Path) -> None:
    """The commit exists upstream, but only on another branch: still refused."""
    url, ids = make_repo(tmp_path, "vllm", commits=2)
    other = add_commit(url, {"o.txt": "o"}, branch="other", base=ids[0])
    m = open_mirror(tmp_path / "cache", url, "vllm")
    with pytest.raises(FetchError) as err:
        resolve_prefix(_runner(tmp_path), "fetch", m, other[:9], "main")
    msg = str(err.value)
    assert "fork 'vllm'" in msg and url in msg and "branch 'main'" in msg and other[:9] in msg
    assert "none" in msg


def test_ambiguous_prefix_lists_the_candidates(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "vllm", commits=40)
    first, n = Counter(c[0] for c in ids).most_common(1)[0]
    assert n >= 2   # 40 ids over 16 first characters always collide
    m = open_mirror(tmp_path / "cache", url, "vllm")
    with pytest.raises(FetchError) as err:
        resolve_prefix(_runner(tmp_path), "fetch", m, first, "main")
    msg = str(err.value)
    assert "ambiguous" in msg and f"{n} candidates" in msg
    for c in [c for c in ids if c.startswith(first)][:10]:
        assert c in msg


def test_malformed_prefix_is_refused(tmp_path: Path) -> None:
    m = open_mirror(tmp_path / "cache", "file:///nowhere/x.git", "vllm")
    with pytest.raises(FetchError, match="malformed"):
        resolve_prefix(_runner(tmp_path), "fetch", m, "XYZ", "main")


def test_resolve_pin_exact_prefix_and_missing_branch(tmp_path: Path) -> None:
    url, ids = make_repo(tmp_path, "vllm", commits=3)
    m = open_mirror(tmp_path / "cache", url, "vllm")
    exact = resolve_pin(_runner(tmp_path), "fetch", m, Pin("p", ids[0]), None)
    assert (exact.commit, exact.how) == (ids[0], "exact")
    pref = resolve_pin(_runner(tmp_path), "fetch", m, Pin("p", ids[1][:9], "main"), None)
    assert (pref.commit, pref.requested, pref.branch, pref.how) == (ids[1], ids[1][:9], "main", "prefix")
    with pytest.raises(FetchError, match="prefix without a branch"):
        resolve_pin(_runner(tmp_path), "fetch", m, Pin("p", ids[1][:9]), None)


def test_locked_uses_the_lock_full_id_without_touching_the_branch(tmp_path: Path) -> None:
    """The origin is gone and the branch would be ambiguous: --locked still answers from the lock."""
    url, ids = make_repo(tmp_path, "vllm", commits=3)
    bare_path(url).rename(tmp_path / "gone.git")
    m = open_mirror(tmp_path / "cache", url, "vllm")
    res = resolve_pin(_runner(tmp_path), "fetch", m, Pin("p", ids[2][:9], "main"), {"vllm": ids[2]})
    assert (res.commit, res.requested, res.how) == (ids[2], ids[2][:9], "locked")


def test_locked_id_must_match_the_pin(tmp_path: Path) -> None:
    m = open_mirror(tmp_path / "cache", "file:///nowhere/x.git", "vllm")
    pin = Pin("p", "2315e62e2", "main")
    with pytest.raises(LockError, match="does not match"):
        resolve_pin(_runner(tmp_path), "fetch", m, pin, {"vllm": "f" * 40})
    with pytest.raises(LockError, match="no entry"):
        resolve_pin(_runner(tmp_path), "fetch", m, pin, {"flashinfer": "f" * 40})
    full = Pin("p", "a" * 40)
    with pytest.raises(LockError, match="does not match"):
        resolve_pin(_runner(tmp_path), "fetch", m, full, {"vllm": "b" * 40})
