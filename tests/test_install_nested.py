"""The nested-install guard and the env consistency check of the ``install`` step, on stand-in forks.

The FlashInfer stand-in's build backend copies what FlashInfer 2f3f0f6d's real ``build_backend.py``
does (read from the real source in ../shared/real-forks): in every editable-build hook it looks up
``uv`` with ``shutil.which`` and runs ``uv pip install --python sys.executable --no-deps <cuTile
compile chain>``, falling back to ``python -m pip``, and only warns when that fails; unless
``BUILD_NVEP=0`` it also installs ``nvidia-nccl-cu13>=2.30.7`` the same way.  The packages it asks
for exist as small real wheels in the find-links dir, so an unguarded nested install would succeed.
The real backend is exercised in tests/test_install_real.py (``real`` tier).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from october.installer.core.errors import InstallError
from october.installer.install import nested
from october.installer.pyenv.uvcmd import uv_exe
from october.installer.steps.env import write_stack_env
from october.installer.steps.install import InstallStep
from october.installer.lock.drift import installed_versions
from tests.fixtures import stack_forks as sf

pytestmark = pytest.mark.slow

NESTED_BACKEND = r'''

# --- copied behaviour of FlashInfer 2f3f0f6d build_backend.py: nested installs during the build ---
import shutil as _shutil, subprocess as _subprocess, sys as _sys

_CHAIN = ["nvidia-cuda-nvcc<13.4,>=13.2", "nvidia-nvjitlink<14,>=13.3"]


def _nested(wheels):
    uv = _shutil.which("uv")
    cmd = ([uv, "pip", "install", "--python", _sys.executable, "--no-deps", *wheels] if uv
           else [_sys.executable, "-m", "pip", "install", "--no-deps", *wheels])
    try:
        _subprocess.run(cmd, check=True)
    except (_subprocess.CalledProcessError, FileNotFoundError) as e:
        print(f"[BUILD] WARNING: could not install {wheels} ({e}); continuing", flush=True)


def _prepare():
    _nested(_CHAIN)
    if os.environ.get("BUILD_NVEP", "") != "0":
        _nested(["nvidia-nccl-cu13>=2.30.7"])


_orig_build_editable = build_editable


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _prepare()
    return _orig_build_editable(wheel_directory, config_settings, metadata_directory)
'''

CHAIN_WHY = {"nvidia-cuda-nvcc": "cuTile compile chain; the decode JIT uses the toolkit's nvcc",
             "nvidia-nvjitlink": "cuTile compile chain; would move torch's nvjitlink pin"}


@pytest.fixture(scope="session")
def links(tmp_path_factory: pytest.TempPathFactory) -> sf.Links:
    links = sf.make_links(tmp_path_factory.mktemp("links"))
    for name, version in (("nvidia-cuda-nvcc", "13.2.0"), ("nvidia-nvjitlink", "13.3.0"),
                          ("nvidia-nccl-cu13", "2.30.7")):
        links.add(name, version)
    links.add("flashinfer-cubin", "0.6.6", {"flashinfer_cubin/__init__.py": '__version__ = "0.6.6"\n'})
    return links


def _ctx(tmp_path: Path, links: sf.Links, monkeypatch: pytest.MonkeyPatch, *, build_env: dict[str, str],
         declared: dict[str, str]):
    stack = tmp_path / "stack"
    forks = sf.make_forks(stack, tmp_path / "repos")
    backend = forks.flashinfer / "backend.py"
    backend.write_text(backend.read_text() + NESTED_BACKEND)
    subprocess.run(["git", "-C", str(forks.flashinfer), "commit", "-qam", "nested installs"], check=True)
    forks.commits["flashinfer"] = subprocess.run(["git", "-C", str(forks.flashinfer), "rev-parse", "HEAD"],
                                                 check=True, capture_output=True, text=True).stdout.strip()
    sf.make_env(stack, links, tmp_path / "uv")
    base = sf.recipe(links, forks, tmp_path)
    fi = dataclasses.replace(base.fork("flashinfer"), build_env=build_env, nested_installs=declared,
                             build_isolation=False)  # as in the real recipes: the build runs in the stack env
    rec = dataclasses.replace(base, forks=(base.fork("vllm"), fi))
    ctx = sf.context(stack, rec, tmp_path / "cache")
    write_stack_env(ctx)
    ctx.done["fetch"] = sf.record(sf.fetched({"vllm": (forks.vllm, forks.commits["vllm"]),
                                              "flashinfer": (forks.flashinfer, forks.commits["flashinfer"])}))
    wheel = sf.base_wheel(tmp_path, links.c_ext, source_commit=forks.upstream_commit)
    ctx.done["wheel"] = sf.record(sf.verified_wheel(wheel))
    # a nested uv/pip that escaped the guard would find the packages it asks for here
    monkeypatch.setenv("UV_FIND_LINKS", str(links.dir))
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_LOCK_TIMEOUT", "20")
    return ctx


def test_knobs_and_declarations_keep_the_build_from_installing_anything(tmp_path, links, monkeypatch):
    ctx = _ctx(tmp_path, links, monkeypatch, build_env={"BUILD_NVEP": "0"}, declared=CHAIN_WHY)
    out = InstallStep().run(ctx).to_json()
    got = out["nested_installs"]["flashinfer"]
    assert got["refused"] == CHAIN_WHY and got["undeclared"] == []
    assert all(a.startswith("uv pip install --python ") for a in got["attempts"])
    versions = installed_versions(ctx.paths.env)
    assert not {"nvidia-cuda-nvcc", "nvidia-nvjitlink", "nvidia-nccl-cu13"} & set(versions)
    assert out["forks"][1]["env"] == {"BUILD_NVEP": "0"}
    # the declared vLLM pin is listed, and nothing else conflicts
    assert [d["requirement"] for d in out["consistency"]["declared"]] == ["flashinfer-python==0.6.6"]
    assert out["consistency"]["undeclared"] == []
    assert "refused nested 'uv pip install" in ctx.runner.log_path("install").read_text() or got["attempts"]


def test_an_undeclared_nested_install_fails_naming_the_package(tmp_path, links, monkeypatch):
    """Planted: no BUILD_NVEP=0, so the backend also asks for nvidia-nccl-cu13, which the recipe does
    not declare; the guard refuses it and the step fails naming it (the env gains nothing)."""
    ctx = _ctx(tmp_path, links, monkeypatch, build_env={}, declared=CHAIN_WHY)
    with pytest.raises(InstallError) as err:
        InstallStep().run(ctx)
    text = str(err.value)
    assert "nvidia-nccl-cu13" in text and "BUILD_NVEP" in text and "nvidia-cuda-nvcc" not in text.split("(refused):")[1].split("\n")[0]
    assert "nvidia-nccl-cu13" not in installed_versions(ctx.paths.env)


def test_undeclared_chain_fails(tmp_path, links, monkeypatch):
    ctx = _ctx(tmp_path, links, monkeypatch, build_env={"BUILD_NVEP": "0"}, declared={})
    with pytest.raises(InstallError, match="nvidia-cuda-nvcc, nvidia-nvjitlink"):
        InstallStep().run(ctx)


def test_an_installer_inside_the_stack_env_is_refused(tmp_path, links, monkeypatch):
    """uv puts STACK/env/bin before our PATH: a uv there would bypass the guard, so the step refuses."""
    ctx = _ctx(tmp_path, links, monkeypatch, build_env={"BUILD_NVEP": "0"}, declared=CHAIN_WHY)
    (ctx.paths.env / "bin" / "uv").write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(InstallError, match="own package installer"):
        InstallStep().run(ctx)


def test_an_undeclared_conflict_fails_the_install(tmp_path, links, monkeypatch):
    """Planted: the recipe declares no exception, so vLLM's flashinfer-python pin under the fork fails."""
    ctx = _ctx(tmp_path, links, monkeypatch, build_env={"BUILD_NVEP": "0"}, declared=CHAIN_WHY)
    ctx.options = dataclasses.replace(ctx.options, recipe=dataclasses.replace(
        ctx.recipe, install=dataclasses.replace(ctx.recipe.install, exceptions=())))
    with pytest.raises(InstallError) as err:
        InstallStep().run(ctx)
    assert "vllm 0.18.0 requires flashinfer-python==0.6.6, but flashinfer-python 0.6.7 is installed" in str(err.value)


