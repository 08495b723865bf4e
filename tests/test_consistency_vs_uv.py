"""Why the install step's consistency check is ours and not ``uv pip check`` (issue 21): on real venvs
(made by uv, one of them the way the env step makes a stack on a site-provided torch:
``--system-site-packages`` plus our ``.pth`` adding the system interpreter's site directory),
``uv pip check --python ENV/bin/python`` and :func:`~october.installer.install.consistency.conflicts`
agree on a version conflict and a missing requirement, and uv misses the three cases below.  If uv
starts catching one, the test fails and says which: that part can then be handed to uv.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.install import consistency
from october.installer.pyenv.systorch import PTH_NAME
from october.installer.pyenv.uvcmd import uv_exe

WHEEL = "Wheel-Version: 1.0\nGenerator: october-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _dist(site: Path, name: str, version: str, *requires: str, extras: tuple[str, ...] = ()) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Provides-Extra: {e}" for e in extras), *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "WHEEL").write_text(WHEEL)
    (info / "INSTALLER").write_text("uv\n")
    (info / "RECORD").write_text("")


def _uv(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CACHE": "1"}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run([uv_exe(), *args], env=env, capture_output=True, text=True, timeout=120)


def _venv(path: Path, python: str, *flags: str) -> Path:
    proc = _uv("venv", "-q", "--python", python, *flags, str(path))
    assert proc.returncode == 0, proc.stderr
    (site,) = path.glob("lib/python*/site-packages")
    return site


def _uv_check(env: Path) -> set[tuple[str, str]]:
    """(requirer, required) pairs ``uv pip check`` names."""
    proc = _uv("pip", "check", "--python", str(env / "bin" / "python"))
    out = proc.stdout + proc.stderr
    pairs = set(re.findall(r"The package `([^`]+)` requires `([A-Za-z0-9._-]+)", out))
    assert (proc.returncode == 0) == (not pairs), out
    return pairs


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("uvcheck")
    python = str(Path(sys.base_prefix) / "bin" / "python3")
    system = _venv(tmp / "system", python)                       # the site-provided torch's interpreter
    _dist(system, "torch", "2.9.0", "triton==3.6.0")
    _dist(system, "triton", "3.6.0")
    stack = _venv(tmp / "stack", str(tmp / "system" / "bin" / "python"), "--system-site-packages")
    (stack / PTH_NAME).write_text(f"import site; site.addsitedir({str(system)!r})\n")
    plain = _venv(tmp / "plain", python)
    for site in (stack, plain):
        _dist(site, "a", "1.0", "b>=2")                          # a version conflict
        _dist(site, "b", "1.0")
        _dist(site, "c", "1.0", "missing-dep")                   # a missing requirement
        _dist(site, "d", "1.0", "e[fast]")                       # turns on e's extra ...
        _dist(site, "e", "1.0", "speedup; extra == 'fast'", extras=("fast",))   # ... whose requirement is missing
        _dist(site, "f", "1.0", "old; python_version < '3'")     # a marker that is off: neither names it
    _dist(stack, "needs-torch", "1.0", "torch>=2")               # met by the system interpreter's torch
    _dist(stack, "triton", "3.9.0")                              # shadows the triton torch pins
    return {"plain": tmp / "plain", "stack": tmp / "stack", "system": system}


def _ours(env: Path, provided: list[Path] = ()) -> set[tuple[str, str]]:
    version = consistency.env_python_version(env)
    found = consistency.conflicts(consistency.installed(env), version, consistency.installed_in(provided))
    return {(c.package, c.requires) for c in found}


def test_uv_pip_check_and_ours_agree_on_conflicts_and_missing_requirements(envs: dict[str, Path]) -> None:
    both = {("a", "b"), ("c", "missing-dep")}
    assert both <= _uv_check(envs["plain"]) and both <= _ours(envs["plain"])


def test_uv_pip_check_misses_a_requirement_turned_on_by_an_extra(envs: dict[str, Path]) -> None:
    assert ("e", "speedup") in _ours(envs["plain"])
    assert ("e", "speedup") not in _uv_check(envs["plain"]), "uv now checks extras: hand it that part"


def test_uv_pip_check_does_not_see_a_system_site_interpreter_s_packages(envs: dict[str, Path]) -> None:
    ours, uv = _ours(envs["stack"], [envs["system"]]), _uv_check(envs["stack"])
    assert ("needs-torch", "torch") not in ours
    assert ("needs-torch", "torch") in uv, "uv now sees system site packages: hand it that part"
    assert ("torch", "triton") in ours                     # torch 2.9.0 pins triton 3.6.0; the env has 3.9.0
    assert ("torch", "triton") not in uv, "uv now checks the system torch's pins: hand it that part"
    assert ours - {("torch", "triton"), ("e", "speedup")} == uv - {("needs-torch", "torch")}
