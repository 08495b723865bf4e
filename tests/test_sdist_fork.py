"""Forks made from source distributions (issue 18): forks.toml pins, the materialised repository, the proof that
the base wheel is the sdist's release, and the install guards met on the way.  Real git, real tar.gz files made
here, real wheels, gcc-built shared objects; the sdist is placed in the cache where the download would put it
(the network is not reachable from unit tests); the real sdists run in tests/test_vllm_sdist_real.py."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from october.checks.probes import elf_symbols
from october.installer.core.errors import FetchError, InstallError, RecipeError, WheelError
from october.installer.core.runner import Runner
from october.installer.git.sdist import RECORD, _extract, materialise, repo_path
from october.installer.git.sdistmatch import blob_id, check_sdist_equivalence
from october.installer.install import overwritten
from october.installer.install.guards import _judge_static
from october.installer.install.plan import ForkSource, make_plan
from october.installer.recipe import SdistSource, load_forks
from october.installer.recipe import explain, spec
from october.installer.wheels.download import cache_path
from tests.fixtures import stack_forks as sf
from tests.fixtures.wheels import build_wheel

URL = "https://files.example.org/packages/aa/vllm-9.9.0.tar.gz"
FILES = {
    ".gitignore": "vllm/_version.py\n*.egg-info/\n",
    "setup.py": "print('setup')\n",
    "csrc/attn.cu": "// kernel\n",
    "vllm/__init__.py": "X = 1\n",
    "vllm/layer.py": "def f():\n    return 2\n",
    "vllm/_version.py": "__commit_id__: str | None\n__commit_id__ = commit_id = 'gabc1234def'\n",
    "vllm.egg-info/PKG-INFO": "Name: vllm\n",
    "tools/run.sh": "#!/bin/sh\n",
}


def _sdist(tmp: Path, files: dict[str, str] = FILES, *, uid: int = 1000) -> tuple[bytes, str]:
    buf = io.BytesIO()
    # gzip's header holds a time: fixed, so the same files give the same sdist bytes (and sha256)
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tf:
        for rel, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-9.9.0/{rel}")
            info.size, info.uid, info.gid, info.mtime = len(data), uid, uid, 1_700_000_000
            info.mode = 0o775 if rel.endswith(".sh") else 0o664
            tf.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return raw, hashlib.sha256(raw).hexdigest()


def _placed(cache: Path, files: dict[str, str] = FILES) -> SdistSource:
    raw, sha = _sdist(cache, files)
    path = cache_path(cache, sha, "vllm-9.9.0.tar.gz")
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    return SdistSource(url=URL, sha256=sha, version="9.9.0")


def _made(tmp: Path, name: str = "c") -> tuple[Path, SdistSource, str]:
    cache = tmp / name
    sdist = _placed(cache)
    with pytest.raises(FetchError) as err:
        materialise(Runner(tmp / "logs"), "fetch", cache, sdist, "vllm", "0" * 40)
    commit = json.loads((repo_path(cache, sdist, "vllm") / RECORD).read_text())["commit"]
    assert commit in str(err.value) and "0" * 40 in str(err.value)      # a wrong pin is named with the found one
    return cache, sdist, commit


# ----------------------------------------------------------------------- forks.toml


def test_shipped_sdist_pins_parse() -> None:
    from october.installer.core.resources import forks_file

    pins = load_forks(forks_file())["vllm"].pins
    for name, version in (("release-0_24_0", "0.24.0"), ("release-0_18_0", "0.18.0")):
        sd = pins[name].sdist
        assert sd is not None and sd.version == version and sd.filename == f"vllm-{version}.tar.gz"


@pytest.mark.parametrize("key,value,expected", [
    ("sdist", "http://x/vllm-1.tar.gz", "https URL"),
    ("sdist", "https://x/vllm-1.whl", ".tar.gz"),
    ("sha256", "ABC", "64 lowercase hex"),
    ("version", "", "release version"),
    ("commit", "1234", "40-character"),
])
def test_malformed_sdist_pin_is_refused(key: str, value: str, expected: str) -> None:
    pin = {"sdist": "https://x/vllm-1.tar.gz", "sha256": "a" * 64, "version": "1.0", "commit": "b" * 40, key: value}
    with pytest.raises(RecipeError) as err:
        explain.validate(Path("forks.toml"), {"format_version": 1, "forks": {"vllm": {"url": "u", "pins": {"p": pin}}}},
                      spec.ForksFile)
    assert expected in str(err.value)


# ------------------------------------------------------------------ materialising


def test_materialised_commit_is_deterministic_tagged_and_tracks_as_git_would(tmp_path: Path) -> None:
    cache_a, sdist, commit = _made(tmp_path, "a")
    cache_b, sdist_b, commit_b = _made(tmp_path, "b")
    assert commit == commit_b                                   # same bytes, another place: same commit
    made = materialise(Runner(tmp_path / "logs"), "fetch", cache_a, sdist, "vllm", commit)
    assert made.tag == "v9.9.0" and made.recorded_commit_id == "gabc1234def"
    listed = subprocess.run(["git", "--git-dir", str(made.path), "ls-tree", "-r", "HEAD"], capture_output=True,
                            text=True, check=True).stdout
    names = {ln.split("\t")[1]: ln.split()[0] for ln in listed.splitlines()}
    # the sdist's .gitignore applies: what setuptools writes at build time is not tracked
    assert set(names) == {".gitignore", "setup.py", "csrc/attn.cu", "vllm/__init__.py", "vllm/layer.py",
                          "tools/run.sh"}
    assert names["tools/run.sh"] == "100755" and names["setup.py"] == "100644"
    tag = subprocess.run(["git", "--git-dir", str(made.path), "rev-parse", "v9.9.0^{commit}"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert tag == commit
    msg = subprocess.run(["git", "--git-dir", str(made.path), "log", "-1", "--format=%B"], capture_output=True,
                         text=True, check=True).stdout
    assert f"sdist-sha256: {sdist.sha256}" in msg and "sdist-commit-id: gabc1234def" in msg   # travels with it
    rec = json.loads((made.path / RECORD).read_text())
    assert "vllm/_version.py" in rec["left_untracked"] and rec["sdist"]["sha256"] == sdist.sha256


def test_extraction_takes_no_owner_from_the_archive(tmp_path: Path) -> None:
    """A tar member of uid 1000 extracted by root keeps uid 1000 with a trusting extraction (and git then refuses
    the tree: "dubious ownership"); ours leaves every file owned by the user running it."""
    raw, _ = _sdist(tmp_path)
    archive = tmp_path / "s.tar.gz"
    archive.write_bytes(raw)
    tree = _extract(archive, tmp_path / "x", SdistSource(URL, "a" * 64, "9.9.0"), "vllm")
    owners = {p.stat().st_uid for p in tree.rglob("*")}
    assert owners == {os.getuid()}
    if os.getuid() == 0:
        with tarfile.open(archive) as tf:
            tf.extractall(tmp_path / "trusting", filter="fully_trusted")
        assert (tmp_path / "trusting" / "vllm-9.9.0" / "setup.py").stat().st_uid == 1000


def test_sdist_with_other_bytes_is_refused(tmp_path: Path) -> None:
    """Planted: the cached sdist is replaced by other bytes; it is not used (and not refetched from here)."""
    cache = tmp_path / "c"
    sdist = _placed(cache)
    cache_path(cache, sdist.sha256, sdist.filename).write_bytes(b"other bytes")
    with pytest.raises(FetchError) as err:
        materialise(Runner(tmp_path / "logs"), "fetch", cache, sdist, "vllm", "0" * 40)
    assert "cannot get its source distribution vllm-9.9.0.tar.gz" in str(err.value)
    assert not repo_path(cache, sdist, "vllm").exists()


def test_damaged_materialised_repository_is_refused(tmp_path: Path) -> None:
    cache, sdist, commit = _made(tmp_path)
    path = repo_path(cache, sdist, "vllm")
    subprocess.run(["git", "--git-dir", str(path), "tag", "-d", "v9.9.0"], check=True, capture_output=True)
    with pytest.raises(FetchError) as err:
        materialise(Runner(tmp_path / "logs"), "fetch", cache, sdist, "vllm", commit)
    assert "damaged" in str(err.value) and "tag v9.9.0" in str(err.value)


# ----------------------------------------------------------------- wheel proof


def _clone(tmp: Path) -> tuple[Path, Path, SdistSource, str]:
    cache, sdist, commit = _made(tmp)
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "-q", str(repo_path(cache, sdist, "vllm")), str(clone)], check=True)
    return cache, clone, sdist, commit


def _wheel(tmp: Path, files: dict[str, str]) -> Path:
    return build_wheel(tmp / "wheels", "vllm", "9.9.0", files)


WHEEL_FILES = {"vllm/__init__.py": FILES["vllm/__init__.py"], "vllm/layer.py": FILES["vllm/layer.py"],
               "vllm/_version.py": FILES["vllm/_version.py"], "vllm/third_party/x/k.py": "fetched = 1\n"}


def test_wheel_of_the_sdists_release_is_proved_file_by_file(tmp_path: Path) -> None:
    cache, clone, sdist, commit = _clone(tmp_path)
    out = check_sdist_equivalence(Runner(tmp_path / "logs"), clone, commit, _wheel(tmp_path, WHEEL_FILES),
                                  wheel_commit="abc1234def", wheel_version="9.9.0", sdist=sdist)
    assert out["method"] == "sdist-files" and out["python_files_identical"] == 2
    assert out["wheel_only"] == {"vllm/_version.py": 1, "vllm/third_party/x/": 1}
    assert blob_id(b"X = 1\n") == subprocess.run(["git", "hash-object", "--stdin"], input=b"X = 1\n",
                                                 capture_output=True, check=True).stdout.decode().strip()


@pytest.mark.parametrize("fault,expected", [
    ("differs", "vllm/layer.py (differs)"),
    ("missing", "vllm/layer.py (not in the wheel)"),
    ("commit", "says commit gabc1234def"),
    ("version", "version 9.9.1"),
    ("sdist", "does not say it was made from the pinned sdist"),
])
def test_wheel_proof_fails_closed(tmp_path: Path, fault: str, expected: str) -> None:
    cache, clone, sdist, commit = _clone(tmp_path)
    files, wheel_commit, version = dict(WHEEL_FILES), "abc1234def", "9.9.0"
    if fault == "differs":
        files["vllm/layer.py"] = "def f():\n    return 3\n"
    elif fault == "missing":
        del files["vllm/layer.py"]
    elif fault == "commit":
        wheel_commit = "abc1234dee"
    elif fault == "version":
        version = "9.9.1"
    elif fault == "sdist":   # another sdist than the one the fork commit was made from
        sdist = SdistSource(sdist.url, "b" * 64, sdist.version)
    with pytest.raises(WheelError) as err:
        check_sdist_equivalence(Runner(tmp_path / "logs"), clone, commit, _wheel(tmp_path, files),
                                wheel_commit=wheel_commit, wheel_version=version, sdist=sdist)
    assert expected in str(err.value)


# ------------------------------------------------------------------- install guards


def test_plan_location_is_always_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """setup.py resolves a relative location against the fork, not the caller: the plan never passes one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.whl").write_bytes(b"")
    use = sf.recipe(sf.Links(tmp_path, b""), None, tmp_path).forks[0]
    plan = make_plan([ForkSource(use, tmp_path / "src", "0" * 40, "vllm")], wheel=Path("w.whl"))
    loc = plan.installs[0].env_dict["VLLM_PRECOMPILED_WHEEL_LOCATION"]
    assert loc == str(tmp_path / "w.whl") and Path(loc).is_absolute()


