"""Names in recipe data become paths: each must be a plain name, and every path made from one
stays inside its directory.  A missing recipe says how to find the right one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.core.errors import RecipeError, UsageError
from october.installer.core.paths import StackPaths, inside
from october.installer.recipe import load_recipe
from tests.fixtures.root import PROJECT_ROOT
from tests.test_recipe import FORKS, GOOD, write


@pytest.mark.parametrize("name", ["../../etc/passwd", "..", ".hidden", "a/b", "a..b", "x" * 65, ""])
def test_unsafe_recipe_names_are_refused(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, GOOD.replace('name = "t"', f'name = "{name}"'))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path))
    assert "key 'name' is invalid" in info.value.message and "plain name" in info.value.message


def test_a_traversing_name_never_reaches_the_lock_lookup(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace('name = "t"', 'name = "../../etc/passwd"'))
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(tmp_path / "stack"), "--recipe",
                           str(path), "--locked"], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120)
    assert proc.returncode == 3 and "plain name" in proc.stderr and "passwd.pylock" not in proc.stderr
    assert not (tmp_path / "stack").exists()


def test_unsafe_fork_names_and_wheel_file_names_are_refused(tmp_path: Path) -> None:
    write(tmp_path, GOOD, FORKS.replace("[forks.alpha]", '[forks."../alpha"]').replace(
        "[forks.alpha.pins]", '[forks."../alpha".pins]'))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(tmp_path / "r.toml"))
    assert "fork name" in info.value.message
    wheel = GOOD + ('[wheel]\nurl = "https://example.invalid/x.whl"\nfilename = "../vllm-0.18.0-py3-none-any.whl"\n'
                    'name = "vllm"\nversion = "0.18.0"\n')
    path = write(tmp_path, wheel)
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path))
    assert "key 'wheel.filename' is invalid" in info.value.message


def test_stack_paths_stay_inside_the_stack(tmp_path: Path) -> None:
    paths = StackPaths(tmp_path)
    assert paths.fork("vllm") == tmp_path / "src" / "vllm"
    for bad in ("..", "../x", "a/../../b", "", "."):
        with pytest.raises(UsageError):
            paths.fork(bad)
    with pytest.raises(UsageError):
        inside(tmp_path / "locks", "../x.pylock.toml")


def test_a_missing_recipe_names_the_choices_and_what_to_run() -> None:
    proc = subprocess.run([sys.executable, "-m", "october", "doctor", "--recipe", "nonexistent"],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120)
    assert proc.returncode == 3
    assert "there is no recipe 'nonexistent'" in proc.stderr
    assert "20260702, current" in proc.stderr and "`current recipes`" in proc.stderr
    assert "key '<file>'" not in proc.stderr
