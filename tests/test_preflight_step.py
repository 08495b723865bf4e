"""PreflightStep through the real pipeline engine, and ``doctor``.

The passing CUDA/GPU case puts stand-in ``nvcc`` and ``nvidia-smi`` scripts
first on PATH (neither a CUDA 12.9 toolkit nor a GPU exists on the development
machine); git, gcc, uv, RAM and disk are this machine's own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from october.installer.core.errors import PreflightError, UsageError
from october.installer.core.runner import Runner
from october.installer.engine import run_pipeline
from october.installer.machine import CHECK_NAMES, doctor
from october.installer.steps.preflight import PreflightStep
from tests.fixtures.preflight import NVCC_12_9, SMI_H100, fake_tool, make_ctx, write_recipe


@pytest.fixture()
def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "fakebin"
    fake_tool(bin_dir, "nvcc", NVCC_12_9)
    fake_tool(bin_dir, "nvidia-smi", SMI_H100)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for var in ("CUDA_HOME", "CUDA_PATH", "CC", "CXX"):
        monkeypatch.delenv(var, raising=False)
    return bin_dir


def test_step_passes_records_outputs_and_is_cached(tmp_path: Path, stand_ins: Path) -> None:
    recipe = write_recipe(tmp_path / "r", 'min_ram_gb = 0.1\nmin_disk_gb = 0.01\n'
                          'min_compute_capability = "9.0"\nuv = ">=0.8.17"\n', cuda="12.9")
    ctx = make_ctx(tmp_path, recipe)
    [record] = run_pipeline([PreflightStep()], ctx)
    out = record.outputs
    assert record.status == "ran"
    assert set(out) == {"facts", "machine", "checks", "skipped", "tools"}
    assert str(stand_ins / "nvcc") in out["tools"]
    assert [c["name"] for c in out["checks"]] == list(CHECK_NAMES)
    assert all(c["status"] == "passed" for c in out["checks"]), out["checks"]
    assert out["skipped"] == []
    assert out["facts"]["nvcc"]["path"] == str(stand_ins / "nvcc")
    assert out["machine"]["gpu_name"] == "NVIDIA H100 80GB HBM3" and out["machine"]["cuda"] == "12.9.86"
    marker = json.loads(ctx.paths.marker("preflight").read_text())
    assert marker["outputs"] == json.loads(json.dumps(out))
    log = ctx.paths.logs / "preflight.log"
    size = log.stat().st_size

    again = make_ctx(tmp_path, recipe)
    [cached] = run_pipeline([PreflightStep()], again)
    assert cached.status == "cached" and log.stat().st_size == size  # verify() never re-probes

    # a toolkit update (the nvcc program changed) is noticed without starting it, and re-probed
    fake_tool(stand_ins, "nvcc", "Cuda compilation tools, release 12.9, V12.9.99\n")
    [rerun] = run_pipeline([PreflightStep()], make_ctx(tmp_path, recipe))
    assert rerun.status == "ran" and rerun.outputs["facts"]["nvcc"]["version"] == "12.9.99"


def test_changed_limits_rerun_the_step(tmp_path: Path, stand_ins: Path) -> None:
    r1 = write_recipe(tmp_path / "r", "min_ram_gb = 0.1\n")
    run_pipeline([PreflightStep()], make_ctx(tmp_path, r1))
    r2 = write_recipe(tmp_path / "r", "min_ram_gb = 0.2\n")
    [record] = run_pipeline([PreflightStep()], make_ctx(tmp_path, r2))
    assert record.status == "ran"
    [record] = run_pipeline([PreflightStep()], make_ctx(tmp_path, r2, skip=("uv",)))
    assert record.status == "ran" and record.outputs["skipped"] == ["uv"]


def test_all_failures_at_once_and_no_marker(tmp_path: Path, stand_ins: Path) -> None:
    fake_tool(stand_ins, "nvidia-smi", "NVIDIA L4, 8.9, 575.57.08\n")
    recipe = write_recipe(tmp_path / "r", 'min_ram_gb = 100000\nmin_disk_gb = 1000000\n'
                          'min_compute_capability = "9.0"\nuv = ">=99"\n', cuda="12.8")
    ctx = make_ctx(tmp_path, recipe)
    with pytest.raises(PreflightError) as info:
        run_pipeline([PreflightStep()], ctx)
    names = [name for name, _ in info.value.problems]
    assert names == ["nvcc", "gpu", "cuda_arch", "ram", "disk", "uv"]
    text = str(info.value)
    assert text.startswith("6 preflight check(s) failed:")
    assert "[nvcc] expected nvcc 12.8 (the recipe's [cuda].version), found nvcc 12.9.86 at" in text
    assert "[gpu] expected an NVIDIA GPU with compute capability >= 9.0" in text
    assert text.endswith("-> fix the items above, or skip one you know is fine with --skip-preflight NAME")
    assert not ctx.paths.marker("preflight").exists()
    log = (ctx.paths.logs / "preflight.log").read_text()
    assert "ram       failed  expected >= 100000 GB RAM" in log  # the table is in the log too


def test_skip_is_recorded_and_warned(tmp_path: Path, stand_ins: Path) -> None:
    recipe = write_recipe(tmp_path / "r", "min_ram_gb = 100000\nmin_disk_gb = 0\n")
    ctx = make_ctx(tmp_path, recipe, skip=("ram", "gpu", "ram"))
    [record] = run_pipeline([PreflightStep()], ctx)
    assert record.outputs["skipped"] == ["gpu", "ram"]
    checks = {c["name"]: c for c in record.outputs["checks"]}
    assert checks["ram"]["status"] == "skipped"
    assert checks["ram"]["detail"].startswith("skipped by --skip-preflight (it would have failed: ")
    assert checks["gpu"]["status"] == "skipped"
    warns = [t for kind, t in ctx.ui.lines if kind == "warn"]  # type: ignore[attr-defined]
    assert "preflight check 'ram' skipped by --skip-preflight" in warns


def test_a_gpu_less_build_node_is_told_the_arch_went_unchecked(tmp_path: Path, stand_ins: Path) -> None:
    """The audit: with --skip-preflight gpu on a machine with no GPU, cuda_arch was left out silently.  Now it
    is a row, not checked, warned as such (never as skipped by the user's option)."""
    # a GPU-less machine on any machine (the GPU machine's own nvidia-smi is further down PATH)
    fake_tool(stand_ins, "nvidia-smi", "NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
                                       "driver.\n", rc=9)
    recipe = write_recipe(tmp_path / "r", 'min_ram_gb = 0.1\nmin_disk_gb = 0\nmin_compute_capability = "9.0"\n',
                          cuda="12.9")
    ctx = make_ctx(tmp_path, recipe, skip=("gpu",))
    [record] = run_pipeline([PreflightStep()], ctx)
    checks = {c["name"]: c for c in record.outputs["checks"]}
    assert checks["gpu"]["status"] == "skipped" and checks["cuda_arch"]["status"] == "skipped"
    assert checks["cuda_arch"]["detail"].startswith("not checked: no GPU here to compare with the recipe's "
                                                    "[cuda].arch_list"), checks["cuda_arch"]
    assert record.outputs["skipped"] == ["gpu"]
    warns = [t for kind, t in ctx.ui.lines if kind == "warn"]  # type: ignore[attr-defined]
    assert "preflight check 'gpu' skipped by --skip-preflight" in warns
    assert f"preflight check 'cuda_arch' {checks['cuda_arch']['detail']}" in warns
    assert "preflight check 'cuda_arch' skipped by --skip-preflight" not in warns
    # without the skip the gpu check fails: the punch list says it, no warning about the arch comes before it
    failing = make_ctx(tmp_path / "again", recipe)
    with pytest.raises(PreflightError) as info:
        run_pipeline([PreflightStep()], failing)
    assert [name for name, _ in info.value.problems] == ["gpu"]
    assert not [t for kind, t in failing.ui.lines if kind == "warn"]  # type: ignore[attr-defined]


def test_unknown_skip_name(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path / "r")
    ctx = make_ctx(tmp_path, recipe, skip=("rams",))
    with pytest.raises(UsageError) as info:
        run_pipeline([PreflightStep()], ctx)
    assert "Expected one of os, arch, nvcc, gpu, cuda_arch, ram, disk, git, compiler, uv, found 'rams'" in str(info.value)
    assert not ctx.paths.marker("preflight").exists()


def test_doctor_reports_without_raising(tmp_path: Path, stand_ins: Path) -> None:
    recipe = write_recipe(tmp_path / "r", 'min_ram_gb = 100000\nmin_compute_capability = "9.0"\n',
                          cuda="12.9")
    results, facts = doctor(recipe, tmp_path / "stack", ("disk",), Runner(tmp_path / "logs"))
    status = {r.name: r.status for r in results}
    assert status == {"os": "passed", "arch": "passed", "nvcc": "passed", "gpu": "passed", "cuda_arch": "passed",
                      "ram": "failed", "disk": "skipped", "git": "passed", "compiler": "passed",
                      "uv": "passed"}
    assert facts.gpus[0].compute_capability == "9.0"


def test_doctor_rejects_unknown_skip_before_probing(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        doctor(write_recipe(tmp_path / "r"), tmp_path / "stack", ("nope",), Runner(tmp_path / "logs"))
    assert not (tmp_path / "logs").exists()
