"""The fetch step through the real pipeline engine: real origins, real git, real done-markers."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from october.installer.core.errors import FetchError
from october.installer.engine import run_pipeline
from october.installer.steps.fetch import FetchStep
from tests.fixtures.fetchctx import CountingStep, fork_use, make_ctx, make_recipe
from tests.fixtures.gitrepos import add_commit, bare_path, make_repo, make_repo_with_submodule


def _head(path: Path) -> str:
    with git.Repo(path) as repo:
        assert repo.head.is_detached
        return repo.head.commit.hexsha


def test_clones_each_fork_detached_at_its_pin(tmp_path: Path) -> None:
    a_url, a_ids = make_repo(tmp_path, "alpha", commits=3)
    b_url, b_ids = make_repo(tmp_path, "beta", commits=2)
    recipe = make_recipe([fork_use("alpha", a_url, a_ids[1], upstream="https://example.invalid/up.git"),
                          fork_use("beta", b_url, b_ids[0])])
    ctx = make_ctx(tmp_path / "stack", recipe, tmp_path / "cache")
    [rec] = run_pipeline([FetchStep()], ctx)
    forks = rec.outputs["forks"]
    assert forks["alpha"] == {
        "path": str(tmp_path / "stack" / "src" / "alpha"), "url": a_url,
        "upstream": "https://example.invalid/up.git", "pin": "test", "requested": a_ids[1],
        "branch": None, "commit": a_ids[1], "submodules": {}, "dirty_allowed": False, "dirty": False}
    assert _head(tmp_path / "stack" / "src" / "alpha") == a_ids[1]
    assert _head(tmp_path / "stack" / "src" / "beta") == b_ids[0]
    with git.Repo(tmp_path / "stack" / "src" / "alpha") as repo:
        assert repo.remotes.origin.url == a_url          # the real URL, not the cache
        assert not repo.is_dirty(untracked_files=True)
    assert "git -C" in (tmp_path / "stack" / "logs" / "fetch.log").read_text()
    assert not list((tmp_path / "stack" / "src").glob(".*partial"))


def test_second_run_skips_and_changing_one_pin_reruns_from_fetch_on(tmp_path: Path) -> None:
    a_url, a_ids = make_repo(tmp_path, "alpha", commits=3)
    b_url, b_ids = make_repo(tmp_path, "beta", commits=3)
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    after = CountingStep()
    steps = [FetchStep(), after]

    def run(b_commit: str) -> list[str]:
        recipe = make_recipe([fork_use("alpha", a_url, a_ids[0]), fork_use("beta", b_url, b_commit)])
        return [r.status for r in run_pipeline(steps, make_ctx(stack, recipe, cache))]

    assert run(b_ids[0]) == ["ran", "ran"]
    assert run(b_ids[0]) == ["cached", "cached"]
    assert after.runs == 1
    assert run(b_ids[2]) == ["ran", "ran"]
    assert after.runs == 2
    assert _head(stack / "src" / "beta") == b_ids[2]     # moved (it was clean)
    assert _head(stack / "src" / "alpha") == a_ids[0]


def test_second_stack_with_the_same_cache_does_not_download_again(tmp_path: Path) -> None:
    """Both origins (and the submodule's) are moved away before the second stack: it must
    succeed from the shared mirrors alone, and its log shows no fetch from an origin."""
    a_url, a_ids = make_repo(tmp_path, "alpha", commits=2)
    s_url, s_ids, sub_url, sub_ids = make_repo_with_submodule(tmp_path, "beta", "gamma")
    recipe = make_recipe([fork_use("alpha", a_url, a_ids[0]), fork_use("beta", s_url, s_ids[-1])])
    cache = tmp_path / "cache"
    first = run_pipeline([FetchStep()], make_ctx(tmp_path / "one", recipe, cache))[0]
    for url in (a_url, s_url, sub_url):
        bare_path(url).rename(bare_path(url).with_suffix(".moved"))
    second = run_pipeline([FetchStep()], make_ctx(tmp_path / "two", recipe, cache))[0]
    assert second.status == "ran"
    for name in ("alpha", "beta"):
        one, two = first.outputs["forks"][name], second.outputs["forks"][name]
        assert (one["commit"], one["submodules"]) == (two["commit"], two["submodules"])
    assert _head(tmp_path / "two" / "src" / "beta" / "third_party" / "sub") == sub_ids[0]
    log = (tmp_path / "two" / "logs" / "fetch.log").read_text()
    assert "origins/" not in "\n".join(ln for ln in log.splitlines() if " fetch " in ln)


def test_submodule_is_checked_out_at_its_recorded_commit(tmp_path: Path) -> None:
    """The recorded commit is the sub repo's oldest, not its tip; relative and absolute URLs."""
    for relative in (True, False):
        root = tmp_path / ("rel" if relative else "abs")
        s_url, s_ids, sub_url, sub_ids = make_repo_with_submodule(root, "beta", "gamma", sub_commits=3,
                                                                  relative_url=relative)
        recipe = make_recipe([fork_use("beta", s_url, s_ids[-1])])
        [rec] = run_pipeline([FetchStep()], make_ctx(root / "stack", recipe, root / "cache"))
        sub = root / "stack" / "src" / "beta" / "third_party" / "sub"
        assert _head(sub) == sub_ids[0] != sub_ids[-1]
        assert rec.outputs["forks"]["beta"]["submodules"] == {"third_party/sub": sub_ids[0]}
        with git.Repo(sub) as repo:
            assert repo.remotes.origin.url == sub_url
        with git.Repo(root / "stack" / "src" / "beta") as repo:
            assert repo.git.config("--get", "submodule.third_party/sub.url") == sub_url


def test_submodules_can_be_switched_off(tmp_path: Path) -> None:
    s_url, s_ids, _, _ = make_repo_with_submodule(tmp_path, "beta", "gamma")
    recipe = make_recipe([fork_use("beta", s_url, s_ids[-1], submodules=False)])
    ctx = make_ctx(tmp_path / "stack", recipe, tmp_path / "cache")
    [rec] = run_pipeline([FetchStep()], ctx)
    assert rec.outputs["forks"]["beta"]["submodules"] == {}
    assert not any((tmp_path / "stack" / "src" / "beta" / "third_party" / "sub").iterdir())
    assert run_pipeline([FetchStep()], ctx)[0].status == "cached"


def test_dirty_fork_tree_is_refused_and_allow_dirty_is_recorded(tmp_path: Path) -> None:
    a_url, a_ids = make_repo(tmp_path, "alpha", commits=2)
    recipe = make_recipe([fork_use("alpha", a_url, a_ids[0])])
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    (stack / "src" / "alpha" / "alpha" / "__init__.py").write_text("patched = True\n")
    (stack / "src" / "alpha" / "notes.txt").write_text("untracked\n")
    ctx = make_ctx(stack, recipe, cache)
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], ctx)
    msg = str(err.value)
    assert "local changes" in msg and "alpha/__init__.py" in msg and "notes.txt" in msg
    assert "--allow-dirty" in msg
    assert not ctx.paths.marker("fetch").exists()
    ok = make_ctx(stack, recipe, cache, allow_dirty=True)
    [rec] = run_pipeline([FetchStep()], ok)
    assert rec.outputs["forks"]["alpha"]["dirty"] is True
    assert rec.outputs["forks"]["alpha"]["dirty_allowed"] is True
    assert any(kind == "warn" for kind, _ in ok.ui.lines)             # type: ignore[attr-defined]
    assert "notes.txt" in (stack / "logs" / "fetch.log").read_text()


