"""The real vLLM base wheels through the wheel step (``real`` tier), and the stand-ins held to them.

Real tier: the wheel step downloads each recipe's [wheel] from PyPI (its recipe URL and sha256)
into ``real_cache_dir()`` -- once; later runs verify the cached copy -- and verifies it with the
project's own code; the facts recorded in ``tests/fixtures/real_vllm_wheels.json`` must equal what
the real wheels show.  The recipe's forks are left out: the real vLLM forks are not reachable
here, so source equivalence is covered on fixture repositories (test_wheel_equivalence.py).

Every run: the stand-in wheels (tests/fixtures/base_wheels.py) must show the recorded facts, so a
stand-in cannot drift from the real wheels without a test failing.
"""

from __future__ import annotations

import dataclasses
import platform
from pathlib import Path
from typing import Any

import pytest

from october.installer.core.paths import StackPaths
from october.installer.core.runner import Runner
from october.installer.engine import SetupOptions, SilentReporter, StepContext
from october.installer.recipe import load_recipe
from october.installer.steps.wheel import WheelStep
from tests.conftest import real_cache_dir
from tests.fixtures.base_wheels import python_link, real_facts, vllm_wheel, wheel_facts

RECIPES = {"current": "0.18.0", "20260702": "0.24.0"}
SHAPE = ("wheel_tags", "so_files", "extensions", "main_extension", "commit_id", "version", "torch_requirement",
         "cudart")
VERIFY_CHECKS = ["sha256", "zip", "filename", "tags", "metadata", "torch-pin", "record", "paths", "cuda-variant"]


def test_recorded_facts_cover_both_recipes() -> None:
    facts = real_facts()
    for name, version in RECIPES.items():
        w = load_recipe(name).wheel
        assert w is not None
        f = facts[version]
        assert (w.url, w.filename, w.sha256, w.version) == (f["url"], f["filename"], f["sha256"], f["version"])
        assert f["torch_requirement"] == [f"torch=={w.requires_torch}"] and f["cudart"] == [w.cudart_major]


@pytest.mark.parametrize("version", sorted(RECIPES.values()))
def test_stand_in_wheel_shows_the_real_wheels_facts(tmp_path: Path, version: str) -> None:
    if platform.machine() != "x86_64":
        pytest.skip("the recorded wheels are x86_64; the stand-in follows the host arch")
    real = real_facts()[version]
    stand = wheel_facts(vllm_wheel(tmp_path, version=version))
    assert {k: stand[k] for k in SHAPE} == {k: real[k] for k in SHAPE}
    # the file name is manylinux while WHEEL says linux, as on the real wheel (policy level follows the host)
    assert all(t.startswith("cp38-abi3-manylinux_") for t in stand["filename_tags"] + real["filename_tags"])


@pytest.mark.real
@pytest.mark.parametrize("recipe_name", sorted(RECIPES))
def test_real_wheel_step_downloads_once_and_verifies(tmp_path: Path, recipe_name: str) -> None:
    recipe = dataclasses.replace(load_recipe(recipe_name), forks=())
    assert recipe.wheel is not None
    paths = StackPaths(tmp_path / "stack")
    python_link(paths.python)
    opts = SetupOptions(stack=paths.root, recipe=recipe, cache_dir=real_cache_dir())
    ctx = StepContext(options=opts, paths=paths, runner=Runner(paths.logs), ui=SilentReporter())
    step = WheelStep()
    result = step.run(ctx)
    out: dict[str, Any] = result.to_json()
    real = real_facts()[recipe.wheel.version]
    assert (out["wheel_sha256"], out["size"], out["trust"]) == (real["sha256"], real["size"], "pinned")
    assert out["checks"] == VERIFY_CHECKS
    # vLLM's retag, accepted and recorded
    assert out["wheel_tags"] == real["wheel_tags"] == ["cp38-abi3-linux_x86_64"]
    assert out["retag"] == [{"wheel": "cp38-abi3-linux_x86_64", "filename": real["filename_tags"][0]}]
    assert [e["module"] for e in out["extensions"]] == real["extensions"]
    assert ("vllm._C" in real["extensions"]) == (recipe.wheel.version == "0.18.0")
    assert out["source_commit"] == real["commit_id"][1:] and out["source_equivalence"] is None
    assert step.verify(ctx, result) is None and Path(out["path"]).stat().st_size == real["size"]
    # the recording is the real wheel's: re-read it independently of the step
    assert wheel_facts(Path(out["path"])) == {k: v for k, v in real.items() if k not in ("url", "sha256", "size")}
