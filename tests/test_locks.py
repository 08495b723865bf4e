"""The committed index locks (locks/<recipe>.pylock.toml) against packaging.pylock and their recipes.

The locks were resolved for real (``uv run python -m october.installer.lock.indexlock``, PyPI); the ``real`` tier
re-resolves them (tests/test_indexlock_real.py).  Here: no network.  Each check of
:func:`october.installer.lock.indexlock.check_index_lock` is also shown failing on a planted fault.
"""

from __future__ import annotations

import copy
import dataclasses
import tomllib
from pathlib import Path

import pytest
from packaging.pylock import Pylock

from october.installer.lock.indexlock import (
    PLATFORM,
    build_index_lock,
    check_index_lock,
    index_request,
    lock_path,
)
from october.installer.lock.pylock import locked_state
from october.installer.recipe import load_recipe
from october.installer.recipe.install import DeclaredException

RECIPES = ("current", "20260702")


def _lock(name: str) -> dict:
    with open(lock_path(name), "rb") as fh:
        return tomllib.load(fh)


@pytest.mark.parametrize("name", RECIPES)
def test_committed_lock_matches_its_recipe(name: str) -> None:
    recipe = load_recipe(name)
    lock = _lock(name)
    assert check_index_lock(recipe, lock) == []
    Pylock.from_dict(lock)
    state = locked_state(lock_path(name))          # what --locked reads
    assert state.commits == {}                     # index scope: the recipe pins the forks
    assert recipe.wheel is not None and state.wheel_sha256 == recipe.wheel.sha256
    assert state.packages["torch"] == recipe.torch.version
    assert set(state.hashes) == set(state.packages)
    assert "vllm" not in state.packages and "flashinfer-python" not in state.packages
    tool = lock["tool"]["october"]
    assert tool["platform"] == PLATFORM and tool["scope"] == "index"
    assert [(e["package"], e["requires"]) for e in tool["install"]["exceptions"]] == \
        [(e.package, e.requires) for e in recipe.install.exceptions]


def test_the_two_torch_builds_are_the_cuda_ones() -> None:
    """PyPI's torch 2.10.0 is the CUDA 12.8 build, 2.11.0 the CUDA 13.0 build (their own pins say so)."""
    cur = locked_state(lock_path("current")).packages
    new = locked_state(lock_path("20260702")).packages
    assert cur["torch"] == "2.10.0" and cur["nvidia-cuda-runtime-cu12"].startswith("12.8.")
    assert new["torch"] == "2.11.0" and new["cuda-toolkit"].startswith("13.0.")
    assert new["flashinfer-cubin"] == "0.6.12" and new["cuda-tile"] == "1.3.0" and "nccl4py" in new


def test_the_lock_is_rebuilt_identically_from_its_own_resolution() -> None:
    """build_index_lock over the committed packages gives the committed lock (nothing hand-edited)."""
    for name in RECIPES:
        recipe, lock = load_recipe(name), _lock(name)
        tool = lock["tool"]["october"]
        again = build_index_lock(recipe, {"packages": lock["packages"]}, tool["exclude-newer"], tool["resolved-at"])
        assert again == lock


def _with(recipe, **kw):
    return dataclasses.replace(recipe, **kw)


@pytest.mark.parametrize("fault, words", [
    ("torch", "torch"),
    ("wheel", "wheel"),
    ("exception", "install"),
    ("replaced", "a fork replaces it"),
    ("hash", "without a sha256"),
    ("python", "requires-python"),
    ("setuptools", "setuptools>=77.0.3,<81"),
    ("unsettled", "less than 3 days before resolved-at"),
    ("no-resolved-at", "must be RFC 3339"),
])
def test_planted_faults_are_reported(fault: str, words: str) -> None:
    recipe = load_recipe("20260702")
    lock = copy.deepcopy(_lock("20260702"))
    if fault == "torch":
        recipe = _with(recipe, torch=dataclasses.replace(recipe.torch, version="2.11.0+cu130"))
    elif fault == "wheel":
        assert recipe.wheel is not None
        recipe = _with(recipe, wheel=dataclasses.replace(recipe.wheel, sha256="0" * 64))
    elif fault == "exception":
        extra = DeclaredException("vllm", "setuptools", "made up")
        recipe = _with(recipe, install=dataclasses.replace(recipe.install,
                                                           exceptions=(*recipe.install.exceptions, extra)))
    elif fault == "replaced":
        lock["packages"].append({"name": "flashinfer-python", "version": "0.6.12",
                                 "wheels": [{"url": "https://x/f.whl", "hashes": {"sha256": "0" * 64}}]})
    elif fault == "hash":
        lock["packages"][0]["wheels"][0]["hashes"] = {"md5": "0" * 32}
    elif fault == "python":
        lock["requires-python"] = "==3.12.10"
    elif fault == "unsettled":      # a cutoff equal to the resolution time (the lock that broke CI)
        lock["tool"]["october"]["exclude-newer"] = lock["tool"]["october"]["resolved-at"]
    elif fault == "no-resolved-at":
        del lock["tool"]["october"]["resolved-at"]
    elif fault == "setuptools":
        for p in lock["packages"]:
            if p["name"] == "setuptools":
                p["version"] = "84.2.1"
    problems = check_index_lock(recipe, lock)
    assert problems and any(words in p for p in problems), problems


def test_index_request_is_the_recipes_real_requirement_set() -> None:
    req = index_request(load_recipe("20260702"))
    assert req.requirements[0] == "torch==2.11.0" and req.requirements[-1] == "vllm==0.24.0"
    assert "nccl4py>=0.3.1" in req.requirements and "setuptools>=77.0.3,<81" in req.requirements
    assert req.replaced == ("vllm", "flashinfer-python")
    argv = req.argv("uv", Path("r.in"), Path("pylock.toml"), "2026-12-01T00:00:00Z")
    assert argv[argv.index("--python-platform") + 1] == PLATFORM and "--exclude-newer" in argv
    assert "--extra-index-url" not in argv            # torch comes from PyPI (recipe says why)


def test_locked_against_an_index_lock_compares_packages_and_wheel_not_fork_commits() -> None:
    """An index-scope lock names no fork commits: a stack's lock (which has them) matches it when its
    index packages and base wheel do; a changed package or wheel is still reported."""
    from october.installer.lock.pylock import diff_against

    state = locked_state(lock_path("20260702"))
    lock = copy.deepcopy(_lock("20260702"))
    lock["packages"].append({"name": "flashinfer-python", "version": "0.6.15",
                             "vcs": {"type": "git", "url": "https://github.com/mcgrof/flashinfer.git",
                                     "commit-id": "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"},
                             "tool": {"october": {"fork": "flashinfer", "editable": True}}})
    assert diff_against(state, lock) == []
    for p in lock["packages"]:
        if p["name"] == "numpy":
            p["version"] = "1.0.0"
    lock["tool"]["october"]["wheel"]["sha256"] = "0" * 64
    problems = diff_against(state, lock)
    assert any(p.startswith("numpy: lock says") for p in problems) and any("base wheel" in p for p in problems)


def test_regenerate_refuses_a_cutoff_that_is_not_settled(tmp_path: Path) -> None:
    """Asking for today's date as the cutoff fails before anything is resolved or written."""
    from october.installer.core.errors import LockError
    from october.installer.lock.indexlock import now_rfc3339, regenerate, settled_cutoff

    with pytest.raises(LockError, match="too recent"):
        regenerate(["current"], tmp_path, "uv-is-never-run", exclude_newer=now_rfc3339())
    assert settled_cutoff("2026-12-01T22:14:56Z") == "2026-11-28T22:00:00Z"
