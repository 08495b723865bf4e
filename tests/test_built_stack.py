"""Issue 20 item 2: a second stack with the same inputs takes the first one's finished env and fork
build outputs from the built-stack cache (installer/pyenv/builtstack.py, builtkey.py, builtrestore.py, builtprune.py) -- as private, relocated
copies, checked as a normal install is -- and a tampered cache entry never reaches a stack (issue 22's
poisoned cache).  Real uv, real git, real wheels (the offline fixture world); nothing is mocked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from october.installer.core.filetrust import FileTrust
from october.installer.install import records
from tests.fixtures.root import PROJECT_ROOT
from october.installer.pyenv import builtkey, builtprune, builtrestore, builtstack
from tests.fixtures.builtcache import entries, rewrite_entry_with_manifest
from tests.fixtures.world import World
from tests.test_cache_isolation import POISON, inodes, site
from tests.test_setup_e2e import setup, world  # noqa: F401  (the world fixture and the one setup driver)

pytestmark = pytest.mark.slow


def statuses(res) -> dict[str, str]:
    return {r.name: r.status for r in res.records}


def built_from(stack: Path) -> str | None:
    return json.loads((stack / ".state" / "env.json").read_text())["outputs"].get("built_from")


def verify(stack: Path) -> int:
    return subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300).returncode


def test_a_second_stack_takes_the_built_stack_as_private_relocated_copies(world: World, tmp_path: Path) -> None:
    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    assert built_from(s1) is None and len(entries(cache)) == 1
    entry = entries(cache)[0]

    res = setup(world, s2, cache)
    assert built_from(s2) == entry.name and all(s == "ran" for s in statuses(res).values())
    assert "env copied from the built-stack cache entry" in (s2 / "logs" / "env.log").read_text()
    assert (entry / builtstack.USED).is_file()        # taken now: what prune() reads as its last use
    # no file of the new stack is an inode of the cache or of the first stack
    assert not inodes(s2) & inodes(cache) and not inodes(s2) & inodes(s1)
    # the editable forks point at this stack's checkouts, and RECORD holds for every file
    for fork in ("alpha", "beta"):
        (direct,) = site(s2).glob(f"{fork}-*.dist-info/direct_url.json")
        assert json.loads(direct.read_text())["url"] == (s2 / "src" / fork).as_uri()
    assert str(s1) not in "".join(p.read_text(errors="replace") for p in (s2 / "env").rglob("*")
                                   if p.is_file() and not p.is_symlink())
    assert records.tampered(s2 / "env", FileTrust(tmp_path / "t.json")) == {}
    assert subprocess.run([str(s2 / "env" / "bin" / "python"), "-c", "import alpha, beta, tinydep"]).returncode == 0
    assert verify(s2) == 0
    assert all(s == "cached" for s in statuses(setup(world, s2, cache)).values())

    # an edit in the second stack reaches neither the entry nor a third stack
    tiny = site(s2) / "tinydep" / "__init__.py"
    clean = tiny.read_text()
    with open(tiny, "a") as fh:
        fh.write(POISON)
    setup(world, tmp_path / "s3", cache)
    assert built_from(tmp_path / "s3") == entry.name
    assert (site(tmp_path / "s3") / "tinydep" / "__init__.py").read_text() == clean


def _stored_entry(world: World, tmp_path: Path) -> builtstack.Entry:
    """The built-stack cache entry a first stack (tmp_path/s1) stored in tmp_path/cache."""
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    (stored,) = entries(cache)
    entry = builtstack.find(cache, stored.name)
    assert entry is not None
    return entry


def test_what_is_copied_from_an_entry_is_read_once_and_a_file_changed_since_is_read_again(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The restore hashes each file it copies against the manifest; install's RECORD check takes those digests
    (FileTrust.vouch) instead of reading the env a second time (a torch env: gigabytes).  A file changed after the
    copy has another signature: read again, and found."""
    entry = _stored_entry(world, tmp_path)
    root = tmp_path / "s3"
    hashed = builtrestore.restore_env(entry, root / "env", root)
    tiny = next((root / "env").glob("lib/python*/site-packages")) / "tinydep" / "__init__.py"
    assert tiny in hashed and all(p.is_file() and p.is_relative_to(root / "env") for p in hashed)
    read: list[Path] = []
    real = records.record_hash

    def counted(path: Path, algo: str, *args: object) -> str:
        read.append(Path(path))
        return real(path, algo, *args)

    monkeypatch.setattr(records, "record_hash", counted)
    trust = FileTrust(tmp_path / "t.json")
    builtrestore.vouch_copied(trust, hashed)
    assert records.tampered(root / "env", trust) == {}
    assert read and not set(read) & set(hashed)         # RECORD's other files only: none the copy hashed
    with open(tiny, "a") as fh:
        fh.write(POISON)
    assert list(records.tampered(root / "env", trust)) == ["tinydep"] and tiny in read


