"""Only what a run made itself is published to the built-stack cache.

What is stored reaches every later stack with the same key.  A stack an earlier run made may have been
changed since: a ``.pth`` no RECORD owns planted in its env, a link in place of a file (same bytes, so
RECORD holds), an ignored file in a fork checkout (fetch's clean check, ``git status``, does not see
ignored files).  Each test plants one into stack 1, makes install run again there (a byte of a
distribution changed: install repairs it), and sets up stack 2 on the same cache: the plant must reach
neither the cache nor stack 2.  The fixture world and real uv, git and setup (no stand-in).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.builtcache import entries
from tests.fixtures.world import World
from tests.test_cache_isolation import POISON, site
from tests.test_setup_e2e import setup, world  # noqa: F401  (the world fixture and the one setup driver)

pytestmark = pytest.mark.slow


def built_from(stack: Path) -> str | None:
    return json.loads((stack / ".state" / "env.json").read_text())["outputs"].get("built_from")


def _install_again(stack: Path, dist: str = "tinydep") -> None:
    with open(site(stack) / dist / "__init__.py", "a") as fh:        # install repairs it on the next run
        fh.write(POISON)


def test_a_run_that_made_its_env_stores_it_and_the_next_stack_takes_it(world: World, tmp_path: Path) -> None:
    """The other side: a cold stack is stored, and a second one is made from it."""
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    (entry,) = entries(cache)
    setup(world, tmp_path / "s2", cache)
    assert built_from(tmp_path / "s2") == entry.name


def test_a_file_planted_in_an_env_an_earlier_run_made_reaches_no_other_stack(world: World, tmp_path: Path) -> None:
    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    (stored,) = entries(cache)
    stored_files = sorted(p.relative_to(stored) for p in stored.rglob("*"))
    (site(s1) / "zz_planted.pth").write_text("import os; os.environ.setdefault('PLANTED', '1')\n")
    _install_again(s1)
    # install refuses an env holding a file no RECORD owns (session 18), before anything could be stored
    from october.installer.core.errors import InstallError

    with pytest.raises(InstallError, match="zz_planted.pth"):
        setup(world, s1, cache)
    (entry,) = entries(cache)
    assert sorted(p.relative_to(entry) for p in entry.rglob("*")) == stored_files
    setup(world, s2, cache)
    assert built_from(s2) == entry.name
    assert not (site(s2) / "zz_planted.pth").exists()
    ran = subprocess.run([str(s2 / "env" / "bin" / "python"), "-c", "import os; print(os.environ.get('PLANTED'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert ran == "None"


def test_a_link_planted_in_an_env_never_makes_another_stack_share_bytes(world: World, tmp_path: Path) -> None:
    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    tiny = site(s1) / "tinydep" / "__init__.py"
    outside = tmp_path / "outside.py"
    outside.write_bytes(tiny.read_bytes())           # the same bytes: RECORD holds through the link
    tiny.unlink()
    tiny.symlink_to(outside)
    _install_again(s1, "torch")
    setup(world, s1, cache)
    setup(world, s2, cache)
    s2_tiny = site(s2) / "tinydep" / "__init__.py"
    assert not s2_tiny.is_symlink()
    with open(outside, "a") as fh:                   # a write outside stack 2 ...
        fh.write(POISON)
    assert POISON not in s2_tiny.read_text()         # ... changes nothing in it


def test_an_ignored_file_planted_in_a_checkout_reaches_no_other_stack(world: World, tmp_path: Path) -> None:
    """Here the env is made again in the same run (its Python is gone), so only the checkout's plant
    keeps the stack from being stored."""
    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    planted = Path("alpha") / "planted.cpython-311-x86_64-linux-gnu.so"    # *.so: the clone's exclude
    (s1 / "src" / "alpha" / planted).write_bytes(b"\x7fELF planted")
    for entry in entries(cache):                     # no entry to take: stack 1 builds and may store
        subprocess.run(["chmod", "-R", "u+w", str(entry)], check=True)
        subprocess.run(["rm", "-rf", str(entry)], check=True)
    subprocess.run(["rm", "-rf", str(s1 / "env")], check=True)
    setup(world, s1, cache)
    assert "held 1 file(s) git does not track before the install (alpha/planted" in (
        s1 / "logs" / "install.log").read_text()
    assert entries(cache) == []
    setup(world, s2, cache)
    assert not (s2 / "src" / "alpha" / planted).exists()


@pytest.mark.parametrize("bit", ["--skip-worktree", "--assume-unchanged"])
def test_an_edit_git_status_is_told_not_to_see_reaches_no_other_stack(world: World, tmp_path: Path, bit: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 18's audit: ``git update-index --skip-worktree`` (or ``--assume-unchanged``) in stack 1's fork
    hides an edit from ``git status``, so the checkout looked clean and was stored; stack 2 took it.  Now the
    fetch step names it as a local change (the re-run is refused; with --allow-dirty it builds, recorded, and
    nothing is stored); and were fetch's check blind to it, install still stores no such checkout (the
    reason is logged).  Stack 2 gets the committed file either way."""
    from october.installer.core.errors import FetchError
    from october.installer.git import clonecheck

    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    target = s1 / "src" / "alpha" / "alpha" / "__init__.py"
    subprocess.run(["git", "-C", str(s1 / "src" / "alpha"), "update-index", bit, "alpha/__init__.py"], check=True)
    target.write_text(target.read_text() + POISON)
    assert subprocess.run(["git", "-C", str(s1 / "src" / "alpha"), "status", "--porcelain"], capture_output=True,
                          text=True, check=True).stdout == ""          # the plant is invisible to status
    for entry in entries(cache):
        subprocess.run(["chmod", "-R", "u+w", str(entry)], check=True)
        subprocess.run(["rm", "-rf", str(entry)], check=True)
    subprocess.run(["rm", "-rf", str(s1 / "env")], check=True)
    with pytest.raises(FetchError, match=f"alpha/__init__.py \\({bit.strip('-')}\\)"):
        setup(world, s1, cache)
    setup(world, s1, cache, allow_dirty=True)
    assert entries(cache) == []
    assert json.loads((s1 / ".state" / "fetch.json").read_text())["outputs"]["forks"]["alpha"]["dirty"] is True

    # the second line of defence: fetch's look made blind, install's own look still refuses to store it
    monkeypatch.setattr(clonecheck, "hidden_entries", lambda *_a, **_k: [])
    subprocess.run(["rm", "-rf", str(s1 / "env")], check=True)
    setup(world, s1, cache)
    assert "tracked file(s) git status does not look at (skip-worktree or assume-unchanged: alpha/__init__.py" in (
        s1 / "logs" / "install.log").read_text()
    assert entries(cache) == []
    monkeypatch.undo()
    setup(world, s2, cache)
    assert POISON not in (s2 / "src" / "alpha" / "alpha" / "__init__.py").read_text()