def test_overwritten_tracked_file_is_named_and_prior_changes_are_not(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    sf.git(repo, "init", "-q")
    for name in ("a.py", "b.py", "c.py"):
        (repo / name).write_text("x\n")
    sf.commit_all(repo, "base")
    runner = Runner(tmp_path / "logs")
    (repo / "c.py").write_text("local change kept with --allow-dirty\n")
    before = overwritten.snapshot(runner, "install", repo)
    overwritten.check(runner, "install", "vllm", repo, before)            # nothing new: passes
    (repo / "b.py").write_text("the wheel's copy\n")
    with pytest.raises(InstallError) as err:
        overwritten.check(runner, "install", "vllm", repo, before)
    assert "overwrote 1 of its tracked file(s): b.py" in str(err.value)
    (repo / "b.py").write_text("x\n")
    (repo / "c.py").write_text("changed again by the install\n")
    with pytest.raises(InstallError) as err:
        overwritten.check(runner, "install", "vllm", repo, before)
    assert "c.py" in str(err.value)


def _so(tmp: Path, name: str, code: str, *libs: str) -> Path:
    src = tmp / f"{name}.c"
    src.write_text(code)
    out = tmp / f"lib{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(out), f"-L{tmp}", "-Wl,-rpath,$ORIGIN",
                    *[f"-l{lib}" for lib in libs]], check=True)
    return out


