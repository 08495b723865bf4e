"""Which wheel tags the *stack* Python accepts, and its PEP 508 marker environment.

The stack env's interpreter is asked (through a Runner) for a few facts with a
stdlib-only script; the tag list is then computed here, in the tool env, with
``packaging.tags`` from those facts, so nothing of the tool leaks into the stack
env and the computation itself is a pure, testable function.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from packaging import tags as ptags

from october.installer.core.errors import EnvError
from october.installer.core.runner import Runner

# Runs inside the stack interpreter: standard library only.
PROBE_SCRIPT = r"""
import json, os, platform, struct, sys, sysconfig
try:
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
except (AttributeError, ValueError, OSError):
    libc = ""
impl = sys.implementation
iv = impl.version
impl_version = "%d.%d.%d" % (iv.major, iv.minor, iv.micro)
if iv.releaselevel != "final":
    impl_version += iv.releaselevel[0] + str(iv.serial)
print(json.dumps({
    "implementation": impl.name,
    "version": [sys.version_info[0], sys.version_info[1]],
    "py_debug": bool(sysconfig.get_config_var("Py_DEBUG")),
    "gil_disabled": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    "platform": sysconfig.get_platform(),
    "machine": platform.machine(),
    "pointer_bits": struct.calcsize("P") * 8,
    "libc": libc,
    "markers": {
        "implementation_name": impl.name,
        "implementation_version": impl_version,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": "%d.%d" % sys.version_info[:2],
        "sys_platform": sys.platform,
    },
}))
"""

# manylinux legacy aliases: (glibc minor, arches it applies to)
_LEGACY = {17: ("manylinux2014", ("x86_64", "i686", "aarch64", "armv7l", "ppc64", "ppc64le", "s390x")),
           12: ("manylinux2010", ("x86_64", "i686")),
           5: ("manylinux1", ("x86_64", "i686"))}


@dataclass(frozen=True)
class PythonFacts:
    implementation: str
    version: tuple[int, int]
    py_debug: bool
    gil_disabled: bool
    platform: str            # sysconfig.get_platform(), e.g. "linux-x86_64"
    machine: str
    libc: str                # "glibc 2.36", or "" (musl, macOS, ...)
    markers: Mapping[str, str]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PythonFacts":
        return cls(implementation=str(data["implementation"]),
                   version=(int(data["version"][0]), int(data["version"][1])),
                   py_debug=bool(data["py_debug"]), gil_disabled=bool(data["gil_disabled"]),
                   platform=str(data["platform"]), machine=str(data["machine"]),
                   libc=str(data.get("libc", "")), markers=dict(data["markers"]))


def probe_python(runner: Runner, python: Path, *, step: str) -> PythonFacts:
    """Ask ``python`` (the stack interpreter) for its tag-relevant facts."""
    done = runner.run([python, "-c", PROBE_SCRIPT], step=step)
    lines = [ln for ln in done.output.splitlines() if ln.startswith("{")]
    try:
        return PythonFacts.from_json(json.loads(lines[-1]))
    except (IndexError, ValueError, KeyError, TypeError):
        raise EnvError(f"the stack Python {python} did not describe itself",
                       expected="one JSON line from the tag probe",
                       found=repr(done.output[-300:]),
                       fix=f"run `{python} -c 'import sys; print(sys.version)'`; re-run the env step if it fails"
                       ) from None


def _platforms(facts: PythonFacts) -> list[str]:
    if not facts.platform.startswith("linux"):
        # Not a target of this tool (Linux only): accept just the exact platform, fail closed.
        return [facts.platform.replace("-", "_").replace(".", "_")]
    arch = facts.machine
    if arch == "x86_64" and facts.platform.endswith("i686"):
        arch = "i686"
    out: list[str] = []
    parts = facts.libc.split()
    if len(parts) == 2 and parts[0] == "glibc":
        try:
            major, minor = (int(x) for x in parts[1].split(".")[:2])
        except ValueError:
            major, minor = 0, 0
        if major == 2:
            floor = 5 if arch in ("x86_64", "i686") else 17
            for m in range(minor, floor - 1, -1):
                out.append(f"manylinux_2_{m}_{arch}")
                legacy = _LEGACY.get(m)
                if legacy and arch in legacy[1]:
                    out.append(f"{legacy[0]}_{arch}")
    out.append(f"linux_{arch}")
    return out


def supported_tags(facts: PythonFacts) -> list[str]:
    """Every tag the interpreter described by ``facts`` installs, most specific first."""
    if facts.implementation != "cpython":
        raise EnvError("the stack Python is not CPython", expected="CPython (the recipe's python)",
                       found=facts.implementation, fix="re-create the stack env with the recipe's CPython")
    platforms = _platforms(facts)
    major, minor = facts.version
    abi = f"cp{major}{minor}{'t' if facts.gil_disabled else ''}{'d' if facts.py_debug else ''}"
    found: list[str] = []
    for tag in ptags.cpython_tags(python_version=facts.version, abis=[abi], platforms=platforms):
        found.append(str(tag))
    for tag in ptags.compatible_tags(python_version=facts.version, interpreter=f"cp{major}{minor}",
                                     platforms=platforms):
        found.append(str(tag))
    return list(dict.fromkeys(found))
