"""Pure preflight checks, judged on hand-built machine facts (nothing runs)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from october.installer.core.errors import PreflightError, RecipeError, UsageError
from october.installer.machine import CHECK_NAMES, evaluate, machine_facts_json, validate_skip
from october.installer.machine.probes import GpuFact, MachineFacts, ToolFact
from october.installer.machine.rules import (
    CheckResult,
    apply_skips,
    gb_floor,
    parse_capability,
    punch_list,
    run_checks,
)
from october.installer.recipe import CudaPin, PreflightLimits, parse_arch_list
from tests.fixtures.preflight import good_facts, missing, tool

LIMITS = PreflightLimits(os="Linux", arch="x86_64", min_ram_gb=100, min_disk_gb=100,
                         min_compute_capability="9.0", uv=">=0.13.0", need_compiler=True)
CUDA = CudaPin(version="12.9", arch_list=parse_arch_list("9.0"), variant="cu129")


def by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.name: r for r in results}


def one(name: str, facts: MachineFacts, limits: PreflightLimits = LIMITS,
        cuda: CudaPin | None = CUDA) -> CheckResult:
    return by_name(run_checks(facts, limits, cuda))[name]


def test_a_good_machine_passes_every_check_in_order() -> None:
    results = run_checks(good_facts(), LIMITS, CUDA)
    assert [r.name for r in results] == list(CHECK_NAMES)
    assert all(r.ok and r.status == "passed" for r in results)
    assert punch_list(results) == []
    assert by_name(results)["nvcc"].detail == (
        "found nvcc 12.9.86 at /usr/local/cuda/bin/nvcc; expected nvcc 12.9 (the recipe's [cuda].version)")


def test_wrong_os() -> None:
    r = one("os", good_facts(os="Darwin"))
    assert not r.ok and r.status == "failed"
    assert r.detail == ("expected Linux (the recipe's [preflight].os), found Darwin "
                        "-> run october_setup on a Linux machine")


def test_wrong_arch() -> None:
    r = one("arch", good_facts(arch="aarch64"))
    assert not r.ok
    assert r.detail == ("expected x86_64 (the recipe's [preflight].arch), found aarch64 "
                        "-> use a x86_64 machine: the recipe's wheels are built for x86_64 only")


def test_arch_aliases_are_the_same_machine() -> None:
    assert one("arch", good_facts(arch="AMD64")).ok


def test_nvcc_missing() -> None:
    r = one("nvcc", good_facts(nvcc=missing("nvcc")))
    assert r.detail == ("expected nvcc 12.9 (the recipe's [cuda].version), found nvcc not found: no nvcc on PATH "
                        "-> install the CUDA 12.9 toolkit and point CUDA_HOME at it (or put its bin/ first on PATH)")


def test_nvcc_wrong_version() -> None:
    r = one("nvcc", good_facts(nvcc=tool("/usr/local/bin/nvcc", "13.0.88")))
    assert not r.ok
    assert r.found == "nvcc 13.0.88 at /usr/local/bin/nvcc"
    assert r.detail.startswith("expected nvcc 12.9 (the recipe's [cuda].version), found nvcc 13.0.88 at ")


def test_nvcc_major_minor_must_be_equal_not_a_prefix() -> None:
    assert not one("nvcc", good_facts(nvcc=tool("/x/nvcc", "12.90.1"))).ok
    assert not one("nvcc", good_facts(nvcc=tool("/x/nvcc", "12.8.93"))).ok
    assert one("nvcc", good_facts(nvcc=tool("/x/nvcc", "12.9"))).ok


def test_nvcc_and_gpu_checks_apply_only_when_the_recipe_asks() -> None:
    limits = replace(LIMITS, min_compute_capability=None)
    names = [r.name for r in run_checks(good_facts(nvcc=missing("nvcc"), gpus=()), limits, None)]
    assert names == ["os", "arch", "ram", "disk", "git", "compiler", "uv"]


def test_no_gpu() -> None:
    r = one("gpu", good_facts(nvidia_smi=missing("nvidia-smi"), gpus=()))
    assert r.detail == (
        "expected an NVIDIA GPU with compute capability >= 9.0 and a driver >= 525 (CUDA 12.9), "
        "found no GPU (not found: no nvidia-smi on PATH) -> run on a machine with a supported NVIDIA GPU "
        "and a working driver (`nvidia-smi` must list it)")


def test_nvidia_smi_lists_no_gpu() -> None:
    r = one("gpu", good_facts(gpus=()))
    assert not r.ok and r.found == "no GPU (nvidia-smi listed none)"


def test_compute_capability_too_low() -> None:
    r = one("gpu", good_facts(gpus=(GpuFact("NVIDIA L4", "8.9", "575.57.08"),)))
    assert r.detail == (
        "expected an NVIDIA GPU with compute capability >= 9.0 and a driver >= 525 (CUDA 12.9), "
        "found NVIDIA L4 (compute capability 8.9, driver 575.57.08) "
        "-> use a GPU with compute capability >= 9.0 (the K16/V8 kernels need it)")


def test_compute_capability_is_compared_as_numbers() -> None:
    assert parse_capability("8.9") < parse_capability("9.0") < parse_capability("10.0")  # type: ignore[operator]
    blackwell = good_facts(gpus=(GpuFact("NVIDIA B200", "10.0", "580.65.06"),))
    assert one("gpu", blackwell).ok  # "10.0" < "9.0" as strings
    assert not one("gpu", good_facts(gpus=(GpuFact("odd", "[N/A]", "575.57.08"),))).ok


def test_every_gpu_must_reach_the_minimum() -> None:
    mixed = good_facts(gpus=(GpuFact("NVIDIA H100 80GB HBM3", "9.0", "575.57.08"),
                             GpuFact("NVIDIA T4", "7.5", "575.57.08")))
    r = one("gpu", mixed)
    assert not r.ok and "NVIDIA T4 (compute capability 7.5" in r.found


def test_driver_too_old_for_the_cuda_major() -> None:
    r = one("gpu", good_facts(gpus=(GpuFact("NVIDIA H100 80GB HBM3", "9.0", "520.61.05"),)))
    assert not r.ok and r.detail.endswith("-> install an NVIDIA driver >= 525")
    cuda13 = CudaPin(version="13.0", arch_list=parse_arch_list("9.0"), variant="cu130")
    assert not one("gpu", good_facts(), cuda=cuda13).ok          # 575 < 580
    assert one("gpu", good_facts(), cuda=None).ok                # no toolkit pin: no driver floor


def test_unparsable_minimum_capability_is_a_recipe_error() -> None:
    with pytest.raises(RecipeError) as info:
        run_checks(good_facts(), replace(LIMITS, min_compute_capability="sm90"), CUDA, recipe_file="r.toml")
    assert "preflight.min_compute_capability" in str(info.value)
    assert "Expected a compute capability major.minor such as '9.0', found 'sm90'" in str(info.value)


def test_too_little_ram() -> None:
    r = one("ram", good_facts(ram_bytes=25_276_510_208))
    assert r.detail == ("expected >= 100 GB RAM (the recipe's [preflight].min_ram_gb), found 25.2 GB RAM "
                        "-> use a machine with more memory, or lower [preflight].min_ram_gb "
                        "if you know the build fits")


def test_ram_boundary_and_rounding_down() -> None:
    assert one("ram", good_facts(ram_bytes=100 * 10**9)).ok
    short = one("ram", good_facts(ram_bytes=100 * 10**9 - 1))
    assert not short.ok and short.found == "99.9 GB RAM"  # never prints "100.0" for a shortfall
    assert gb_floor(1_999_999_999) == "1.9 GB"


def test_unknown_ram_fails() -> None:
    r = one("ram", good_facts(ram_bytes=None))
    assert not r.ok and r.found == "unknown (could not read MemTotal from /proc/meminfo)"


def test_too_little_disk() -> None:
    r = one("disk", good_facts(disk_free_bytes=12_345_678_901))
    assert r.detail == ("expected >= 100 GB free at /data (the recipe's [preflight].min_disk_gb), "
                        "found 12.3 GB free -> free some space there, or choose a stack path on a "
                        "larger filesystem")


def test_git_missing() -> None:
    r = one("git", good_facts(git=missing("git")))
    assert r.detail == ("expected git on PATH, found git not found: no git on PATH "
                        "-> install git (e.g. `apt-get install git`) and put it on PATH")


def test_no_compiler() -> None:
    r = one("compiler", good_facts(cxx=missing("g++")))
    assert r.detail == (
        "expected a C and a C++ compiler ($CC/$CXX, or gcc/g++ on PATH), found C compiler 12.2.0 at "
        "/usr/bin/gcc; C++ compiler not found: no g++ on PATH -> install gcc and g++ "
        "(e.g. `apt-get install build-essential`) or set CC and CXX")


def test_compiler_check_can_be_turned_off_by_the_recipe() -> None:
    results = run_checks(good_facts(cc=missing("gcc")), replace(LIMITS, need_compiler=False), CUDA)
    assert "compiler" not in by_name(results)


def test_broken_tool_is_reported_with_its_path() -> None:
    broken = ToolFact(path="/opt/bin/gcc", line="", source="CC", error="`/opt/bin/gcc --version` exited 1: boom")
    r = one("compiler", good_facts(cc=broken))
    assert "C compiler at /opt/bin/gcc: `/opt/bin/gcc --version` exited 1: boom" in r.found


def test_uv_too_old() -> None:
    r = one("uv", good_facts(uv=tool("/usr/bin/uv", "0.12.20")))
    assert r.detail == (
        "expected uv >=0.12.11 (the tool's floor) and >=0.13.0 (the recipe's [preflight].uv), found uv 0.12.20 at /usr/bin/uv "
        "-> run `uv sync` in this project (it installs the uv that pyproject.toml pins into the tool env), "
        "or upgrade uv with `uv self update`")


def test_uv_versions_compare_as_versions() -> None:
    assert one("uv", good_facts(uv=tool("/usr/bin/uv", "0.13.9"))).ok
    # "0.13.9" < "0.9.0" as strings: a string comparison would refuse it
    assert one("uv", good_facts(uv=tool("/usr/bin/uv", "0.13.9")), limits=replace(LIMITS, uv=">=0.9.0")).ok
    assert not one("uv", good_facts(uv=missing("uv"))).ok
    assert one("uv", good_facts(), limits=replace(LIMITS, uv=None)).ok


def test_the_tool_s_uv_floor_holds_whatever_the_recipe_says() -> None:
    """A recipe with no [preflight].uv, or one that allows older, still gets the tool's floor."""
    for spec in (None, ">=0.8.17"):
        r = one("uv", good_facts(uv=tool("/usr/bin/uv", "0.12.10")), limits=replace(LIMITS, uv=spec))
        assert not r.ok and r.detail.startswith("expected uv >=0.12.11 (the tool's floor)"), r.detail
        assert one("uv", good_facts(uv=tool("/usr/bin/uv", "0.12.11")), limits=replace(LIMITS, uv=spec)).ok


