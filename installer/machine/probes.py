"""Facts about this machine for the preflight checks.  Every program runs through the Runner under the step
``preflight`` (its output lands in ``STACK/logs/preflight.log``); a missing or broken tool is a fact
(``ToolFact.path is None`` or ``ToolFact.error``), never a crash."""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.errors import CommandFailed, ToolMissing
from ..core.idle import while_futures
from ..core.runner import Runner
from ..pyenv.uvcmd import uv_exe

STEP = "preflight"
PROBE_TIMEOUT_S = 120.0
NVIDIA_SMI_QUERY = ("--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader")
MEMINFO = Path("/proc/meminfo")


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class ToolFact:
    """One external program: where it is, what version it reports, or why not."""

    path: str | None = None          # None: not found
    version: str | None = None       # parsed from its output; None when unparsable
    line: str = ""                   # the first line of its output (for messages)
    error: str | None = None         # why it could not be run or parsed
    source: str = ""                 # how it was found: PATH, CUDA_HOME, CC, ...

    @property
    def present(self) -> bool:
        return self.path is not None and self.error is None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ToolFact":
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class GpuFact:
    name: str
    compute_capability: str          # as nvidia-smi prints it, e.g. "9.0"
    driver: str                      # e.g. "575.57.08"


@dataclass(frozen=True)
class MachineFacts:
    os: str                          # platform.system(): "Linux"
    os_release: str                  # platform.release()
    arch: str                        # platform.machine(): "x86_64"
    cpu_count: int
    python: str                      # the tool env's Python
    ram_bytes: int | None            # MemTotal; None when unreadable
    disk_path: str                   # nearest existing parent of the stack path
    disk_free_bytes: int | None
    nvcc: ToolFact = field(default_factory=ToolFact)
    nvidia_smi: ToolFact = field(default_factory=ToolFact)
    gpus: tuple[GpuFact, ...] = ()
    git: ToolFact = field(default_factory=ToolFact)
    cc: ToolFact = field(default_factory=ToolFact)
    cxx: ToolFact = field(default_factory=ToolFact)
    uv: ToolFact = field(default_factory=ToolFact)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "MachineFacts":
        """Inverse of ``dataclasses.asdict`` (what the preflight step stores)."""
        tools = {k: ToolFact.from_json(data.get(k) or {})
                 for k in ("nvcc", "nvidia_smi", "git", "cc", "cxx", "uv")}
        return cls(os=data["os"], os_release=data.get("os_release", ""), arch=data["arch"],
                   cpu_count=int(data.get("cpu_count", 0)), python=data.get("python", ""),
                   ram_bytes=data.get("ram_bytes"), disk_path=data.get("disk_path", ""),
                   disk_free_bytes=data.get("disk_free_bytes"),
                   gpus=tuple(GpuFact(**g) for g in data.get("gpus", ())), **tools)


# ------------------------------------------------------------------------- parsing


_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+)(?:, V(\d+(?:\.\d+)+))?")
_NUMBER = re.compile(r"\d+\.\d+(?:\.\d+)*")
_UV = re.compile(r"^uv (\S+)")


def parse_nvcc(output: str) -> str | None:
    """``nvcc --version`` -> full toolkit version ("12.9.86"), or "12.9" when no V-number."""
    m = _NVCC_RELEASE.search(output)
    return (m.group(3) or f"{m.group(1)}.{m.group(2)}") if m else None


def parse_nvidia_smi(output: str) -> tuple[tuple[GpuFact, ...], str | None]:
    """Rows ``name, compute_cap, driver_version`` -> GPUs, plus an error for an unreadable row."""
    gpus: list[GpuFact] = []
    for line in output.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            return tuple(gpus), f"unexpected nvidia-smi line {line.strip()!r}"
        gpus.append(GpuFact(name=parts[0], compute_capability=parts[1], driver=parts[2]))
    return tuple(gpus), None


def parse_git(output: str) -> str | None:
    m = re.search(r"git version (\d+(?:\.\d+)+)", output)
    return m.group(1) if m else None


