"""Submodules: per-fork selection, shallow fetch at the recorded commit, no partial packs left
after a failed fetch, and a message that tells a damaged remote from an unreachable one.

Real git throughout: bare origins made by fixtures, a damaged origin made by deleting one
blob from its object store, a loopback port with nothing listening for the network case.
"""

from __future__ import annotations

import hashlib
import shutil
import socket
import subprocess
from pathlib import Path

import git
import pytest

from october.installer.core.errors import FetchError
from october.installer.core.runner import Runner
from october.installer.engine import run_pipeline
from october.installer.git.diagnose import diagnose, remove_partial_objects
from october.installer.git.mirror import ensure_commit, mirror_path, open_mirror
from october.installer.steps.fetch import FetchStep
from tests.fixtures.fetchctx import fork_use, make_ctx, make_recipe
from tests.fixtures.gitrepos import bare_path, drop_blob, make_repo
from tests.fixtures.gitrepos import git as fixture_git


def _super_with(tmp: Path, subs: dict[str, str]) -> tuple[str, str, dict[str, str]]:
    """A bare super repo whose submodules at ``path -> sub URL`` record each sub's tip.
    Returns (super URL, super commit, path -> recorded commit)."""
    url, _ = make_repo(tmp, "super")
    work = tmp / "work-super"
    fixture_git("clone", "--quiet", str(bare_path(url)), str(work))
    recorded: dict[str, str] = {}
    text = ""
    for path, sub_url in subs.items():
        commit = fixture_git("ls-remote", str(bare_path(sub_url)), "refs/heads/main").split()[0]
        recorded[path] = commit
        text += f"[submodule \"{path}\"]\n\tpath = {path}\n\turl = {sub_url}\n"
        fixture_git("update-index", "--add", "--cacheinfo", f"160000,{commit},{path}", cwd=work)
    (work / ".gitmodules").write_text(text, encoding="utf-8")
    fixture_git("add", ".gitmodules", cwd=work)
    fixture_git("commit", "--quiet", "-m", "submodules", cwd=work)
    fixture_git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=work)
    return url, fixture_git("rev-parse", "HEAD", cwd=work), recorded


def _damaged_repo(tmp: Path, name: str, files: int = 150) -> tuple[str, str]:
    """A bare repo with more objects than git unpacks loose (so the fetch writes a pack) whose
    one blob is deleted: the remote answers, then cannot send a complete object set."""
    files_ = {f"f{i:03d}.txt": "".join(hashlib.sha256(f"{i}.{j}".encode()).hexdigest() for j in range(40))
              for i in range(files)}
    url, ids = make_repo(tmp, name, files=files_)
    drop_blob(bare_path(url), ids[0], "f077.txt")
    return url, ids[0]


def _leftovers(repo: Path) -> list[str]:
    pack = repo / "objects" / "pack"
    return sorted(p.name for p in pack.iterdir() if p.name.startswith("tmp_")
                  or (p.suffix == ".pack" and not p.with_suffix(".idx").exists())) if pack.is_dir() else []


def test_only_selected_submodules_are_fetched_shallow_and_recorded(tmp_path: Path) -> None:
    cccl_url, cccl_ids = make_repo(tmp_path, "cccl", commits=3)
    spdlog_url, _ = make_repo(tmp_path, "spdlog", commits=2)
    url, commit, recorded = _super_with(tmp_path, {"3rdparty/cccl": cccl_url, "3rdparty/spdlog": spdlog_url})
    fork = fork_use("fi", url, commit)
    fork = type(fork)(**{**fork.__dict__, "submodule_paths": ("3rdparty/cccl",)})
    cache, stack = tmp_path / "cache", tmp_path / "stack"
    [rec] = run_pipeline([FetchStep()], make_ctx(stack, make_recipe([fork]), cache))
    out = rec.outputs["forks"]["fi"]
    assert out["submodules"] == {"3rdparty/cccl": recorded["3rdparty/cccl"]} == {"3rdparty/cccl": cccl_ids[-1]}
    assert out["submodule_paths"] == ["3rdparty/cccl"]
    src = stack / "src" / "fi"
    assert (src / "3rdparty" / "cccl" / "cccl" / "__init__.py").exists()
    assert not any((src / "3rdparty" / "spdlog").iterdir())          # left out: an empty gitlink dir
    assert not mirror_path(cache, spdlog_url).exists(), "an unselected submodule must not be fetched"
    # the submodule's mirror holds its recorded commit only (depth 1), and so does the checkout
    sub_mirror = mirror_path(cache, cccl_url)
    assert (sub_mirror / "shallow").read_text().split() == [cccl_ids[-1]]
    with git.Repo(sub_mirror) as repo:
        assert repo.git.rev_list("--all").split() == [cccl_ids[-1]]
    with git.Repo(src / "3rdparty" / "cccl") as repo:
        assert repo.git.rev_list("HEAD").split() == [cccl_ids[-1]]
    # a no-op re-run verifies and stays cached; a selected submodule moved by hand is caught
    [again] = run_pipeline([FetchStep()], make_ctx(stack, make_recipe([fork]), cache))
    assert again.status == "cached"
    shutil.rmtree(src / "3rdparty" / "cccl")
    (src / "3rdparty" / "cccl").mkdir()
    assert FetchStep().verify(make_ctx(stack, make_recipe([fork]), cache), rec.result) is not None


