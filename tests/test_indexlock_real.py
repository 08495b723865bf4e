"""Real tier: both recipes' real requirement sets resolved again on PyPI with ``uv pip compile``.

1. With the date the committed lock records (``exclude-newer``) and the lock's own versions as constraints,
   the resolution is the committed lock, file for file: every version is one PyPI's resolver accepts for the
   recipe at that date, the set is complete and consistent, and every URL and sha256 is PyPI's.  What this
   does not prove: that each version is the newest the date allowed (a lock moved back to an older release
   that also resolves, with PyPI's own hashes, passes).  The pins make the check immune to an index that lists
   files late (sse-starlette 3.7.1, uploaded 2026-11-22, was listed here only after the locks were cut on
   2026-12-01): without them a fresh resolution moves forward and the check fails on a lock nobody touched.
   A lock pinning a version the cutoff excludes, or one PyPI does not have, fails to resolve (planted below).
2. Laying the forks over that resolution leaves exactly the recipe's declared exceptions unmet: every
   distribution that requires a replaced one (found from uv's own ``# via`` annotations, its requirement
   read from the requirer's real METADATA on PyPI, PEP 658) and, for 20260702, every requirement of the
   real FlashInfer fork at 2f3f0f6d (its ``requirements.txt`` from ../shared/real-forks) checked against
   the resolved versions.  An undeclared conflict or a declaration the resolution does not show fails.
"""

from __future__ import annotations

import subprocess
import tomllib
import urllib.request
from email.parser import HeaderParser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from october.installer.core.errors import CommandFailed
from october.installer.core.runner import Runner
from october.installer.install.consistency import marker_environment
from october.installer.lock.indexlock import (
    build_index_lock,
    compile_recipe,
    index_request,
    lock_path,
    lock_pins,
    settled_problems,
)
from october.installer.pyenv.uvcmd import uv_exe
from october.installer.recipe import load_recipe

pytestmark = pytest.mark.real

FLASHINFER_COMMIT = "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"


def _committed(name: str) -> dict:
    with open(lock_path(name), "rb") as fh:
        return tomllib.load(fh)


def _files(p: dict) -> list[tuple[str, str]]:
    files = [*(p.get("wheels") or []), *([p["sdist"]] if isinstance(p.get("sdist"), dict) else [])]
    return sorted((f["url"], f["hashes"]["sha256"]) for f in files)


def _fork_source(real_mirror: Path, tmp_path: Path) -> Path:
    src = tmp_path / "flashinfer"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(real_mirror / "github.com/flashinfer-ai/flashinfer.git"),
                    str(src)], check=True)
    subprocess.run(["git", "-C", str(src), "checkout", "-q", "--detach", FLASHINFER_COMMIT], check=True)
    return src