def test_guard_script_records_and_refuses(tmp_path):
    guard = nested.install_guard(tmp_path / "g")
    log = tmp_path / "n.log"
    env = nested.guard_env(guard, log, "/usr/bin:/bin")
    done = subprocess.run(["sh", "-c", "uv pip install --python /x/python --no-deps 'a<2,>=1' b"], env=env,
                          capture_output=True, text=True)
    assert done.returncode == nested.REFUSED_EXIT and "refused nested" in done.stderr
    attempts = nested.read_attempts(log)
    assert attempts == [nested.Attempt("uv", ("pip", "install", "--python", "/x/python", "--no-deps", "a<2,>=1", "b"))]
    assert attempts[0].packages == ("a", "b")
    verdict = nested.judge(attempts * 2, {"a": "why"})
    assert verdict.refused_declared == {"a": "why"} and verdict.undeclared == ("b",) and len(verdict.attempts) == 1
    assert nested.judge([nested.Attempt("uv", ("--version",))], {}).unparsed == ("uv --version",)


def test_without_the_guard_the_stand_in_backend_really_installs(tmp_path, links, monkeypatch):
    """Control: with the guard switched off, the same build puts the chain into the stack env (after
    waiting for uv's env lock), so the tests above pass because of the guard, not the stand-in."""
    monkeypatch.setattr(nested, "guard_env", lambda d, log, p: {})
    ctx = _ctx(tmp_path, links, monkeypatch, build_env={"BUILD_NVEP": "0"}, declared=CHAIN_WHY)
    monkeypatch.setenv("UV_LOCK_TIMEOUT", "3")
    with pytest.raises(InstallError, match="inconsistent"):
        InstallStep().run(ctx)
    assert {"nvidia-cuda-nvcc", "nvidia-nvjitlink"} <= set(installed_versions(ctx.paths.env))