def test_elf_symbols_tell_a_missing_provider_from_a_driver_symbol(tmp_path: Path) -> None:
    """gcc-built objects: an extension needing `provided` (defined by its library), `cuInit` (the driver's) and
    `drifted` (defined nowhere)."""
    _so(tmp_path, "torchlike", "int provided(void) { return 1; }\n")
    ext = _so(tmp_path, "ext", "int provided(void); int cuInit(int); int drifted(void);\n"
              "int use(void) { return provided() + cuInit(0) + drifted(); }\n", "torchlike")
    left, missing, checked = elf_symbols.unresolved(str(ext), [str(tmp_path)])
    assert left == ["cuInit", "drifted"] and missing == [] and checked >= 3
    assert [s for s in left if elf_symbols.is_driver_symbol(s)] == ["cuInit"]
    assert not elf_symbols.is_driver_symbol("cudaMalloc") and not elf_symbols.is_driver_symbol("_ZN3c104cuda")


@pytest.mark.parametrize("static,outcome", [
    ({"file": "/x/_C.so", "checked": 220, "missing_libs": ["libcuda.so.1"], "driver_symbols": ["cuInit"],
      "unresolved": []}, "torch ABI checked statically: 220 undefined symbols of _C.so, all defined by the env's "
                        "torch and libraries except 1 driver symbol(s) (libcuda.so.1 absent)"),
    ({"file": "/x/_C.so", "checked": 220, "missing_libs": ["libcuda.so.1"], "driver_symbols": [],
      "unresolved": ["torch_dtype_float8_e8m0fnu"]}, "torch ABI drift: 1 undefined symbol(s): torch_dtype_float8_e8m0fnu"),
    ({"file": "/x/_C.so", "checked": 9, "missing_libs": ["libcuda.so.1", "libcudart.so.13"], "driver_symbols": [],
      "unresolved": []}, "not found: libcudart.so.13"),
    ({"error": "boom"}, "torch ABI not checked (boom)"),
])
def test_guard_says_which_it_checked(static: dict, outcome: str) -> None:
    verdict, problem = _judge_static("vllm._C", static, {"reason": "libcuda.so.1: cannot open shared object file"})
    text = verdict if problem is None else f"{problem.found} {problem.expected}"
    assert outcome in text
    if problem is None:
        assert verdict.startswith("not verifiable here: no CUDA driver (libcuda.so.1")


