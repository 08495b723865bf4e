"""Which wheel tags the *stack* Python accepts, and its PEP 508 marker environment.

Both are packaging's own answer, run in the stack interpreter (``python -I -B``) with the tool's copy of
``packaging`` loaded by path: the stack env need not have packaging, and nothing else of the tool's
site-packages goes on its ``sys.path``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import packaging

from ..core.errors import EnvError
from ..core.runner import Runner

# Runs inside the stack interpreter; argv[1] is the tool's packaging package directory.
PROBE_SCRIPT = r"""
import importlib.util, json, os, sys
where = sys.argv[1]
for name in [n for n in sys.modules if n == "packaging" or n.startswith("packaging.")]:
    del sys.modules[name]
spec = importlib.util.spec_from_file_location("packaging", os.path.join(where, "__init__.py"),
                                              submodule_search_locations=[where])
module = importlib.util.module_from_spec(spec)
sys.modules["packaging"] = module
spec.loader.exec_module(module)
from packaging import markers, tags
print(json.dumps({
    "implementation": sys.implementation.name,
    "version": list(sys.version_info[:2]),
    "tags": [str(t) for t in tags.sys_tags()],
    "markers": dict(markers.default_environment()),
}))
"""


@dataclass(frozen=True)
class PythonFacts:
    implementation: str
    version: tuple[int, int]
    tags: tuple[str, ...]            # packaging.tags.sys_tags() there, most specific first
    markers: Mapping[str, str]       # packaging.markers.default_environment() there

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PythonFacts":
        tags = data["tags"]
        if not isinstance(tags, list) or not tags or not all(isinstance(t, str) for t in tags):
            raise TypeError("tags")
        return cls(implementation=str(data["implementation"]),
                   version=(int(data["version"][0]), int(data["version"][1])),
                   tags=tuple(tags), markers={str(k): str(v) for k, v in dict(data["markers"]).items()})


def packaging_dir() -> Path:
    """The directory of the tool's own ``packaging`` package (what the probe loads)."""
    return Path(packaging.__file__).resolve().parent


def probe_python(runner: Runner, python: Path, *, step: str) -> PythonFacts:
    """Ask ``python`` (the stack interpreter) what packaging says there: its tags and marker environment."""
    done = runner.run([python, "-I", "-B", "-c", PROBE_SCRIPT, packaging_dir()], step=step, quiet=True)
    lines = [ln for ln in done.output.splitlines() if ln.startswith("{")]
    try:
        return PythonFacts.from_json(json.loads(lines[-1]))
    except (IndexError, ValueError, KeyError, TypeError, AttributeError):
        raise EnvError(f"the stack Python {python} did not describe itself",
                       expected="one JSON line from the tag probe (packaging.tags.sys_tags() run there)",
                       found=f"{done.output[-300:]!r} (log: {runner.log_path(step)})",
                       fix=f"run `{shlex.quote(str(python))} -c 'import sys; print(sys.version)'`; re-run the env step if it fails"
                       ) from None


def supported_tags(facts: PythonFacts) -> list[str]:
    """Every tag the interpreter described by ``facts`` installs, most specific first."""
    if facts.implementation != "cpython":
        raise EnvError("the stack Python is not CPython", expected="CPython (the recipe's python)",
                       found=facts.implementation, fix="re-create the stack env with the recipe's CPython")
    return list(dict.fromkeys(facts.tags))
