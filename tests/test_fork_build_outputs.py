"""An ordinary setuptools fork can be set up twice: its own build outputs (``*.egg-info``,
``build/``) do not make the clone "dirty", while a real edit by the user is still caught.

Real parts: a setuptools project in a real bare git repo, real setuptools (this interpreter's
copy, packed into a wheel by tests/fixtures/repack.py) as its build backend, real uv, git and
the whole pipeline through the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from october.installer.git.exclude import BEGIN, exclude_build_outputs
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.gitrepos import git
from tests.fixtures.repack import repack
from tests.fixtures.wheels import build_wheel
from tests.fixtures.world import RELAXED_PREFLIGHT, fork_entry, publish, recipe_head, write_forks_file

pytestmark = pytest.mark.slow


def make_setuptools_world(root: Path) -> Path:
    links = root / "links"
    build_wheel(links, "torch", "2.10.0+fixture", {"torch/__init__.py": '__version__ = "2.10.0+fixture"\n'})
    repack("setuptools", links)
    work = root / "work" / "plain"
    (work / "plain").mkdir(parents=True)
    (work / "plain" / "__init__.py").write_text("VALUE = 1\n")
    (work / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "plain"
        version = "0.1"

        [tool.setuptools]
        packages = ["plain"]
        """))
    commit = publish(work, root / "git" / "plain.git")       # no .gitignore: an ordinary fork
    write_forks_file(root / "forks.toml", {"plain": {"url": (root / "git" / "plain.git").as_uri(), "commit": commit}})
    recipe = root / "plain.toml"
    recipe.write_text(recipe_head("plain", "2.10.0+fixture", "links")
                      + fork_entry("plain", "main", "editable", deps=False, build_isolation=True) + RELAXED_PREFLIGHT)
    return recipe


def setup(stack: Path, recipe: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe", str(recipe),
                           "--cache-dir", str(cache), "--skip-preflight", "nvcc,gpu,cuda_arch"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)


def test_setuptools_fork_reruns_clean_and_user_edits_are_still_caught(tmp_path: Path) -> None:
    recipe = make_setuptools_world(tmp_path)
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    first = setup(stack, recipe, cache)
    assert first.returncode == 0, first.stderr
    clone = stack / "src" / "plain"
    assert list(clone.glob("*.egg-info")), "the setuptools editable build left no egg-info: the scenario is void"
    again = setup(stack, recipe, cache)
    assert again.returncode == 0, again.stderr
    assert "0 step(s) ran" in again.stdout
    receipt = json.loads((stack / "receipts" / "setup.json").read_text())
    assert [f["dirty"] for f in receipt["forks"]] == [False]

    # a real edit of a tracked file is a local change
    src = clone / "plain" / "__init__.py"
    src.write_text("VALUE = 2\n")
    edited = setup(stack, recipe, cache)
    assert edited.returncode == 8 and "local changes" in edited.stderr and "plain/__init__.py" in edited.stderr
    src.write_text("VALUE = 1\n")
    # so is a new source file (untracked, not a build output)
    (clone / "plain" / "extra.py").write_text("X = 1\n")
    added = setup(stack, recipe, cache)
    assert added.returncode == 8 and "plain/extra.py" in added.stderr
    (clone / "plain" / "extra.py").unlink()
    assert setup(stack, recipe, cache).returncode == 0


def test_exclude_block_is_idempotent_and_keeps_the_users_lines(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    git("init", "-q", str(repo))
    exclude = repo / ".git" / "info" / "exclude"
    exclude.write_text("# mine\nsecret.txt\n")
    exclude_build_outputs(repo)
    once = exclude.read_text()
    exclude_build_outputs(repo)
    assert exclude.read_text() == once and once.count(BEGIN) == 1
    assert once.startswith("# mine\nsecret.txt\n") and "*.egg-info" in once
    (repo / "x.egg-info").mkdir()
    (repo / "x.egg-info" / "PKG-INFO").write_text("x")
    (repo / "new.py").write_text("x")
    status = git("status", "--porcelain", "--untracked-files=all", cwd=repo)
    assert "egg-info" not in status and "new.py" in status
