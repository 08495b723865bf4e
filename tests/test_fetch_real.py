"""Real tier: the fetch step on the real FlashInfer 2f3f0f6d (PR #3812 head, the 20260702 pin)
and the real CCCL it records, from ../shared/real-forks, through git's url.insteadOf as a user
without GitHub access would point git at a copy.  Commit ids are git's own object hashes, so a
checkout at the pinned ids is the real source."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import git
import pytest

from october.installer.core.errors import FetchError
from october.installer.engine import run_pipeline
from october.installer.git import clonecheck
from october.installer.git.clonecheck import submodule_heads, submodule_states
from october.installer.git.mirror import mirror_path
from october.installer.recipe import load_recipe
from october.installer.steps.fetch import FetchStep
from tests.fixtures.fetchctx import make_ctx, make_recipe

pytestmark = pytest.mark.real

FLASHINFER = "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"
CCCL = "876867684f7fac130e0f5911236e0a92a970d4fd"
SPDLOG = "c3aed4b6"      # recorded gitlink prefix; no reachable copy has it


def _rewrite(monkeypatch: pytest.MonkeyPatch, mirror: Path) -> None:
    """git config through the environment (as ``git -c`` would): the fork URL and every
    github.com URL (submodules) resolve to the real copies."""
    fi = mirror / "github.com" / "flashinfer-ai" / "flashinfer.git"
    pairs = [(f"url.{fi.as_uri()}.insteadOf", "https://github.com/mcgrof/flashinfer.git"),
             (f"url.{(mirror / 'github.com').as_uri()}/.insteadOf", "https://github.com/")]
    monkeypatch.setenv("GIT_CONFIG_COUNT", str(len(pairs)))
    for i, (key, value) in enumerate(pairs):
        monkeypatch.setenv(f"GIT_CONFIG_KEY_{i}", key)
        monkeypatch.setenv(f"GIT_CONFIG_VALUE_{i}", value)


def _no_git_submodule(path: Path) -> list:
    raise AssertionError(f"`git submodule status` was run in {path}")


def _leftovers(cache: Path) -> list[str]:
    return [str(p) for p in (cache / "git").rglob("*") if p.name.startswith("tmp_")
            or (p.suffix == ".pack" and not p.with_suffix(".idx").exists())]


def test_real_flashinfer_with_its_selected_cccl(real_mirror: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _rewrite(monkeypatch, real_mirror)
    fork = load_recipe("20260702").fork("flashinfer")
    assert fork.pin.commit == FLASHINFER and fork.submodule_paths == ("3rdparty/cccl",)
    cache, stack = tmp_path / "cache", tmp_path / "stack"
    [rec] = run_pipeline([FetchStep()], make_ctx(stack, make_recipe([fork]), cache))
    out = rec.outputs["forks"]["flashinfer"]
    assert out["commit"] == FLASHINFER and out["submodules"] == {"3rdparty/cccl": CCCL}
    src = stack / "src" / "flashinfer"
    with git.Repo(src) as repo:
        assert repo.head.commit.hexsha == FLASHINFER
        assert repo.git.rev_parse("HEAD:3rdparty/cccl") == CCCL      # the gitlink the fork records
    with git.Repo(src / "3rdparty" / "cccl") as repo:
        assert repo.head.commit.hexsha == CCCL
    # the commit's objects hash to its id: git verifies the whole tree
    subprocess.run(["git", "-C", str(src), "fsck", "--connectivity-only", "--no-dangling"], check=True,
                   capture_output=True)
    assert (src / "3rdparty" / "cccl" / "libcudacxx" / "include").is_dir()
    assert not any((src / "3rdparty" / "cutlass").iterdir()) and not any((src / "3rdparty" / "spdlog").iterdir())
    assert not mirror_path(cache, "https://github.com/NVIDIA/cutlass.git").exists()
    assert _leftovers(cache) == []
    # the fetch step's reader of submodule states says what `git submodule status --recursive` says
    # (cccl checked out, cutlass, spdlog and the others not), on the real fork: it fails here when they drift apart
    everything = submodule_states(src)
    assert {s.path: s.flag for s in everything if s.flag != "-"} == {"3rdparty/cccl": " "}
    assert {"3rdparty/cutlass", "3rdparty/spdlog"} <= {s.path for s in everything if s.flag == "-"}
    monkeypatch.setattr(clonecheck, "submodule_states", _no_git_submodule)     # read, not asked of git
    assert submodule_heads(src) == everything
    assert submodule_heads(src, ("3rdparty/cccl",)) == [s for s in everything if s.path == "3rdparty/cccl"]
    [again] = run_pipeline([FetchStep()], make_ctx(stack, make_recipe([fork]), cache))
    assert again.status == "cached"


def test_a_missing_real_submodule_fails_closed_naming_it(real_mirror: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _rewrite(monkeypatch, real_mirror)
    fork = dataclasses.replace(load_recipe("20260702").fork("flashinfer"),
                               submodule_paths=("3rdparty/cccl", "3rdparty/spdlog"))
    cache, stack = tmp_path / "cache", tmp_path / "stack"
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], make_ctx(stack, make_recipe([fork]), cache))
    msg = str(err.value)
    assert f"submodule 3rdparty/spdlog @ {SPDLOG}" in msg and "gabime/spdlog" in msg
    assert "no repository at" in msg and "leave it out of the fork entry's submodules" in msg
    assert not (stack / ".state" / "fetch.json").exists(), "no done-marker for a failed fetch"
    assert _leftovers(cache) == []


def test_real_flashinfer_through_a_kit_offline(real_mirror: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The git half of a kit for the 20260702 FlashInfer: made from the real copies, then used with
    git allowed local files only and no rewriting to the real copies (only the kit's own mapping)."""
    from october.installer.core.runner import Runner
    from october.installer.kit.gitcopy import KitRepos
    from october.installer.kit.use import Kit

    _rewrite(monkeypatch, real_mirror)
    fork = load_recipe("20260702").fork("flashinfer")
    kit_dir = tmp_path / "kit"
    repos = KitRepos(Runner(tmp_path / "logs"), "kit", tmp_path / "cache-kit", kit_dir, lambda _: None)
    assert repos.add_fork(fork) == FLASHINFER
    made = {c.owner: c for c in repos.repos.values()}
    assert set(made) == {"flashinfer", "flashinfer/3rdparty/cccl"}
    assert made["flashinfer/3rdparty/cccl"].commits == [CCCL]
    assert made["flashinfer/3rdparty/cccl"].url == "https://github.com/NVIDIA/cccl.git"
    size = sum(p.stat().st_size for p in kit_dir.rglob("*") if p.is_file())
    print(f"real FlashInfer 2f3f0f6d + CCCL kit repos: {size / 1e6:.1f} MB")

    for key in ("GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "GIT_CONFIG_KEY_1", "GIT_CONFIG_VALUE_1"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("GIT_ALLOW_PROTOCOL", "file")
    kit = Kit(root=kit_dir, manifest={"repos": [c.as_json() for c in repos.repos.values()]},
              repos={str(c.as_json()["key"]): kit_dir / c.path for c in repos.repos.values()})
    ctx = make_ctx(tmp_path / "stack", make_recipe([fork]), tmp_path / "cache-offline")
    ctx = dataclasses.replace(ctx, options=dataclasses.replace(ctx.options, kit=kit))
    [rec] = run_pipeline([FetchStep()], ctx)
    out = rec.outputs["forks"]["flashinfer"]
    assert out["commit"] == FLASHINFER and out["submodules"] == {"3rdparty/cccl": CCCL}
    assert out["url"] == "https://github.com/mcgrof/flashinfer.git"     # recorded as online, not the kit path
    subprocess.run(["git", "-C", str(tmp_path / "stack" / "src" / "flashinfer"), "fsck", "--connectivity-only"],
                   check=True, capture_output=True)


def test_real_kit_for_the_flashinfer_fork_with_system_torch(real_mirror: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole kit, real parts only: the real FlashInfer 2f3f0f6d + CCCL from ../shared/real-forks and
    the wheels its JIT import needs beside a system torch (apache-tvm-ffi and the build requirements),
    resolved and downloaded from PyPI by the kit's own code; then verified as an install would."""
    from october.installer.kit.make import KitOptions, make_kit
    from october.installer.kit.use import open_kit

    _rewrite(monkeypatch, real_mirror)
    base = load_recipe("20260702")
    recipe = dataclasses.replace(base, name="flashinfer-real-kit", forks=(base.fork("flashinfer"),), wheel=None,
                                 torch=dataclasses.replace(base.torch, version="2.11.0+cu130", index_url=None,
                                                           source="system"),
                                 build_requirements=("packaging", "apache-tvm-ffi>=0.1.6,!=0.1.8,<0.2"))
    kit = tmp_path / "kit"
    make_kit(KitOptions(recipe=recipe, out=kit, cache_dir=tmp_path / "cache"))
    doc = open_kit(kit, recipe).manifest
    assert doc["forks"] == {"flashinfer": FLASHINFER} and doc["torch"]["from_system"] is True
    assert {r["owner"]: r["commits"] for r in doc["repos"]} == {"flashinfer": [FLASHINFER],
                                                                "flashinfer/3rdparty/cccl": [CCCL]}
    names = sorted(w["package"] for w in doc["wheels"])
    assert "apache-tvm-ffi" in names and "packaging" in names and "torch" not in names
    tvm = next(w for w in doc["wheels"] if w["package"] == "apache-tvm-ffi")
    assert "cp312" in tvm["filename"] and "x86_64" in tvm["filename"] and tvm["url"].startswith("https://")
    print(f"kit: {doc['size_bytes'] / 1e6:.1f} MB, wheels {names}")


def test_a_kit_that_needs_a_missing_real_submodule_fails_closed(real_mirror: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from october.installer.core.runner import Runner
    from october.installer.kit.gitcopy import KitRepos

    _rewrite(monkeypatch, real_mirror)
    fork = dataclasses.replace(load_recipe("20260702").fork("flashinfer"),
                               submodule_paths=("3rdparty/cccl", "3rdparty/cutlass"))
    cache = tmp_path / "cache"
    with pytest.raises(FetchError) as err:
        KitRepos(Runner(tmp_path / "logs"), "kit", cache, tmp_path / "kit", lambda _: None).add_fork(fork)
    msg = str(err.value)
    assert "submodule 3rdparty/cutlass" in msg and "NVIDIA/cutlass" in msg and "for the kit" in msg
    assert _leftovers(cache) == []


def test_a_hidden_edit_in_real_cccl_survives_a_switch_to_a_sparse_cccl(real_mirror: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Review finding (data loss): an edit in the real cccl hidden by ``git update-index --skip-worktree`` was
    not seen by the re-run, and a recipe that now wants cccl sparse cleared the submodule, edit and all.
    Now the re-run is refused (exit 8, the file named with its bit) and the edit is where the user left it."""
    import dataclasses

    from october.installer.core.errors import FetchError

    _rewrite(monkeypatch, real_mirror)
    whole = load_recipe("20260702").fork("flashinfer")
    sparse = dataclasses.replace(whole, sparse={"3rdparty/cccl": ("libcudacxx/include", "cub/cub")})
    cache, stack = tmp_path / "cache", tmp_path / "stack"
    run_pipeline([FetchStep()], make_ctx(stack, make_recipe([whole]), cache))
    sub = stack / "src" / "flashinfer" / "3rdparty" / "cccl"
    edited = "libcudacxx/include/cuda/std/version"
    subprocess.run(["git", "-C", str(sub), "update-index", "--skip-worktree", edited], check=True)
    (sub / edited).write_text("MY HIDDEN EDIT\n")
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], make_ctx(stack, make_recipe([sparse]), cache))
    assert err.value.exit_code == 8 and f"3rdparty/cccl/{edited} (skip-worktree)" in str(err.value)
    assert (sub / edited).read_text() == "MY HIDDEN EDIT\n"
    # undone, the switch goes ahead on the real sparse cccl, and the sparse checkout hides nothing
    subprocess.run(["git", "-C", str(sub), "update-index", "--no-skip-worktree", edited], check=True)
    subprocess.run(["git", "-C", str(sub), "checkout", "--", edited], check=True)
    [rec] = run_pipeline([FetchStep()], make_ctx(stack, make_recipe([sparse]), cache))
    assert rec.status == "ran"
    from october.installer.git.hidden import hidden_entries
    assert hidden_entries(stack / "src" / "flashinfer", ["3rdparty/cccl"]) == []