def test_a_selected_path_that_is_no_submodule_is_refused(tmp_path: Path) -> None:
    cccl_url, _ = make_repo(tmp_path, "cccl")
    url, commit, _ = _super_with(tmp_path, {"3rdparty/cccl": cccl_url})
    fork = fork_use("fi", url, commit)
    fork = type(fork)(**{**fork.__dict__, "submodule_paths": ("3rdparty/cutlass",)})
    with pytest.raises(FetchError, match="3rdparty/cutlass") as err:
        run_pipeline([FetchStep()], make_ctx(tmp_path / "stack", make_recipe([fork]), tmp_path / "cache"))
    assert "3rdparty/cccl" in str(err.value) and "submodules = [...]" in str(err.value)


def test_a_damaged_submodule_remote_fails_closed_naming_it_and_leaves_no_partial_pack(tmp_path: Path) -> None:
    good_url, _ = make_repo(tmp_path, "cccl")
    bad_url, _ = _damaged_repo(tmp_path, "cutlass")
    url, commit, _ = _super_with(tmp_path, {"3rdparty/cccl": good_url, "3rdparty/cutlass": bad_url})
    cache = tmp_path / "cache"
    # plant what a killed earlier fetch leaves: a temporary pack and a pack without its index
    mirror = open_mirror(cache, bad_url, "planted")
    (mirror.path / "objects" / "pack" / "tmp_pack_Planted").write_bytes(b"PACK" + b"\0" * 4096)
    (mirror.path / "objects" / "pack" / ("pack-" + "1" * 40 + ".pack")).write_bytes(b"PACK" + b"\0" * 64)
    (mirror.path / "shallow.lock").write_text("")
    with pytest.raises(FetchError) as err:
        run_pipeline([FetchStep()], make_ctx(tmp_path / "stack", make_recipe([fork_use("fi", url, commit)]), cache))
    msg = str(err.value)
    assert "submodule 3rdparty/cutlass" in msg and "damaged or incomplete" in msg and "retrying will not help" in msg
    assert "network" not in msg.split("->")[0], msg
    assert _leftovers(mirror.path) == [], "a failed fetch must leave no partial pack in the shared mirror"
    assert not (mirror.path / "shallow.lock").exists()


def test_the_fetch_itself_leaves_no_tmp_pack_without_the_cleanup(tmp_path: Path) -> None:
    """Proves the planted remote really makes git leave a tmp_pack_* (so the test above can fail)."""
    bad_url, commit = _damaged_repo(tmp_path, "cutlass")
    target = tmp_path / "plain.git"
    fixture_git("init", "--quiet", "--bare", str(target))
    subprocess.run(["git", "-C", str(target), "fetch", "--depth=1", bad_url, f"+{commit}:refs/x"],
                   capture_output=True, check=False)
    assert any(p.name.startswith("tmp_pack_") for p in (target / "objects" / "pack").iterdir())
    assert remove_partial_objects(target) and _leftovers(target) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_network_failure_and_missing_repository_are_told_apart_from_damage(tmp_path: Path) -> None:
    runner = Runner(tmp_path / "logs")
    commit = "a" * 40
    unreachable = open_mirror(tmp_path / "cache", f"http://127.0.0.1:{_free_port()}/x/y.git", "net")
    with pytest.raises(FetchError) as net:
        ensure_commit(runner, "fetch", unreachable, commit, shallow=True)
    assert "could not be reached" in str(net.value) and "damaged" not in str(net.value)
    missing = open_mirror(tmp_path / "cache", (tmp_path / "nowhere.git").as_uri(), "gone")
    with pytest.raises(FetchError) as gone:
        ensure_commit(runner, "fetch", missing, commit)
    assert "no repository at" in str(gone.value) and "damaged" not in str(gone.value)
    # a reachable, healthy remote that lacks the commit: incomplete for this pin (not our ref)
    url, _ = make_repo(tmp_path, "healthy")
    with pytest.raises(FetchError) as absent:
        ensure_commit(runner, "fetch", open_mirror(tmp_path / "cache", url, "sub"), commit, shallow=True)
    assert "damaged or incomplete" in str(absent.value) and "not our ref" in str(absent.value)


@pytest.mark.parametrize(("text", "cause"), [
    ("error: Could not read 47d5dc15\nfatal: did not send all necessary objects", "remote-damaged"),
    ("remote: fatal: unable to read 47d5dc15fa12a7059098cd0d89a333f335dcf29d\nfatal: early EOF", "remote-damaged"),
    ("fatal: remote error: upload-pack: not our ref 0000000000000000000000000000000000000001", "remote-damaged"),
    ("fatal: unable to access 'https://github.com/x/y.git/': Could not resolve host: github.com", "network"),
    ("fatal: unable to access 'https://h/x.git/': Failed to connect to h port 443 after 2 ms: Couldn't connect to server", "network"),
    ("fatal: unable to access 'https://h/x.git/': Operation timed out after 300000 milliseconds", "network"),
    ("fatal: Authentication failed for 'https://h/x.git/'", "network"),
    ("fatal: '/m/github.com/gabime/spdlog.git' does not appear to be a git repository", "not-found"),
    ("something new", "unknown"),
    # git 2.39's words for a remote (file://) another user owns, which "check the URL and your network" misread
    ("fatal: detected dubious ownership in repository at '/srv/world/git/gamma.git'\nTo add an exception for this "
     "directory, call:\n\n\tgit config --global --add safe.directory /srv/world/git/gamma.git\nfatal: Could not read "
     "from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists.",
     "ownership"),
])
def test_diagnosis_of_git_messages(text: str, cause: str) -> None:
    assert diagnose(text, what="x", url="u").cause == cause