def test_flashinfer_imports_beside_an_older_cubin_only_with_the_stack_env(tmp_path, links, monkeypatch):
    """vLLM pins a flashinfer-cubin that stays under the fork (as 0.6.12 under 0.6.15 in 20260702): the
    install step imports flashinfer with STACK/stack-env.json applied; planted: the version-check
    switch emptied in that file, and the import fails the step."""
    import json

    from october.installer.pyenv import stackenv

    ctx = _ctx(tmp_path, links, monkeypatch, build_env={"BUILD_NVEP": "0"}, declared=CHAIN_WHY)
    sf_env = dict(os.environ, UV_CACHE_DIR=str(tmp_path / "uv"))
    subprocess.run([uv_exe(), "pip", "install", "-q", "--python", str(ctx.paths.python), "--no-index",
                    "--find-links", str(links.dir), "flashinfer-cubin==0.6.6"], check=True, env=sf_env)
    out = InstallStep().run(ctx).to_json()
    assert out["imports_with_stack_env"] == {"flashinfer": "0.6.7"}
    path = stackenv.env_file(ctx.paths.root)
    doc = json.loads(path.read_text())
    doc["env"]["FLASHINFER_DISABLE_VERSION_CHECK"] = ""
    path.write_text(json.dumps(doc))
    with pytest.raises(InstallError) as err:
        InstallStep().run(ctx)
    assert "import flashinfer" in str(err.value) and "flashinfer-cubin version (0.6.6) does not match" in str(err.value)
