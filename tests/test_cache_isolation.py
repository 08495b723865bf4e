"""Issue 22 item 4: a poisoned cache does not spread, and a tampered installed file is put back.

Real uv, real git, real wheels (the offline fixture world of tests/fixtures/world.py); nothing is
mocked.  The stacks and the cache share one filesystem, as ``--cache-dir`` is meant to be used.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from october.installer.core.errors import InstallError
from october.installer.core.filetrust import RACY_NS, FileTrust
from october.installer.core.hashing import sha256_file
from october.installer.lock.pylock import locked_state
from tests.fixtures.world import World
from tests.test_setup_e2e import setup, world  # noqa: F401  (the world fixture and the one setup driver)

POISON = "\nimport os  # planted\n"


def site(stack: Path) -> Path:
    return next((stack / "env").glob("lib/python*/site-packages"))


def inodes(root: Path) -> set[tuple[int, int]]:
    return {(st.st_dev, st.st_ino) for p in root.rglob("*") if p.is_file() and not p.is_symlink()
            for st in [p.stat()]}


@pytest.mark.slow
def test_an_edit_in_one_stack_reaches_neither_the_cache_nor_the_next_stack(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    s1, s2 = tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    # no installed file, base wheel or clone object is an inode of the cache
    shared = inodes(s1) & inodes(cache)
    assert not shared, f"{len(shared)} file(s) of stack 1 are the cache's inodes"
    tiny, torch_init = site(s1) / "tinydep" / "__init__.py", site(s1) / "torch" / "__init__.py"
    clean = {p.name: p.read_text() for p in (tiny,)} | {"torch": torch_init.read_text()}
    for p in (tiny, torch_init):
        with open(p, "a") as fh:
            fh.write(POISON)

    setup(world, s2, cache)
    assert (site(s2) / "tinydep" / "__init__.py").read_text() == clean["__init__.py"]
    assert (site(s2) / "torch" / "__init__.py").read_text() == clean["torch"]

    # a plain re-run of stack 1 re-installs only the distributions whose RECORD no longer matches
    # (env stays cached); the run after that is a no-op again
    statuses = {r.name: r.status for r in setup(world, s1, cache).records}
    assert statuses["install"] == "ran" and statuses["env"] == "cached"
    assert tiny.read_text() == clean["__init__.py"] and torch_init.read_text() == clean["torch"]
    assert all(r.status == "cached" for r in setup(world, s1, cache).records)

    # `october_setup STACK --locked` puts an edited file back too
    with open(tiny, "a") as fh:
        fh.write(POISON)
    res = setup(world, s1, cache, locked=locked_state(s1 / "pylock.toml"))
    assert {r.name: r.status for r in res.records}["install"] == "ran"
    assert tiny.read_text() == clean["__init__.py"]
    with open(tiny, "a") as fh:
        fh.write(POISON)
    res = setup(world, s1, cache, locked=locked_state(s1 / "pylock.toml"))
    assert {r.name: r.status for r in res.records}["env"] == "cached"   # the same --locked inputs
    assert tiny.read_text() == clean["__init__.py"]


@pytest.mark.slow
def test_install_is_not_done_when_the_cache_serves_other_bytes(world: World, tmp_path: Path) -> None:
    """A cache poisoned some other way (e.g. through a stack made by an older, hard-linking
    version) is caught by the RECORD check before install is marked done."""
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    planted = [p for p in (cache / "uv").rglob("tinydep/__init__.py")]
    assert planted, "uv's cache should hold the unpacked tinydep"
    for p in planted:
        os.chmod(p, 0o644)
        with open(p, "a") as fh:
            fh.write(POISON)
    # without the built-stack cache entry stack 1 left, so that stack 2 installs through uv's cache
    # (a tampered entry: tests/test_built_stack.py)
    shutil.rmtree(cache / "built")
    with pytest.raises(InstallError) as info:
        setup(world, tmp_path / "s2", cache)
    assert "tinydep: tinydep/__init__.py (changed)" in info.value.message
    assert str(cache / "uv") in info.value.fix
    assert not (tmp_path / "s2" / ".state" / "install.json").exists()


def _hash(counter: list[int]):
    def compute(p: Path) -> str:
        counter.append(1)
        return sha256_file(p)
    return compute


def _age(path: Path, seconds: float) -> None:
    t = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(t, t))


def test_trust_rehashes_what_changed_and_only_that(tmp_path: Path) -> None:
    f = tmp_path / "f.bin"
    f.write_bytes(b"a" * 100)
    store = tmp_path / "trust.json"
    calls: list[int] = []
    trust = FileTrust(store)
    # ctime is "now" after any write, so a fresh file is racy: hashed, not recorded
    assert trust.digest(f, "sha256", _hash(calls)) == sha256_file(f) and len(calls) == 1
    assert str(f) not in trust.entries
    time.sleep(RACY_NS / 1e9 + 0.05)
    trust.save()                        # settles the racy file: hashed again, recorded
    assert len(calls) == 2 and str(f) in trust.entries

    again = FileTrust(store)
    assert again.known(f, "sha256") == sha256_file(f) and again.known(f, "other") is None
    assert again.digest(f, "sha256", _hash(calls)) == sha256_file(f) and len(calls) == 2   # trusted
    assert again.digest(f, "other", _hash(calls)) and len(calls) == 3                      # another kind

    # same size, mtime put back: ctime moved, so it is read again and the new digest returned
    st = f.stat()
    f.write_bytes(b"b" * 100)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert FileTrust(store).known(f, "sha256") is None
    assert FileTrust(store).digest(f, "sha256", _hash(calls)) == sha256_file(f) and len(calls) == 4
    with pytest.raises(FileNotFoundError):
        FileTrust(store).known(tmp_path / "gone", "sha256")

    # a torn or foreign store trusts nothing
    store.write_text("{not json")
    assert FileTrust(store).entries == {}
    store.write_text('{"format": 99, "files": {}}')
    assert FileTrust(store).entries == {}


def test_a_blob_changed_in_a_git_mirror_is_refused_by_its_hash(world: World, tmp_path: Path) -> None:
    """A loose object of the cache's mirror rewritten (valid zlib, the right header, other bytes): before
    anything is checked out, every object of the pinned commit is hashed against its id, so the new
    stack's fetch fails naming the mirror and the file.  Before, only git's racy-clean re-hash could
    notice (a checkout spanning over a second did not: git status compares stat data)."""
    import subprocess
    import zlib

    from october.installer.core.errors import FetchError

    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    (mirror,) = (cache / "git").glob("*-alpha.git")
    tree = subprocess.run(["git", "--git-dir", str(mirror), "ls-tree", "-r", world.commits["alpha"]],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    oid, rel = next((ln.split()[2], ln.split("\t")[1]) for ln in tree if ln.endswith(".py"))
    obj = mirror / "objects" / oid[:2] / oid[2:]
    assert obj.is_file(), "the fixture mirror keeps loose objects"
    planted = (s1 / "src" / "alpha" / rel).read_bytes() + POISON.encode()
    os.chmod(obj, 0o644)
    obj.write_bytes(zlib.compress(b"blob %d\0" % len(planted) + planted))
    with pytest.raises(FetchError) as exc:
        setup(world, s2, cache)
    assert f"the cache's mirror {mirror} holds objects whose bytes are not the ones their ids name" in str(exc.value)
    assert f"{oid} ({rel})" in (exc.value.found or "") and f"remove {mirror}" in (exc.value.fix or "")
    assert not (s2 / "src" / "alpha").exists()


def test_a_file_still_too_new_at_save_is_not_hashed_again_for_nothing(tmp_path: Path) -> None:
    """A racy file (written within RACY_NS) is settled by hashing it again at save; one still too new then could not
    be recorded either, and hashing it again was wasted (a second stack's env: its whole torch, a third time)."""
    f, store, calls = tmp_path / "f.bin", tmp_path / "trust.json", []
    f.write_bytes(b"a" * 100)
    trust = FileTrust(store)
    assert trust.digest(f, "sha256", _hash(calls)) == sha256_file(f) and len(calls) == 1
    trust.save()
    assert len(calls) == 1 and str(f) not in trust.entries and str(f) in trust.racy


def test_a_vouched_digest_serves_this_run_only_while_the_file_is_unchanged(tmp_path: Path) -> None:
    """FileTrust.vouch: a digest this run computed as it wrote the file is taken while the signature holds, is read
    again once the file changed, and never reaches the store (it was hashed while racy: settled by hashing it)."""
    from october.installer.core.filetrust import signature

    f, g, store, calls = tmp_path / "f.bin", tmp_path / "g.bin", tmp_path / "trust.json", []
    f.write_bytes(b"a" * 100)
    g.write_bytes(b"g" * 100)
    trust = FileTrust(store)
    trust.vouch(f, "sha256", sha256_file(f), signature(os.stat(f)), _hash(calls))
    assert trust.known(f, "sha256") == sha256_file(f) and trust.known(f, "other") is None
    assert trust.digest(f, "sha256", _hash(calls)) == sha256_file(f) and calls == []
    f.write_bytes(b"b" * 100)                   # changed after it was vouched for: read again
    assert trust.known(f, "sha256") is None
    assert trust.digest(f, "sha256", _hash(calls)) == sha256_file(f) and len(calls) == 1
    trust.vouch(g, "sha256", "not-its-digest", signature(os.stat(g)), _hash(calls))
    assert trust.known(g, "sha256") == "not-its-digest"       # taken as vouched for, this run
    time.sleep(RACY_NS / 1e9 + 0.05)
    trust.save()
    again = FileTrust(store)
    assert again.vouched == {} and again.known(g, "sha256") == sha256_file(g) and again.known(f, "sha256") == sha256_file(f)


def test_what_was_vouched_for_under_a_removed_folder_is_forgotten(tmp_path: Path) -> None:
    """Review: a copied env refused and removed left its vouched digests; a file made later at the same path with
    the same signature (an inode used again, whole-second times) would have taken one.  unvouch forgets them."""
    from october.installer.core.filetrust import signature

    env, other, calls = tmp_path / "env", tmp_path / "env2", []
    for d in (env / "lib", other):
        d.mkdir(parents=True)
    files = [env / "a.py", env / "lib" / "b.py", other / "c.py"]
    trust = FileTrust(tmp_path / "trust.json")
    for f in files:
        f.write_text(f.name)
        trust.vouch(f, "sha256", "vouched", signature(os.stat(f)), _hash(calls))
    trust.unvouch(env)
    assert [trust.known(f, "sha256") for f in files] == [None, None, "vouched"]
