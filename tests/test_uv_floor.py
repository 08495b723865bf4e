"""The oldest uv the tool works with (``UV_FLOOR``, installer/machine/rules.py): one number, said the same
by pyproject.toml and every shipped recipe; the reason for it measured on real uv releases from PyPI
(the one before the floor writes a lock without hashes for a ``--find-links`` wheel, the floor writes
them); and a tool whose uv is below it is stopped by the preflight, or, with that check skipped, by
the lock step with an error that names uv, not "report this as a bug"."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from october.installer.machine.rules import UV_FLOOR
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.toolinstall import build_tool_wheel, install_tool, run_uv, uv_env
from tests.fixtures.wheels import build_wheel
from tests.fixtures.world import make_world

BELOW = "0.12.10"          # the release before the floor: no hash for a find-links wheel in its pylock


def test_pyproject_and_every_shipped_recipe_say_the_floor() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    (uv,) = [Requirement(d) for d in project["dependencies"] if Requirement(d).name == "uv"]
    assert str(uv.specifier) == f">={UV_FLOOR}"
    recipes = sorted((PROJECT_ROOT / "recipes").glob("*.toml"))
    assert recipes
    for path in recipes:
        spec = tomllib.loads(path.read_text())["preflight"]["uv"]
        assert SpecifierSet(spec) == SpecifierSet(f">={UV_FLOOR}"), (path.name, spec)


def _compile_find_links(uv: Path, tmp_path: Path) -> dict[str, object]:
    links = tmp_path / "links"
    build_wheel(links, "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
    req = tmp_path / "req.in"
    req.write_text("tinydep==1.0\n")
    out = tmp_path / "pylock.toml"
    subprocess.run([str(uv), "pip", "compile", str(req), "--no-deps", "--no-header", "--quiet", "--no-index",
                    "--find-links", str(links), "--python-version", "3.11", "-o", str(out)],
                   check=True, capture_output=True, text=True, timeout=120)
    (package,) = tomllib.loads(out.read_text())["packages"]
    (wheel,) = package["wheels"]
    return dict(wheel)


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("version", [BELOW, UV_FLOOR])
def test_the_floor_is_the_first_uv_that_hashes_a_find_links_wheel(version: str, tmp_path: Path) -> None:
    venv = tmp_path / "uv-venv"
    run_uv("venv", "-q", "--python", "3.11", str(venv), cwd=tmp_path)
    run_uv("pip", "install", "-q", "--python", str(venv / "bin" / "python"), f"uv=={version}", cwd=tmp_path)
    wheel = _compile_find_links(venv / "bin" / "uv", tmp_path)
    assert bool(wheel.get("hashes")) is (version == UV_FLOOR), wheel


@pytest.mark.real
@pytest.mark.slow
def test_a_tool_with_uv_below_the_floor_is_stopped_with_uv_named(tmp_path: Path) -> None:
    """Plant: a tool env given uv 0.12.10.  It re-runs a stack another install finished: the preflight is
    judged again for this uv (its inputs name the uv), not taken from the last run, and refuses it (exit 4,
    the floor named).  On a new stack with the uv check skipped, the lock step refuses uv's hashless
    answer (exit 13, uv named, not "report this as a bug")."""
    (tmp_path / "wheel-out").mkdir()
    wheel = build_tool_wheel(tmp_path / "wheel-out")
    good = install_tool(wheel, tmp_path / "tool-good")
    old = install_tool(wheel, tmp_path / "tool")
    # over the tool's own (its dependency says >= the floor), as a later `pip install uv==...` in its env would
    run_uv("pip", "install", "-q", "--no-deps", "--python", str(old / "python"), f"uv=={BELOW}", cwd=tmp_path)
    world = make_world(tmp_path / "world")
    env = {k: v for k, v in uv_env().items() if k != "UV_CACHE_DIR"}

    def setup(bin_dir: Path, stack: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(bin_dir / "october_setup"), str(tmp_path / stack), "--recipe", str(world.recipe),
                               "--cache-dir", str(tmp_path / "cache"), *extra], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)

    done = setup(good, "finished")
    assert done.returncode == 0, done.stderr
    for stack in ("finished", "new"):
        refused = setup(old, stack)
        assert refused.returncode == 4, (stack, refused.stderr)
        assert f"expected uv >={UV_FLOOR} (the tool's floor)" in refused.stderr and f"uv {BELOW}" in refused.stderr
    skipped = setup(old, "new", "--skip-preflight", "uv")
    assert skipped.returncode == 13, skipped.stderr
    assert f"uv {BELOW}" in skipped.stderr and "without a hash" in skipped.stderr, skipped.stderr
    assert "report this as a bug" not in skipped.stderr


def test_the_lock_error_says_upgrade_only_below_the_floor() -> None:
    """uv below the floor: upgrade it.  At or above it, a file without a hash is the source's doing: the
    recipe's [sources] are named instead, and a URL's credentials never reach the message."""
    from october.installer.steps.lock import _unhashed_error

    files = ["https://user:secret@example.invalid/simple/x-1.0-py3-none-any.whl"]
    old = _unhashed_error(files, f"uv {BELOW} (x86_64-unknown-linux-gnu)\n")
    assert f"uv {BELOW}" in old.message and f"to {UV_FLOOR} or later" in old.message
    new = _unhashed_error(files, f"uv {UV_FLOOR} (x86_64-unknown-linux-gnu)\n")
    assert "upgrade" not in new.message and "[sources]" in new.message and f"uv {UV_FLOOR}" in new.message
    assert all("secret" not in e.message for e in (old, new))