def test_a_file_written_while_the_restore_hashed_it_is_not_vouched_for(world: World, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: the signature was taken after the hash (and after the mode was set), so a write landing between the
    two was inside it, vouched for with the manifest's digest, and install's RECORD check passed the file.  The
    signature is now taken before the hash and the file vouched for only when it stats the same after it."""
    entry = _stored_entry(world, tmp_path)
    real = builtrestore.sha256_file
    planted: list[Path] = []

    def hash_then_write(path: Path) -> str:         # a writer right behind the hash
        digest = real(path)
        if Path(path).name == "__init__.py" and Path(path).parent.name == "tinydep" and not planted:
            with open(path, "a") as fh:
                fh.write(POISON)
            planted.append(Path(path))
        return digest

    monkeypatch.setattr(builtrestore, "sha256_file", hash_then_write)
    root = tmp_path / "s3"
    hashed = builtrestore.restore_env(entry, root / "env", root)
    monkeypatch.undo()
    tiny = next((root / "env").glob("lib/python*/site-packages")) / "tinydep" / "__init__.py"
    assert planted and POISON in tiny.read_text() and tiny not in hashed and len(hashed) > 1
    trust = FileTrust(tmp_path / "t.json")
    builtrestore.vouch_copied(trust, hashed)
    assert list(records.tampered(root / "env", trust)) == ["tinydep"]


def test_on_a_filesystem_with_whole_second_times_nothing_copied_is_vouched_for(world: World, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: where times are whole seconds (ext4 with small inodes, some NFS servers), a write of the same size
    in the second of the hash keeps the signature, so a digest vouched for there could pass a rewritten file.  On
    such a filesystem nothing is vouched for: the checks read the files.  The signature rounded to whole seconds
    stands in for that filesystem (making one needs a loop mount)."""
    entry = _stored_entry(world, tmp_path)
    real = builtrestore.signature

    def whole_seconds(st: os.stat_result) -> list[int]:
        ino, size, mtime, ctime = real(st)
        return [ino, size, mtime // 10**9 * 10**9, ctime // 10**9 * 10**9]

    monkeypatch.setattr(builtrestore, "signature", whole_seconds)
    root = tmp_path / "s3"
    assert builtrestore.restore_env(entry, root / "env", root) == {}
    monkeypatch.undo()
    assert len(builtrestore.restore_env(entry, tmp_path / "s5" / "env", tmp_path / "s5")) > 1


def test_an_env_refused_after_its_copy_takes_its_vouched_digests_with_it(world: World, tmp_path: Path) -> None:
    """Review: a copied env refused (reuse.refuse_entry) is removed; what its copy vouched for is forgotten with it,
    so a file made at the same path later (an inode used again) cannot take a digest of the removed one."""
    from october.installer.core.paths import StackPaths
    from october.installer.engine import SetupOptions, SilentReporter, StepContext
    from october.installer.core.runner import Runner
    from october.installer.recipe.load import load_recipe
    from october.installer.steps import reuse

    entry = _stored_entry(world, tmp_path)
    paths = StackPaths(tmp_path / "s3")
    ctx = StepContext(options=SetupOptions(stack=paths.root, recipe=load_recipe(str(world.recipe)),
                                           cache_dir=tmp_path / "cache"),
                      paths=paths, runner=Runner(paths.logs), ui=SilentReporter())
    builtrestore.vouch_copied(ctx.trust, builtrestore.restore_env(entry, paths.env, paths.root))
    assert any(k.startswith(str(paths.env) + os.sep) for k in ctx.trust.vouched)
    reuse.refuse_entry(ctx, "env", entry, "planted")
    assert not paths.env.exists() and ctx.trust.vouched == {}


def test_a_rerun_after_a_failed_second_stack_installs_the_forks_again(world: World, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Tamper hunt: a second stack whose install failed after the env copy keeps its env (the env step is done); a
    line added to fork alpha's editable .pth (run at every interpreter start) with its RECORD row rewritten to
    match, and the re-run took the forks' outputs from the entry again: alpha was not installed again, repair
    leaves forks to their install, and no install had recorded the RECORDs to hold them to: setup, the no-op and
    `current verify` passed with the line in place.  The forks are taken from the entry only by the run that
    copied the env; here they are installed again."""
    import base64
    import csv
    import hashlib
    import io

    from october.installer.core.errors import InstallError
    from october.installer.steps.install import InstallStep

    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    with monkeypatch.context() as m:
        def fail(_self: InstallStep, _ctx: object, *_markers: object) -> None:
            raise InstallError("planted", expected="-", found="-", fix="-")

        m.setattr(InstallStep, "check_consistency", fail)
        with pytest.raises(InstallError):
            setup(world, s2, cache)
    assert built_from(s2) is not None
    pth = site(s2) / "__editable__.alpha.pth"
    with open(pth, "a") as fh:
        fh.write("import os; os.environ['PLANTED'] = '1'\n")
    record = next(site(s2).glob("alpha-*.dist-info")) / "RECORD"
    rows = list(csv.reader(io.StringIO(record.read_text())))
    for row in rows:
        if row and row[0] == pth.name:
            data = pth.read_bytes()
            row[1:3] = ["sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode(),
                        str(len(data))]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    record.write_text(out.getvalue())

    res = setup(world, s2, cache)
    assert statuses(res)["env"] == "cached" and statuses(res)["install"] == "ran"
    assert "PLANTED" not in pth.read_text()
    assert verify(s2) == 0


def test_a_relocated_file_changed_while_the_env_is_copied_is_unlike_its_record(world: World, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Tamper hunt: the files the stack's path is put into (fork alpha's editable .pth, run at every interpreter
    start) are written first; their RECORD rows were made at the end of the copy by reading them back, so a line
    added in between was recorded as theirs and passed every check.  The rows now say the bytes written."""
    entry = _stored_entry(world, tmp_path)
    real = builtrestore.clone_or_copy
    planted: list[Path] = []

    def copy_then_plant(src: Path, dest: Path) -> str:    # a writer while the rest of the env is copied
        done = real(src, dest)
        if not planted and "alpha-" in str(dest) and ".dist-info" in str(dest):
            pth = next(Path(dest).parents[1].glob("__editable__.alpha*.pth"))
            with open(pth, "a") as fh:
                fh.write("import os; os.environ['PLANTED'] = '1'\n")
            planted.append(pth)
        return done

    monkeypatch.setattr(builtrestore, "clone_or_copy", copy_then_plant)
    root = tmp_path / "s3"
    builtrestore.restore_env(entry, root / "env", root)
    monkeypatch.undo()
    pth = next((root / "env").glob("lib/python*/site-packages/__editable__.alpha*.pth"))
    assert planted and "PLANTED" in pth.read_text()
    bad = records.tampered(root / "env", FileTrust(tmp_path / "t.json"))
    assert list(bad) == ["alpha"] and pth.name in bad["alpha"][0], bad


def _rewrite_same_size(out: Path) -> None:
    st = out.stat()
    os.chmod(out, 0o644)
    out.write_bytes(b"X" * st.st_size)
    os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("how, said", [("rewritten", "changed"), ("removed", "was removed")])
def test_a_fork_output_changed_between_its_copy_and_its_record_fails_the_install(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch,
                                                                                how: str, said: str) -> None:
    """Tamper hunt: alpha's build output, copied from the entry, then rewritten with bytes of the same size and its
    mtime put back before the install step recorded it: the record took the new bytes as the build's output, and
    setup, the no-op and `current verify` passed.  The record of an output copied from the entry must be the
    entry's digest; the re-run installs the forks again.  Removed instead (session 31): it was recorded as never
    made, and the three passed a checkout without it (vLLM's ``_C.abi3.so`` is one)."""
    from october.installer.core.errors import InstallError
    from october.installer.steps import reuse
    from tests.fixtures.world import ALPHA_OUTPUT, make_world

    world = make_world(tmp_path / "world", build_output=True)
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    out = s2 / "src" / "alpha" / ALPHA_OUTPUT
    real = reuse.forks_from_built_stack

    def copy_then_write(ctx: object, step: str, forks: object):    # a writer after the copy
        got = real(ctx, step, forks)
        if how == "rewritten":
            _rewrite_same_size(out)
        else:
            out.unlink()
        return got

    with monkeypatch.context() as m:
        m.setattr(reuse, "forks_from_built_stack", copy_then_write)
        with pytest.raises(InstallError, match=f"{said} after it was copied from the built-stack cache entry"):
            setup(world, s2, cache)
    assert len(entries(cache)) == 1                 # not the entry's fault: kept
    res = setup(world, s2, cache)
    assert statuses(res)["install"] == "ran" and out.is_file() and b"X" * 8 not in out.read_bytes()
    assert verify(s2) == 0


def test_an_output_link_or_a_file_with_the_stack_path_changed_after_its_copy_fails_the_install(tmp_path: Path) -> None:
    """Review of the mend above: it compared plain files only; a link pointed elsewhere, or a file the stack's path
    was placed into and then rewritten, was still recorded as the build's output.  Each is held to what the entry
    puts at this stack's root.  The entry is made here with those shapes (the fixture forks build a plain file)."""
    from october.installer.core.errors import InstallError
    from october.installer.core.hashing import sha256_file
    from october.installer.steps import reuse

    entry_dir, root = tmp_path / "entry", tmp_path / "stack"
    (entry_dir / "forks" / "alpha").mkdir(parents=True)
    templated = f"ROOT = '{builtkey.PLACEHOLDER}/src/alpha'\n".encode()
    (entry_dir / "forks" / "alpha" / "where.py").write_bytes(templated)
    (entry_dir / "forks" / "alpha" / "plain.so").write_bytes(b"\x7fELF")
    rows = {"where.py": {"kind": "file", "templated": True, "sha256": hashlib.sha256(templated).hexdigest()},
            "plain.so": {"kind": "file", "sha256": sha256_file(entry_dir / "forks" / "alpha" / "plain.so")},
            "data": {"kind": "link", "target": f"{builtkey.PLACEHOLDER}/src/alpha/csrc"},
            "sub": {"kind": "dir"}}
    entry = builtstack.Entry(entry_dir, {"files": {"forks": {"alpha": rows}}})
    placed = f"ROOT = '{root}/src/alpha'\n".encode()
    good = {"where.py": "sha256:" + hashlib.sha256(placed).hexdigest(),
            "plain.so": "sha256:" + rows["plain.so"]["sha256"], "data": f"link:{root}/src/alpha/csrc"}
    reuse.require_restored_outputs(entry, {"alpha": good}, root)
    for gone in good:                               # one not recorded (removed since its copy); a folder needs none
        with pytest.raises(InstallError, match=f"build output {gone} was removed after it was copied"):
            reuse.require_restored_outputs(entry, {"alpha": {k: v for k, v in good.items() if k != gone}}, root)
    for rel, changed in (("where.py", "sha256:" + "0" * 64), ("plain.so", "sha256:" + "1" * 64),
                         ("data", "link:/tmp/elsewhere")):
        with pytest.raises(InstallError, match=f"build output {rel} changed after it was copied"):
            reuse.require_restored_outputs(entry, {"alpha": {**good, rel: changed}}, root)
    (entry_dir / "forks" / "alpha" / "where.py").write_bytes(b"tampered in the cache")
    with pytest.raises(InstallError, match="no longer verifies"):
        reuse.require_restored_outputs(entry, {"alpha": good}, root)


def test_the_fork_build_outputs_copied_from_an_entry_are_read_once_too(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """As the env's files: the record the install step keeps of the forks' build outputs (vLLM's extension modules:
    hundreds of MB) takes the digests the restore computed; an output changed since is read again."""
    from october.installer.git import buildoutputs
    from tests.fixtures.world import ALPHA_OUTPUT, make_world

    world = make_world(tmp_path / "world", build_output=True)
    entry = _stored_entry(world, tmp_path)
    root = tmp_path / "s3"
    checkout, outputs = root / "src" / "alpha", {}
    checkout.mkdir(parents=True)
    builtrestore.restore_forks(entry, [("alpha", checkout)], root, changed_tracked=lambda _c: [],
                             announce=lambda _n, _c: None, hashed=outputs)
    assert checkout / ALPHA_OUTPUT in outputs
    trust = FileTrust(tmp_path / "t.json")
    builtrestore.vouch_copied(trust, outputs, as_record=False)
    read: list[Path] = []
    real = buildoutputs.sha256_file
    monkeypatch.setattr(buildoutputs, "sha256_file", lambda p: (read.append(Path(p)), real(p))[1])
    rels = [str(p.relative_to(checkout)) for p in outputs]
    assert buildoutputs.record(checkout, rels, trust) == {r: f"sha256:{real(checkout / r)}" for r in rels}
    assert read == []
    (checkout / ALPHA_OUTPUT).write_bytes(b"planted")
    assert buildoutputs.record(checkout, [ALPHA_OUTPUT], trust) == {ALPHA_OUTPUT: f"sha256:{real(checkout / ALPHA_OUTPUT)}"}
    assert read == [checkout / ALPHA_OUTPUT]


def test_a_stack_copied_from_the_cache_records_the_fork_build_outputs_it_took(tmp_path: Path) -> None:
    """Fork 'alpha' builds alpha/_native.abi3.so into its checkout (ignored by git, as vLLM's _C.abi3.so): the
    second stack takes it from the entry, and its install records it as the first stack's install did, so
    verify and the no-op hold it there too."""
    from october.installer.core.hashing import sha256_file
    from tests.fixtures.world import ALPHA_OUTPUT, make_world

    from october.installer.git import buildoutputs

    world = make_world(tmp_path / "world", build_output=True)
    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    read: list[Path] = []
    with pytest.MonkeyPatch.context() as m:         # the restore's hashing vouches for it: not read again
        real = buildoutputs.sha256_file
        m.setattr(buildoutputs, "sha256_file", lambda p: (read.append(Path(p)), real(p))[1])
        setup(world, s2, cache)
    assert built_from(s2) is not None and s2 / "src" / "alpha" / ALPHA_OUTPUT not in read
    assert "fork build outputs copied from the built-stack cache entry" in (s2 / "logs" / "install.log").read_text()

    def recorded(stack: Path) -> dict:
        return json.loads((stack / ".state" / "install.json").read_text())["outputs"]["build_outputs"]

    out = s2 / "src" / "alpha" / ALPHA_OUTPUT
    assert recorded(s2) == recorded(s1) == {"alpha": {ALPHA_OUTPUT: "sha256:" + sha256_file(out)}, "beta": {}}
    assert verify(s2) == 0 and all(s == "cached" for s in statuses(setup(world, s2, cache)).values())
    clean = out.read_bytes()
    out.write_bytes(b"\x7fELF replaced\n")
    assert verify(s2) == 13
    assert statuses(setup(world, s2, cache))["install"] == "ran"
    assert out.read_bytes() == clean and verify(s2) == 0


@pytest.mark.parametrize("plant", ["edit", "extra", "missing", "fork"])
def test_a_tampered_entry_is_refused_removed_and_the_stack_built(world: World, tmp_path: Path, plant: str) -> None:
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    (entry,) = entries(cache)
    esite = next((entry / "env").glob("lib/python*/site-packages"))
    tiny = esite / "tinydep" / "__init__.py"
    if plant == "edit":                 # a byte of a stored file
        os.chmod(tiny, 0o644)
        with open(tiny, "a") as fh:
            fh.write(POISON)
    elif plant == "extra":              # a .pth (runs at every interpreter start) the manifest does not name
        (esite / "zz.pth").write_text("import os\n")
    elif plant == "missing":
        tiny.unlink()
    else:                               # a file planted among the forks' build outputs
        (entry / "forks" / "alpha").mkdir(parents=True, exist_ok=True)
        (entry / "forks" / "alpha" / "planted.py").write_text("import os\n")

    res = setup(world, s2, cache)
    step = "install" if plant == "fork" else "env"
    assert "refused" in (s2 / "logs" / f"{step}.log").read_text()
    assert statuses(res)["install"] == "ran"
    # nothing of the plant reached the stack: it was built, and its files are its RECORDs'
    assert POISON not in (site(s2) / "tinydep" / "__init__.py").read_text()
    assert not (site(s2) / "zz.pth").exists() and not (s2 / "src" / "alpha" / "planted.py").exists()
    assert records.tampered(s2 / "env", FileTrust(tmp_path / "t.json")) == {}
    assert verify(s2) == 0
    # the refused entry is gone; the stack that was built stored a clean one in its place
    (again,) = entries(cache)
    assert not (next((again / "env").glob("lib/python*/site-packages")) / "zz.pth").exists()
    assert POISON not in (next((again / "env").glob("lib/python*/site-packages")) / "tinydep" / "__init__.py").read_text()
    assert not (again / "forks" / "alpha" / "planted.py").exists()


def test_a_changed_manifest_row_is_not_a_way_in(world: World, tmp_path: Path) -> None:
    """The manifest and a file changed together (the hash a planted file has) pass the manifest, and
    install's RECORD check still refuses the file before install is done."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    rewrite_entry_with_manifest(cache)
    from october.installer.core.errors import InstallError

    with pytest.raises(InstallError) as info:
        setup(world, s2, cache)
    assert "tinydep: tinydep/__init__.py (changed)" in info.value.message
    assert not (s2 / ".state" / "install.json").exists()
    # the entry is the culprit (its bytes were copied by this very run): removed, with the env made from it,
    # so neither this stack's re-run nor another stack takes it again
    assert "now removed with the env" in info.value.message and entries(cache) == [] and not (s2 / "env").exists()
    setup(world, s2, cache)
    assert built_from(s2) is None and verify(s2) == 0


def _fails_with_a_writer_first(world: World, stack: Path, cache: Path, monkeypatch: pytest.MonkeyPatch,
                               write: Callable[[Path], None]) -> str:
    """The setup of ``stack`` with ``write(env)`` run just before install's RECORD check (a spy on the real check:
    a writer in the stack), which must fail: -> the error's message."""
    from october.installer.core.errors import InstallError
    from october.installer.steps import install as install_step

    real = install_step.records.require_intact

    def writer_first(env: Path, *args: Any, **kwargs: Any) -> Any:
        write(env)
        return real(env, *args, **kwargs)
    monkeypatch.setattr(install_step.records, "require_intact", writer_first)
    with pytest.raises(InstallError) as info:
        setup(world, stack, cache)
    monkeypatch.undo()
    return info.value.message


@pytest.mark.parametrize("how", ["edited", "removed", "added"])
def test_an_env_file_changed_in_the_stack_after_its_copy_is_not_the_entry_s_fault(world: World, tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                                  how: str) -> None:
    """Session 32's review: a file of the env edited, removed (or a file added) in the stack after this run copied
    it, before install's RECORD check, was taken for the entry's fault and the entry was removed (every later stack
    then built cold).  Every file the check names is not as the copy wrote it: the entry is kept, the env removed,
    the error names the file and a writer in the stack; the re-run copies the env again and the stack verifies.
    The writer is a spy on the real check (it runs after the plant)."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    (entry,) = entries(cache)

    def write(env: Path) -> None:
        target = next(env.glob("lib/python*/site-packages/tinydep/__init__.py"))
        if how == "edited":
            with open(target, "a") as fh:
                fh.write("PLANTED = 1\n")
        elif how == "removed":
            target.unlink()
        else:
            target.with_name("planted.py").write_text("PLANTED = 1\n")
    said = _fails_with_a_writer_first(world, s2, cache, monkeypatch, write)
    assert "changed in the stack after it was copied" in said and "tinydep/" in said, said
    # said once, with this fix only (the check's own message and fix were repeated in it, uv's cache blamed)
    assert said.count("Expected") == 1 and "uv's cache served" not in said, said
    assert ("(removed)" in said) == (how == "removed") and ("(added)" in said) == (how == "added")
    assert "now removed with the env" not in said and entries(cache) == [entry] and not (s2 / "env").exists()
    setup(world, s2, cache)
    assert built_from(s2) == entry.name and verify(s2) == 0


def test_a_file_the_copy_wrote_without_a_hash_is_not_judged(world: World, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A file the copy wrote with the stack's path put in (fork alpha's editable ``.pth``) has no hash of the copy's
    to hold it to: edited after the copy, it cannot be told from the entry's fault, and the entry is refused as
    before (the safe way).  The writer is a spy on the real check."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)

    def write(env: Path) -> None:
        pth = next(env.glob("lib/python*/site-packages/__editable__.alpha*.pth"))
        with open(pth, "a") as fh:
            fh.write("import os\n")
    said = _fails_with_a_writer_first(world, s2, cache, monkeypatch, write)
    assert ".pth (changed)" in said and "now removed with the env" in said and "changed in the stack" not in said, said
    assert entries(cache) == []


@pytest.mark.parametrize("how", ["another file touched", "a fork reinstalled"])
def test_a_bad_entry_is_refused_whatever_else_changed_in_the_stack(world: World, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The review of the rule above: it asked whether *any* copied file changed, so a bad entry (its file unlike its
    RECORD, as copied) was kept when another file's signature moved -- a chmod in the stack, or the tool's own
    reinstall of a fork whose outputs could not be taken (uv rewrites its dist-info) -- and every re-run failed
    again.  Only the files the check names are judged: one of them as copied is the entry's fault, whatever else
    changed.  The writer is a spy on the real check; the fork reinstall is made by the real install when the
    forks' outputs are refused (a stand-in refusal: ``restore_forks`` raising the entry's ``InTheWay``)."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    rewrite_entry_with_manifest(cache)

    def touch(env: Path) -> None:
        other = next(env.glob("lib/python*/site-packages/alpha-*.dist-info/METADATA"))
        os.chmod(other, other.stat().st_mode)        # the same mode: only its ctime moves

    def in_the_way(*_args: Any, **_kwargs: Any) -> None:
        raise builtstack.InTheWay("a stand-in: the forks' outputs are not taken")
    if how == "a fork reinstalled":
        monkeypatch.setattr(builtrestore, "restore_forks", in_the_way)
    said = _fails_with_a_writer_first(world, s2, cache, monkeypatch,
                                      touch if how == "another file touched" else lambda _env: None)
    assert "tinydep/__init__.py (changed)" in said and "now removed with the env" in said, said
    assert said.count("Expected") == 1 and "uv's cache served" not in said, said
    assert "changed in the stack" not in said and entries(cache) == [] and not (s2 / "env").exists()
    setup(world, s2, cache)
    assert built_from(s2) is None and verify(s2) == 0


@pytest.mark.parametrize("plant", ["interpreter link", "facts", "unsigned"])
def test_a_manifest_rewritten_without_the_key_is_never_taken(world: World, tmp_path: Path, plant: str) -> None:
    """The cache hunt: whoever could write the cache rewrote an entry's ``bin/python`` link and its manifest row
    (the next stack's interpreter was their program, setup and verify 0), or its recorded facts (``torch_cuda``
    of a CPU torch).  The manifest is signed with this user's key, kept outside the cache: a rewritten one, or
    one signed by no key (an earlier version's), is not taken; the stack is built, and the entry replaced."""
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    (entry,) = entries(cache)
    manifest_path = entry / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if plant == "interpreter link":
        evil = tmp_path / "evil-python"
        evil.write_text("#!/bin/sh\nexec python3 \"$@\"\n")
        evil.chmod(0o755)
        os.unlink(entry / "env" / "bin" / "python")
        os.symlink(evil, entry / "env" / "bin" / "python")
        manifest["files"]["env"]["bin/python"]["target"] = str(evil)
    elif plant == "facts":
        manifest["facts"]["env"]["torch_cuda"] = "12.9"
    else:
        del manifest["mac"]
    os.chmod(manifest_path, 0o644)
    manifest_path.write_text(json.dumps(manifest))
    setup(world, s2, cache)
    assert built_from(s2) is None and os.readlink(s2 / "env" / "bin" / "python") != str(tmp_path / "evil-python")
    assert json.loads((s2 / ".state" / "env.json").read_text())["outputs"].get("torch_cuda") is None
    assert verify(s2) == 0
    (replaced,) = entries(cache)
    assert builtstack.find(cache, replaced.name) is not None
    setup(world, tmp_path / "s3", cache)
    assert built_from(tmp_path / "s3") == replaced.name


def test_the_key_is_made_once_private_and_without_it_nothing_is_stored(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from october.installer.core import cachekey

    path = tmp_path / "keys" / "cache.key"
    key = cachekey.load_key(path)
    assert key is not None and len(key) == 32 and cachekey.load_key(path) == key
    assert os.stat(path).st_mode & 0o777 == 0o600 and list(path.parent.iterdir()) == [path]
    path.write_bytes(b"short")
    assert cachekey.load_key(path) is None                 # a key file that is not one: nothing signed or taken
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(blocker / "cache.key"))
    root = tmp_path / "stack"
    (root / "env").mkdir(parents=True)
    with pytest.raises(builtstack.EntryRefused, match="OCTOBER_KEY_FILE"):
        builtstack.store(tmp_path / "cache", "a" * 64, root, root / "env", {}, {})


def test_two_keys_on_one_cache_keep_their_entries_apart(world: World, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The upgrade hunt: two users (two homes, two keys) on one cache each replaced the other's entry under the
    same key, and no stack was ever copied.  The signing key's id is part of the entry's key."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "a.key"))
    setup(world, tmp_path / "a1", cache)
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "b.key"))
    setup(world, tmp_path / "b1", cache)
    assert built_from(tmp_path / "b1") is None and len(entries(cache)) == 2
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "a.key"))
    setup(world, tmp_path / "a2", cache)
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "b.key"))
    setup(world, tmp_path / "b2", cache)
    assert built_from(tmp_path / "a2") is not None and built_from(tmp_path / "b2") is not None
    assert built_from(tmp_path / "a2") != built_from(tmp_path / "b2") and len(entries(cache)) == 2