def test_punch_list_has_every_failure_at_once() -> None:
    bad = MachineFacts(os="Darwin", os_release="", arch="arm64", cpu_count=8, python="3.11.7",
                       ram_bytes=16 * 10**9, disk_path="/", disk_free_bytes=10**9,
                       nvcc=missing("nvcc"), nvidia_smi=missing("nvidia-smi"), gpus=(),
                       git=missing("git"), cc=missing("gcc"), cxx=missing("g++"), uv=tool("/u/uv", "0.8.3"))
    results = run_checks(bad, LIMITS, CUDA)
    problems = punch_list(results)
    # every check but cuda_arch, which needs a GPU to compare (no GPU is the gpu check's failure): it is
    # there, as not checked
    assert [name for name, _ in problems] == [n for n in CHECK_NAMES if n != "cuda_arch"]
    assert by_name(results)["cuda_arch"].status == "skipped"
    err = PreflightError(problems)
    text = str(err)
    assert text.startswith("9 preflight check(s) failed:")
    for name, detail in problems:
        assert f"  - [{name}] {detail}" in text
    assert err.exit_code == 4


def test_skips_are_recorded_with_what_the_check_found() -> None:
    results = apply_skips(run_checks(good_facts(ram_bytes=10**9), LIMITS, CUDA), ("ram", "os"))
    r = by_name(results)
    assert r["ram"].status == "skipped" and r["os"].status == "skipped"
    assert r["ram"].detail.startswith("skipped by --skip-preflight (it would have failed: expected >= 100 GB")
    assert r["os"].detail == "skipped by --skip-preflight (it would have passed)"
    assert punch_list(results) == []
    assert r["ram"].as_json() == {"name": "ram", "status": "skipped", "detail": r["ram"].detail}


