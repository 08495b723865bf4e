"""Probes on this real machine, and on stand-in tools placed on PATH.

nvcc 12.9 and nvidia-smi (with a GPU) cannot exist on the development machine:
those are tiny /bin/sh scripts (tests/fixtures/preflight.py::fake_tool) that
print the real tools' output.  Everything else (git, gcc, uv, /proc/meminfo,
disk usage, the Runner and its log) is real.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from october.installer.core.runner import Runner
from october.installer.machine import gather_facts
from october.installer.machine.probes import (
    find_nvcc,
    nearest_existing,
    parse_compiler,
    parse_nvcc,
    parse_nvidia_smi,
    parse_uv,
    read_ram_bytes,
)
from october.installer.pyenv.uvcmd import uv_exe
from tests.fixtures.preflight import NVCC_12_9, SMI_H100, fake_tool, link_real


def env_with(path: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "CC", "CXX")}
    env["PATH"] = path
    env.update(extra)
    return env


def test_real_machine(tmp_path: Path) -> None:
    runner = Runner(tmp_path / "logs")
    facts = gather_facts(tmp_path / "stack" / "not" / "yet", runner)
    assert facts.os == platform.system() and facts.arch == platform.machine()
    assert facts.cpu_count == os.cpu_count()
    assert facts.ram_bytes is not None and facts.ram_bytes > 10**8
    assert facts.disk_path == str(tmp_path)  # nearest existing parent of the stack path
    assert facts.disk_free_bytes == pytest.approx(shutil.disk_usage(tmp_path).free, rel=0.05)
    real_git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    assert facts.git.present and facts.git.version == real_git.split()[2]
    real_uv = subprocess.run([uv_exe(), "--version"], capture_output=True, text=True).stdout
    assert facts.uv.path == uv_exe() and facts.uv.version == real_uv.split()[1]
    if shutil.which("nvidia-smi") is None:
        assert facts.nvidia_smi.error == "not found: no nvidia-smi on PATH" and facts.gpus == ()
    if shutil.which("gcc") and not os.environ.get("CC"):
        assert facts.cc.present and facts.cc.path == shutil.which("gcc")
    log = (tmp_path / "logs" / "preflight.log").read_text()
    assert f"$ {uv_exe()} --version" in log and "--version" in log


def test_fake_nvcc_and_nvidia_smi_on_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "nvcc", NVCC_12_9)
    fake_tool(bin_dir, "nvidia-smi", SMI_H100 + "NVIDIA H100 80GB HBM3, 9.0, 575.57.08\n")
    link_real(bin_dir, "git", "gcc", "g++")
    facts = gather_facts(tmp_path / "stack", Runner(tmp_path / "logs"), environ=env_with(str(bin_dir)))
    assert facts.nvcc.version == "12.9.86" and facts.nvcc.path == str(bin_dir / "nvcc")
    assert facts.nvcc.line == "Cuda compilation tools, release 12.9, V12.9.86"
    assert facts.nvcc.source == "PATH"
    assert len(facts.gpus) == 2 and facts.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert facts.gpus[0].compute_capability == "9.0" and facts.nvidia_smi.version == "575.57.08"
    log = (tmp_path / "logs" / "preflight.log").read_text()
    assert "--query-gpu=name,compute_cap,driver_version --format=csv,noheader" in log


def test_cuda_home_wins_over_path_and_a_broken_one_is_reported(tmp_path: Path) -> None:
    fake_tool(tmp_path / "bin", "nvcc", NVCC_12_9.replace("12.9", "12.8"))
    fake_tool(tmp_path / "cuda-12.9" / "bin", "nvcc", NVCC_12_9)
    env = env_with(str(tmp_path / "bin"), CUDA_HOME=str(tmp_path / "cuda-12.9"))
    assert find_nvcc(env) == (str(tmp_path / "cuda-12.9" / "bin" / "nvcc"), "CUDA_HOME")
    facts = gather_facts(tmp_path, Runner(tmp_path / "logs"), environ=env)
    assert facts.nvcc.version == "12.9.86" and facts.nvcc.source == "CUDA_HOME"
    broken = env_with(str(tmp_path / "bin"), CUDA_HOME=str(tmp_path / "nowhere"))
    facts = gather_facts(tmp_path, Runner(tmp_path / "logs"), environ=broken)
    assert not facts.nvcc.present
    assert facts.nvcc.error == f"not found: looked for $CUDA_HOME/bin/nvcc ({tmp_path / 'nowhere'})"


def test_nothing_on_path_is_facts_not_a_crash(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    facts = gather_facts(tmp_path / "s", Runner(tmp_path / "logs"), environ=env_with(str(empty)),
                         uv=str(tmp_path / "no-uv"))
    for fact in (facts.nvidia_smi, facts.git, facts.cc, facts.cxx, facts.uv):
        assert not fact.present and fact.error is not None
    assert facts.git.error == "not found: no git on PATH"
    assert facts.cc.error == "not found: none of gcc, cc, clang on PATH and $CC unset"
    assert facts.uv.error == f"not found: no {tmp_path / 'no-uv'} on PATH"
    if not Path("/usr/local/cuda/bin/nvcc").is_file():
        assert facts.nvcc.error == "not found: looked for nvcc on PATH or /usr/local/cuda/bin/nvcc"


def test_nvidia_smi_without_a_driver(tmp_path: Path) -> None:
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
           "Make sure that the latest NVIDIA driver is installed and running.\n")
    fake_tool(tmp_path / "bin", "nvidia-smi", msg, rc=9)
    facts = gather_facts(tmp_path, Runner(tmp_path / "logs"), environ=env_with(str(tmp_path / "bin")))
    assert facts.gpus == ()
    assert facts.nvidia_smi.error == f"nvidia-smi exited 9: {msg.strip()}"


def test_nvidia_smi_too_old_for_compute_cap(tmp_path: Path) -> None:
    fake_tool(tmp_path / "bin", "nvidia-smi", 'Field "compute_cap" is not a valid field to query.\n', rc=2)
    facts = gather_facts(tmp_path, Runner(tmp_path / "logs"), environ=env_with(str(tmp_path / "bin")))
    assert facts.nvidia_smi.error == 'nvidia-smi exited 2: Field "compute_cap" is not a valid field to query.'


def test_compiler_from_cc_env_and_a_broken_cc_does_not_fall_back(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "mycc", "clang version 18.1.8 (https://github.com/llvm/llvm-project)\n")
    link_real(bin_dir, "g++")
    facts = gather_facts(tmp_path, Runner(tmp_path / "logs"), environ=env_with(str(bin_dir), CC="mycc"))
    assert facts.cc.version == "18.1.8" and facts.cc.source == "CC" and facts.cc.path == str(bin_dir / "mycc")
    link_real(bin_dir, "gcc")
    facts = gather_facts(tmp_path, Runner(tmp_path / "logs"), environ=env_with(str(bin_dir), CC="nosuchcc"))
    assert not facts.cc.present
    assert facts.cc.error == "$CC='nosuchcc' names a program that is not on PATH"


def test_tool_that_cannot_start_or_fails(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    noexec = bin_dir / "git"
    noexec.write_bytes(b"\x7fELF-but-not-really")
    noexec.chmod(0o755)
    fake_tool(bin_dir, "gcc", "gcc: fatal error: broken install\n", rc=4)
    facts = gather_facts(tmp_path, Runner(tmp_path / "logs"), environ=env_with(str(bin_dir)))
    assert facts.git.path == str(noexec) and facts.git.error is not None
    assert facts.git.error.startswith(f"could not run `{noexec} --version`: ")
    assert facts.cc.error == f"`{bin_dir / 'gcc'} --version` exited 4: gcc: fatal error: broken install"


def test_old_uv_is_read(tmp_path: Path) -> None:
    uv = fake_tool(tmp_path / "bin", "uv", "uv 0.8.3 (7e78f54e7 2025-07-24)\n")
    facts = gather_facts(tmp_path, Runner(tmp_path / "logs"), environ=env_with(str(tmp_path / "bin")),
                         uv=str(uv))
    assert facts.uv.version == "0.8.3" and facts.uv.source == "tool env"


def test_meminfo(tmp_path: Path) -> None:
    mi = tmp_path / "meminfo"
    mi.write_text("MemTotal:       131890108 kB\nMemFree:         1000 kB\n")
    assert read_ram_bytes(mi) == 131890108 * 1024
    mi.write_text("garbage\n")
    assert read_ram_bytes(mi) is None
    assert read_ram_bytes(tmp_path / "missing") is None


def test_nearest_existing(tmp_path: Path) -> None:
    assert nearest_existing(tmp_path / "a" / "b") == tmp_path
    assert nearest_existing(tmp_path) == tmp_path


def test_parsers() -> None:
    assert parse_nvcc(NVCC_12_9) == "12.9.86"
    assert parse_nvcc("Cuda compilation tools, release 11.8") == "11.8"
    assert parse_nvcc("something else") is None
    gpus, err = parse_nvidia_smi(SMI_H100)
    assert err is None and gpus[0].driver == "575.57.08"
    gpus, err = parse_nvidia_smi("NVIDIA H200, 9.0, 580.159.04\n")  # as the lent H200 prints it
    assert err is None and gpus[0].name == "NVIDIA H200" and gpus[0].compute_capability == "9.0"
    gpus, err = parse_nvidia_smi("No devices were found\n")
    assert gpus == () and err == "unexpected nvidia-smi line 'No devices were found'"
    assert parse_compiler("gcc (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright") == "12.2.0"
    assert parse_compiler("Apple clang version 15.0.0 (clang-1500.3.9.4)") == "15.0.0"
    assert parse_uv("uv 0.13.9 (x86_64-unknown-linux-gnu)") == "0.13.9"
    assert parse_uv("october 0.1.0") is None  # `uv version` (the project's) must never be mistaken
