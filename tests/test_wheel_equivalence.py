"""vllm/_version.py parsing and the source-equivalence check, on real git repos made by the fixtures.

Nothing is mocked: the upstream is a git repository reached by a file:// URL (a real transfer),
the fork clone is a real clone of its main branch, and the fork's shared mirror is made by
:mod:`october.installer.git.mirror` in a temporary cache dir.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from october.installer.core.errors import WheelError
from october.installer.core.runner import Runner
from october.installer.git.equivalence import check_source_equivalence
from october.installer.git.mirror import mirror_path
from october.installer.recipe import DEFAULT_COMPILED_SOURCES
from october.installer.wheels.version_info import parse_version_file, read_version_info
from tests.fixtures.base_wheels import GIT_ENV, Histories, git, make_histories, version_py, vllm_wheel

PATHS = DEFAULT_COMPILED_SOURCES

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


# ------------------------------------------------------------------ equivalence


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> Histories:
    return make_histories(tmp_path_factory.mktemp("git"))


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    return Runner(tmp_path / "logs")


def is_ancestor(repo: Path, a: str, b: str) -> bool:
    env = dict(os.environ, **GIT_ENV)
    return subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", a, b], env=env).returncode == 0


def refs(repo: Path) -> str:
    return git("for-each-ref", "--format=%(refname)", cwd=repo)


def check(runner: Runner, h: Histories, source: str, fork: str, cache: Path, **kw: object):
    args: dict[str, object] = dict(paths=PATHS, upstream=h.upstream_url, cache_dir=cache,
                                   fork_url=h.clone.as_uri(), wheel_version="0.18.0")
    args.update(kw)
    return check_source_equivalence(runner, h.clone, source, fork, **args)  # type: ignore[arg-type]


def test_release_commit_outside_the_fork_history_passes_on_equal_trees(tmp_path: Path, runner: Runner) -> None:
    """The real case: vLLM's release commit sits on a release branch the fork (branched from main) lacks."""
    h = make_histories(tmp_path / "g")
    git("fetch", "-q", h.clone.as_uri(), "fork", cwd=h.upstream)
    assert not is_ancestor(h.upstream, h.release, h.fork) and is_ancestor(h.upstream, h.base, h.fork)
    assert git("cat-file", "-t", h.release, cwd=h.clone, check=False) != "commit"       # the fork lacks it
    got = check(runner, h, h.release[:9], h.fork, tmp_path / "cache")
    assert (got.source_commit, got.fork_commit, got.compared_in, got.fetched_upstream) == \
        (h.release, h.fork, "fork-mirror", True)
    want = {p: git("rev-parse", f"{h.release}:{p}", cwd=h.upstream) for p in PATHS}
    assert {p.path: p.id for p in got.paths} == want
    assert [p.kind for p in got.paths] == ["tree", "blob", "tree"]
    assert got.as_json()["paths"][0] == {"path": "csrc", "type": "tree", "id": want["csrc"]}
    # fetched into the fork's shared mirror, by the release tag (no other upstream ref), and pinned there
    mirror = mirror_path(tmp_path / "cache", h.clone.as_uri())
    assert "refs/october/upstream/tags/v0.18.0" in refs(mirror)
    assert "refs/october/upstream/heads/" not in refs(mirror)
    assert f"refs/october/pins/{h.release}" in refs(mirror)
    # the fork clone itself is untouched
    assert git("status", "--porcelain", cwd=h.clone) == "" and git("rev-parse", "HEAD", cwd=h.clone) == h.fork
    assert git("cat-file", "-t", h.release, cwd=h.clone, check=False) != "commit" and "october" not in refs(h.clone)
    log = runner.log_path("wheel").read_text()
    assert "fetch --no-tags --quiet" in log and "ls-tree" in log


def test_commit_in_the_clone_is_compared_there_without_network(hist: Histories, runner: Runner,
                                                               tmp_path: Path) -> None:
    got = check(runner, hist, hist.base[:9], hist.fork, tmp_path / "cache", upstream="file:///nowhere")
    assert (got.compared_in, got.fetched_upstream, got.source_commit) == ("fork-clone", False, hist.base)
    assert not (tmp_path / "cache").exists()


def test_a_changed_csrc_file_fails_naming_it(tmp_path: Path, runner: Runner) -> None:
    h = make_histories(tmp_path / "g")
    with pytest.raises(WheelError) as err:
        check(runner, h, h.release[:9], h.fork_csrc, tmp_path / "cache")
    msg = str(err.value)
    assert "the precompiled path is wrong for the vllm fork" in msg
    assert "csrc/cache_kernels.cu (changed)" in msg and "1 file(s)" in msg
    assert "paged_attention" not in msg and "CMakeLists.txt" not in msg.split("Expected")[0]
    assert h.release in msg and h.fork_csrc in msg and "from source" in msg


def test_upstream_kernel_change_after_the_release_fails(hist: Histories, runner: Runner, tmp_path: Path) -> None:
    """The wheel is from a later upstream main whose kernels the fork does not have."""
    with pytest.raises(WheelError) as err:
        check(runner, hist, hist.kernel, hist.fork, tmp_path / "cache")
    msg = str(err.value)
    assert "csrc/attention/paged_attention_v2.cu (changed)" in msg
    # a full id is fetched by id first
    assert f"refs/october/upstream/wheel-source/{hist.kernel}" in refs(mirror_path(tmp_path / "cache",
                                                                                   hist.clone.as_uri()))