# ------------------------------------------------------------------- receipt and lock


def test_receipt_schema_takes_the_sdist_proof_and_the_lock_records_it() -> None:
    import jsonschema

    from october.installer.core.schemas import load_schema
    from october.installer.steps.lock import wheel_for_lock
    from october.installer.steps.results import WheelResult

    proof = {"method": "sdist-files", "fork_commit": "3" * 40, "sdist_sha256": "a" * 64,
             "sdist_commit_id": "gee0da84ab", "wheel_commit_id": "ee0da84ab", "version": "0.24.0",
             "python_files_identical": 1885, "wheel_only": {"vllm/_version.py": 1},
             "compiled_sources": "not comparable with a wheel: the fork's are the pinned sdist's"}
    wheel = {"path": "/s/wheels/w.whl", "filename": "w.whl", "wheel_sha256": "b" * 64, "trust": "pinned",
             "source_equivalence": proof}
    schema = load_schema("setup")["properties"]["wheel"]
    jsonschema.validate(wheel, schema)
    for bad in ({**proof, "python_files_identical": 0}, {**proof, "fork_commit": "3" * 12},
                {k: v for k, v in proof.items() if k != "sdist_sha256"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**wheel, "source_equivalence": bad}, schema)
    res = WheelResult(path=wheel["path"], filename="w.whl", url="https://x/w.whl", wheel_sha256="b" * 64, size=1,
                      mtime_ns=0, trust="pinned", source_commit="ee0da84ab", checks=("sha256",),
                      source_equivalence=proof)
    locked = wheel_for_lock(res)["source-equivalence"]
    assert locked["method"] == "sdist-files" and locked["python-files-identical"] == 1885
    assert "wheel-only" not in locked


def test_a_build_module_missing_from_the_env_is_named() -> None:
    """vLLM 0.24.0's setup.py imports setuptools_rust: without it in [build] the install says so in one line."""
    from october.installer.core.errors import CommandFailed
    from october.installer.install.forkinstall import install_failed as _install_failed

    # as uv printed it for the real 0.24.0 setup.py in an env without setuptools-rust (torch's warning first)
    tail = ("  torch/_subclasses/functional_tensor.py:283: UserWarning: Failed to initialize NumPy: No module named "
            "'numpy' (Triggered internally)\n"
            "  File \"/s/src/vllm/setup.py\", line 21, in <module>\n"
            "    from setuptools_rust.build import build_rust\nModuleNotFoundError: No module named 'setuptools_rust'\n")
    err = _install_failed("vllm", "2.11.0", CommandFailed("install", ["uv", "pip"], 1, tail, None))
    assert "needs the module 'setuptools_rust'" in str(err) and "setuptools-rust" in str(err) and "[build]" in str(err)
    other = _install_failed("vllm", "2.11.0", CommandFailed("install", ["uv", "pip"], 1, "error: boom\n", None))
    assert "needs the module" not in str(other)