@pytest.mark.parametrize("where", ["inside the cache", "relative"])
def test_a_key_file_anyone_who_writes_the_cache_could_read_is_not_used(world: World, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       where: str) -> None:
    """The upgrade hunt: with $OCTOBER_KEY_FILE inside the shared cache, whoever could write the cache read the key,
    re-signed a rewritten entry and the next stack took it (ready, verify 0).  Such a key (or a relative path,
    another key in each directory) is not used: nothing is stored or taken, and the console says why."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(cache / "team.key") if where == "inside the cache" else "team.key")
    from october.installer.core import cachekey

    problem = cachekey.key_problem(cache=cache)
    assert problem is not None and ("is inside the cache" in problem or "relative path" in problem), problem
    setup(world, tmp_path / "s1", cache)
    setup(world, tmp_path / "s2", cache)
    assert not (cache / "built").exists() and built_from(tmp_path / "s2") is None
    assert problem in (tmp_path / "s1" / "logs" / "install.log").read_text()
    assert not (cache / "team.key").exists() and not (tmp_path / "team.key").exists()     # none made there either


def test_a_fifo_in_place_of_a_manifest_is_not_waited_on(tmp_path: Path) -> None:
    """The second review: a FIFO planted as ``built/<any key>/manifest.json`` hung every stack that stored an entry
    (its prune read each one) or looked that key up.  It is no entry, read without waiting."""
    import threading

    root, cache = tmp_path / "stack", tmp_path / "cache"
    (root / "env").mkdir(parents=True)
    (root / "env" / "a.txt").write_text("x\n")
    planted = builtstack.built_dir(cache) / ("f" * 64)
    planted.mkdir(parents=True)
    os.mkfifo(planted / "manifest.json")
    done: list[object] = []

    def look() -> None:
        done.append(builtstack.find(cache, "f" * 64))
        done.append(builtprune.prune(cache, tmp_path / "none", now=time.time() + 400 * 86400))

    worker = threading.Thread(target=look, daemon=True)
    worker.start()
    worker.join(10)
    hung = worker.is_alive()
    while worker.is_alive():        # hung in the FIFO: let it go (a writer opening it ends the reader's wait)
        with contextlib.suppress(OSError):
            os.close(os.open(planted / "manifest.json", os.O_WRONLY | os.O_NONBLOCK))
        worker.join(0.1)
    assert not hung and done == [None, []]


def test_another_keys_entries_are_pruned_only_when_untaken_for_30_days(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The second review: an entry signed with another key (another user's, or a key lost with a home) was never
    pruned.  Its own takers stamp it; untaken for 30 days it goes like any other."""
    root, cache = tmp_path / "stack", tmp_path / "cache"
    (root / "env").mkdir(parents=True)
    (root / "env" / "a.txt").write_text("x\n")
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "lost.key"))
    lost = builtstack.store(cache, "a" * 64, root, root / "env", {}, {})
    active = builtstack.store(cache, "b" * 64, root, root / "env", {}, {})
    assert lost is not None and active is not None
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "mine.key"))
    _age(lost.path, 31)
    _age(active.path, 31)
    builtstack.mark_used(active)                            # its user took it today
    mine = builtstack.store(cache, "c" * 64, root, root / "env", {}, {})
    assert mine is not None
    assert dict(builtprune.prune(cache, mine.path)) == {lost.path: "signed with another key, stored 31 day(s) ago, "
                                                                    "no use recorded since"}
    assert entries(cache) == sorted([active.path, mine.path])


