"""Issue 20: a second stack's env is copied from the built-stack cache while the fetch step clones the forks
(installer/steps/envearly.py), and the env step takes that copy only when it is of the entry the stack's own key
finds.  Real uv, real git, real wheels (the offline fixture world); nothing is mocked.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from october.installer.core.filetrust import FileTrust
from october.installer.install import records
from october.installer.pyenv import builtprune, builtrestore, builtstack
from october.installer.steps import envearly
from tests.fixtures.builtcache import entries
from tests.fixtures.world import World, publish
from tests.test_built_stack import built_from, statuses, verify
from tests.test_cache_isolation import POISON, inodes, site
from tests.test_setup_e2e import setup, world  # noqa: F401  (the world fixture and the one setup driver)

pytestmark = pytest.mark.slow

BEGUN = "during the fetch (october.installer.steps.envearly)"
TAKEN = "(during the fetch)"


def by_recipe(cache: Path) -> dict[str, str]:
    index = builtstack.built_dir(cache) / builtstack.BY_RECIPE
    return {p.name: p.read_text().strip() for p in sorted(index.iterdir())} if index.is_dir() else {}


def test_a_second_stack_s_env_is_copied_while_the_forks_are_fetched(world: World, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    (entry,) = entries(cache)
    assert list(by_recipe(cache).values()) == [entry.name]      # the stack that stored it named it

    seen: list[bool] = []
    begin = envearly.EarlyEnv.begin

    def spy(self: envearly.EarlyEnv, ctx, detail) -> None:      # a spy: the real begin runs
        seen.append((s2 / "src" / "alpha").exists() or (s2 / "src" / ".alpha.partial").exists())
        begin(self, ctx, detail)
    monkeypatch.setattr(envearly.EarlyEnv, "begin", spy)

    res = setup(world, s2, cache)
    assert seen == [False]          # begun before the fetch made any checkout
    log = (s2 / "logs" / "env.log").read_text()
    assert BEGUN in log and TAKEN in log
    assert built_from(s2) == entry.name and all(s == "ran" for s in statuses(res).values())
    assert not (s2 / ".state" / envearly.AHEAD).exists()
    # a private copy, every file as its RECORD says, and the stack verifies
    assert not inodes(s2) & inodes(cache) and not inodes(s2) & inodes(s1)
    assert records.tampered(s2 / "env", FileTrust(tmp_path / "t.json")) == {}
    assert verify(s2) == 0


def test_a_copy_made_ahead_from_another_entry_is_not_taken(world: World, tmp_path: Path) -> None:
    """The recipe's remembered key changed to another signed entry's (whoever writes the cache can): that
    entry's env is copied during the fetch, then removed; the env step copies this stack's own entry's."""
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    (own,) = entries(cache)
    (named,) = by_recipe(cache)
    (world.alpha_work / "alpha" / "more.py").write_text("M = 1\n")
    first = world.commits["alpha"]
    world.set_pin("alpha", publish(world.alpha_work, world.alpha_bare, "more"))
    setup(world, tmp_path / "other", cache)
    (other,) = [e for e in entries(cache) if e != own]
    world.set_pin("alpha", first)
    (builtstack.built_dir(cache) / builtstack.BY_RECIPE / named).write_text(other.name + "\n")

    s2 = tmp_path / "s2"
    res = setup(world, s2, cache)
    log = (s2 / "logs" / "env.log").read_text()
    assert f"copying the env of the built-stack cache entry {other} {BEGUN}" in log
    assert f"is not used (it was copied from {other}, not this stack's entry {own})" in log
    assert TAKEN not in log and built_from(s2) == own.name
    assert statuses(res)["install"] == "ran" and not (s2 / ".state" / envearly.AHEAD).exists()
    assert by_recipe(cache)[named] == own.name          # named again as the entry this recipe takes
    assert verify(s2) == 0


def test_an_entry_tampered_with_is_refused_when_copied_ahead(world: World, tmp_path: Path) -> None:
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    (entry,) = entries(cache)
    tiny = next((entry / "env").glob("lib/python*/site-packages")) / "tinydep" / "__init__.py"
    os.chmod(tiny, 0o644)
    with open(tiny, "a") as fh:
        fh.write(POISON)

    res = setup(world, s2, cache)
    log = (s2 / "logs" / "env.log").read_text()
    assert BEGUN in log and "is not used (the copy failed:" in log and "does not hash as the manifest says" in log
    assert "refused" in log and statuses(res)["install"] == "ran" and built_from(s2) is None
    assert POISON not in (site(s2) / "tinydep" / "__init__.py").read_text()
    assert not (s2 / ".state" / envearly.AHEAD).exists()