def parse_compiler(output: str) -> str | None:
    """First line of ``cc --version``: the number after 'version', else the last number."""
    first = output.strip().splitlines()[0] if output.strip() else ""
    m = re.search(r"version\s+(\d+\.\d+(?:\.\d+)*)", first)
    if m:
        return m.group(1)
    numbers = _NUMBER.findall(first)
    return numbers[-1] if numbers else None


def parse_uv(output: str) -> str | None:
    m = _UV.search(output.strip())
    return m.group(1) if m else None


# -------------------------------------------------------------------------- probes


def first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _which(name: str, environ: Mapping[str, str]) -> str | None:
    if os.sep in name:
        return name if os.access(name, os.X_OK) and Path(name).is_file() else None
    return shutil.which(name, path=environ.get("PATH", ""))


def _release_line(text: str) -> str:
    """nvcc's informative line ("Cuda compilation tools, release 12.9, V12.9.86")."""
    return next((ln.strip() for ln in text.splitlines() if "release" in ln), None) or first_line(text)


def _run_tool(runner: Runner, argv: list[str], environ: Mapping[str, str], source: str,
              parse: Callable[[str], str | None],
              line_of: Callable[[str], str] = first_line) -> ToolFact:
    """Run one probe; a failure to start or a non-zero exit becomes ``ToolFact.error``."""
    exe = argv[0]
    try:
        done = runner.run(argv, step=STEP, env=dict(environ), check=False, timeout=PROBE_TIMEOUT_S)
    except (ToolMissing, CommandFailed, OSError) as exc:
        return ToolFact(path=exe, error=f"could not run `{shlex.join(argv)}`: {exc}", source=source)
    line = line_of(done.output)
    if done.returncode != 0:
        return ToolFact(path=exe, line=line, source=source,
                        error=f"`{shlex.join(argv)}` exited {done.returncode}: {line or 'no output'}")
    version = parse(done.output)
    if version is None:
        return ToolFact(path=exe, line=line, source=source,
                        error=f"could not read a version from `{shlex.join(argv)}`: {line or 'no output'!r}")
    return ToolFact(path=exe, version=version, line=line, source=source)


