"""The built-stack cache across installs of the tool (issue 20 item 2): a second tool install of the
same code, with the same uv, takes the entries the first one made; one whose uv is another release
does not.  Each tool install brings its own copy of uv (the ``uv`` dependency), so a key that named
uv by its path or inode made every reinstall build its stacks again (seen on the H200, session 15).
Real parts: the project's wheel built by real uv, installed into venvs with copied files (own
inodes), a real other uv release from PyPI, the offline fixture world, the installed commands."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from october.installer.core.hashing import sha256_file
from october.installer.machine.rules import UV_FLOOR
from october.installer.pyenv.venv import UV_012_SITE_FILES
from tests.fixtures.builtcache import entries
from tests.fixtures.toolinstall import build_tool_wheel, install_tool, uv_env
from tests.fixtures.world import World, make_world

pytestmark = [pytest.mark.real, pytest.mark.slow]


@pytest.fixture(scope="module")
def tool_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tool_wheel(tmp_path_factory.mktemp("tool-wheel"))


def setup_with(bin_dir: Path, world: World, stack: Path, cache: Path) -> str | None:
    """The installed october_setup on the fixture world; -> the built-stack key its env came from."""
    env = {k: v for k, v in uv_env().items() if k != "UV_CACHE_DIR"}
    done = subprocess.run([str(bin_dir / "october_setup"), str(stack), "--recipe", str(world.recipe),
                           "--cache-dir", str(cache), "--quiet"], cwd=stack.parent, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((stack / ".state" / "env.json").read_text())["outputs"].get("built_from")


def test_a_new_install_of_the_same_tool_takes_the_entries_the_last_one_made(tool_wheel: Path, tmp_path: Path) -> None:
    world = make_world(tmp_path / "world")
    first, second = install_tool(tool_wheel, tmp_path / "tool-a"), install_tool(tool_wheel, tmp_path / "tool-b")
    assert os.stat(first / "uv").st_ino != os.stat(second / "uv").st_ino     # two copies of one uv
    cache = tmp_path / "cache"
    assert setup_with(first, world, tmp_path / "s1", cache) is None
    (entry,) = entries(cache)
    assert setup_with(second, world, tmp_path / "s2", cache) == entry.name
    verified = subprocess.run([str(second / "current"), "verify", "--install", str(tmp_path / "s2")],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_install_with_another_uv_release_builds_its_own(tool_wheel: Path, tmp_path: Path) -> None:
    """Plant: the second install's uv is another real release (the floor); its stack must not take the
    entry the first install's uv made."""
    world = make_world(tmp_path / "world")
    cache = tmp_path / "cache"
    first = install_tool(tool_wheel, tmp_path / "tool-a")
    other = install_tool(tool_wheel, tmp_path / "tool-floor-uv", f"uv=={UV_FLOOR}")
    lines = [subprocess.run([str(b / "uv"), "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
             for b in (first, other)]
    assert lines[1] == UV_FLOOR != lines[0], lines
    assert setup_with(first, world, tmp_path / "s1", cache) is None
    assert setup_with(other, world, tmp_path / "s2", cache) is None
    assert len(entries(cache)) == 2
    # the scenario hunt: the floor's uv writes _virtualenv.pth and _virtualenv.py into every venv; the install
    # step took them as uv's own and current verify named them as files nothing set up put there (exit 13)
    site = next((tmp_path / "s2" / "env" / "lib").glob("python3*/site-packages"))
    assert (site / "_virtualenv.pth").is_file()
    verified = subprocess.run([str(other / "current"), "verify", "--install", str(tmp_path / "s2")],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # a stack the previous version set up has no record of them (its install marker predates venv_files):
    # verify asks its uv what a new venv holds, and the two files are not named either
    marker = tmp_path / "s2" / ".state" / "install.json"
    kept = marker.read_text()
    data = json.loads(kept)
    del data["outputs"]["venv_files"]
    marker.write_text(json.dumps(data))
    verified = subprocess.run([str(other / "current"), "verify", "--install", str(tmp_path / "s2")],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # the pinned bytes are the real uv 0.12's, and the tool upgraded to a uv that writes neither file (the first
    # install's) takes them by those bytes: it named both (exit 13) on every stack an earlier version set up
    assert {f.name: sha256_file(f) for f in site.glob("_virtualenv.*")} == UV_012_SITE_FILES
    verified = subprocess.run([str(first / "current"), "verify", "--install", str(tmp_path / "s2")],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    pth = (site / "_virtualenv.pth").read_bytes()
    (site / "_virtualenv.pth").write_bytes(pth + b"; import os\n")
    verified = subprocess.run([str(first / "current"), "verify", "--install", str(tmp_path / "s2")],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert verified.returncode == 13 and "_virtualenv.pth" in verified.stdout + verified.stderr, verified.stderr
    (site / "_virtualenv.pth").write_bytes(pth)
    marker.write_text(kept)
    # held to their bytes: one changed after setup is named
    (site / "_virtualenv.py").write_text("import os\n")
    verified = subprocess.run([str(other / "current"), "verify", "--install", str(tmp_path / "s2")],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert verified.returncode == 13 and "_virtualenv.py" in verified.stdout + verified.stderr, verified.stderr
