"""Pure checks: machine facts + the recipe's limits -> one result per check, whose failed ``detail`` is a
complete punch-list line (expected, found, what to do).  Sizes are decimal: 1 GB = 10**9 bytes."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..core.errors import RecipeError
from .probes import MachineFacts, ToolFact
from ..recipe import CudaPin, PreflightLimits

CHECK_NAMES: tuple[str, ...] = ("os", "arch", "nvcc", "gpu", "cuda_arch", "ram", "disk", "git", "compiler", "uv")
# Not skippable (not in CHECK_NAMES): a site-provided torch that is not the recipe's cannot be waved through.
SYSTEM_TORCH_CHECK = "torch"
GB = 10**9
# Minimum Linux driver (major) for each CUDA toolkit major under minor-version compatibility (NVIDIA's
# "CUDA Compatibility" guide, table "CUDA Toolkit 11.x, 12.x, and 13.x Driver Version Ranges").
MIN_DRIVER_FOR_CUDA_MAJOR: dict[int, int] = {11: 450, 12: 525, 13: 580}
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
_CAPABILITY = re.compile(r"^(\d+)\.(\d+)$")


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str           # one line: the punch-list text when failed
    expected: str
    found: str
    fix: str = ""
    skipped: bool = False

    @property
    def status(self) -> str:
        return "skipped" if self.skipped else "passed" if self.ok else "failed"

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


def _result(name: str, ok: bool, expected: str, found: str, fix: str) -> CheckResult:
    detail = f"found {found}; expected {expected}" if ok else f"expected {expected}, found {found} -> {fix}"
    return CheckResult(name=name, ok=ok, detail=detail, expected=expected, found=found,
                       fix="" if ok else fix)


def parse_capability(text: str) -> tuple[int, int] | None:
    """"9.0" -> (9, 0); "10.0" -> (10, 0): compared as numbers, never as strings."""
    m = _CAPABILITY.match(text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def gb_floor(n_bytes: int) -> str:
    """Bytes as GB with one decimal, rounded down (so a shortfall never prints as enough)."""
    return f"{math.floor(n_bytes / (GB / 10)) / 10:.1f} GB"


def _limit(x: float) -> str:
    return f"{x:g} GB"


def _tool_found(fact: ToolFact, label: str) -> str:
    if fact.error is not None:
        return f"{label} {fact.error}" if fact.path is None else f"{label} at {fact.path}: {fact.error}"
    return f"{label} {fact.version} at {fact.path}"


# -------------------------------------------------------------------------- checks


def check_os(facts: MachineFacts, limits: PreflightLimits) -> CheckResult:
    return _result("os", facts.os == limits.os, f"{limits.os} (the recipe's [preflight].os)",
                   facts.os or "an unknown OS", f"run october_setup on a {limits.os} machine")


def check_arch(facts: MachineFacts, limits: PreflightLimits) -> CheckResult:
    have = _ARCH_ALIASES.get(facts.arch.lower(), facts.arch)
    want = _ARCH_ALIASES.get(limits.arch.lower(), limits.arch)
    return _result("arch", have == want, f"{want} (the recipe's [preflight].arch)",
                   facts.arch or "an unknown architecture",
                   f"use a {want} machine: the recipe's wheels are built for {want} only")


def check_nvcc(facts: MachineFacts, cuda: CudaPin) -> CheckResult:
    expected = f"nvcc {cuda.version} (the recipe's [cuda].version)"
    fix = (f"install the CUDA {cuda.version} toolkit and point CUDA_HOME at it "
           f"(or put its bin/ first on PATH)")
    nv = facts.nvcc
    ok = nv.present and nv.version is not None and ".".join(nv.version.split(".")[:2]) == cuda.version
    return _result("nvcc", ok, expected, _tool_found(nv, "nvcc"), fix)


def check_gpu(facts: MachineFacts, min_capability: str, cuda: CudaPin | None) -> CheckResult:
    """Every listed GPU must reach ``min_capability``; with a CUDA pin, the driver must support it."""
    want = parse_capability(min_capability)
    assert want is not None, "validated by run_checks"
    expected = f"an NVIDIA GPU with compute capability >= {min_capability}"
    driver_floor: int | None = None
    if cuda is not None:
        driver_floor = MIN_DRIVER_FOR_CUDA_MAJOR.get(int(cuda.version.split(".")[0]))
        if driver_floor is not None:
            expected += f" and a driver >= {driver_floor} (CUDA {cuda.version})"
    smi = facts.nvidia_smi
    if smi.error is not None or not facts.gpus:
        found = f"no GPU ({smi.error})" if smi.error else "no GPU (nvidia-smi listed none)"
        return _result("gpu", False, expected, found,
                       "run on a machine with a supported NVIDIA GPU and a working driver "
                       "(`nvidia-smi` must list it)")
    found = "; ".join(f"{g.name} (compute capability {g.compute_capability}, driver {g.driver})"
                      for g in facts.gpus)
    if any((cap := parse_capability(g.compute_capability)) is None or cap < want for g in facts.gpus):
        return _result("gpu", False, expected, found,
                       f"use a GPU with compute capability >= {min_capability} (the K16/V8 kernels need it)")
    # no readable driver version counts as too old (every floor is > 0)
    if driver_floor is not None and any((_driver_major(g.driver) or 0) < driver_floor for g in facts.gpus):
        return _result("gpu", False, expected, found, f"install an NVIDIA driver >= {driver_floor}")
    return _result("gpu", True, expected, found, "")


def check_cuda_arch(facts: MachineFacts, cuda: CudaPin) -> CheckResult:
    """Every GPU here must be in the recipe's JIT arch list, or the kernels are built for the wrong arch."""
    expected = f"every GPU's compute capability in the recipe's [cuda].arch_list ({cuda.flashinfer_arch_list!r})"
    wanted = {c.pair for c in cuda.arch_list}     # "9.0a" runs on a 9.0 GPU: the suffix is how it is built
    found = ", ".join(f"{g.name} {g.compute_capability}" for g in facts.gpus)
    missing = [g for g in facts.gpus if parse_capability(g.compute_capability) not in wanted]
    return _result("cuda_arch", not missing, expected, found,
                   f"use a recipe whose [cuda].arch_list includes "
                   f"{', '.join(sorted({g.compute_capability for g in missing}))} (a JIT cache built for "
                   "another arch cannot run here)" if missing else "")