def find_nvcc(environ: Mapping[str, str]) -> tuple[str | None, str]:
    """The nvcc a CUDA build would use ($CUDA_HOME, $CUDA_PATH, PATH, /usr/local/cuda) -> (path or None, where)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = environ.get(var)
        if home:
            cand = Path(home) / "bin" / "nvcc"
            # an explicit CUDA_HOME wins even when broken: builds would use it too
            return (str(cand) if cand.is_file() else None), var
    on_path = _which("nvcc", environ)
    if on_path:
        return on_path, "PATH"
    default = Path("/usr/local/cuda/bin/nvcc")
    if default.is_file():
        return str(default), "/usr/local/cuda"
    return None, "PATH"


def probe_nvcc(runner: Runner, environ: Mapping[str, str]) -> ToolFact:
    path, source = find_nvcc(environ)
    if path is None:
        where = f"${source}/bin/nvcc ({environ.get(source)})" if source in ("CUDA_HOME", "CUDA_PATH") \
            else "nvcc on PATH or /usr/local/cuda/bin/nvcc"
        return ToolFact(source=source, error=f"not found: looked for {where}")
    return _run_tool(runner, [path, "--version"], environ, source, parse_nvcc, line_of=_release_line)


def probe_gpus(runner: Runner, environ: Mapping[str, str]) -> tuple[ToolFact, tuple[GpuFact, ...]]:
    path = _which("nvidia-smi", environ)
    if path is None:
        return ToolFact(source="PATH", error="not found: no nvidia-smi on PATH"), ()
    argv = [path, *NVIDIA_SMI_QUERY]
    try:
        done = runner.run(argv, step=STEP, env=dict(environ), check=False, timeout=PROBE_TIMEOUT_S)
    except (ToolMissing, CommandFailed, OSError) as exc:
        return ToolFact(path=path, source="PATH", error=f"could not run nvidia-smi: {exc}"), ()
    line = first_line(done.output)
    if done.returncode != 0:
        return ToolFact(path=path, line=line, source="PATH",
                        error=f"nvidia-smi exited {done.returncode}: {line or 'no output'}"), ()
    gpus, err = parse_nvidia_smi(done.output)
    driver = gpus[0].driver if gpus else None
    return ToolFact(path=path, version=driver, line=line, error=err, source="PATH"), gpus


def probe_compiler(runner: Runner, environ: Mapping[str, str], var: str,
                   names: tuple[str, ...]) -> ToolFact:
    """``$CC``/``$CXX`` when set (a broken one is a failure, not a fallback), else the first of ``names``."""
    value = environ.get(var, "").strip()
    if value:
        words = shlex.split(value)
        path = _which(words[0], environ)
        if path is None:
            return ToolFact(source=var, error=f"${var}={value!r} names a program that is not on PATH")
        return _run_tool(runner, [path, *words[1:], "--version"], environ, var, parse_compiler)
    for name in names:
        path = _which(name, environ)
        if path is not None:
            return _run_tool(runner, [path, "--version"], environ, "PATH", parse_compiler)
    return ToolFact(source="PATH", error=f"not found: none of {', '.join(names)} on PATH and ${var} unset")


def probe_simple(runner: Runner, environ: Mapping[str, str], exe: str,
                 parse: Callable[[str], str | None]) -> ToolFact:
    path = _which(exe, environ)
    if path is None:
        return ToolFact(source="PATH", error=f"not found: no {exe} on PATH")
    return _run_tool(runner, [path, "--version"], environ, "PATH" if os.sep not in exe else "tool env", parse)


def read_ram_bytes(meminfo: Path = MEMINFO) -> int | None:
    """MemTotal from /proc/meminfo (kB = KiB), else sysconf; None when neither works."""
    try:
        for line in meminfo.read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if meminfo != MEMINFO:
        return None  # a test pointed us at a specific file: do not fall back to the real machine
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (OSError, ValueError, AttributeError):
        return None


def nearest_existing(path: Path) -> Path:
    """``path`` or its closest parent that exists (the filesystem the stack will live on)."""
    p = Path(os.path.abspath(path.expanduser()))
    while not p.exists() and p.parent != p:
        p = p.parent
    return p


def disk_free(stack: Path) -> tuple[str, int | None]:
    where = nearest_existing(stack)
    try:
        return str(where), shutil.disk_usage(where).free
    except OSError:
        return str(where), None


def gather_facts(stack: Path, runner: Runner, *, environ: Mapping[str, str] | None = None,
                 uv: str | None = None, meminfo: Path = MEMINFO) -> MachineFacts:
    """Probe this machine. ``uv`` defaults to :func:`october.installer.pyenv.uvcmd.uv_exe` (the tool env's uv)."""
    env = dict(os.environ if environ is None else environ)
    # the probes start one program each (nvidia-smi alone took seconds on the H200): all at once
    with ThreadPoolExecutor(max_workers=6) as pool:
        gpus_f = pool.submit(probe_gpus, runner, env)
        nvcc_f = pool.submit(probe_nvcc, runner, env)
        git_f = pool.submit(probe_simple, runner, env, "git", parse_git)
        cc_f = pool.submit(probe_compiler, runner, env, "CC", ("gcc", "cc", "clang"))
        cxx_f = pool.submit(probe_compiler, runner, env, "CXX", ("g++", "c++", "clang++"))
        uv_f = pool.submit(probe_simple, runner, env, uv_exe() if uv is None else uv, parse_uv)
        disk_path, free = disk_free(stack)
        ram = read_ram_bytes(meminfo)
        jobs = (gpus_f, nvcc_f, git_f, cc_f, cxx_f, uv_f)
        while_futures(jobs)   # imports a later step makes (core.idle)
        nvidia_smi, gpus = gpus_f.result()
        return MachineFacts(
            os=platform.system(), os_release=platform.release(), arch=platform.machine(),
            cpu_count=os.cpu_count() or 0, python=platform.python_version() or sys.version.split()[0],
            ram_bytes=ram, disk_path=disk_path, disk_free_bytes=free,
            nvcc=nvcc_f.result(), nvidia_smi=nvidia_smi, gpus=gpus, git=git_f.result(),
            cc=cc_f.result(), cxx=cxx_f.result(), uv=uv_f.result(),
        )