def test_skipping_a_check_that_does_not_apply_is_still_recorded() -> None:
    results = apply_skips(run_checks(good_facts(), LIMITS, None), ("nvcc",))
    # order kept, nvcc inserted; cuda_arch does not apply without [cuda] and is not skipped
    assert [r.name for r in results] == [n for n in CHECK_NAMES if n != "cuda_arch"]
    assert by_name(results)["nvcc"].detail == ("skipped by --skip-preflight (the check does not apply "
                                               "to this recipe)")


def test_unknown_skip_name_is_a_usage_error_listing_valid_names() -> None:
    with pytest.raises(UsageError) as info:
        validate_skip(("ram", "gpus"))
    assert str(info.value) == (
        "--skip-preflight names an unknown check: gpus. Expected one of os, arch, nvcc, gpu, cuda_arch, ram, disk, git, "
        "compiler, uv, found 'gpus'.\n  -> use the check names exactly as listed (as `current doctor` prints them)")
    assert validate_skip(("ram", "disk", "ram")) == ("disk", "ram")


def test_evaluate_uses_the_recipe_sections(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.fixtures.preflight import write_recipe

    recipe = write_recipe(tmp_path, 'min_ram_gb = 200\nmin_compute_capability = "10.0"\n', cuda="12.9")
    r = by_name(evaluate(recipe, good_facts(), ("disk",)))
    assert not r["ram"].ok and not r["gpu"].ok and r["nvcc"].ok and r["disk"].status == "skipped"


def test_machine_facts_json_summary_round_trips_from_stored_facts() -> None:
    from october.installer.machine import facts_json

    facts = good_facts()
    summary = machine_facts_json(facts)
    assert summary == {"os": "Linux", "os_release": "6.8.0", "arch": "x86_64", "cpu_count": 64,
                       "python": "3.11.7", "ram_bytes": 137_438_953_472,
                       "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "compute_capability": "9.0",
                       "driver": "575.57.08", "cuda": "12.9.86", "nvcc": "/usr/local/cuda/bin/nvcc"}
    assert MachineFacts.from_json(facts_json(facts)) == facts
    assert machine_facts_json(facts_json(facts)) == summary
    none = machine_facts_json(good_facts(gpus=(), nvcc=missing("nvcc")))
    assert none["gpu_name"] is None and none["gpu_count"] == 0 and none["cuda"] is None


def test_cuda_arch_list_must_cover_every_gpu() -> None:
    """A JIT cache built for the wrong arch is a quiet failure: the GPU must be in the arch list."""
    assert {c.pair for c in parse_arch_list("8.9 9.0a;10.0+PTX")} == {(8, 9), (9, 0), (10, 0)}
    assert one("cuda_arch", good_facts()).ok  # H100 9.0 vs "9.0"
    assert one("cuda_arch", good_facts(), cuda=replace(CUDA, arch_list=parse_arch_list("9.0a"))).ok
    bad = one("cuda_arch", good_facts(), cuda=replace(CUDA, arch_list=parse_arch_list("8.0 8.9")))
    assert not bad.ok
    assert "expected every GPU's compute capability in the recipe's [cuda].arch_list ('8.0 8.9')" in bad.detail
    assert "NVIDIA H100 80GB HBM3 9.0" in bad.detail and "includes 9.0" in bad.detail
    unchecked = by_name(run_checks(good_facts(gpus=()), LIMITS, CUDA))["cuda_arch"]
    assert unchecked.status == "skipped" and unchecked.found == "no GPU here"
    assert unchecked.detail.startswith("not checked: no GPU here to compare with the recipe's [cuda].arch_list")
    skipped = by_name(apply_skips([unchecked], ("cuda_arch",)))["cuda_arch"]   # never "it would have passed"
    assert skipped.detail == f"skipped by --skip-preflight ({unchecked.detail})"
