"""Sparse submodules (``sparse = { "3rdparty/cutlass" = [...] }``): the real situation is a submodule
commit whose only reachable copy lacks one file outside the directories the build reads (CUTLASS
b46b16d0 without a PNG under ``media/``).  Planted here with real git: a bare origin whose one blob
under ``media/`` is deleted from its object store.  A whole checkout of it fails; a sparse one fetches
the commit, its trees and the cone's blobs only, checks out clean, and goes through a kit.  The real
CUTLASS copy (the ``fetch`` tool's snapshot, when this machine has it) is used in the ``real`` tier.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from october.installer.core.errors import FetchError, RecipeError
from october.installer.core.runner import Runner
from october.installer.git import NO_FETCH
from october.installer.git.clonecheck import check_clone, dirty_entries, submodule_states
from october.installer.git.mirror import mirror_path, open_mirror
from october.installer.git.sparse import (cone_blobs, cone_problem, cut_packs, held_objects, ignore_blobs, lacking,
                                          missing_objects)
from october.installer.git.worktree import sync_clone
from october.installer.kit import repo_relpath, url_key
from october.installer.kit.gitcopy import KitRepos
from tests.fixtures.root import PROJECT_ROOT
from october.installer.recipe import explain, spec
from october.installer.steps.fetch import FetchStep
from tests.fixtures.fetchctx import fork_use, make_ctx, make_recipe
from tests.fixtures.gitrepos import bare_path, drop_blob, make_repo
from tests.fixtures.gitrepos import git as fixture_git
from tests.test_fetch_submodules import _super_with

DIRS = ("include", "tools/util/include")
CUTLASS_LIKE = {
    "README.md": "cutlass\n",
    "CMakeLists.txt": "project(x)\n",
    "include/cutlass/cutlass.h": "#pragma once\n",
    "include/cute/tensor.hpp": "#pragma once\n// cute\n",
    "tools/CMakeLists.txt": "add_subdirectory(util)\n",
    "tools/util/CMakeLists.txt": "# util\n",
    "tools/util/include/cutlass/util/device_memory.h": "#pragma once\n// util\n",
    "tools/profiler/main.cpp": "int main() {}\n",
    "media/images/big.png": "\x89PNG not really\n" * 50,
    "examples/00/a.cu": "// example\n",
}


def _drop(bare: Path, commit: str, path: str) -> str:
    """Delete the blob of ``path`` at ``commit`` from the bare repo (as the real copy lacks one)."""
    return drop_blob(bare, commit, path)


def _super(tmp: Path, sub_url: str, cccl_url: str | None = None) -> tuple[str, str]:
    """A superproject recording 3rdparty/cutlass (and 3rdparty/cccl) at their tips."""
    url, commit, _ = _super_with(tmp, {"3rdparty/cutlass": sub_url, **({"3rdparty/cccl": cccl_url} if cccl_url else {})})
    return url, commit


@pytest.fixture()
def world(tmp_path: Path) -> dict:
    cut_url, cut_ids = make_repo(tmp_path, "cutlass", files=CUTLASS_LIKE)
    dropped = _drop(bare_path(cut_url), cut_ids[0], "media/images/big.png")
    cccl_url, _ = make_repo(tmp_path, "cccl")
    url, commit = _super(tmp_path, cut_url, cccl_url)
    return {"url": url, "commit": commit, "cut_url": cut_url, "cut": cut_ids[0], "dropped": dropped}


def _fork(world: dict, sparse: dict | None = None, paths: tuple[str, ...] = ("3rdparty/cccl", "3rdparty/cutlass")):
    import dataclasses
    use = fork_use("fi", world["url"], world["commit"])
    return dataclasses.replace(use, submodule_paths=paths, sparse=sparse if sparse is not None else {"3rdparty/cutlass": DIRS})


def _fetch(tmp: Path, fork, cache: Path | None = None):
    stack = tmp / "stack"
    ctx = make_ctx(stack, make_recipe([fork]), cache or tmp / "cache")
    step = FetchStep()
    return ctx, step, step.run(ctx)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts
            and p.name != ".git"}


def test_a_whole_checkout_of_a_commit_whose_copy_lacks_a_file_fails_naming_the_submodule(tmp_path: Path, world: dict) -> None:
    fork = _fork(world, sparse={})
    with pytest.raises(FetchError) as exc:
        _fetch(tmp_path, fork)
    assert "3rdparty/cutlass" in str(exc.value)


def test_a_sparse_submodule_checks_out_only_its_cone_clean_from_a_copy_lacking_a_file_elsewhere(
        tmp_path: Path, world: dict) -> None:
    ctx, step, result = _fetch(tmp_path, _fork(world))
    rec = result.forks["fi"]
    sub = Path(rec.path) / "3rdparty/cutlass"
    assert _files(sub) == {"README.md", "CMakeLists.txt", "include/cutlass/cutlass.h", "include/cute/tensor.hpp",
                           "tools/CMakeLists.txt", "tools/util/CMakeLists.txt",
                           "tools/util/include/cutlass/util/device_memory.h"}
    assert rec.submodules["3rdparty/cutlass"] == world["cut"]
    assert rec.sparse == {"3rdparty/cutlass": DIRS}
    assert dirty_entries(Path(rec.path)) == []
    assert {s.path: s.flag for s in submodule_states(Path(rec.path))} == {"3rdparty/cccl": " ", "3rdparty/cutlass": " "}
    assert (Path(rec.path) / ".git" / "modules" / "3rdparty/cutlass").is_dir()      # absorbed, as submodule update
    assert step.verify(ctx, result) is None
    # the cache's partial mirror holds the cone, not the rest (and never the whole mirror's name)
    partial = mirror_path(tmp_path / "cache", world["cut_url"], partial=True)
    assert partial.is_dir() and not mirror_path(tmp_path / "cache", world["cut_url"]).exists()
    gone = missing_objects(partial, world["cut"])
    assert world["dropped"] in gone
    assert not set(cone_blobs(partial, world["cut"], DIRS, who="t").values()) & gone
    # held_objects (what the second stack asks: no walk of the commit) answers as the walk does, for every id
    # the commit reaches, in the mirror and in the stack's sparse clone
    for repo in (partial, sub):
        walk = subprocess.run(["git", "-C", str(repo), "rev-list", "--objects", "--missing=print", world["cut"]],
                              capture_output=True, text=True, check=True, env=dict(os.environ, **NO_FETCH))
        reached = {ln.split()[0].lstrip("?") for ln in walk.stdout.splitlines()}
        assert reached - held_objects(repo) == missing_objects(repo, world["cut"]) != set()
    # the record round-trips through the step's marker
    assert step.load(result.to_json()).forks["fi"].sparse == {"3rdparty/cutlass": DIRS}


def test_a_pack_cut_short_in_the_partial_mirror_is_named_and_removing_the_mirror_as_told_mends_it(
        tmp_path: Path, world: dict) -> None:
    """An interrupted copy of a shared cache leaves the pack of the cone's blobs shorter than its index says: the
    index still lists them (held_objects), git cannot read them, and a fetch asks for none of them again.  lacking()
    names them (a walk, as a pack is cut short); a second stack is refused naming the mirror and the pack, not the
    source, and the fix it gives (remove the mirror) mends it.  Taken for held, the checkout failed with a fix that
    removed the stack's submodule and failed again."""
    _, _, first = _fetch(tmp_path, _fork(world))
    partial = mirror_path(tmp_path / "cache", world["cut_url"], partial=True)
    cone = cone_blobs(partial, world["cut"], DIRS, who="t")
    assert lacking(partial, world["cut"], DIRS, who="t") == [] and cut_packs(partial) == []
    # the stack's sparse submodule too (its .git a file naming .git/modules/...): cut_packs reads the packs there
    sub = Path(first.forks["fi"].path) / "3rdparty/cutlass"
    assert (sub / ".git").is_file() and cut_packs(sub) == []
    sub_pack = sorted((Path(first.forks["fi"].path) / ".git/modules/3rdparty/cutlass/objects/pack").glob("*.pack"))[0]
    os.truncate(sub_pack, sub_pack.stat().st_size - 1)
    assert cut_packs(sub) == [sub_pack]

    def ids(index: Path) -> set[str]:
        with index.open("rb") as feed:
            out = subprocess.run(["git", "show-index"], stdin=feed, capture_output=True, check=True).stdout
        return {ln.split()[1] for ln in out.decode().splitlines()}

    # the fetch of the cone's blobs by id made a pack of its own (a promisor fetch keeps its packs)
    blob_pack = next(i for i in (partial / "objects" / "pack").glob("*.idx") if set(cone.values()) <= ids(i))
    assert world["cut"] not in ids(blob_pack)
    pack = blob_pack.with_suffix(".pack")
    os.truncate(pack, pack.stat().st_size // 2)
    assert set(cone.values()) <= held_objects(partial)          # the index still lists them
    assert cut_packs(partial) == [pack]
    assert lacking(partial, world["cut"], DIRS, who="t") == sorted(cone)
    ctx2 = make_ctx(tmp_path / "stack2", make_recipe([_fork(world)]), tmp_path / "cache")
    with pytest.raises(FetchError) as err:
        FetchStep().run(ctx2)
    assert "cut short" in err.value.message and pack.name in err.value.found and f"remove {partial}" in err.value.fix
    shutil.rmtree(partial)
    out = FetchStep().run(ctx2)
    sub = Path(out.forks["fi"].path) / "3rdparty/cutlass"
    assert (sub / "include/cute/tensor.hpp").read_text() == CUTLASS_LIKE["include/cute/tensor.hpp"]
    assert dirty_entries(Path(out.forks["fi"].path)) == []


def test_a_second_run_keeps_the_sparse_checkout_and_a_second_stack_fetches_nothing(tmp_path: Path, world: dict) -> None:
    ctx, step, result = _fetch(tmp_path, _fork(world))
    sub = Path(result.forks["fi"].path) / "3rdparty/cutlass"
    marker = sub / "include" / "cutlass" / "cutlass.h"
    before = marker.stat().st_ino
    step.run(ctx)
    assert marker.stat().st_ino == before          # not checked out again
    # a second stack on the same cache: the partial mirror answers, the origin is not asked
    os.rename(bare_path(world["cut_url"]), tmp_path / "gone.git")
    ctx2 = make_ctx(tmp_path / "stack2", make_recipe([_fork(world)]), tmp_path / "cache")
    out = FetchStep().run(ctx2)
    assert (Path(out.forks["fi"].path) / "3rdparty/cutlass/include/cute/tensor.hpp").is_file()


def test_a_changed_cone_in_the_stack_is_found_and_the_next_run_restores_it(tmp_path: Path, world: dict) -> None:
    ctx, step, result = _fetch(tmp_path, _fork(world))
    sub = Path(result.forks["fi"].path) / "3rdparty/cutlass"
    fixture_git("-C", str(sub), "sparse-checkout", "set", "--cone", "include")
    bad = step.verify(ctx, result)
    assert bad is not None and "3rdparty/cutlass" in bad and "tools/util/include" in bad
    assert check_clone(Path(result.forks["fi"].path), world["commit"], allow_dirty=False,
                       sparse={"3rdparty/cutlass": DIRS}) is not None
    step.run(ctx)
    assert cone_problem(sub, DIRS) is None
    assert (sub / "tools/util/include/cutlass/util/device_memory.h").is_file()
    # sparse checkout turned off: named too
    fixture_git("-C", str(sub), "config", "--worktree", "core.sparseCheckout", "false")
    assert "not a sparse checkout" in (cone_problem(sub, DIRS) or "")


def test_current_verify_names_a_changed_cone(tmp_path: Path, world: dict) -> None:
    from october.installer.core.paths import StackPaths
    from october.installer.engine import MARKER_FORMAT
    from october.installer.verify.forks import check_forks
    ctx, step, result = _fetch(tmp_path, _fork(world))
    paths = StackPaths(tmp_path / "stack")
    paths.marker("fetch").parent.mkdir(parents=True, exist_ok=True)
    paths.marker("fetch").write_text(json.dumps({"format_version": MARKER_FORMAT, "outputs": result.to_json()}),
                                     encoding="utf-8")
    lock = {"packages": [{"name": "fi", "version": "0.1.0", "vcs": {"commit-id": world["commit"]},
                          "tool": {"october": {"fork": "fi", "path": "src/fi"}}}]}
    assert check_forks(paths, lock, {"forks": []}, "re-run") == []
    sub = Path(result.forks["fi"].path) / "3rdparty/cutlass"
    fixture_git("-C", str(sub), "sparse-checkout", "set", "--cone", "include")
    diffs = check_forks(paths, lock, {"forks": []}, "re-run")
    assert len(diffs) == 1 and "3rdparty/cutlass" in diffs[0].what and "tools/util/include" in diffs[0].found


def test_a_cone_narrowed_by_a_negative_line_is_found_and_the_next_run_restores_it(tmp_path: Path, world: dict) -> None:
    """Tamper hunt: ``!/include/*/`` appended to the cone file (and ``git sparse-checkout reapply``) took the
    kept directory's subfolders away while the positive lines were unchanged: verify and the no-op passed."""
    ctx, step, result = _fetch(tmp_path, _fork(world))
    sub = Path(result.forks["fi"].path) / "3rdparty/cutlass"
    cone = Path(fixture_git("-C", str(sub), "rev-parse", "--absolute-git-dir").strip()) / "info" / "sparse-checkout"
    cone.write_text(cone.read_text() + "!/include/*/\n")
    fixture_git("-C", str(sub), "sparse-checkout", "reapply")
    assert not (sub / "include/cute/tensor.hpp").exists()
    bad = step.verify(ctx, result)
    assert bad is not None and "!/include/*/" in bad, bad
    step.run(ctx)
    assert cone_problem(sub, DIRS) is None and (sub / "include/cute/tensor.hpp").is_file()


def test_a_fork_made_sparse_is_not_a_clean_clone(tmp_path: Path, world: dict) -> None:
    """Tamper hunt: `git sparse-checkout set --no-cone "/*" "!/x"` on the fork itself removed files with
    skip-worktree bits, which the hidden-entry look excuses in a sparse checkout: verify and the no-op passed.
    The recipe keeps only submodules sparse: a sparse fork is named, and a re-run says how to undo it."""
    ctx, step, result = _fetch(tmp_path, _fork(world))
    fork = Path(result.forks["fi"].path)
    tracked = fixture_git("-C", str(fork), "ls-files").split()
    gone = next(p for p in tracked if "/" not in p and p != ".gitmodules")
    fixture_git("-C", str(fork), "sparse-checkout", "set", "--no-cone", "/*", f"!/{gone}")
    assert not (fork / gone).exists() and dirty_entries(fork) == []
    bad = step.verify(ctx, result)
    assert bad is not None and "sparse or partial checkout" in bad, bad
    from october.installer.core.paths import StackPaths
    from october.installer.engine import MARKER_FORMAT
    from october.installer.verify.forks import check_forks
    paths = StackPaths(tmp_path / "stack")
    paths.marker("fetch").parent.mkdir(parents=True, exist_ok=True)
    paths.marker("fetch").write_text(json.dumps({"format_version": MARKER_FORMAT, "outputs": result.to_json()}))
    lock = {"packages": [{"name": "fi", "version": "0.1.0", "vcs": {"commit-id": world["commit"]},
                          "tool": {"october": {"fork": "fi", "path": "src/fi"}}}]}
    diffs = check_forks(paths, lock, {"forks": []}, "re-run")
    assert [d.found for d in diffs] == ["a sparse or partial checkout (core.sparseCheckout or a promisor remote)"]
    with pytest.raises(FetchError) as err:
        step.run(ctx)
    assert "sparse-checkout disable" in err.value.fix
    fixture_git("-C", str(fork), "sparse-checkout", "disable")
    step.run(ctx)
    assert (fork / gone).is_file() and step.verify(ctx, result) is None


def test_local_changes_in_a_sparse_submodule_are_never_thrown_away(tmp_path: Path, world: dict) -> None:
    ctx, step, result = _fetch(tmp_path, _fork(world))
    sub = Path(result.forks["fi"].path) / "3rdparty/cutlass"
    (sub / "include/cute/tensor.hpp").write_text("// my edit\n", encoding="utf-8")
    fixture_git("-C", str(sub), "sparse-checkout", "set", "--cone", "include")   # forces a re-checkout
    with pytest.raises(FetchError) as exc:
        step.run(ctx)
    assert "local changes" in str(exc.value)
    assert (sub / "include/cute/tensor.hpp").read_text(encoding="utf-8") == "// my edit\n"


def test_a_kept_directory_the_commit_lacks_is_named(tmp_path: Path, world: dict) -> None:
    with pytest.raises(FetchError) as exc:
        _fetch(tmp_path, _fork(world, sparse={"3rdparty/cutlass": ("include", "tools/util/inc")}))
    assert "tools/util/inc" in str(exc.value) and "sparse" in exc.value.fix


def test_a_source_that_lacks_a_file_inside_the_cone_is_refused_naming_it(tmp_path: Path) -> None:
    cut_url, cut_ids = make_repo(tmp_path, "cutlass", files=CUTLASS_LIKE)
    _drop(bare_path(cut_url), cut_ids[0], "include/cute/tensor.hpp")
    url, commit = _super(tmp_path, cut_url)
    fork = _fork({"url": url, "commit": commit}, paths=("3rdparty/cutlass",))
    with pytest.raises(FetchError) as exc:
        _fetch(tmp_path, fork)
    assert "3rdparty/cutlass" in str(exc.value)
    assert not (tmp_path / "stack" / "src" / "fi" / "3rdparty/cutlass/include").exists()


def test_a_kit_carries_the_cone_only_and_an_offline_stack_checks_it_out(tmp_path: Path, world: dict) -> None:
    fork = _fork(world)
    runner = Runner(tmp_path / "logs")
    kit = tmp_path / "kit"
    repos = KitRepos(runner, "kit", tmp_path / "kitcache", kit, say=lambda _: None)
    repos.add_fork(fork)
    copy = repos.repos[repo_relpath(world["cut_url"])]
    assert copy.as_json()["sparse"] == {world["cut"]: list(DIRS)}
    # kit.json's schema takes the record (the kit step validates kit.json against it)
    doc = {"repos": [c.as_json() for c in repos.repos.values()]}
    schema = json.loads((PROJECT_ROOT / "receipts" / "kit.schema.json").read_text(encoding="utf-8"))
    item = {**schema["properties"]["repos"]["items"], "$defs": schema.get("$defs", {})}
    for repo in doc["repos"]:
        jsonschema.validate(repo, item)
    kit_cut = kit / copy.path
    assert world["dropped"] in missing_objects(kit_cut, world["cut"])
    assert not set(cone_blobs(kit_cut, world["cut"], DIRS, who="t").values()) & missing_objects(kit_cut, world["cut"])
    # the origins are gone: everything comes from the kit
    for u in (world["url"], world["cut_url"]):
        os.rename(bare_path(u), str(bare_path(u)) + ".away")
    by_key = {c.as_json()["key"]: (kit / c.path).as_uri() for c in repos.repos.values()}
    def rewrite(u: str) -> str | None:
        return by_key.get(url_key(u))
    mirror = open_mirror(tmp_path / "cache", fork.fetch_url, "fi", source=by_key[url_key(world["url"])])
    from october.installer.git.mirror import ensure_commit
    ensure_commit(runner, "fetch", mirror, world["commit"])
    out = sync_clone(runner, "fetch", tmp_path / "stack" / "src" / "fi", mirror, world["commit"],
                     cache_dir=tmp_path / "cache", submodules=True, allow_dirty=False,
                     submodule_paths=fork.submodule_paths, sparse=fork.sparse, rewrite=rewrite)
    assert out.submodules["3rdparty/cutlass"] == world["cut"] and not out.dirty
    assert (out.path / "3rdparty/cutlass/tools/util/include/cutlass/util/device_memory.h").is_file()
    assert not (out.path / "3rdparty/cutlass/media").exists()


@pytest.mark.parametrize("raw, paths, found", [
    ({"3rdparty/spdlog": ["include"]}, ("3rdparty/cutlass",), "3rdparty/spdlog"),
    ({"3rdparty/cutlass": ["include"]}, None, "3rdparty/cutlass"),
    ({"3rdparty/cutlass": ["../x"]}, ("3rdparty/cutlass",), "../x"),
    ({"3rdparty/cutlass": []}, ("3rdparty/cutlass",), "empty"),
    ({"3rdparty/cutlass": ["include", "include/"]}, ("3rdparty/cutlass",), "'include' twice"),
    ({"3rdparty/cutlass": "include"}, ("3rdparty/cutlass",), "include"),
    # git collapses nested cone folders: the cone check could never pass (the review)
    ({"3rdparty/cutlass": ["include", "include/cute"]}, ("3rdparty/cutlass",), "'include/cute' inside 'include'"),
])
def test_a_sparse_table_that_does_not_fit_the_selection_is_refused(raw, paths, found) -> None:
    entry = {"name": "flashinfer", "pin": "p", "submodules": list(paths) if paths else True, "sparse": raw}
    with pytest.raises(RecipeError) as exc:
        explain.validate(Path("r.toml"), entry, spec.ForkUseSpec)
    assert found in str(exc.value)


def test_the_vllm_recipe_keeps_the_two_cutlass_directories_flashinfer_reads() -> None:
    from october.installer.recipe import load_recipe
    r = load_recipe("vllm-0.24.0-pr3812")
    fi = next(f for f in r.forks if f.name == "flashinfer")
    assert fi.sparse == {"3rdparty/cutlass": DIRS}


def _real_cutlass() -> Path | None:
    """The real NVIDIA/cutlass copy the ``fetch`` tool brings (it holds b46b16d0 less one PNG):
    $OCTOBER_REAL_CUTLASS, or the tool's snapshot on this machine."""
    for c in (os.environ.get("OCTOBER_REAL_CUTLASS"), "/work/.mirror/NVIDIA+cutlass/repo"):
        if c and (Path(c) / "objects").is_dir():
            return Path(c)
    return None


@pytest.mark.real
def test_real_flashinfer_pr3812_gets_cutlass_b46b16d0_sparse_from_the_one_copy_that_lacks_a_png(
        tmp_path: Path, real_mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real objects: FlashInfer 2f3f0f6d (../shared/real-forks) records CUTLASS b46b16d0, whose only
    reachable copy lacks blob 06ebe5ad (a PNG under media/): a whole fetch cannot work, the recipe's
    sparse one must, with the two directories FlashInfer's JIT reads."""
    cutlass = _real_cutlass()
    if cutlass is None:
        pytest.skip("no copy of NVIDIA/cutlass on this machine (set OCTOBER_REAL_CUTLASS to one)")
    mirror = tmp_path / "mirror"
    (mirror / "github.com" / "NVIDIA").mkdir(parents=True)
    for owner_name in ("flashinfer-ai/flashinfer.git", "NVIDIA/cccl.git"):
        (mirror / "github.com" / owner_name).parent.mkdir(parents=True, exist_ok=True)
        (mirror / "github.com" / owner_name).symlink_to(real_mirror / "github.com" / owner_name)
    (mirror / "github.com" / "NVIDIA" / "cutlass.git").symlink_to(cutlass)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{(mirror / 'github.com').as_uri()}/.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/")
    from october.installer.recipe import load_recipe
    fi = next(f for f in load_recipe("vllm-0.24.0-pr3812").forks if f.name == "flashinfer")
    ctx, step, result = _fetch(tmp_path, fi)
    rec = result.forks["flashinfer"]
    sub = Path(rec.path) / "3rdparty" / "cutlass"
    assert rec.submodules["3rdparty/cutlass"] == "b46b16d003484063bca4ed365e44095c4c6ed633"
    for header in ("include/cute/tensor.hpp", "include/cutlass/arch/reg_reconfig.h",
                   "tools/util/include/cutlass/util/device_memory.h"):
        assert (sub / header).is_file(), header
    assert not (sub / "media").exists() and not (sub / "examples").exists()
    assert dirty_entries(Path(rec.path)) == [] and step.verify(ctx, result) is None
    partial = mirror_path(tmp_path / "cache", "https://github.com/NVIDIA/cutlass.git", partial=True)
    assert "06ebe5ad" in " ".join(missing_objects(partial, rec.submodules["3rdparty/cutlass"]))


@pytest.mark.parametrize("source, passed", [
    ("file:///c/x.partial.git", True), ("/c/x.git", True), ("https://github.com/NVIDIA/cutlass.git", True),
    ("ssh://git@gitlab.example/x/y.git", False), ("git@gitlab.example:x/y.git", False)])
def test_upload_pack_is_asked_for_local_and_https_sources_never_over_ssh(source: str, passed: bool) -> None:
    from october.installer.git.sparse import upload_pack
    assert bool(upload_pack(source)) is passed


def test_a_submodule_kept_sparse_before_is_checked_out_whole_when_the_recipe_says_so(tmp_path: Path) -> None:
    """Review finding: a sparse -> whole change of the recipe left the submodule sparse, and the re-run
    check passed.  Now the checkout is made whole, and a sparse one the record calls whole is named."""
    cut_url, cut_ids = make_repo(tmp_path, "cutlass", files=CUTLASS_LIKE)          # complete this time
    url, commit = _super(tmp_path, cut_url)
    sparse = _fork({"url": url, "commit": commit}, paths=("3rdparty/cutlass",))
    ctx, step, result = _fetch(tmp_path, sparse)
    root = Path(result.forks["fi"].path)
    sub = root / "3rdparty/cutlass"
    assert not (sub / "media").exists()
    subs = dict(result.forks["fi"].submodules)
    assert "wants it whole" in (check_clone(root, commit, allow_dirty=False, submodules=subs) or "")
    whole = _fork({"url": url, "commit": commit}, sparse={}, paths=("3rdparty/cutlass",))
    ctx2 = make_ctx(tmp_path / "stack", make_recipe([whole]), tmp_path / "cache")
    out = FetchStep().run(ctx2)
    assert (sub / "media/images/big.png").is_file() and (sub / "tools/profiler/main.cpp").is_file()
    assert check_clone(root, commit, allow_dirty=False, submodules=dict(out.forks["fi"].submodules)) is None
    assert FetchStep().verify(ctx2, out) is None


def test_an_untracked_file_in_a_sparse_submodule_stops_a_re_checkout(tmp_path: Path, world: dict) -> None:
    ctx, step, result = _fetch(tmp_path, _fork(world))
    sub = Path(result.forks["fi"].path) / "3rdparty/cutlass"
    (sub / "build").mkdir()
    (sub / "build" / "out.o").write_bytes(b"mine")
    fixture_git("-C", str(sub), "sparse-checkout", "set", "--cone", "include")
    with pytest.raises(FetchError) as exc:
        step.run(ctx)
    assert ("local changes" in str(exc.value) or "build/" in str(exc.value))
    assert (sub / "build" / "out.o").read_bytes() == b"mine"
    # the submodule's own guard, reached directly (the clone's dirty check above comes first in a run)
    from october.installer.git.submodules import clear_submodule
    with pytest.raises(FetchError) as inner:
        clear_submodule(sub.parent.parent, "3rdparty/cutlass", "3rdparty/cutlass", "fi", "a test")
    assert "build/" in str(inner.value) and (sub / "build" / "out.o").read_bytes() == b"mine"


def _ignore_world(tmp: Path) -> tuple[str, str, object]:
    """A CUTLASS-like submodule (nothing dropped) whose folders outside the cone track a .gitignore each, in a
    fork that selects only it, sparse: (its URL, its commit, the fork entry)."""
    files = {**CUTLASS_LIKE, "examples/.gitignore": "*.o\n", "tools/profiler/.gitignore": "out/\n"}
    del files["media/images/big.png"]
    cut_url, cut_ids = make_repo(tmp, "cutlass", files=files)
    url, commit = _super(tmp, cut_url)
    return cut_url, cut_ids[0], _fork({"url": url, "commit": commit}, paths=("3rdparty/cutlass",))


def test_a_file_of_the_user_s_in_a_folder_outside_the_cone_with_a_gitignore_is_named_not_a_broken_clone(
        tmp_path: Path) -> None:
    """Review finding (real CCCL: docs/, cub/test/ ... each track a .gitignore outside the cone): once such a folder
    exists, git status reads its .gitignore from the object store; without the blob (the partial clone never wrote
    it) every look failed ("git cannot read the clone", whose fix was to delete it).  The .gitignore blobs come with
    the cone, through the cache's mirror and a kit, so the user's file is a named local change."""
    cut_url, cut_id, fork = _ignore_world(tmp_path)
    cut_ids = [cut_id]
    for stack in ("stack", "stack2"):             # the first fills the cache's partial mirror; the second reads it
        ctx = make_ctx(tmp_path / stack, make_recipe([fork]), tmp_path / "cache")
        rec = FetchStep().run(ctx).forks["fi"]
        sub = Path(rec.path) / "3rdparty/cutlass"
        assert not (sub / "examples").exists() and dirty_entries(Path(rec.path), ["3rdparty/cutlass"]) == []
        # the clone holds them itself: `current verify` never lets git fetch lazily from the mirror
        assert len(ignore_blobs(sub, cut_ids[0])) == 2 and not ignore_blobs(sub, cut_ids[0]) & missing_objects(sub, cut_ids[0])
        (sub / "examples").mkdir()
        (sub / "examples" / "mine.txt").write_text("notes\n")
        (sub / "examples" / "x.o").write_text("ignored by the fork's own .gitignore\n")
        seen = dirty_entries(sub)
        assert seen == ["?? examples/mine.txt"], seen
    partial = mirror_path(tmp_path / "cache", cut_url, partial=True)
    assert not ignore_blobs(partial, cut_ids[0]) & missing_objects(partial, cut_ids[0])


def test_the_kit_s_partial_copy_names_its_upstream_not_this_machine_s_cache_and_is_never_also_whole(
        tmp_path: Path, world: dict) -> None:
    from october.installer.core.errors import KitError
    runner = Runner(tmp_path / "logs")
    repos = KitRepos(runner, "kit", tmp_path / "kitcache", tmp_path / "kit", say=lambda _: None)
    repos.add_fork(_fork(world))
    copy = repos.repos[repo_relpath(world["cut_url"])]
    config = (tmp_path / "kit" / copy.path / "config").read_text(encoding="utf-8")
    assert str(tmp_path / "kitcache") not in config
    assert fixture_git("-C", str(tmp_path / "kit" / copy.path), "config", "remote.origin.url") == world["cut_url"]
    # a look at the partial copy never fetches what it lacks from its promisor (GIT_NO_LAZY_FETCH)
    from october.installer.git.mirror import has_commit
    kit_cut = tmp_path / "kit" / copy.path
    outside = fixture_git("-C", str(bare_path(world["cut_url"])), "rev-parse", f"{world['cut']}:tools/profiler/main.cpp")
    before = sorted(str(p.relative_to(kit_cut)) for p in kit_cut.rglob("*"))
    assert outside in missing_objects(kit_cut, world["cut"])
    assert not has_commit(kit_cut, outside)
    assert sorted(str(p.relative_to(kit_cut)) for p in kit_cut.rglob("*")) == before
    assert outside in missing_objects(kit_cut, world["cut"])
    whole = open_mirror(tmp_path / "kitcache", world["cut_url"], "fi/3rdparty/cutlass")
    with pytest.raises(KitError) as exc:
        repos.add(whole, world["cut"], role="submodule", owner="other/3rdparty/cutlass")
    assert "both whole and sparse" in str(exc.value)


@pytest.mark.parametrize("guard", [{}, {"GIT_NO_LAZY_FETCH": "1"}, {"GIT_ALLOW_PROTOCOL": ""}, "NO_FETCH"])
def test_each_no_fetch_guard_alone_keeps_a_look_at_a_partial_copy_local(
        tmp_path: Path, world: dict, monkeypatch: pytest.MonkeyPatch, guard) -> None:
    """A look at a partial repository fetches nothing, on a git that honours GIT_NO_LAZY_FETCH and on an
    older one that ignores it (there an empty GIT_ALLOW_PROTOCOL refuses the transport).  Each guard is
    tried alone; the planted fault is no guard at all ({}), under which git fetches the missing blob
    from the promisor the copy names."""
    from october.installer import git as fetch_pkg
    from october.installer.git.mirror import has_commit

    repos = KitRepos(Runner(tmp_path / "logs"), "kit", tmp_path / "kitcache", tmp_path / "kit", say=lambda _: None)
    repos.add_fork(_fork(world))
    kit_cut = tmp_path / "kit" / repos.repos[repo_relpath(world["cut_url"])].path
    fixture_git("-C", str(kit_cut), "config", "remote.origin.url", f"file://{bare_path(world['cut_url'])}")
    for key, value in (("uploadpack.allowFilter", "true"), ("uploadpack.allowAnySHA1InWant", "true")):
        fixture_git("-C", str(bare_path(world["cut_url"])), "config", key, value)   # a promisor that would serve
    outside = fixture_git("-C", str(bare_path(world["cut_url"])), "rev-parse", f"{world['cut']}:tools/profiler/main.cpp")
    assert outside in missing_objects(kit_cut, world["cut"])
    monkeypatch.setattr(fetch_pkg, "NO_FETCH", fetch_pkg.NO_FETCH if guard == "NO_FETCH" else guard)
    monkeypatch.delenv("GIT_NO_LAZY_FETCH", raising=False)
    monkeypatch.delenv("GIT_ALLOW_PROTOCOL", raising=False)
    fetched = has_commit(kit_cut, outside) or outside not in missing_objects(kit_cut, world["cut"])
    assert fetched == (guard == {}), f"guard {guard}: the missing blob was {'' if fetched else 'not '}fetched"


class _Killed(BaseException):
    """Stands in for SIGKILL right after one git command: nothing of ours runs after it (no except, no
    finally of the step catches a BaseException it does not know)."""


@pytest.mark.parametrize("after", ["init", "fetch", "sparse-checkout", "checkout", "absorbgitdirs"])
def test_a_run_killed_inside_the_sparse_checkout_is_finished_by_the_next_run(
        tmp_path: Path, world: dict, monkeypatch: pytest.MonkeyPatch, after: str) -> None:
    """Killed right after each command of the sparse checkout (the review's gap: between the checkout and
    ``absorbgitdirs`` the submodule's git directory is still inside it), the next run leaves what a run
    that was never killed leaves: the cone, clean, its git directory under .git/modules."""
    real_run = Runner.run

    def run(self, argv, *a, **kw):
        out = real_run(self, argv, *a, **kw)
        words = [str(w) for w in argv]
        if after in words and any(w.endswith("3rdparty/cutlass") for w in words):
            monkeypatch.setattr(Runner, "run", real_run)          # one kill
            raise _Killed(after)
        return out

    monkeypatch.setattr(Runner, "run", run)
    with pytest.raises(_Killed):
        _fetch(tmp_path, _fork(world))
    monkeypatch.setattr(Runner, "run", real_run)
    ctx, step, result = _fetch(tmp_path, _fork(world))
    root = Path(result.forks["fi"].path)
    sub = root / "3rdparty/cutlass"
    assert _files(sub) == {"README.md", "CMakeLists.txt", "include/cutlass/cutlass.h", "include/cute/tensor.hpp",
                           "tools/CMakeLists.txt", "tools/util/CMakeLists.txt",
                           "tools/util/include/cutlass/util/device_memory.h"}
    assert (sub / ".git").is_file() and (root / ".git" / "modules" / "3rdparty/cutlass").is_dir()
    assert result.forks["fi"].submodules["3rdparty/cutlass"] == world["cut"]
    assert dirty_entries(root) == [] and step.verify(ctx, result) is None
    assert fixture_git("-C", str(sub), "config", "remote.origin.url") == world["cut_url"]


@pytest.mark.parametrize("where", ["mirror trees", "mirror ignores", "clone ignores"])
def test_a_run_killed_in_the_partial_mirror_s_fetches_is_finished_by_the_next_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Kill hunt: killed in the partial mirror's first fetch, git left shallow.lock and every later run failed
    ("remove the file manually"; the fix blamed the network) until it was deleted by hand; killed before the
    .gitignore fetch (the mirror's or the clone's), the re-run called the mirror complete and the blobs never
    came.  Each kill (the git command's own leftovers planted, then nothing of ours runs) is finished by the
    next run: the mirror and the clone hold every .gitignore, and the clone is clean."""
    cut_url, cut, fork = _ignore_world(tmp_path)
    partial = mirror_path(tmp_path / "cache", cut_url, partial=True)
    real_run = Runner.run
    seen: list[str] = []

    def run(self, argv, *a, **kw):
        words = [str(w) for w in argv]
        noop = "fetch.negotiationAlgorithm=noop" in words
        in_mirror = str(partial) in words
        kind = ("mirror trees" if in_mirror and "--depth=1" in words else
                "mirror ignores" if in_mirror and noop and "mirror blobs" in seen else
                "mirror blobs" if in_mirror and noop else
                "clone ignores" if noop and any(w.endswith("3rdparty/cutlass") for w in words) else "")
        seen.append(kind)
        if kind == where:
            monkeypatch.setattr(Runner, "run", real_run)          # one kill
            if where == "mirror trees":
                (partial / "shallow.lock").write_text("")          # what the killed fetch leaves
            raise _Killed(where)
        return real_run(self, argv, *a, **kw)

    monkeypatch.setattr(Runner, "run", run)
    with pytest.raises(_Killed):
        _fetch(tmp_path, fork)
    monkeypatch.setattr(Runner, "run", real_run)
    ctx, step, result = _fetch(tmp_path, fork)
    sub = Path(result.forks["fi"].path) / "3rdparty/cutlass"
    for repo in (partial, sub):
        assert len(ignore_blobs(repo, cut)) == 2 and not ignore_blobs(repo, cut) & missing_objects(repo, cut), repo
    assert not (partial / "shallow.lock").exists() and step.verify(ctx, result) is None


@pytest.mark.parametrize("then", ["fork files", "other submodule", "fork commit"])
def test_a_run_refused_for_a_submodule_s_files_does_not_leave_the_fork_to_be_reset(tmp_path: Path, then: str) -> None:
    """Kill hunt (lost work): a whole submodule that the recipe now keeps sparse, holding an ignored file of the
    user's, is refused (nothing removed); the fork stayed marked as being changed, so after the user did as told
    (deleted the submodule) and went on working (files of the fork, another submodule's, a commit in the fork),
    the next run took it for a killed run's and reset it (`checkout --force`, `clean`, `submodule update
    --force`).  A refusal made before anything was half-written, by a run that did not move the fork, clears the
    mark: the next run refuses the user's changes as any local change, and keeps them."""
    import dataclasses
    import shutil

    files = {**CUTLASS_LIKE, "examples/.gitignore": "*.o\n"}
    del files["media/images/big.png"]
    cut_url, _ = make_repo(tmp_path, "cutlass", files=files)
    cccl_url, _ = make_repo(tmp_path, "cccl")
    url, commit = _super(tmp_path, cut_url, cccl_url)
    fork = _fork({"url": url, "commit": commit})                       # cccl whole, cutlass sparse
    ctx, step, result = _fetch(tmp_path, dataclasses.replace(fork, sparse={}))
    root = Path(result.forks["fi"].path)
    sub, cccl = root / "3rdparty/cutlass", root / "3rdparty/cccl"
    exclude = Path(fixture_git("-C", str(sub), "rev-parse", "--absolute-git-dir").strip()) / "info" / "exclude"
    exclude.write_text("build/\n")
    (sub / "build").mkdir()
    (sub / "build" / "notes.txt").write_text("mine\n")
    with pytest.raises(FetchError) as refused:
        _fetch(tmp_path, fork)
    assert "holds files of yours" in str(refused.value) and (sub / "build" / "notes.txt").is_file()
    shutil.rmtree(sub)                                        # as the refusal says
    if then == "fork files":
        mine, edited = root / "mywork.py", root / ".gitmodules"
    elif then == "other submodule":
        mine, edited = cccl / "mywork.py", next(p for p in cccl.rglob("*.py") if ".git" not in p.parts)
    else:
        mine, edited = root / "mywork.py", root / ".gitmodules"
    mine.write_text("work\n")
    edited.write_text(edited.read_text() + "# my edit\n")
    if then == "fork commit":
        fixture_git("-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qam", "wip")
    with pytest.raises(FetchError) as again:
        _fetch(tmp_path, fork)
    assert "local changes" in str(again.value), str(again.value)
    assert mine.read_text() == "work\n" and edited.read_text().endswith("# my edit\n")
