"""The typed step results: marker round trips, unknown content refused, the step order defined once."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from october.installer.engine import StepResult, planned_step_names
from october.installer.pipeline.plan import STEP_ORDER, plan_steps
from october.installer.recipe import BaseWheel, JitModule
from october.installer.steps.markerjson import MalformedResult
from october.installer.steps.results import (
    EnvResult,
    FetchResult,
    ForkRecord,
    InstalledFork,
    InstallResult,
    JitResult,
    LockResult,
    NoWheel,
    PreflightResult,
    ReceiptResult,
    WheelResult,
    wheel_result_from_json,
)
from tests.test_pipeline import toy_recipe

SHA = "a" * 64
COMMIT = "c" * 40

RESULTS: list[StepResult] = [
    PreflightResult(facts={"os": "Linux", "nvcc": {"path": "/cuda/bin/nvcc", "version": "13.0"},
                           "disk_free_bytes": 10}, machine={"os": "Linux"},
                    checks=({"name": "os", "status": "passed", "detail": ""},), skipped=("disk",),
                    tools={"/cuda/bin/nvcc": [1, 2]}),
    FetchResult(forks={"vllm": ForkRecord(path="/s/src/vllm", url="https://x/vllm.git", upstream=None, pin="p",
                                          requested=COMMIT[:9], branch="main", commit=COMMIT,
                                          submodules={"third_party/x": COMMIT}, submodule_paths=("third_party/x",))}),
    EnvResult(path="/s/env", python="/s/env/bin/python", python_version="3.12.3", torch="2.11.0",
              site_packages=("/s/env/lib/python3.12/site-packages",), stack_env={"sha256": SHA}),
    EnvResult(path="/s/env", python="/s/env/bin/python", python_version="3.12.3", torch="2.11.0",
              site_packages=(), stack_env={}, torch_cuda="13.0", torch_source="system",
              system_torch={"version": "2.11.0"}),
    WheelResult(path="/s/wheels/v.whl", filename="v.whl", url="https://x/v.whl", wheel_sha256=SHA, size=3,
                mtime_ns=4, trust="pinned", source_commit=COMMIT, checks=("sha256",), wheel_tags=("cp38-abi3",),
                extensions=({"module": "vllm._C", "path": "vllm/_C.abi3.so"},)),
    NoWheel("recipe has no [wheel]"),
    InstallResult(forks=(InstalledFork(name="vllm", path="/s/src/vllm", commit=COMMIT, mode="vllm-precompiled",
                                       args=("-e", "/s/src/vllm"), env={"VLLM_USE_PRECOMPILED": "1"}),),
                  order=("vllm",), torch="2.11.0", checks={"torch": "ok"}, wheel_path="/s/wheels/v.whl",
                  wheel_sha256=SHA, vllm_base_commit=COMMIT,
                  build_outputs={"vllm": {"vllm/_C.abi3.so": f"sha256:{SHA}", "vllm/data/x": "link:/s/src/x"}}),
    JitResult(workspace="/s/jit", arch_list="9.0", modules=({"uri": "m", "path": "/s/jit/m.so", "sha256": SHA,
                                                             "cached": False, "source": "built"},),
              cached=False, builder="b", flashinfer_version="0.6.7"),
    LockResult(path="/s/pylock.toml", sha256=SHA, packages=3),
    ReceiptResult(path="/s/receipts/setup.json", sha256=SHA),
]


def _load(result: StepResult, data: Any) -> StepResult:
    if result.step == "wheel":
        return wheel_result_from_json(data)
    return type(result).from_json(data)  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: type(r).__name__)
def test_each_result_round_trips_through_its_json_marker(result: StepResult) -> None:
    text = json.dumps(result.to_json())          # the marker is plain JSON
    assert _load(result, json.loads(text)) == result
    json.dumps(result.chain_json())


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: type(r).__name__)
def test_unknown_or_malformed_content_is_refused(result: StepResult) -> None:
    data = result.to_json()
    for broken in ([], {}, {k: (7 if i == 0 else v) for i, (k, v) in enumerate(data.items())}):
        with pytest.raises((MalformedResult, ValueError)):
            _load(result, broken)


def test_what_changes_without_meaning_anything_stays_out_of_the_chain() -> None:
    """Free disk, the wheel's mtime and where a JIT module came from this time do not re-run later
    steps; the facts, the wheel's hash and a module's hash do."""
    pre, wheel, jit = RESULTS[0], RESULTS[4], RESULTS[7]
    assert isinstance(pre, PreflightResult) and isinstance(wheel, WheelResult) and isinstance(jit, JitResult)
    assert pre.chain_json() == dataclasses.replace(pre, facts={**pre.facts, "disk_free_bytes": 99},
                                                   skipped=(), checks=()).chain_json()
    assert pre.chain_json() != dataclasses.replace(pre, facts={**pre.facts, "os": "Darwin"}).chain_json()
    assert wheel.chain_json() == dataclasses.replace(wheel, mtime_ns=5).chain_json()
    assert wheel.chain_json() != dataclasses.replace(wheel, wheel_sha256="b" * 64).chain_json()
    moved = dict(jit.modules[0], cached=True, source="shared-cache")
    assert jit.chain_json() == dataclasses.replace(jit, modules=(moved,), cached=True).chain_json()
    other = dict(jit.modules[0], sha256="b" * 64)
    assert jit.chain_json() != dataclasses.replace(jit, modules=(other,)).chain_json()


def test_an_install_result_of_an_older_tool_loads_without_build_outputs_and_chains_the_same() -> None:
    """A marker written before the install recorded the forks' build outputs still loads (None: not recorded,
    which its no-op check says); the record stays out of the chain, so recording it re-runs no later step."""
    install = RESULTS[6]
    assert isinstance(install, InstallResult) and install.build_outputs
    older = {k: v for k, v in install.to_json().items() if k != "build_outputs"}
    loaded = InstallResult.from_json(older)
    assert loaded.build_outputs is None and loaded.to_json() == older
    assert loaded.chain_json() == install.chain_json() == older
    for bad in ([], {"vllm": ["vllm/_C.abi3.so"]}, {"vllm": {"vllm/_C.abi3.so": 7}}):
        with pytest.raises(MalformedResult):
            InstallResult.from_json({**older, "build_outputs": bad})


def test_the_plan_follows_step_order(tmp_path: Path) -> None:
    bare = toy_recipe(tmp_path)
    full = dataclasses.replace(bare, wheel=BaseWheel(url="https://x/v.whl", filename="v.whl", name="vllm",
                                                     version="0.18.0", sha256=None),
                               jit=(JitModule("decode", "bf16", "bf16", "fp8", "bf16", 128),))
    assert [s.name for s in plan_steps(full)] == list(STEP_ORDER)
    assert [s.name for s in plan_steps(bare)] == [n for n in STEP_ORDER if n not in ("wheel", "jit")]
    # what fleet counts without importing a step names the steps the pipeline makes, for every mix
    for recipe in (full, bare, dataclasses.replace(full, jit=()), dataclasses.replace(full, wheel=None)):
        assert planned_step_names(recipe) == tuple(s.name for s in plan_steps(recipe))


def test_a_record_field_without_a_marker_reader_fails_at_import_not_as_a_silent_rerun() -> None:
    """Planted: a result type with an annotation the generic reader does not know.  Without the check its
    marker could never be read back (a KeyError inside load_result), so the step would run again on every
    run with no word; the check names the class and the field."""
    from october.installer.steps import results

    results._check_readers()                      # the shipped results all have readers

    @dataclasses.dataclass(frozen=True)
    class Planted(results.Record):
        name: str
        count: float

    with pytest.raises(TypeError, match=r"^Planted: no marker reader for count: float$"):
        results._check_readers([Planted])


def test_activate_s_sha256_stays_out_of_the_env_chain() -> None:
    """activate is made from the recorded env (chained); its sha256, recorded since, leaves a record older than it
    with the chain its later steps' markers were made on, while stack-env.json's sha256 stays in it."""
    env = RESULTS[2]
    assert isinstance(env, EnvResult)
    newer = dataclasses.replace(env, stack_env={**env.stack_env, "activate_sha256": "c" * 64})
    assert EnvResult.from_json(newer.to_json()) == newer and newer.to_json() != env.to_json()
    assert newer.chain_json() == env.chain_json()
    assert dataclasses.replace(env, stack_env={"sha256": "d" * 64}).chain_json() != env.chain_json()