def _via(name: str, date: str, pins: dict[str, str], tmp_path: Path) -> dict[str, list[str]]:
    """package -> the distributions that require it, from uv's annotations of the same (pinned) resolution."""
    recipe = load_recipe(name)
    req = index_request(recipe)
    (tmp_path / "r.in").write_text("\n".join(req.requirements) + "\n")
    (tmp_path / "pins.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
    argv = req.argv(uv_exe(), tmp_path / "r.in", tmp_path / "r.txt", date, tmp_path / "pins.txt")
    argv.insert(argv.index("--no-header"), "--annotation-style=line")
    subprocess.run(argv, check=True, capture_output=True)
    out: dict[str, list[str]] = {}
    for line in (tmp_path / "r.txt").read_text().splitlines():
        if "==" in line and "# via" in line:
            pkg = str(canonicalize_name(line.split("==")[0]))
            out[pkg] = [str(canonicalize_name(v.strip())) for v in line.split("# via", 1)[1].split(",")
                        if not v.strip().startswith("-r")]
    return out


def _requires_dist(wheel_url: str) -> list[str]:
    with urllib.request.urlopen(wheel_url + ".metadata", timeout=60) as resp:   # PEP 658
        msg = HeaderParser().parsestr(resp.read().decode("utf-8"))
    return list(msg.get_all("Requires-Dist") or [])


@pytest.mark.parametrize("name", ["current", "20260702"])
def test_resolution_is_the_committed_lock_and_leaves_only_the_declared_exceptions(
        name: str, tmp_path: Path, real_mirror: Path) -> None:
    recipe = load_recipe(name)
    committed = _committed(name)
    date, made = committed["tool"]["october"]["exclude-newer"], committed["tool"]["october"]["resolved-at"]
    assert settled_problems(date, made) == []      # the cutoff had SETTLE days to reach every index
    pins = lock_pins(committed)
    compiled = compile_recipe(recipe, Runner(tmp_path / "logs"), uv_exe(), date, pins)
    again = build_index_lock(recipe, compiled, date, made)
    assert {p["name"]: (p["version"], _files(p)) for p in again["packages"]} == \
        {p["name"]: (p["version"], _files(p)) for p in committed["packages"]}

    resolved = {str(canonicalize_name(p["name"])): p for p in compiled["packages"]}
    versions = {n: str(p["version"]) for n, p in resolved.items()}
    env = marker_environment(recipe.python)
    if name == "20260702":
        src = _fork_source(real_mirror, tmp_path)
        fork_version = (src / "version.txt").read_text().strip()
        fork_reqs = [ln.strip() for ln in (src / "requirements.txt").read_text().splitlines()
                     if ln.strip() and not ln.startswith("#")]
    else:
        fork_version, fork_reqs = "0.6.7", []
    assert fork_version in ("0.6.15", "0.6.7")

    conflicts: set[tuple[str, str]] = set()
    # (a) whoever requires a distribution a fork replaces, at a version the fork is not
    fork_versions = {"flashinfer-python": fork_version}
    via = _via(name, date, pins, tmp_path)
    for replaced, version in fork_versions.items():
        for requirer in via.get(replaced, []):
            wheel = resolved[requirer]["wheels"][0]["url"] if requirer in resolved else recipe.wheel.url
            for line in _requires_dist(wheel):
                r = Requirement(line)
                if str(canonicalize_name(r.name)) == replaced and (r.marker is None or r.marker.evaluate(
                        {**env, "extra": ""})) and not r.specifier.contains(Version(version), prereleases=True):
                    conflicts.add((requirer, replaced))
    # (b) the FlashInfer fork's own requirements (installed --no-deps) against what the index part holds
    for line in fork_reqs:
        r = Requirement(line)
        got = versions.get(str(canonicalize_name(r.name)))
        if got is None or not r.specifier.contains(Version(got), prereleases=True):
            conflicts.add(("flashinfer-python", str(canonicalize_name(r.name))))
    declared = {(e.package, e.requires) for e in recipe.install.exceptions}
    assert conflicts == declared, (f"undeclared: {sorted(conflicts - declared)}; "
                                   f"declared but not in the resolution: {sorted(declared - conflicts)}")


@pytest.mark.parametrize("fault", ["after-cutoff", "not-on-pypi"])
def test_a_lock_pinning_what_the_cutoff_or_pypi_does_not_have_fails_to_resolve(fault: str, tmp_path: Path) -> None:
    """The planted fault for check 1: an edited pin.  anthropic 2.15.0 is on PyPI, uploaded 2026-11-30T19:30Z,
    after the committed cutoff (2026-11-28T22:00Z), so its files are excluded; 999.0 does not exist.  Either
    way the pinned resolution fails, naming the package, so the equality above only passes on versions PyPI
    offered at that date."""
    committed = _committed("current")
    date = committed["tool"]["october"]["exclude-newer"]
    assert date == "2026-11-28T22:00:00Z", "the planted version was chosen for this cutoff: choose another"
    pins = lock_pins(committed)
    assert pins["anthropic"] == "2.14.0"
    pins["anthropic"] = "2.15.0" if fault == "after-cutoff" else "999.0"
    with pytest.raises(CommandFailed) as err:
        compile_recipe(load_recipe("current"), Runner(tmp_path / "logs"), uv_exe(), date, pins)
    assert f"anthropic=={pins['anthropic']}" in err.value.message