def arch_not_checked(cuda: CudaPin) -> CheckResult:
    """``cuda_arch`` where no GPU is seen: nothing to compare (no GPU is the ``gpu`` check's failure), so not
    checked, and said as such, with what the JIT will build for."""
    expected = f"every GPU's compute capability in the recipe's [cuda].arch_list ({cuda.flashinfer_arch_list!r})"
    return CheckResult(name="cuda_arch", ok=True, skipped=True, expected=expected, found="no GPU here",
                       detail=f"not checked: no GPU here to compare with the recipe's [cuda].arch_list "
                              f"({cuda.flashinfer_arch_list!r}); the JIT modules are built for that list")


def _driver_major(driver: str) -> int | None:
    head = driver.strip().split(".")[0]
    return int(head) if head.isdigit() else None


def check_ram(facts: MachineFacts, limits: PreflightLimits) -> CheckResult:
    expected = f">= {_limit(limits.min_ram_gb)} RAM (the recipe's [preflight].min_ram_gb)"
    fix = "use a machine with more memory, or lower [preflight].min_ram_gb if you know the build fits"
    if facts.ram_bytes is None:
        return _result("ram", False, expected, "unknown (could not read MemTotal from /proc/meminfo)",
                       "check /proc/meminfo is readable, or skip with --skip-preflight ram")
    ok = facts.ram_bytes >= limits.min_ram_gb * GB
    return _result("ram", ok, expected, f"{gb_floor(facts.ram_bytes)} RAM", fix)


def check_disk(facts: MachineFacts, limits: PreflightLimits) -> CheckResult:
    expected = (f">= {_limit(limits.min_disk_gb)} free at {facts.disk_path} "
                f"(the recipe's [preflight].min_disk_gb)")
    fix = "free some space there, or choose a stack path on a larger filesystem"
    if facts.disk_free_bytes is None:
        return _result("disk", False, expected, f"unknown (could not stat {facts.disk_path})", fix)
    ok = facts.disk_free_bytes >= limits.min_disk_gb * GB
    return _result("disk", ok, expected, f"{gb_floor(facts.disk_free_bytes)} free", fix)


def check_git(facts: MachineFacts) -> CheckResult:
    return _result("git", facts.git.present, "git on PATH", _tool_found(facts.git, "git"),
                   "install git (e.g. `apt-get install git`) and put it on PATH")