def test_added_and_removed_files_are_named(tmp_path: Path, runner: Runner) -> None:
    h = make_histories(tmp_path / "g")
    git("rm", "-q", "cmake/utils.cmake", cwd=h.clone)
    (h.clone / "csrc" / "new_kernel.cu").write_text("// new\n")
    git("add", "csrc/new_kernel.cu", cwd=h.clone)
    git("commit", "-q", "-m", "fork: kernels", cwd=h.clone)
    changed = git("rev-parse", "HEAD", cwd=h.clone)
    with pytest.raises(WheelError) as err:
        check(runner, h, h.base, changed, tmp_path / "cache")
    msg = str(err.value)
    assert "cmake/utils.cmake (only in the wheel's source)" in msg and "csrc/new_kernel.cu (only in the fork)" in msg


def test_compared_paths_are_recipe_data(hist: Histories, runner: Runner, tmp_path: Path) -> None:
    """Comparing only cmake/ (a recipe's choice) passes where csrc/ differs; a path absent at both is recorded."""
    got = check(runner, hist, hist.kernel, hist.fork, tmp_path / "cache",
                paths=("cmake", "cmake/external_projects/vllm_flash_attn.cmake", "build_tools"))
    assert [(p.path, p.kind) for p in got.paths] == [("cmake", "tree"),
                                                     ("cmake/external_projects/vllm_flash_attn.cmake", "blob"),
                                                     ("build_tools", None)]


def test_no_compiled_sources_in_the_fork_fails_closed(hist: Histories, runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(WheelError) as err:
        check(runner, hist, hist.base, hist.fork, tmp_path / "cache", paths=("kernels",))
    assert "none of the compiled-source paths exist" in str(err.value)


def test_missing_everywhere_names_upstream(tmp_path: Path, runner: Runner) -> None:
    h = make_histories(tmp_path / "g")
    with pytest.raises(WheelError) as err:
        check(runner, h, "deadbeef1", h.fork, tmp_path / "cache")
    msg = str(err.value)
    assert "deadbeef1" in msg and "nor at its upstream" in msg and h.upstream_url in msg
    # the tag, then every branch and tag were tried
    assert "refs/october/upstream/heads/releases/v0.18.0" in refs(mirror_path(tmp_path / "cache", h.clone.as_uri()))


def test_unreachable_upstream(hist: Histories, runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(WheelError) as err:
        check(runner, hist, hist.release[:9], hist.fork, tmp_path / "cache",
              upstream=(tmp_path / "gone.git").as_uri())
    msg = str(err.value)
    assert "could not be fetched" in msg and "git fetch failed" in msg and "network" in msg


def test_no_upstream_url(hist: Histories, runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(WheelError) as err:
        check(runner, hist, hist.release[:9], hist.fork, tmp_path / "cache", upstream=None)
    assert "no upstream URL" in str(err.value)


def test_fork_commit_missing_from_its_clone(hist: Histories, runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(WheelError) as err:
        check(runner, hist, hist.base, "f" * 40, tmp_path / "cache")
    assert "does not contain its own pinned commit" in str(err.value)


def test_non_hex_commit_is_refused_before_git(hist: Histories, runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(WheelError) as err:
        check(runner, hist, "--upload-pack=evil", hist.fork, tmp_path / "cache")
    assert "not a commit id" in str(err.value)
    assert not runner.log_path("wheel").exists()


# ------------------------------------------------------------------ recipe data


def _recipe_with(tmp_path: Path, line: str):
    from october.installer.recipe import load_recipe
    from tests.fixtures.root import PROJECT_ROOT
    text = (PROJECT_ROOT / "recipes" / "current.toml").read_text()
    path = tmp_path / "r.toml"
    path.write_text(text.replace('requires_torch = "2.10.0"\n', f'requires_torch = "2.10.0"\n{line}\n', 1))
    return load_recipe(str(path))


def test_compiled_sources_default_and_override(tmp_path: Path) -> None:
    from october.installer.recipe import load_recipe
    default = load_recipe("current").wheel
    assert default is not None and default.compiled_sources == ("csrc", "CMakeLists.txt", "cmake")
    got = _recipe_with(tmp_path, 'compiled_sources = ["csrc", "cmake/external_projects"]')
    assert got.wheel.compiled_sources == ("csrc", "cmake/external_projects")  # type: ignore[union-attr]


@pytest.mark.parametrize("value", ["[]", '["../csrc"]', '["/etc"]', '["csrc/"]', '"csrc"', "[1]"])
def test_bad_compiled_sources_are_refused(tmp_path: Path, value: str) -> None:
    from october.installer.core.errors import RecipeError
    with pytest.raises(RecipeError) as err:
        _recipe_with(tmp_path, f"compiled_sources = {value}")
    assert "compiled_sources" in str(err.value)


def test_fork_commit_the_mirror_cannot_get_fails(tmp_path: Path, runner: Runner) -> None:
    """The clone has the fork commit but its mirror neither has it nor can fetch it (fork URL gone)."""
    h = make_histories(tmp_path / "g")
    with pytest.raises(WheelError) as err:
        check(runner, h, h.release[:9], h.fork, tmp_path / "cache", fork_url=(tmp_path / "gone.git").as_uri())
    msg = str(err.value)
    assert f"fork commit {h.fork[:12]} is not in the mirror" in msg and "re-run october_setup" in msg