def test_untracked_file_alone_counts_as_dirty(tmp_path: Path) -> None:
    a_url, a_ids = make_repo(tmp_path, "alpha")
    recipe = make_recipe([fork_use("alpha", a_url, a_ids[0])])
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    (stack / "src" / "alpha" / "stray.py").write_text("x = 1\n")
    with pytest.raises(FetchError, match="stray.py"):
        run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))


def test_ignored_build_outputs_do_not_make_the_tree_dirty(tmp_path: Path) -> None:
    """An editable install writes *.egg-info (ignored by the fork's .gitignore): not a change."""
    a_url, a_ids = make_repo(tmp_path, "alpha")
    recipe = make_recipe([fork_use("alpha", a_url, a_ids[0])])
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    (stack / "src" / "alpha" / "alpha.egg-info").mkdir()
    (stack / "src" / "alpha" / "alpha.egg-info" / "PKG-INFO").write_text("Name: alpha\n")
    assert run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))[0].status == "cached"


def test_dirty_submodule_is_refused(tmp_path: Path) -> None:
    s_url, s_ids, _, _ = make_repo_with_submodule(tmp_path, "beta", "gamma")
    recipe = make_recipe([fork_use("beta", s_url, s_ids[-1])])
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    (stack / "src" / "beta" / "third_party" / "sub" / "history.txt").write_text("edited\n")
    ctx = make_ctx(stack, recipe, cache)
    assert "local changes" in (FetchStep().verify(ctx, _marker_outputs(ctx)) or "")
    with pytest.raises(FetchError, match="third_party/sub"):
        run_pipeline([FetchStep()], ctx)


def _marker_outputs(ctx: object) -> dict:
    import json
    return FetchStep().load(json.loads(ctx.paths.marker("fetch").read_text())["outputs"])  # type: ignore[attr-defined]