def check_compiler(facts: MachineFacts) -> CheckResult:
    ok = facts.cc.present and facts.cxx.present
    found = f"{_tool_found(facts.cc, 'C compiler')}; {_tool_found(facts.cxx, 'C++ compiler')}"
    return _result("compiler", ok, "a C and a C++ compiler ($CC/$CXX, or gcc/g++ on PATH)", found,
                   "install gcc and g++ (e.g. `apt-get install build-essential`) or set CC and CXX")


UV_FLOOR = "0.12.11"
"""The oldest uv the tool works with, whatever the recipe says: before it, ``uv pip compile -o pylock.toml``
writes no hash for a wheel from ``--find-links`` or a hashless index, which the lock step refuses
(0.12.10 writes none, 0.12.11 does; astral-sh/uv#20146)."""


def check_uv(facts: MachineFacts, limits: PreflightLimits) -> CheckResult:
    spec = limits.uv
    expected = f"uv >={UV_FLOOR} (the tool's floor)" + (f" and {spec} (the recipe's [preflight].uv)" if spec else "")
    fix = ("run `uv sync` in this project (it installs the uv that pyproject.toml pins into the tool env), "
           "or upgrade uv with `uv self update`")
    uv = facts.uv
    ok = uv.present and uv.version is not None
    if ok:
        try:
            ok = all(SpecifierSet(s).contains(Version(str(uv.version)), prereleases=True)
                     for s in (f">={UV_FLOOR}", spec) if s)
        except InvalidVersion:
            ok = False
    return _result("uv", ok, expected, _tool_found(uv, "uv"), fix)


# ----------------------------------------------------------------------- together


def run_checks(facts: MachineFacts, limits: PreflightLimits, cuda: CudaPin | None, *,
               recipe_file: Path | str = "the recipe") -> list[CheckResult]:
    """Every check that applies to the recipe, in :data:`CHECK_NAMES` order (``cuda_arch`` needs a GPU to
    compare: without one it is not checked, :func:`arch_not_checked`, and no GPU is the ``gpu`` check's
    failure)."""
    if limits.min_compute_capability is not None and parse_capability(limits.min_compute_capability) is None:
        raise RecipeError(recipe_file, "preflight.min_compute_capability",
                          expected="a compute capability major.minor such as '9.0'",
                          found=repr(limits.min_compute_capability))
    results = [check_os(facts, limits), check_arch(facts, limits)]
    if cuda is not None:
        results.append(check_nvcc(facts, cuda))
    if limits.min_compute_capability is not None:
        results.append(check_gpu(facts, limits.min_compute_capability, cuda))
    if cuda is not None:
        results.append(check_cuda_arch(facts, cuda) if facts.gpus else arch_not_checked(cuda))
    results += [check_ram(facts, limits), check_disk(facts, limits), check_git(facts)]
    if limits.need_compiler:
        results.append(check_compiler(facts))
    results.append(check_uv(facts, limits))
    return results


def apply_skips(results: Sequence[CheckResult], skip: Iterable[str]) -> list[CheckResult]:
    """Mark skipped checks, keeping what each found (the receipt shows what was waved through); a skipped
    check that did not apply still appears, as skipped."""
    names, seen = set(skip), {r.name for r in results}
    out: list[CheckResult] = []
    for r in results:
        if r.name in names:
            verdict = r.detail if r.skipped else "it would have passed" if r.ok else f"it would have failed: {r.detail}"
            out.append(replace(r, skipped=True, detail=f"skipped by --skip-preflight ({verdict})"))
        else:
            out.append(r)
    out += [CheckResult(name=name, ok=True, skipped=True, expected="", found="",
                        detail="skipped by --skip-preflight (the check does not apply to this recipe)")
            for name in CHECK_NAMES if name in names and name not in seen]
    order = {n: i for i, n in enumerate(CHECK_NAMES)}
    return sorted(out, key=lambda r: order.get(r.name, len(order)))


def system_torch_result(judged: tuple[bool, str, str, str]) -> CheckResult:
    """The ``torch`` check of a site-provided torch: ``judged`` is :func:`october.installer.pyenv.systorch.check`."""
    ok, expected, found, fix = judged
    return _result(SYSTEM_TORCH_CHECK, ok, expected, found, fix)


def failures(results: Sequence[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.status == "failed"]


def punch_list(results: Sequence[CheckResult]) -> list[tuple[str, str]]:
    """(name, text) of every failed check: what :class:`PreflightError` takes."""
    return [(r.name, r.detail) for r in failures(results)]