def test_a_store_finding_an_entry_of_its_key_stored_meanwhile_keeps_it(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: the check for an entry of the key came before the env-sized copy; one stored by a stack beside it
    during the copy was removed (and a third stack copying from it built cold).  Checked again before the rename."""
    root, cache = tmp_path / "stack", tmp_path / "cache"
    (root / "env").mkdir(parents=True)
    (root / "env" / "a.txt").write_text("x\n")
    real_store_tree = builtstack._store_tree
    beside: list[builtstack.Entry] = []

    def store_tree_while_another_stores(*args: object, **kw: object) -> object:
        rows = real_store_tree(*args, **kw)       # type: ignore[arg-type]
        if not beside:
            with monkeypatch.context() as m:
                m.setattr(builtstack, "_store_tree", real_store_tree)
                entry = builtstack.store(cache, "a" * 64, root, root / "env", {}, {})
            assert entry is not None
            beside.append(entry)
        return rows

    monkeypatch.setattr(builtstack, "_store_tree", store_tree_while_another_stores)
    got = builtstack.store(cache, "a" * 64, root, root / "env", {}, {})
    assert got is not None and got.ident == beside[0].ident and entries(cache) == [beside[0].path]


def test_a_fifo_in_place_of_the_used_stamp_is_not_waited_on(tmp_path: Path) -> None:
    """The review: the stamp was opened for writing without O_NONBLOCK: a FIFO planted there hung the setup."""
    import threading

    root, cache = tmp_path / "stack", tmp_path / "cache"
    (root / "env").mkdir(parents=True)
    (root / "env" / "a.txt").write_text("x\n")
    entry = builtstack.store(cache, "a" * 64, root, root / "env", {}, {})
    assert entry is not None
    os.mkfifo(entry.path / builtstack.USED)
    done = threading.Event()
    threading.Thread(target=lambda: (builtstack.mark_used(entry), done.set()), daemon=True).start()
    assert done.wait(5)


def test_a_key_file_others_can_read_or_no_home_is_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key hunt: a key file made by hand 0644 (the README's sharing) let another user sign a forged entry that
    the owner's next stack took (ready, verify 0); with no home directory at all, setup died in platformdirs
    (exit 70).  A key others can read or write is refused with the chmod to run; no home is a named problem (the
    home-less process is a stand-in: platformdirs raising, as it does for a uid without a passwd entry)."""
    from october.installer.core import cachekey

    key = tmp_path / "team.key"
    key.write_bytes(bytes(range(32)))
    for mode, ok in ((0o644, False), (0o604, False), (0o660, False), (0o640, True), (0o600, True)):
        key.chmod(mode)
        assert (cachekey.load_key(key) is not None) is ok, oct(mode)
    key.chmod(0o644)
    assert "`chmod 600` it" in (cachekey.key_problem(key) or "")
    key.write_bytes(b"ab" * 32)                                 # 64 bytes: a hex key in a file is not a key file
    key.chmod(0o600)
    assert "is not a key (more than 32 byte(s)" in (cachekey.key_problem(key) or "")

    def homeless(*_a: object, **_k: object) -> Path:
        raise RuntimeError("could not determine the home directory")

    monkeypatch.delenv("OCTOBER_KEY_FILE")
    monkeypatch.setattr("platformdirs.user_data_path", homeless)
    assert cachekey.load_key() is None and "no home directory" in (cachekey.key_problem() or "")


def test_a_key_file_that_is_a_link_loop_is_a_named_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$OCTOBER_KEY_FILE a link to itself: no key, a problem naming the file (a RuntimeError traceback, exit 70,
    before: Python 3.11's Path.resolve raises on a loop)."""
    from october.installer.core import cachekey

    loop = tmp_path / "loop.key"
    loop.symlink_to(loop)
    monkeypatch.delenv(cachekey.KEY_ENV, raising=False)
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(loop))
    assert cachekey.load_key(cache=tmp_path / "cache") is None
    assert f"the key file {loop} cannot be" in (cachekey.key_problem(cache=tmp_path / "cache") or "")


def test_an_entry_is_readable_by_those_who_share_the_key(tmp_path: Path) -> None:
    """The key hunt: the manifest was written 0600 (a temporary file's mode), so a second user of a shared key file
    could never read an entry: it rebuilt, and its store replaced the owner's entry with its own, every run.  The
    manifest is readable as the umask allows, like the entry's files."""
    root, cache = tmp_path / "stack", tmp_path / "cache"
    (root / "env").mkdir(parents=True)
    (root / "env" / "a.txt").write_text("x\n")
    old = os.umask(0o022)
    try:
        entry = builtstack.store(cache, "a" * 64, root, root / "env", {}, {})
    finally:
        os.umask(old)
    assert entry is not None and os.stat(entry.path / "manifest.json").st_mode & 0o777 == 0o444


def test_no_entry_for_a_stack_with_changed_inputs(world: World, tmp_path: Path) -> None:
    """Another recipe input (a build requirement) is another key: the stack is built, not copied."""
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    text = world.recipe.read_text()
    world.recipe.write_text(text.replace("[build]\nrequirements = [", '[build]\nrequirements = ["tinydep", ', 1)
                            if "[build]\nrequirements = [" in text else text + '\n[build]\nrequirements = ["tinydep"]\n')
    setup(world, tmp_path / "s2", cache)
    assert built_from(tmp_path / "s2") is None and len(entries(cache)) == 2


def test_the_stack_root_is_replaced_only_where_it_is_the_root(tmp_path: Path) -> None:
    root = Path("/tmp/st1")
    value = {"a": "/tmp/st1/src/x", "b": "/tmp/st10/src", "c": "file:///tmp/st1", "d": "/tmp/st1.bak"}
    t = builtkey.templated(value, root)
    assert t == {"a": f"{builtkey.PLACEHOLDER}/src/x", "b": "/tmp/st10/src", "c": f"file://{builtkey.PLACEHOLDER}",
                 "d": "/tmp/st1.bak"}
    assert builtkey.placed(t, Path("/srv/other")) == {"a": "/srv/other/src/x", "b": "/tmp/st10/src",
                                                        "c": "file:///srv/other", "d": "/tmp/st1.bak"}
    assert not builtkey.path_ok(Path("/tmp/with space")) and not builtkey.path_ok(Path("/tmp/a%20b"))
    assert builtkey.path_ok(Path("/tmp/st_1.x+y-z"))


def test_a_binary_file_naming_the_stack_path_is_not_stored(tmp_path: Path) -> None:
    root = tmp_path / "stack"
    env = root / "env"
    env.mkdir(parents=True)
    (env / "lib.so").write_bytes(b"\0ELF" + str(root).encode() + b"\0")
    with pytest.raises(builtstack.EntryRefused, match="binary and names the stack path"):
        builtstack.store(tmp_path / "cache", "k" * 64, root, env, {}, {})
    assert entries(tmp_path / "cache") == []


def test_a_stack_whose_env_was_removed_takes_its_own_entry_back(world: World, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork outputs the entry holds are already in the checkouts (the same bytes): kept, not refused.

    The fixture's forks build nothing into their checkouts, so the entry is stored as a build that wrote
    ``built.txt`` would store it: the file is written before the install, where it is otherwise not this
    run's making (:func:`october.installer.steps.reuse.unstorable`), and that rule is set aside for that
    one run."""
    import shutil

    from october.installer.steps import reuse

    cache, s1 = tmp_path / "cache", tmp_path / "s1"
    setup(world, s1, cache)
    (entry,) = entries(cache)
    (s1 / "src" / "alpha" / "built.txt").write_text("made by the build\n")    # an ignored build output
    with open(s1 / "src" / "alpha" / ".git" / "info" / "exclude", "a") as fh:
        fh.write("built.txt\n")
    shutil.rmtree(entry)
    (s1 / ".state" / "install.json").unlink()
    (s1 / ".state" / "lock.json").unlink()      # its listing, begun during the install, holds the env to the wheels
    with monkeypatch.context() as m:
        m.setattr(reuse, "unstorable", lambda *args: None)
        setup(world, s1, cache)                         # install runs again and stores an entry with that output
    assert built_from(s1) is None
    (entry,) = entries(cache)
    assert (entry / "forks" / "alpha" / "built.txt").is_file()
    shutil.rmtree(s1 / "env")
    res = setup(world, s1, cache)
    assert built_from(s1) == entry.name and statuses(res)["install"] == "ran"
    assert "refused" not in (s1 / "logs" / "install.log").read_text() and entries(cache) == [entry]
    assert verify(s1) == 0


def test_no_entry_made_by_other_tool_code(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tool's own code is part of the key (not just its version number, 0.1.0 on every commit): an
    entry stored by other code -- planted here as another code hash -- is never taken."""
    cache = tmp_path / "cache"
    monkeypatch.setattr(builtkey, "tool_code", lambda: "0" * 64)
    setup(world, tmp_path / "s1", cache)
    monkeypatch.undo()                                            # this code, hashed from its files
    setup(world, tmp_path / "s2", cache)
    assert built_from(tmp_path / "s2") is None and len(entries(cache)) == 2
    setup(world, tmp_path / "s3", cache)
    assert built_from(tmp_path / "s3") is not None


def _age(entry: Path, days: float) -> None:
    for stamp in (entry / "manifest.json", entry / builtstack.USED):
        if stamp.exists():
            then = time.time() - days * 86400
            os.utime(stamp, (then, then))


def test_entries_no_stack_will_take_are_removed_when_the_next_is_stored(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each upgrade of the tool left an env-sized entry that no later code takes (the key names the code),
    never removed.  The install step, once it stored an entry, now removes one made by other code that no
    stack took for a week, and any that none took for 30 days; one taken since, or of other code but taken
    this week, is kept, and so is a folder that is not an entry (a user's, or one whose manifest names
    another key)."""
    root, cache = tmp_path / "stack", tmp_path / "cache"
    (root / "env").mkdir(parents=True)
    (root / "env" / "a.txt").write_text("x\n")

    def store(key: str) -> builtstack.Entry:
        entry = builtstack.store(cache, key * 64, root, root / "env", {}, {})
        assert entry is not None
        return entry

    with monkeypatch.context() as m:
        m.setattr(builtkey, "tool_code", lambda: "0" * 64)
        upgraded_from, other_recent, other_taken = store("a"), store("b"), store("7")
    builtstack.mark_used(other_taken)
    unmarked = store("f")                   # an entry an earlier version made names no code and is not signed
    manifest = json.loads((unmarked.path / "manifest.json").read_text())
    del manifest["code"], manifest["mac"]
    os.chmod(unmarked.path / "manifest.json", 0o644)
    (unmarked.path / "manifest.json").write_text(json.dumps(manifest))
    idle, taken = store("c"), store("d")
    notes = builtstack.built_dir(cache) / "my-notes"        # not an entry: a user's folder with a manifest.json
    notes.mkdir()
    (notes / "manifest.json").write_text("[]")
    alias = builtstack.built_dir(cache) / ("9" * 64)        # an entry's manifest under another key's name
    shutil.copytree(idle.path, alias)
    for entry, days in ((upgraded_from.path, 8), (other_recent.path, 3), (other_taken.path, 8), (unmarked.path, 8),
                        (idle.path, 31), (taken.path, 40), (notes, 400), (alias, 400)):
        _age(entry, days)
    builtstack.mark_used(builtstack.Entry(taken.path, taken.manifest))
    newest = store("e")
    gone = builtprune.prune(cache, newest.path)
    assert entries(cache) == sorted([other_recent.path, taken.path, newest.path, notes, alias])
    assert dict(gone) == {upgraded_from.path: "made by other tool code, stored 8 day(s) ago, no use recorded since",
                          other_taken.path: "made by other tool code, not taken for 8 day(s)",
                          unmarked.path: "made by other tool code, stored 8 day(s) ago, no use recorded since",
                          idle.path: "stored 31 day(s) ago, no use recorded since"}
    assert not list(builtstack.built_dir(cache).glob(".gone-*"))


def test_a_store_keeps_the_entry_a_stack_beside_it_stored_and_a_refusal_removes_only_what_it_read(
        tmp_path: Path) -> None:
    """Stacks set up at once with the same key: the second store replaced the first's entry while a third stack
    copied from it, that stack took the vanished files for tampering and removed whatever entry was there then,
    the healthy new one (the cache hunt, about one round in five).  Now a store keeps an entry of its key, and
    a refusal removes the entry only while its manifest is the one the refusing stack read."""
    root, cache = tmp_path / "stack", tmp_path / "cache"
    (root / "env").mkdir(parents=True)
    (root / "env" / "a.txt").write_text("x\n")
    first = builtstack.store(cache, "a" * 64, root, root / "env", {}, {})
    (root / "env" / "b.txt").write_text("y\n")
    again = builtstack.store(cache, "a" * 64, root, root / "env", {}, {})
    assert first is not None and again is not None and again.ident == first.ident
    assert sorted(again.manifest["files"]["env"]) == ["a.txt"]
    read = builtstack.find(cache, "a" * 64)
    assert read is not None and read.ident == first.ident
    builtstack.discard(first.path)                          # another run: refused it, then stored it again
    second = builtstack.store(cache, "a" * 64, root, root / "env", {}, {})
    assert second is not None and second.ident != read.ident
    assert builtstack.discard_entry(read) == "replaced" and entries(cache) == [second.path]
    last = builtstack.find(cache, "a" * 64)
    assert last is not None and builtstack.discard_entry(last) == "removed" and entries(cache) == []
    assert builtstack.discard_entry(last) == "gone"


def test_a_manifest_found_signed_is_read_once_until_it_changes(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A second stack looks its entry up four times; an env with its own torch has a manifest of ~12k rows (60 ms
    to read and check each time).  The signed manifest is read once while its identity and the key are the same;
    rewritten (signed or not), removed, or judged with another key, it is read and judged again; no more than
    FOUND_KEPT entries are remembered.  The count of reads is a spy on the real reader (it reads as before)."""
    from october.installer.core.cachekey import KEY_ENV, load_key, sign

    root, cache = tmp_path / "stack", tmp_path / "cache"
    (root / "env").mkdir(parents=True)
    (root / "env" / "a.txt").write_text("x\n")
    stored = builtstack.store(cache, "c" * 64, root, root / "env", {}, {})
    assert stored is not None
    reads: list[Path] = []
    real = builtstack.read_entry
    monkeypatch.setattr(builtstack, "read_entry", lambda path: reads.append(path) or real(path))
    first = builtstack.find(cache, "c" * 64)
    assert first is not None and builtstack.find(cache, "c" * 64) is first and len(reads) == 1
    manifest_path = stored.path / builtstack.MANIFEST
    doc = json.loads(manifest_path.read_text())
    doc["files"]["env"]["a.txt"]["sha256"] = "0" * 64
    os.chmod(manifest_path, 0o644)
    # a size of its own each time: a file system of whole-second times shows the rewrite by its size alone
    manifest_path.write_text(json.dumps(doc, indent=1))         # rewritten in place, not signed: refused
    assert builtstack.find(cache, "c" * 64) is None and len(reads) == 2
    doc["mac"] = sign(doc, load_key())
    manifest_path.write_text(json.dumps(doc))           # signed (by one who holds the key): read again, taken
    again = builtstack.find(cache, "c" * 64)
    assert again is not None and again.manifest["files"]["env"]["a.txt"]["sha256"] == "0" * 64 and len(reads) == 3
    assert builtstack.find(cache, "c" * 64) is again and len(reads) == 3
    monkeypatch.setenv(KEY_ENV, "ab" * 32)              # another key (the fleet's): judged again, not signed by it
    assert builtstack.find(cache, "c" * 64) is None and len(reads) == 4
    monkeypatch.delenv(KEY_ENV)
    assert builtstack.find(cache, "c" * 64) is again and len(reads) == 4
    os.remove(manifest_path)
    assert builtstack.find(cache, "c" * 64) is None     # gone: not the one remembered
    for i in range(builtstack.FOUND_KEPT + 1):
        assert builtstack.store(cache, f"{i:x}" * 64, root, root / "env", {}, {}) is not None
        assert builtstack.find(cache, f"{i:x}" * 64) is not None
        assert len(builtstack._found) <= builtstack.FOUND_KEPT


def test_a_full_disk_while_copying_an_entry_keeps_the_entry(world: World, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack on a full disk took the shared entry's copy failure for a bad entry and removed it: every later
    stack on a good disk was built cold.  The disk is filled by a stand-in (the copy raises ENOSPC: a small
    tmpfs needs a mount this test machine may not allow); the run ends disk full, the entry stays and the
    next stack takes it."""
    import errno

    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    (entry,) = entries(cache)

    def full(*_args: object, **_kw: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(builtrestore, "clone_or_copy", full)
        with pytest.raises(OSError) as info:
            setup(world, tmp_path / "s2", cache)
    assert info.value.errno == errno.ENOSPC and entries(cache) == [entry]
    setup(world, tmp_path / "s3", cache)
    assert built_from(tmp_path / "s3") == entry.name


def test_the_used_stamp_is_never_written_through_a_link(tmp_path: Path) -> None:
    """Whoever can write an entry's folder could make every stack taking it touch a file of their choosing
    (``used`` a link), and keep the entry for ever (a link to a file that is always new)."""
    root, cache = tmp_path / "stack", tmp_path / "cache"
    (root / "env").mkdir(parents=True)
    (root / "env" / "a.txt").write_text("x\n")
    entry = builtstack.store(cache, "a" * 64, root, root / "env", {}, {})
    assert entry is not None
    target = tmp_path / "elsewhere" / "made-by-touch"
    target.parent.mkdir()
    (entry.path / builtstack.USED).symlink_to(target)
    builtstack.mark_used(entry)
    assert not target.exists()
    (entry.path / builtstack.USED).unlink()
    _age(entry.path, 40)
    fresh = tmp_path / "fresh"
    fresh.write_text("")
    (entry.path / builtstack.USED).symlink_to(fresh)
    os.utime(entry.path / builtstack.USED, (time.time() - 40 * 86400,) * 2, follow_symlinks=False)
    assert [p for p, _ in builtprune.prune(cache, tmp_path / "none")] == [entry.path]


def test_a_new_stack_removes_the_entry_an_upgrade_left(world: World, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The install step prunes once it stored its own entry (:func:`builtprune.prune`): the previous code's
    entry, not taken for a week, is gone, and the log says so."""
    cache = tmp_path / "cache"
    with monkeypatch.context() as m:
        m.setattr(builtkey, "tool_code", lambda: "0" * 64)
        setup(world, tmp_path / "s1", cache)
    (old,) = entries(cache)
    _age(old, 8)
    setup(world, tmp_path / "s2", cache)
    (kept,) = entries(cache)
    assert kept != old and json.loads((kept / "manifest.json").read_text())["code"] == builtkey.tool_code()
    assert f"removed the built-stack cache entry {old}" in (tmp_path / "s2" / "logs" / "install.log").read_text()


def test_the_key_names_uv_by_its_version_line_and_size_not_its_path(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The same inputs, the same uv line and size: one key, wherever the uv binary lies (each tool install
    has its own copy); another line (release or target) or another size (build): another key.  The uv
    binary's place is planted through uv_exe, the one thing that says which uv the tool runs."""
    import shutil

    from october.installer.pyenv import uvcmd

    def key(line: str) -> str:
        return builtkey.key_for(tmp_path / "stack", env_inputs={"python": "3.12"}, install_inputs={},
                                  wheel_sha256=None, forks={}, uv_line=line)

    real = Path(uvcmd.uv_exe()).resolve()
    copy = tmp_path / "elsewhere" / "uv"
    copy.parent.mkdir()
    shutil.copy2(real, copy)
    line = "uv 0.13.9 (x86_64-unknown-linux-gnu)"
    here = key(line)
    monkeypatch.setattr(builtkey, "uv_exe", lambda: str(copy))
    assert key(line) == here                                               # another copy of the same uv
    assert key("uv 0.13.8 (x86_64-unknown-linux-gnu)") != here             # another release
    with open(copy, "ab") as fh:
        fh.write(b"\0")
    assert key(line) != here                                               # same line, another build


def test_a_run_killed_while_copying_the_env_leaves_none_and_the_rerun_finishes(world: World, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario hunt: a second stack interrupted while its env was copied from the cache (SIGINT or
    SIGKILL) left ``STACK/env`` without ``pyvenv.cfg``, and every re-run failed (``uv venv --clear`` will not
    clear what is not a venv; exit 6).  Now the copy is made beside it and renamed into place.  Planted: the
    copy interrupted (KeyboardInterrupt, what Ctrl-C raises) at its tenth file.  The env step's own copy: the
    recipe's remembered entry forgotten, so none is copied during the fetch (tests/test_env_ahead.py: a Ctrl-C
    while that copy is waited for)."""
    from october.installer.core import clonefile

    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    (entry,) = entries(cache)
    forget = builtstack.built_dir(cache) / builtstack.BY_RECIPE
    shutil.rmtree(forget)
    copied = {"n": 0}
    real = clonefile.clone_or_copy

    def interrupted(src: Path, dest: Path) -> None:
        copied["n"] += 1
        if copied["n"] == 10:
            raise KeyboardInterrupt
        real(src, dest)

    with monkeypatch.context() as m:
        m.setattr(builtrestore, "clone_or_copy", interrupted)
        with pytest.raises(KeyboardInterrupt):
            setup(world, s2, cache)
    assert copied["n"] == 10 and not (s2 / "env").exists() and (s2 / "env.partial").is_dir()
    res = setup(world, s2, cache)
    assert statuses(res)["env"] == "ran" and built_from(s2) == entry.name
    assert not (s2 / "env.partial").exists() and verify(s2) == 0
    # the review: killed again, and the entry gone before the re-run (evicted, or the key changed): the re-run
    # builds the env itself, and the half copy is removed all the same (on a real stack, gigabytes)
    shutil.rmtree(s2 / "env")
    shutil.rmtree(forget)
    copied["n"] = 0
    with monkeypatch.context() as m:
        m.setattr(builtrestore, "clone_or_copy", interrupted)
        with pytest.raises(KeyboardInterrupt):
            setup(world, s2, cache)
    assert (s2 / "env.partial").is_dir()
    builtstack.discard(entry)
    res = setup(world, s2, cache)
    assert statuses(res)["env"] == "ran" and built_from(s2) is None
    assert not (s2 / "env.partial").exists() and verify(s2) == 0


def test_an_env_left_without_pyvenv_cfg_is_made_again_by_the_rerun(world: World, tmp_path: Path) -> None:
    """What an older tool's killed copy left (and a deleted pyvenv.cfg): verify names it, and the re-run
    removes the half env and makes it again (before: exit 6 on every re-run, and verify passed)."""
    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    setup(world, s2, cache)
    (s2 / "env" / "pyvenv.cfg").unlink()
    bad = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(s2)], cwd=PROJECT_ROOT,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 13 and f"[env] {s2 / 'env' / 'pyvenv.cfg'}: expected sha256" in bad.stdout + bad.stderr
    res = setup(world, s2, cache)
    assert statuses(res)["env"] == "ran" and (s2 / "env" / "pyvenv.cfg").is_file()
    assert "had no pyvenv.cfg" in (s2 / "logs" / "env.log").read_text() and verify(s2) == 0


def test_an_env_file_edited_in_a_stack_copied_from_the_cache_is_put_back_by_the_rerun(world: World,
                                                                                      tmp_path: Path) -> None:
    """The scenario hunt: a stack built here put back an edited env file on re-run ("re-installing what no
    longer matches its RECORD"); one copied from the cache failed (exit 11), and the fix it named (delete
    uv's cache) did not help.  Planted: a file of an index package deleted, another edited."""
    cache, s1, s2 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2"
    setup(world, s1, cache)
    setup(world, s2, cache)
    assert built_from(s2) is not None
    tiny = site(s2) / "tinydep" / "__init__.py"
    clean = tiny.read_text()
    tiny.unlink()
    with open(next((site(s2) / "torch").glob("*.py")), "a") as fh:
        fh.write(POISON)
    res = setup(world, s2, cache)
    assert statuses(res)["install"] == "ran" and tiny.read_text() == clean
    assert POISON not in "".join(p.read_text() for p in (site(s2) / "torch").glob("*.py"))
    log = (s2 / "logs" / "install.log").read_text()
    assert "--reinstall-package tinydep" in log and "--reinstall-package torch" in log
    assert verify(s2) == 0


def test_a_run_killed_while_copying_a_fork_build_output_keeps_the_entry_and_the_rerun_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario hunt: a second stack killed while it copied a fork's build output from the cache left a
    half-written file; the re-run called that the entry's fault ("exists already and differs"), removed the
    shared entry, and every later stack on the node built cold.  Now the entry is kept and the half file replaced:
    the re-run installs the forks again (the env was copied by the killed run, not by it: see
    ``test_a_rerun_after_a_failed_second_stack_installs_the_forks_again``), and a later stack takes the entry's
    verified bytes.  Planted: the copy interrupted half-way through the file."""
    from october.installer.core import clonefile
    from october.installer.core.hashing import sha256_file
    from tests.fixtures.world import ALPHA_OUTPUT, make_world

    world = make_world(tmp_path / "world", build_output=True)
    cache, s1, s2, s3 = tmp_path / "cache", tmp_path / "s1", tmp_path / "s2", tmp_path / "s3"
    setup(world, s1, cache)
    (entry,) = entries(cache)
    real = clonefile.clone_or_copy

    def killed(src: Path, dest: Path) -> str:
        if dest.name == Path(ALPHA_OUTPUT).name:
            dest.write_bytes(src.read_bytes()[: max(1, src.stat().st_size // 2)])
            raise KeyboardInterrupt
        return real(src, dest)

    with monkeypatch.context() as m:
        m.setattr(builtrestore, "clone_or_copy", killed)
        with pytest.raises(KeyboardInterrupt):
            setup(world, s2, cache)
    out = s2 / "src" / "alpha" / ALPHA_OUTPUT
    assert out.is_file() and out.read_bytes() != (s1 / "src" / "alpha" / ALPHA_OUTPUT).read_bytes()
    res = setup(world, s2, cache)
    assert statuses(res)["install"] == "ran" and built_from(s2) == entry.name
    assert entries(cache) == [entry], "the shared entry was removed for this stack's own leftover"
    assert sha256_file(out) == sha256_file(s1 / "src" / "alpha" / ALPHA_OUTPUT) and verify(s2) == 0
    assert "fork build outputs copied from the built-stack cache entry" not in (s2 / "logs" / "install.log").read_text()
    setup(world, s3, cache)
    assert built_from(s3) == entry.name
    assert "fork build outputs copied from the built-stack cache entry" in (s3 / "logs" / "install.log").read_text()
    # a folder where the entry has a file is not replaced: that stack builds its forks, the entry is not at fault
    checkout = tmp_path / "s4-alpha"
    (checkout / ALPHA_OUTPUT).mkdir(parents=True)
    found = builtstack.find(cache, entry.name)
    assert found is not None
    with pytest.raises(builtstack.InTheWay, match="is a folder where the cache entry has a file"):
        builtrestore.restore_forks(found, [("alpha", checkout)], tmp_path / "s4", changed_tracked=lambda _c: [],
                                 announce=lambda _n, _c: None)
    assert (checkout / ALPHA_OUTPUT).is_dir() and entries(cache) == [entry]


def test_what_a_killed_store_left_is_swept_by_the_next_store_of_this_host(world: World, tmp_path: Path) -> None:
    """The scenario hunt: a first stack killed while it stored itself left ``CACHE/built/.partial-*`` (a whole
    env) for ever.  The next store on this host removes those of processes that are gone; a live one, and
    one of another host (a shared cache), are left."""
    import socket

    cache, s1 = tmp_path / "cache", tmp_path / "s1"
    base = cache / "built"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    host = socket.gethostname()
    ns = os.stat("/proc/self/ns/pid").st_ino
    dead = base / f".partial-{gone}.{ns}@{host}+0123"
    alive = base / f".partial-1.{ns}@{host}+4567"
    other = base / f".partial-{gone}.{ns}@elsewhere.example+89ab"
    # the review: host "gpu" must not read "gpu-99999"'s stores as its own, nor another pid namespace's
    prefixed = base / f".partial-{gone}.{ns}@{host}-99999+cdef"
    namespace = base / f".partial-{gone}.{ns + 1}@{host}+ef01"
    # the upgrade hunt: an earlier october named its partials .partial-<hex> (no owner): a day-old one goes
    legacy_old, legacy_new = base / f".partial-{'a' * 32}", base / f".partial-{'b' * 32}"
    for d in (dead, alive, other, prefixed, namespace, legacy_old, legacy_new):
        (d / "env").mkdir(parents=True)
    os.utime(legacy_old, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    setup(world, s1, cache)
    assert len(entries(cache)) == 1
    assert not dead.exists() and alive.is_dir() and other.is_dir() and prefixed.is_dir() and namespace.is_dir()
    assert not legacy_old.exists() and legacy_new.is_dir()


def test_a_rerun_by_another_install_of_the_same_uv_judges_the_machine_again_and_rebuilds_nothing(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same tool installed again elsewhere (its own copy of the same uv): the re-run's preflight is judged
    again (another uv binary), and no later step runs again (env, install and lock did: the preflight's result
    chained on uv's path).  Another uv is planted as the tool env's own: a copy of the real binary beside a
    link to this Python (uv_exe looks there)."""
    import shutil

    from october.installer.pyenv import uvcmd

    cache, stack = tmp_path / "cache", tmp_path / "s1"
    setup(world, stack, cache)
    bin_dir = tmp_path / "elsewhere" / "bin"
    bin_dir.mkdir(parents=True)
    shutil.copy2(Path(uvcmd.uv_exe()).resolve(), bin_dir / "uv")
    (bin_dir / "python").symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    assert uvcmd.uv_exe() == str(bin_dir / "uv")
    ran = {k for k, v in statuses(setup(world, stack, cache)).items() if v == "ran"}
    assert ran <= {"preflight", "receipt"}, ran


def test_markers_chained_as_the_earlier_version_did_still_match(world: World, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack set up by october before the preflight stopped chaining on uv's path: its markers were chained on
    the whole facts; the upgraded tool's re-run runs nothing (an upgrade is not a rebuild)."""
    from october.installer.steps.results import PreflightResult

    import shutil

    from october.installer.pyenv import uvcmd

    cache, stack = tmp_path / "cache", tmp_path / "s1"
    with monkeypatch.context() as m:
        m.setattr(PreflightResult, "chain_json", PreflightResult.legacy_chain_json)     # as before
        setup(world, stack, cache)
    ran = {k for k, v in statuses(setup(world, stack, cache)).items() if v == "ran"}
    assert ran == set(), ran
    # the upgrade hunt: the upgraded tool installed elsewhere (its own copy of the same uv) re-ran every step: the
    # preflight ran again (another uv path) and the legacy chain was made from its new facts, not the old ones
    with monkeypatch.context() as m:
        m.setattr(PreflightResult, "chain_json", PreflightResult.legacy_chain_json)
        setup(world, tmp_path / "s2", cache)
    bin_dir = tmp_path / "elsewhere" / "bin"
    bin_dir.mkdir(parents=True)
    shutil.copy2(Path(uvcmd.uv_exe()).resolve(), bin_dir / "uv")
    (bin_dir / "python").symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    ran = {k for k, v in statuses(setup(world, tmp_path / "s2", cache)).items() if v == "ran"}
    assert ran <= {"preflight", "receipt"}, ran
    ran = {k for k, v in statuses(setup(world, tmp_path / "s2", cache)).items() if v == "ran"}
    assert ran == set(), ran                # and the next re-run too
