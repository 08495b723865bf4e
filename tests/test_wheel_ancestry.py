"""vllm/_version.py parsing and the ancestry check, on real git repos made by the fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from installer.errors import WheelError
from installer.runner import Runner
from installer.wheels.ancestry import check_ancestry
from installer.wheels.version_info import parse_version_file, read_version_info
from tests.fixtures.base_wheels import Histories, git, make_histories, version_py, vllm_wheel

# ------------------------------------------------------------------- version file


def test_setuptools_scm_file_gives_the_commit_without_its_g_prefix() -> None:
    info = parse_version_file(version_py("0.18.0", "gbcf2be961"))
    assert (info.version, info.commit, info.raw_commit, info.where) == ("0.18.0", "bcf2be961", "gbcf2be961",
                                                                        "commit_id")


def test_older_template_names_the_node_in_a_dev_version() -> None:
    src = "version = '0.18.1.dev3+gbcf2be961.d20260101'\n__version__ = version\n"
    info = parse_version_file(src)
    assert (info.commit, info.where) == ("bcf2be961", "version")


def test_release_without_commit_id_has_none() -> None:
    info = parse_version_file(version_py("0.18.0", None))
    assert (info.version, info.commit, info.where) == ("0.18.0", None, "none")


def test_version_file_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    src = f"open({str(marker)!r}, 'w').write('x')\n__commit_id__ = commit_id = 'g0123456789'\n"
    assert parse_version_file(src).commit == "0123456789" and not marker.exists()


def test_broken_version_file_is_reported() -> None:
    with pytest.raises(WheelError) as err:
        parse_version_file("__version__ = (\n")
    assert "not valid Python" in str(err.value)


def test_wheel_without_version_file(tmp_path: Path) -> None:
    whl = vllm_wheel(tmp_path)
    import zipfile
    bare = tmp_path / "bare" / whl.name
    bare.parent.mkdir()
    with zipfile.ZipFile(whl) as src, zipfile.ZipFile(bare, "w") as dst:
        for item in src.infolist():
            if item.filename != "vllm/_version.py":
                dst.writestr(item, src.read(item))
    assert read_version_info(whl).commit == "bcf2be961"
    with pytest.raises(WheelError) as err:
        read_version_info(bare)
    assert "has no vllm/_version.py" in str(err.value)


# ----------------------------------------------------------------------- ancestry


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> Histories:
    return make_histories(tmp_path_factory.mktemp("git"))


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    return Runner(tmp_path / "logs")


def test_abbreviated_ancestor_resolves_to_the_full_id(hist: Histories, runner: Runner) -> None:
    got = check_ancestry(runner, hist.clone, hist.base[:9], hist.fork, upstream=str(hist.upstream))
    assert (got.source_commit, got.fork_commit, got.fetched_upstream) == (hist.base, hist.fork, False)
    assert "merge-base --is-ancestor" in runner.log_path("wheel").read_text()


def test_commit_only_upstream_is_fetched_then_refused(tmp_path: Path, runner: Runner) -> None:
    h = make_histories(tmp_path / "g")
    assert git("cat-file", "-t", h.side, cwd=h.clone, check=False) != "commit"          # not there yet
    with pytest.raises(WheelError) as err:
        check_ancestry(runner, h.clone, h.side[:9], h.fork, upstream=str(h.upstream))
    msg = str(err.value)
    assert f"built from {h.side[:12]}, which is not an ancestor" in msg and h.fork in msg
    assert "release wheel" in msg
    assert git("rev-parse", "--verify", f"{h.side}^{{commit}}", cwd=h.clone) == h.side   # fetched
    assert "refs/october/upstream/heads/releases/v0.18" in git("for-each-ref", cwd=h.clone)
    assert git("status", "--porcelain", cwd=h.clone) == ""                               # tree untouched
    assert git("rev-parse", "HEAD", cwd=h.clone) == h.fork


def test_full_id_is_fetched_by_id(tmp_path: Path, runner: Runner) -> None:
    h = make_histories(tmp_path / "g")
    with pytest.raises(WheelError):
        check_ancestry(runner, h.clone, h.side, h.fork, upstream=str(h.upstream))
    assert "refs/october/upstream/wheel-source" in git("for-each-ref", cwd=h.clone)


def test_unknown_commit_names_both_places(hist: Histories, runner: Runner) -> None:
    with pytest.raises(WheelError) as err:
        check_ancestry(runner, hist.clone, "deadbeef1", hist.fork, upstream=str(hist.upstream))
    msg = str(err.value)
    assert "deadbeef1" in msg and "or upstream" in msg and hist.fork in msg


def test_unknown_commit_without_upstream(hist: Histories, runner: Runner) -> None:
    with pytest.raises(WheelError) as err:
        check_ancestry(runner, hist.clone, "deadbeef1", hist.fork, upstream=None)
    assert "no upstream URL" in str(err.value)


def test_fork_commit_missing_from_its_clone(hist: Histories, runner: Runner) -> None:
    with pytest.raises(WheelError) as err:
        check_ancestry(runner, hist.clone, hist.base, "f" * 40, upstream=None)
    assert "does not contain its own pinned commit" in str(err.value)


def test_non_hex_commit_is_refused_before_git(hist: Histories, runner: Runner) -> None:
    with pytest.raises(WheelError) as err:
        check_ancestry(runner, hist.clone, "--upload-pack=evil", hist.fork, upstream=None)
    assert "not a commit id" in str(err.value)