@pytest.mark.parametrize("named", [True, False], ids=["copied-ahead", "not-copied-ahead"])
def test_what_a_killed_run_copied_ahead_is_never_taken(world: World, tmp_path: Path, named: bool) -> None:
    """A copy a killed run left in ``.state/env-ahead``, a file planted in it: removed, whether or not this run
    copies ahead itself (``named``: the recipe's entry is remembered)."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    if not named:
        shutil.rmtree(builtstack.built_dir(cache) / builtstack.BY_RECIPE)
    left = s2 / ".state" / envearly.AHEAD / "env"
    shutil.copytree(tmp_path / "s1" / "env", left, symlinks=True)
    (next(left.glob("lib/python*/site-packages")) / "zz.pth").write_text("import os\n")

    setup(world, s2, cache)
    assert (BEGUN in (s2 / "logs" / "env.log").read_text()) is named
    assert not (s2 / ".state" / envearly.AHEAD).exists() and not (site(s2) / "zz.pth").exists()
    assert built_from(s2) == entries(cache)[0].name and verify(s2) == 0


def test_a_run_that_fails_during_the_fetch_leaves_no_copy(world: World, tmp_path: Path) -> None:
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    # beta's repository gone, and its mirror in the cache: the fetch fails at beta, after alpha's checkout
    world.beta_bare.rename(tmp_path / "beta-moved.git")
    for mirror in (cache / "git").glob("*beta.git"):
        shutil.rmtree(mirror)
    with pytest.raises(Exception) as failed:
        setup(world, s2, cache)
    assert "beta" in str(failed.value)
    assert BEGUN in (s2 / "logs" / "env.log").read_text()
    assert not (s2 / ".state" / envearly.AHEAD).exists() and not (s2 / "env").exists()


def test_a_restore_stopped_leaves_nothing(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    (path,) = entries(cache)
    entry = builtstack.Entry(path, json.loads((path / builtstack.MANIFEST).read_text()))
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 3           # after three files or folders
    dest = tmp_path / "ahead" / "env"
    dest.parent.mkdir()
    with pytest.raises(builtstack.Stopped):
        builtrestore.restore_env(entry, dest, tmp_path / "s2", stop=stop)
    assert list(dest.parent.iterdir()) == []


def test_a_ctrl_c_while_the_copy_is_waited_for_leaves_no_env_and_the_rerun_finishes(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: KeyboardInterrupt (what Ctrl-C raises in the main thread) as the env step waits for the copy
    made during the fetch.  The run's end stops the copy and removes it; no env is left; the re-run copies."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    waited: list[int] = []
    wait = envearly.EarlyEnv.wait

    def interrupted(self: envearly.EarlyEnv, timeout: float | None = None) -> bool:
        waited.append(1)
        if len(waited) == 1:
            raise KeyboardInterrupt
        return wait(self, timeout)
    with monkeypatch.context() as m:
        m.setattr(envearly.EarlyEnv, "wait", interrupted)
        with pytest.raises(KeyboardInterrupt):
            setup(world, s2, cache)
    assert len(waited) >= 2             # the run's end waited for the copy's thread after the Ctrl-C
    assert not (s2 / "env").exists() and not (s2 / ".state" / envearly.AHEAD).exists()
    res = setup(world, s2, cache)       # the fetch was done: the env step copies the env itself
    assert statuses(res)["fetch"] == "cached" and statuses(res)["env"] == "ran"
    assert built_from(s2) == entries(cache)[0].name and verify(s2) == 0


@pytest.mark.parametrize("copy", ["ahead", "own"])
@pytest.mark.parametrize("plant", ["pyvenv.cfg", "bin/activate", "bin/python3.99"])
def test_a_venv_file_changed_between_the_copy_and_its_record_fails_the_env_step(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy: str, plant: str) -> None:
    """The venv's own files (no RECORD holds them) as the env step records them are the entry's: a writer in the
    stack after the copy (``ahead``: while the copy made during the fetch waited; ``own``: the env step's own
    copy) changed ``pyvenv.cfg`` or an activation script, or planted an interpreter name.  Before, the env step
    recorded what it found, and the no-op and ``current verify`` held the stack to it."""
    from october.installer.core.errors import EnvError

    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    if copy == "own":
        shutil.rmtree(builtstack.built_dir(cache) / builtstack.BY_RECIPE)

    def write(env: Path) -> None:       # the writer: a spy on the copy, the real copy made first
        target = env / plant
        if plant == "bin/python3.99":
            target.symlink_to("/bin/sh")
        else:
            with open(target, "a") as fh:
                fh.write("\n# planted\n")
    if copy == "ahead":
        take = envearly.EarlyEnv.take

        def taken(self: envearly.EarlyEnv, ctx, entry):
            got = take(self, ctx, entry)
            if got is not None:
                write(ctx.paths.env)
            return got
        monkeypatch.setattr(envearly.EarlyEnv, "take", taken)
    else:
        restore = builtrestore.restore_env

        def restored(entry, env, root, **kw):
            got = restore(entry, env, root, **kw)
            write(env)
            return got
        monkeypatch.setattr(builtrestore, "restore_env", restored)

    with pytest.raises(EnvError) as failed:
        setup(world, s2, cache)
    assert f"the env's {plant} changed after it was copied" in str(failed.value)
    log = s2 / "logs" / "env.log"
    assert (log.exists() and BEGUN in log.read_text()) is (copy == "ahead")
    monkeypatch.undo()
    res = setup(world, s2, cache)        # the env made again
    assert statuses(res)["env"] == "ran" and "# planted" not in (s2 / "env" / "pyvenv.cfg").read_text()
    assert not (s2 / "env" / "bin" / "python3.99").exists() and verify(s2) == 0


@pytest.mark.parametrize("how", ["removed", "linked"])
def test_a_copy_removed_or_swapped_before_it_is_taken_is_copied_again(world: World, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Planted: the copy made during the fetch, once it was done and before the env step put it in place, removed
    or swapped for a link to a folder elsewhere holding the same files (the review: the link became ``STACK/env``
    and verify passed): said, and the env step copies the env itself."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    wait = envearly.EarlyEnv.wait
    made = s2 / ".state" / envearly.AHEAD / "env"

    def removed(self: envearly.EarlyEnv, timeout: float | None = None) -> bool:
        done = wait(self, timeout)
        if made.is_dir() and not made.is_symlink():
            if how == "linked":
                shutil.copytree(made, tmp_path / "elsewhere", symlinks=True)
                shutil.rmtree(made)
                made.symlink_to(tmp_path / "elsewhere")
            else:
                shutil.rmtree(made)
        return done
    monkeypatch.setattr(envearly.EarlyEnv, "wait", removed)
    res = setup(world, s2, cache)
    log = (s2 / "logs" / "env.log").read_text()
    assert f"is not used ({made} is not the folder the copy made)" in log and TAKEN not in log
    assert not (s2 / "env").is_symlink() and (s2 / "env").is_dir()
    assert built_from(s2) == entries(cache)[0].name and statuses(res)["install"] == "ran" and verify(s2) == 0


def test_a_copy_that_cannot_be_renamed_into_place_is_copied_again(world: World, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy made during the fetch is renamed into ``STACK/env``; a rename that fails (another file system under
    ``.state``, a folder made read-only) is said, the copy removed, and the env step copies the env itself; the
    entry is not blamed.  The failing rename is a stand-in: as root, on one file system, no plant makes it fail."""
    import errno

    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    made = s2 / ".state" / envearly.AHEAD / "env"
    rename = os.rename

    def refused(src, dst, *args, **kwargs) -> None:
        if Path(src) == made:
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))
        rename(src, dst, *args, **kwargs)
    monkeypatch.setattr(envearly.os, "rename", refused)
    res = setup(world, s2, cache)
    log = (s2 / "logs" / "env.log").read_text()
    assert "is not used (it could not be put in place: [Errno 18] Invalid cross-device link" in log and TAKEN not in log
    assert not (s2 / ".state" / envearly.AHEAD).exists() and (s2 / "env").is_dir() and not (s2 / "env").is_symlink()
    assert built_from(s2) == entries(cache)[0].name and statuses(res)["install"] == "ran" and verify(s2) == 0


