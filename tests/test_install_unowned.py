"""Session 18's audit: files a cached wheel's RECORD does not list reached a new stack.  uv copies every file
of a wheel unpacked in its cache (``archive-v0``), listed or not; install's RECORD check held only the listed
ones, and the built-stack cache then carried a planted ``.pth`` to every later stack.  Install now refuses an
env holding a file no RECORD owns (current verify's rules), before the env is stored.

Real uv, real git, the offline fixture world; the plant is in uv's real cache.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from october.installer.core.errors import InstallError
from tests.fixtures.builtcache import entries
from tests.fixtures.world import World, make_world
from tests.test_setup_e2e import setup


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return make_world(tmp_path_factory.mktemp("unowned-world"))


@pytest.mark.slow
def test_a_file_planted_in_uv_s_cache_beside_a_wheel_fails_install_and_is_not_stored(world: World,
                                                                                      tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    for entry in entries(cache):
        shutil.rmtree(entry)               # the next stack installs from uv's cache, not a built-stack entry
    unpacked = next(p.parent for p in (cache / "uv" / "archive-v0").rglob("tinydep/__init__.py"))
    (unpacked.parent / "zz_planted.pth").write_text("import sys; sys.stderr.write('PLANTED\\n')\n")
    (unpacked / "extra.py").write_text("X = 'planted'\n")
    with pytest.raises(InstallError) as err:
        setup(world, tmp_path / "s2", cache)
    text = str(err.value)
    assert "2 file(s) in the stack env that no installed distribution's RECORD owns" in text, text
    assert "zz_planted.pth" in text and "extra.py" in text and str(cache / "uv") in text
    assert entries(cache) == []            # nothing stored for a later stack to copy
    # the user follows the fix (removes the files it names and uv's cache): the re-run finishes clean, stored
    site = next((tmp_path / "s2" / "env").glob("lib/python*/site-packages"))
    with pytest.raises(InstallError):
        setup(world, tmp_path / "s2", cache)          # a re-run alone does not take them
    (site / "zz_planted.pth").unlink()
    (site / "tinydep" / "extra.py").unlink()
    shutil.rmtree(cache / "uv")
    done = setup(world, tmp_path / "s2", cache)
    assert {r.name: r.status for r in done.records}["install"] == "ran"
    assert entries(cache) == []       # an env an earlier run made is never stored (its files were planted once)


@pytest.mark.slow
def test_a_link_no_record_owns_is_named_not_a_crash(world: World, tmp_path: Path) -> None:
    """The review: a link in the env that no RECORD owns (and uv's own venv lacks) ended the install step in a
    KeyError (exit 70): a link has no sha256 and uv's venv had no such file, and None matched None."""
    cache, stack = tmp_path / "cache", tmp_path / "s1"
    setup(world, stack, cache)
    site = next((stack / "env").glob("lib/python*/site-packages"))
    (site / "planted").symlink_to(tmp_path)
    (stack / ".state" / "install.json").unlink()          # the install runs again, its full check with it
    with pytest.raises(InstallError) as err:
        setup(world, stack, cache)
    assert "1 file(s) in the stack env that no installed distribution's RECORD owns" in str(err.value)
    assert str(site / "planted") in str(err.value)
