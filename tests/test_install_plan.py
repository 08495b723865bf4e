"""The install plan and the guard verdicts, computed without running anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from october.installer.core.errors import InstallError
from october.installer.install.guards import GuardSpec, evaluate
from october.installer.install.plan import ForkSource, dist_name, make_plan
from october.installer.recipe import ForkUse, Pin

SRC = Path("/stack/src")


def _fork(name: str, mode: str = "editable", *, deps: bool = True, iso: bool = True, dist: str | None = None):
    use = ForkUse(name=name, url=f"https://example.invalid/{name}.git", upstream=None, pin=Pin("p", "a" * 40),
                  mode=mode, deps=deps, build_isolation=iso)
    return ForkSource(use=use, path=SRC / name, commit="a" * 40, dist=dist or name)


def test_flashinfer_goes_last_whatever_the_recipe_order():
    fi = _fork("flashinfer", "flashinfer", deps=True, dist="flashinfer-python")
    vllm = _fork("vllm", "vllm-precompiled", iso=False)
    tool = _fork("tool", deps=False)
    plan = make_plan([fi, tool, vllm], wheel=Path("/stack/wheels/v.whl"), base_commit="b" * 40)
    assert plan.order == ("vllm", "tool", "flashinfer")
    v, t, f = plan.installs
    assert v.args == ("--reinstall-package", "vllm", "--no-build-isolation", "--editable", "/stack/src/vllm")
    assert v.env_dict == {"VLLM_USE_PRECOMPILED": "1", "VLLM_PRECOMPILED_WHEEL_LOCATION": "/stack/wheels/v.whl",
                          "VLLM_PRECOMPILED_WHEEL_COMMIT": "b" * 40}
    assert "--no-deps" in t.args and t.env == ()
    # flashinfer mode is --no-deps even when the recipe says deps = true
    assert f.args == ("--reinstall-package", "flashinfer-python", "--no-deps", "--editable", "/stack/src/flashinfer")


def test_a_forks_build_env_goes_into_its_install_only():
    import dataclasses
    fi = _fork("flashinfer", "flashinfer", dist="flashinfer-python")
    fi = dataclasses.replace(fi, use=dataclasses.replace(fi.use, build_env={"BUILD_NVEP": "0", "BUILD_NIXL_EP": "0"}))
    plan = make_plan([fi, _fork("tool")])
    tool, f = plan.installs
    assert f.env_dict == {"BUILD_NIXL_EP": "0", "BUILD_NVEP": "0"} and tool.env == ()


def test_precompiled_without_a_wheel_is_refused():
    with pytest.raises(InstallError) as err:
        make_plan([_fork("vllm", "vllm-precompiled")])
    assert "[wheel]" in str(err.value)


def test_dist_name_reads_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "flashinfer-python"\n')
    assert dist_name(tmp_path, "flashinfer") == "flashinfer-python"
    assert dist_name(tmp_path / "missing", "flashinfer") == "flashinfer"


# ------------------------------------------------------------------------- guard verdicts

SPEC = GuardSpec(python=Path("/stack/env/bin/python"), torch_version="2.10.0+cu128",
                 forks={"flashinfer": SRC / "flashinfer"}, imports=("vllm._C",))


def _facts(**over):
    editable = {"name": "flashinfer-python", "version": "0.6.7", "ships_package": False,
                "direct_url": {"url": "file:///stack/src/flashinfer", "dir_info": {"editable": True}}}
    facts = {"torch": {"versions": ["2.10.0+cu128"]},
             "forks": {"flashinfer": {"dists": [editable],
                                      "import": {"origin": "/stack/src/flashinfer/flashinfer/__init__.py"}}},
             "cuda": {"present": True, "lib": "libcuda.so.1", "reason": "loads"},
             "imports": {"vllm._C": {"attempted": True, "ok": True, "error": None}}}
    facts.update(over)
    return facts


def test_all_good():
    assert evaluate(SPEC, _facts()).results == {"torch": "ok", "flashinfer": "ok", "import vllm._C": "ok"}


def test_torch_moved():
    with pytest.raises(InstallError) as err:
        evaluate(SPEC, _facts(torch={"versions": ["2.12.0"]}))
    assert "torch 2.10.0+cu128 exactly" in str(err.value) and "torch 2.12.0" in str(err.value)


def test_flashinfer_not_editable():
    dist = {"name": "flashinfer-python", "version": "0.6.7", "ships_package": False,
            "direct_url": {"url": "file:///stack/src/flashinfer", "dir_info": {}}}
    facts = _facts(forks={"flashinfer": {"dists": [dist],
                                         "import": {"origin": "/stack/src/flashinfer/flashinfer/__init__.py"}}})
    with pytest.raises(InstallError) as err:
        evaluate(SPEC, facts)
    assert "(not editable)" in str(err.value)


def test_flashinfer_editable_elsewhere():
    dist = {"name": "flashinfer-python", "version": "0.6.7", "ships_package": False,
            "direct_url": {"url": "file:///home/me/flashinfer", "dir_info": {"editable": True}}}
    facts = _facts(forks={"flashinfer": {"dists": [dist], "import": {"origin": "/home/me/flashinfer/x.py"}}})
    with pytest.raises(InstallError) as err:
        evaluate(SPEC, facts)
    assert "2 post-install checks failed" in str(err.value) and "/home/me/flashinfer" in str(err.value)


def test_vllm_C_import_failure_and_not_verifiable():
    bad = _facts(imports={"vllm._C": {"attempted": True, "ok": False,
                                      "error": "ImportError: undefined symbol: _ZN3c1013MessageLogger"}})
    with pytest.raises(InstallError) as err:
        evaluate(SPEC, bad)
    assert "undefined symbol" in str(err.value) and "ABI" in str(err.value)
    absent = _facts(cuda={"present": False, "reason": "libcuda.so.1: cannot open"},
                    imports={"vllm._C": {"attempted": False}})
    got = evaluate(SPEC, absent).results["import vllm._C"]
    assert got == ("not verifiable here: no CUDA driver (libcuda.so.1: cannot open); torch ABI not checked "
                   "(no extension file given)")
    with pytest.raises(InstallError):
        evaluate(SPEC, _facts(imports={}))


def test_only_a_torch_version_conflict_is_called_one() -> None:
    """A failure is blamed on torch only when uv talks about a torch version."""
    from october.installer.core.errors import CommandFailed
    from october.installer.install.forkinstall import install_failed as _install_failed

    conflict = CommandFailed("install", ["uv"], 1, "Because torch-mover==1.0 depends on torch==2.11.0 and you "
                             "require torch==2.10.0+cpu, we can conclude ...", None)
    build = CommandFailed("install", ["uv"], 1, "error: /opt/torch/include/c10/util/x.h: No such file", None)
    assert "would move torch" in _install_failed("vllm", "2.10.0+cpu", conflict).message
    assert "would move torch" not in _install_failed("vllm", "2.10.0+cpu", build).message
    assert "failed" in _install_failed("vllm", "2.10.0+cpu", build).message