def test_an_entry_removed_after_the_copy_does_not_fail_the_stack(world: World, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: the check of the venv's own files read the entry again, so an entry refused by another stack
    (removed) right after this one's copy failed a complete env (FileNotFoundError).  Now it holds the files to
    what the copy wrote."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    take = envearly.EarlyEnv.take

    def taken(self: envearly.EarlyEnv, ctx, entry):
        got = take(self, ctx, entry)
        if got is not None:
            builtstack.discard_entry(entry)         # another stack refused it: removed
        return got
    monkeypatch.setattr(envearly.EarlyEnv, "take", taken)
    res = setup(world, s2, cache)
    assert TAKEN in (s2 / "logs" / "env.log").read_text() and statuses(res)["install"] == "ran"
    assert verify(s2) == 0


def test_a_ctrl_c_as_the_copy_s_thread_starts_is_waited_for(world: World, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: a Ctrl-C raised inside ``Thread.start`` (the thread already running) left the copy unknown to
    the run's end, which released the lock while it wrote in the stack.  Planted: KeyboardInterrupt after the real
    start, each file's copy slowed."""
    import threading
    import time

    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    start, copy = threading.Thread.start, builtrestore.clone_or_copy

    def interrupted(self: threading.Thread) -> None:
        start(self)
        if self.name == "october-env-early":
            raise KeyboardInterrupt

    def slow(src: Path, dest: Path) -> str:
        time.sleep(0.05)
        return copy(src, dest)
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    monkeypatch.setattr(builtrestore, "clone_or_copy", slow)
    with pytest.raises(KeyboardInterrupt):
        setup(world, s2, cache)
    assert [t.name for t in threading.enumerate() if t.name == "october-env-early"] == []
    assert not (s2 / ".state" / envearly.AHEAD).exists()


def test_the_run_s_end_waits_for_a_file_that_takes_longer_than_the_kill_wait(world: World, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: the end of the run stopped waiting for the copy after KILL_WAIT_S while one slow file (a large
    ``.so`` from a network cache) was still being copied into the stack.  Planted: the wait 0.1 s, a file 1 s."""
    import threading
    import time

    from october.installer.core.runner import Started

    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    copy = builtrestore.clone_or_copy

    def slow(src: Path, dest: Path) -> str:
        if src.name == "payload.bin" or src.stat().st_size > 1000:
            time.sleep(1.0)
        return copy(src, dest)
    monkeypatch.setattr(Started, "KILL_WAIT_S", 0.1)
    monkeypatch.setattr(builtrestore, "clone_or_copy", slow)
    world.beta_bare.rename(tmp_path / "beta-moved.git")         # the fetch fails: the run ends during the copy
    for mirror in (cache / "git").glob("*beta.git"):
        shutil.rmtree(mirror)
    with pytest.raises(Exception):
        setup(world, s2, cache)
    assert [t.name for t in threading.enumerate() if t.name == "october-env-early"] == []
    assert "one file still copying); waiting for it" in (s2 / "logs" / "env.log").read_text()
    assert not (s2 / ".state" / envearly.AHEAD).exists() and not (s2 / "env").exists()


def test_a_remembered_recipe_key_naming_no_entry_is_pruned(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    (entry,) = entries(cache)
    (named,) = by_recipe(cache)
    stale = builtstack.built_dir(cache) / builtstack.BY_RECIPE / ("e" * 64)
    stale.write_text("f" * 64 + "\n")           # an entry pruned or refused since
    builtprune.prune(cache, entry)
    assert by_recipe(cache) == {named: entry.name}


def test_an_env_swapped_for_a_link_is_named_and_the_rerun_never_touches_what_it_points_at(
        world: World, tmp_path: Path) -> None:
    """The review: ``STACK/env`` replaced by a link to a folder holding the same files (another stack's env, or
    one anyone may write) passed the no-op re-run and ``current verify``.  Now both name it; the re-run removes
    the link (never what it points at: ``uv venv --clear`` would have emptied it) and makes the env again."""
    from tests.test_setup_e2e import verify as verify_cli

    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    setup(world, s2, cache)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(s2 / "env", elsewhere, symlinks=True)
    shutil.rmtree(s2 / "env")
    (s2 / "env").symlink_to(elsewhere)
    before = sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*"))

    out = verify_cli(s2)
    assert out.returncode == 13 and f"{s2 / 'env'}: expected the folder the env step made, found a link to " \
                                   f"{elsewhere}" in out.stdout + out.stderr
    res = setup(world, s2, cache)
    assert statuses(res)["env"] == "ran" and not (s2 / "env").is_symlink() and (s2 / "env").is_dir()
    assert sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*")) == before
    assert verify(s2) == 0