def test_pin_missing_upstream_fails_clearly(tmp_path: Path) -> None:
    a_url, _ = make_repo(tmp_path, "alpha")
    ghost = "deadbeef" * 5
    recipe = make_recipe([fork_use("alpha", a_url, ghost)])
    ctx = make_ctx(tmp_path / "stack", recipe, tmp_path / "cache")
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], ctx)
    msg = str(err.value)
    assert "fork 'alpha'" in msg and a_url in msg and ghost in msg
    assert not (tmp_path / "stack" / "src" / "alpha").exists()
    assert not ctx.paths.marker("fetch").exists()


def test_verify_catches_a_moved_head_and_the_rerun_restores_it(tmp_path: Path) -> None:
    a_url, a_ids = make_repo(tmp_path, "alpha", commits=3)
    recipe = make_recipe([fork_use("alpha", a_url, a_ids[2])])
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    ctx = make_ctx(stack, recipe, cache)
    run_pipeline([FetchStep()], ctx)
    with git.Repo(stack / "src" / "alpha") as repo:
        repo.git.checkout("--detach", a_ids[0])          # someone moved the clone (clean tree)
    bad = FetchStep().verify(ctx, _marker_outputs(ctx))
    assert bad is not None and a_ids[0] in bad
    ctx2 = make_ctx(stack, recipe, cache)
    assert run_pipeline([FetchStep()], ctx2)[0].status == "ran"
    assert _head(stack / "src" / "alpha") == a_ids[2]
    assert any("its outputs no longer verify" in t for k, t in ctx2.ui.lines if k == "start")  # type: ignore[attr-defined]


def test_deleted_clone_is_recloned(tmp_path: Path) -> None:
    import shutil
    a_url, a_ids = make_repo(tmp_path, "alpha")
    recipe = make_recipe([fork_use("alpha", a_url, a_ids[0])])
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    shutil.rmtree(stack / "src" / "alpha")
    assert run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))[0].status == "ran"
    assert _head(stack / "src" / "alpha") == a_ids[0]


def test_a_directory_that_is_not_a_clone_is_refused(tmp_path: Path) -> None:
    a_url, a_ids = make_repo(tmp_path, "alpha")
    stack = tmp_path / "stack"
    (stack / "src" / "alpha").mkdir(parents=True)
    (stack / "src" / "alpha" / "file.txt").write_text("mine\n")
    recipe = make_recipe([fork_use("alpha", a_url, a_ids[0])])
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], make_ctx(stack, recipe, tmp_path / "cache"))
    assert "is not a git clone" in str(err.value) and "move" in str(err.value)


def test_leftover_partial_clone_from_a_killed_run_is_replaced(tmp_path: Path) -> None:
    a_url, a_ids = make_repo(tmp_path, "alpha")
    stack = tmp_path / "stack"
    partial = stack / "src" / ".alpha.partial"
    partial.mkdir(parents=True)
    (partial / "junk").write_text("half a clone\n")
    recipe = make_recipe([fork_use("alpha", a_url, a_ids[0])])
    run_pipeline([FetchStep()], make_ctx(stack, recipe, tmp_path / "cache"))
    assert not partial.exists() and _head(stack / "src" / "alpha") == a_ids[0]


def test_prefix_pin_is_resolved_once_and_recorded_in_full(tmp_path: Path) -> None:
    v_url, v_ids = make_repo(tmp_path, "vllm", commits=4)
    tip = add_commit(v_url, {"asym.py": "K16 = True\n"}, branch="k16fp8", base=v_ids[1])
    recipe = make_recipe([fork_use("vllm", v_url, tip[:9], branch="k16fp8")])
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    [rec] = run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))
    out = rec.outputs["forks"]["vllm"]
    assert (out["requested"], out["branch"], out["commit"]) == (tip[:9], "k16fp8", tip)
    assert _head(stack / "src" / "vllm") == tip
    add_commit(v_url, {"later.py": "x = 1\n"}, branch="k16fp8")    # the branch moves on
    assert run_pipeline([FetchStep()], make_ctx(stack, recipe, cache))[0].status == "cached"


def test_locked_run_uses_the_full_id_from_the_lock(tmp_path: Path) -> None:
    """The branch is deleted upstream after the lock was written: --locked still works."""
    v_url, v_ids = make_repo(tmp_path, "vllm", commits=3)
    tip = add_commit(v_url, {"asym.py": "K16 = True\n"}, branch="k16fp8", base=v_ids[0])
    recipe = make_recipe([fork_use("vllm", v_url, tip[:9], branch="k16fp8")])
    cache = tmp_path / "cache"
    run_pipeline([FetchStep()], make_ctx(tmp_path / "one", recipe, cache))
    from tests.fixtures.gitrepos import git as fixture_git
    fixture_git("update-ref", "-d", "refs/heads/k16fp8", cwd=bare_path(v_url))
    ctx = make_ctx(tmp_path / "two", recipe, cache, locked={"vllm": tip})
    [rec] = run_pipeline([FetchStep()], ctx)
    assert rec.outputs["forks"]["vllm"]["commit"] == tip
    assert _head(tmp_path / "two" / "src" / "vllm") == tip
