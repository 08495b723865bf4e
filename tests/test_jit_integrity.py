"""JIT integrity and reuse: a library whose bytes differ from what the jit step recorded is rebuilt, never
taken as a cache hit; a second stack with the same inputs reuses the built modules from the shared cache.

Real parts: a uv venv with a stand-in ``flashinfer`` wheel (asymmetric ``plan``), the real builder ``main``
(tests/fixtures/jit_standin.py replaces only the CUDA compile with gcc, which cannot run here), the real
step, the real pipeline engine for the re-run.  Faults are planted in the files on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from october.installer.core.hashing import sha256_file
from october.installer.engine import StepContext
from october.installer.jit.cache import SharedJitCache
from october.installer.jit.integrity import MANIFEST, read_manifest, report, untrusted_libraries
from october.installer.recipe import JitModule
from october.installer.steps.jit import JitStep
from tests.fixtures import stack_forks as sf
from tests.fixtures.jit_ctx import STANDIN, jit_api_context, jit_context

MODULES = (JitModule(kind="decode", q="bf16", k="bf16", v="e4m3", o="bf16", head_dim=128),
           JitModule(kind="decode", q="f16", k="f16", v="e4m3", o="f16", head_dim=64))
COMMIT = "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"


@pytest.fixture(scope="session")
def links(tmp_path_factory: pytest.TempPathFactory) -> sf.Links:
    d = tmp_path_factory.mktemp("jitint") / "links"
    links = sf.Links(d, b"")
    links.add("flashinfer-python", "0.6.7", {"flashinfer/__init__.py": sf.FLASHINFER_ASYM})
    return links


def _ctx(root: Path, links: sf.Links, cache: Path, *, shared: bool = True) -> StepContext:
    # the facts the shared-cache key is made of, as the fetch/preflight/env steps record them, and the fork's
    # checkout as the install step records it: FlashInfer's AOT dir is <it>/flashinfer/data/aot
    done = {"fetch": sf.record(sf.fetched({"flashinfer": ("x", COMMIT)})),
            "preflight": sf.record(sf.preflight_facts(nvcc={"version": "13.0", "path": None})),
            "env": sf.record(sf.env_torch("2.11.0+cu130", "13.0")),
            "install": sf.record(sf.installed({"flashinfer": (root / "src-flashinfer", COMMIT, "flashinfer")}))}
    return jit_context(root, links, MODULES, packages=["flashinfer-python==0.6.7"], cache=cache,
                       done=done if shared else None)


def _lib(out: dict, i: int = 0) -> Path:
    return Path(out["modules"][i]["path"])


@pytest.mark.parametrize("fault", ["truncated", "corrupted", "deleted", "unrecorded"])
def test_a_library_that_is_not_what_was_recorded_is_rebuilt(tmp_path, links, fault):
    ctx = _ctx(tmp_path, links, tmp_path / "cache", shared=False)
    step = JitStep(builder=STANDIN)
    first = step.run(ctx).to_json()
    lib, good = _lib(first), first["modules"][0]["sha256"]
    if fault == "truncated":
        lib.write_bytes(lib.read_bytes()[:100])
    elif fault == "corrupted":
        data = bytearray(lib.read_bytes())
        data[len(data) // 2] ^= 0xFF
        lib.write_bytes(bytes(data))
    elif fault == "deleted":
        lib.unlink()
    else:   # a library the step never recorded (its record lost): not trusted either
        (ctx.paths.jit / MANIFEST).unlink()
    if fault != "unrecorded":
        assert step.verify(ctx, step.load(first)) is not None          # the no-op re-run notices
    again = step.run(ctx).to_json()
    m = again["modules"][0]
    assert m["cached"] is False and m["source"] == "built"   # compiled again, not taken as a hit
    assert m["sha256"] == sha256_file(lib) == good          # the lock gets the good bytes' hash
    if fault in ("truncated", "corrupted", "unrecorded"):
        assert again["discarded"] and again["discarded"][0]["path"] == str(lib)
    assert again["modules"][1]["cached"] is (fault != "unrecorded")
    assert step.verify(ctx, step.load(again)) is None and report(ctx.paths.jit)["ok"] is True


def test_a_corrupted_library_is_found_by_the_integrity_report(tmp_path, links):
    ctx = _ctx(tmp_path, links, tmp_path / "cache", shared=False)
    out = JitStep(builder=STANDIN).run(ctx).to_json()
    lib = _lib(out)
    assert report(ctx.paths.jit) == {"ok": True, "untrusted": [], "missing": []}
    lib.write_bytes(b"\x7fELF" + b"\0" * 10)
    got = report(ctx.paths.jit)
    assert got["ok"] is False and got["untrusted"][0]["path"] == str(lib)
    assert "bytes differ from the recorded sha256" in got["untrusted"][0]["reason"]


def test_a_second_stack_reuses_the_shared_cache_without_building(tmp_path, links, monkeypatch):
    cache = tmp_path / "cache"
    first = JitStep(builder=STANDIN).run(_ctx(tmp_path / "a", links, cache)).to_json()
    assert first["shared_cache"]["stored"] == 2 and first["shared_cache"]["restored"] == 0
    # The builder must not run for the second stack: if it did, it would fail on purpose.
    monkeypatch.setenv("JIT_STANDIN_FAULT", "crash")
    ctx2 = _ctx(tmp_path / "b", links, cache)
    second = JitStep(builder=STANDIN).run(ctx2).to_json()
    assert [m["source"] for m in second["modules"]] == ["shared-cache", "shared-cache"]
    assert [m["sha256"] for m in second["modules"]] == [m["sha256"] for m in first["modules"]]
    assert _lib(second).is_relative_to(ctx2.paths.jit) and sha256_file(_lib(second)) == first["modules"][0]["sha256"]
    assert not ctx2.runner.log_path("jit").exists() or "jit_standin" not in ctx2.runner.log_path("jit").read_text()
    assert untrusted_libraries(ctx2.paths.jit) == [] and set(read_manifest(ctx2.paths.jit)) == {
        m["uri"] for m in second["modules"]}


@pytest.mark.parametrize("tamper", ["library", "entry", "extra-file", "library-and-record", "unsigned"])
def test_a_tampered_shared_cache_entry_is_refused_and_rebuilt(tmp_path, links, tamper):
    cache = tmp_path / "cache"
    first = JitStep(builder=STANDIN).run(_ctx(tmp_path / "a", links, cache)).to_json()
    entries = sorted(p.parent for p in (cache / "jit").glob("k-*/*/*/entry.json"))
    assert len(entries) == 2
    uri = first["modules"][0]["uri"]
    entry = next(e for e in entries if json.loads((e / "entry.json").read_text())["uri"] == uri)
    if tamper == "library":
        so = entry / "files" / f"{uri}.so"
        os.chmod(so, 0o644)
        so.write_bytes(so.read_bytes()[:-8] + b"tampered")
    elif tamper == "entry":   # the entry's own record rewritten to match bad bytes: the lib path escapes
        doc = json.loads((entry / "entry.json").read_text())
        doc["lib"] = "../../elsewhere.so"
        (entry / "entry.json").write_text(json.dumps(doc))
    elif tamper in ("library-and-record", "unsigned"):
        # the library and its rows in entry.json rewritten together (the README's limit until entries were signed),
        # or the signature taken off (what an earlier version's entries are)
        doc = json.loads((entry / "entry.json").read_text())
        if tamper == "library-and-record":
            so = entry / "files" / f"{uri}.so"
            os.chmod(so, 0o644)
            so.write_bytes(so.read_bytes()[:-8] + b"tampered")
            doc["sha256"] = doc["files"][so.name] = hashlib.sha256(so.read_bytes()).hexdigest()
        else:
            del doc["mac"]
        (entry / "entry.json").write_text(json.dumps(doc))
    else:
        (entry / "files" / "planted.so").write_bytes(b"x")
    ctx2 = _ctx(tmp_path / "b", links, cache)
    second = JitStep(builder=STANDIN).run(ctx2).to_json()
    sources = {m["uri"]: m["source"] for m in second["modules"]}
    assert sources[uri] == "built" and list(sources.values()).count("shared-cache") == 1
    assert second["modules"][0]["sha256"] == first["modules"][0]["sha256"]
    log = ctx2.runner.log_path("jit").read_text()
    assert "refused and removed" in log
    assert second["shared_cache"]["stored"] == 1              # the rebuilt one replaces the bad entry
    assert SharedJitCache(cache / "jit").restore(
        json.loads((entry / "entry.json").read_text())["key"], tmp_path / "ws").restored is not None


def test_two_keys_on_one_cache_keep_their_entries_apart(tmp_path, links, monkeypatch):
    """The upgrade hunt: two users (two homes, two keys) on one cache: each refused and removed the other's entries
    as unsigned, and every stack built its modules again.  Each key's entries live apart: never seen by the other."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "a.key"))
    a1 = JitStep(builder=STANDIN).run(_ctx(tmp_path / "a1", links, cache)).to_json()
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "b.key"))
    ctx_b = _ctx(tmp_path / "b1", links, cache)
    b1 = JitStep(builder=STANDIN).run(ctx_b).to_json()
    assert a1["shared_cache"]["stored"] == 2 and b1["shared_cache"]["stored"] == 2 and b1["shared_cache"]["restored"] == 0
    assert not ctx_b.runner.log_path("jit").exists() or "refused" not in ctx_b.runner.log_path("jit").read_text()
    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "a.key"))
    monkeypatch.setenv("JIT_STANDIN_FAULT", "crash")        # user a's second stack must build nothing
    a2 = JitStep(builder=STANDIN).run(_ctx(tmp_path / "a2", links, cache)).to_json()
    assert [m["source"] for m in a2["modules"]] == ["shared-cache", "shared-cache"]
    assert len(list((cache / "jit").glob("k-*/*/*/entry.json"))) == 4


def test_a_file_swapped_after_the_entry_was_checked_never_reaches_the_stack(tmp_path, links, monkeypatch):
    """The review: restore hashed every file of the entry, then copied them and hashed only the library again: a
    file swapped in between (a build.ninja, an object; or made a link) reached the stack's jit/.  Each copy is
    hashed against entry.json.  The swap is planted right after the check (a writer racing the restore)."""
    cache = tmp_path / "cache"
    JitStep(builder=STANDIN).run(_ctx(tmp_path / "a", links, cache))
    (entry,) = [e.parent for e in (cache / "jit").glob("k-*/*/*/entry.json")][:1]
    doc = json.loads((entry / "entry.json").read_text())
    other = next(n for n in doc["files"] if not n.endswith(".so"))
    real_check = SharedJitCache._check

    def check_then_swap(self, key, d, signing):
        found = real_check(self, key, d, signing)
        target = d / "files" / other
        os.chmod(target, 0o644)
        target.write_text("rule cc\n  command = touch /tmp/pwned\n")
        return found

    monkeypatch.setattr(SharedJitCache, "_check", check_then_swap)
    got = SharedJitCache(cache / "jit").restore(doc["key"], tmp_path / "ws")
    assert got.restored is None and "changed while it was copied" in (got.refused or "")
    assert not any("pwned" in p.read_text(errors="replace") for p in (tmp_path / "ws").rglob("*") if p.is_file())


def test_entries_of_the_layout_before_signing_are_swept_after_a_week(tmp_path, links):
    """The layout before entries were signed (``jit/<key[:2]>/<key>/``): never taken by this code, and never removed
    either; each upgrade's JIT modules stayed for good.  A store sweeps those a week old; a newer one stays (an
    earlier version still using the cache takes it)."""
    cache = tmp_path / "cache"
    old, recent = cache / "jit" / "ab" / ("ab" + "0" * 62), cache / "jit" / "cd" / ("cd" + "1" * 62)
    for entry, days in ((old, 8), (recent, 1)):
        (entry / "files").mkdir(parents=True)
        (entry / "files" / "x.so").write_bytes(b"x")
        (entry / "entry.json").write_text("{}")
        then = __import__("time").time() - days * 86400
        os.utime(entry / "entry.json", (then, then))
    JitStep(builder=STANDIN).run(_ctx(tmp_path / "a", links, cache))
    assert not old.exists() and not old.parent.exists() and recent.is_dir()
    assert len(list((cache / "jit").glob("k-*/*/*/entry.json"))) == 2
    # any key's entry (a lost key's, too) untaken for 30 days goes; a restore stamps its entry as taken
    (mine, other) = sorted((cache / "jit").glob("k-*/*/*/entry.json"))
    later = __import__("time").time() + 31 * 86400
    os.utime(mine, (later, later))                          # taken "today", 31 days from now
    gone = SharedJitCache(cache / "jit").sweep(now=later)
    assert set(gone) == {other.parent, recent} and mine.exists()     # the legacy one is 32 days old by then


@pytest.mark.parametrize("where", ["entry.json", "a file"])
def test_a_fifo_in_a_jit_entry_is_not_waited_on(tmp_path, links, where):
    """The second review: a FIFO as an entry's entry.json (or one of its files) hung the JIT step's restore."""
    import threading

    cache = tmp_path / "cache"
    JitStep(builder=STANDIN).run(_ctx(tmp_path / "a", links, cache))
    entry = sorted(e.parent for e in (cache / "jit").glob("k-*/*/*/entry.json"))[0]
    key = json.loads((entry / "entry.json").read_text())["key"]
    doc = json.loads((entry / "entry.json").read_text())
    fifo = entry / "entry.json" if where == "entry.json" else entry / "files" / sorted(doc["files"])[0]
    fifo.unlink()
    os.mkfifo(fifo)
    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(SharedJitCache(cache / "jit").restore(key, tmp_path / "ws")),
                              daemon=True)
    worker.start()
    worker.join(10)
    hung = worker.is_alive()
    while worker.is_alive():
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        worker.join(0.1)
    assert not hung and got and got[0].restored is None


def test_a_stored_entry_is_readable_by_those_who_share_the_key(tmp_path, links):
    """The key hunt: an entry was a 0700 folder with a 0600 entry.json (mkdtemp's and mkstemp's modes): another user
    of a shared key file was told it was tampered, and rebuilt every module every run."""
    cache = tmp_path / "cache"
    old = os.umask(0o022)
    try:
        JitStep(builder=STANDIN).run(_ctx(tmp_path / "a", links, cache))
    finally:
        os.umask(old)
    entry = sorted(e.parent for e in (cache / "jit").glob("k-*/*/*/entry.json"))[0]
    assert os.stat(entry).st_mode & 0o777 == 0o755 and os.stat(entry / "entry.json").st_mode & 0o777 == 0o644


def test_other_inputs_do_not_share(tmp_path, links, monkeypatch):
    """Another torch build (or commit, nvcc, arch) is another key: the second stack compiles."""
    cache = tmp_path / "cache"
    JitStep(builder=STANDIN).run(_ctx(tmp_path / "a", links, cache))
    ctx2 = _ctx(tmp_path / "b", links, cache)
    ctx2.done["env"] = sf.record(sf.env_torch("2.11.0+cu129", "12.9"))
    out = JitStep(builder=STANDIN).run(ctx2).to_json()
    assert [m["source"] for m in out["modules"]] == ["built", "built"]
    assert len(list((cache / "jit").glob("k-*/*/*/entry.json"))) == 4
    shutil.rmtree(tmp_path / "a")


def test_smoke_refuses_a_stack_whose_jit_library_changed(tmp_path, links):
    """`current smoke` does not run the checks on bytes the jit step did not record (exit 12)."""
    from october.installer.core.errors import JitError
    from october.installer.smoke.launch import refuse_untrusted_jit

    ctx = _ctx(tmp_path, links, tmp_path / "cache", shared=False)
    out = JitStep(builder=STANDIN).run(ctx).to_json()
    refuse_untrusted_jit(ctx.paths.root)                    # intact: no objection
    lib = _lib(out)
    lib.write_bytes(lib.read_bytes()[: len(lib.read_bytes()) // 2])
    with pytest.raises(JitError) as err:
        refuse_untrusted_jit(ctx.paths.root)
    assert err.value.exit_code == 12 and "bytes differ from the recorded sha256" in str(err.value)
    # the smoke built nothing: not "JIT build failed"; no record of how the stack was set up: the recipe left to say
    assert err.value.title == "JIT libraries not trusted"
    assert f"re-run `october_setup {ctx.paths.root} --recipe NAME`" in str(err.value)
    lib.unlink()
    with pytest.raises(JitError) as err:
        refuse_untrusted_jit(ctx.paths.root)
    assert "recorded, missing" in str(err.value)
    (ctx.paths.jit / MANIFEST).unlink()       # a stack whose jit step recorded nothing: the checks judge it
    refuse_untrusted_jit(ctx.paths.root)


def test_the_smoke_s_refusal_names_the_command_the_stack_was_set_up_with(tmp_path, links):
    """The H100 run: `current smoke` on a stack with a corrupted library said "JIT build failed" and "re-run
    `october_setup STACK --recipe NAME`".  Its fix is now the stack's own command, from its setup receipt (the recipe
    by name, the system interpreter, the cache) or, where its last run recorded them, that run's options (a kit)."""
    from october.installer.core.errors import UntrustedJitError
    from october.installer.core.resources import recipes_dir
    from october.installer.smoke.launch import refuse_untrusted_jit

    ctx = _ctx(tmp_path, links, tmp_path / "cache", shared=False)
    lib = _lib(JitStep(builder=STANDIN).run(ctx).to_json())
    lib.write_bytes(b"\x7fELF planted")
    root = ctx.paths.root
    (root / "receipts").mkdir(parents=True, exist_ok=True)
    (root / "receipts" / "setup.json").write_text(json.dumps({
        "recipe": {"name": "flashinfer-pr3812", "path": str(recipes_dir() / "flashinfer-pr3812.toml")},
        "torch": {"source": "system", "python": "/opt/torch/.venv/bin/python"},
        "options": {"cache_dir": str(tmp_path / "cache"), "skip_preflight": []}}))
    with pytest.raises(UntrustedJitError) as err:
        refuse_untrusted_jit(root)
    assert (f"re-run `october_setup {root} --recipe flashinfer-pr3812 --system-python /opt/torch/.venv/bin/python "
            f"--cache-dir {tmp_path / 'cache'}` (add --kit KIT if it was set up from a kit): its jit step puts back"
            ) in str(err.value)
    ctx.paths.recipe_record.parent.mkdir(parents=True, exist_ok=True)
    ctx.paths.recipe_record.write_text(json.dumps({
        "name": "flashinfer-pr3812", "path": str(recipes_dir() / "flashinfer-pr3812.toml"),
        "options": {"system_python": "/opt/torch/.venv/bin/python", "cache_dir": str(tmp_path / "cache"),
                    "kit": str(tmp_path / "kit")}}))
    with pytest.raises(UntrustedJitError) as err:
        refuse_untrusted_jit(root)
    assert (f"re-run `october_setup {root} --recipe flashinfer-pr3812 --system-python /opt/torch/.venv/bin/python "
            f"--cache-dir {tmp_path / 'cache'} --kit {tmp_path / 'kit'}`: its jit step puts back") in str(err.value)


def test_the_smoke_s_refusal_keeps_what_changes_the_steps_inputs_and_survives_hand_edits(tmp_path, links):
    """The review of 51e31f1: a stack set up ``--locked --lock-file L --allow-dirty`` re-run without them would be
    made again, not repaired, so the fix keeps them (from the receipt); a receipt-less stack (its run stopped after
    the jit step) gets its run record's command; a hand-edited receipt (a number for the skipped checks, a NUL in
    the recipe path) gives a fix line, never a traceback."""
    from october.installer.core.errors import UntrustedJitError
    from october.installer.core.resources import recipes_dir
    from october.installer.smoke.launch import refuse_untrusted_jit

    ctx = _ctx(tmp_path, links, tmp_path / "cache", shared=False)
    lib = _lib(JitStep(builder=STANDIN).run(ctx).to_json())
    lib.write_bytes(b"\x7fELF planted")
    root = ctx.paths.root
    shipped = str(recipes_dir() / "flashinfer-pr3812.toml")
    ctx.paths.recipe_record.parent.mkdir(parents=True, exist_ok=True)
    ctx.paths.recipe_record.write_text(json.dumps({"name": "flashinfer-pr3812", "path": shipped,
                                                   "options": {"kit": "/k", "skip_preflight": ["gpu"]}}))
    with pytest.raises(UntrustedJitError) as err:                   # no receipt: the run record's command
        refuse_untrusted_jit(root)
    assert (f"re-run `october_setup {root} --recipe flashinfer-pr3812 --skip-preflight gpu --kit /k`: its jit step"
            ) in str(err.value)
    (root / "receipts").mkdir(parents=True, exist_ok=True)
    receipt = {"recipe": {"name": "flashinfer-pr3812", "path": shipped},
               "lock": {"locked_from": "/locks/fi.pylock.toml"},
               "options": {"locked": True, "allow_dirty": True, "skip_preflight": ["gpu"]}}
    (root / "receipts" / "setup.json").write_text(json.dumps(receipt))
    with pytest.raises(UntrustedJitError) as err:
        refuse_untrusted_jit(root)
    assert (f"`october_setup {root} --recipe flashinfer-pr3812 --skip-preflight gpu --kit /k --locked --lock-file "
            "/locks/fi.pylock.toml --allow-dirty`: its jit step") in str(err.value)
    ctx.paths.recipe_record.unlink()
    for edit in ({"options": {"skip_preflight": 5}}, {"options": {"skip_preflight": "gpu", "locked": "yes"}},
                 {"recipe": {"name": "x", "path": "/a\u0000b"}}, {"options": []}):
        (root / "receipts" / "setup.json").write_text(json.dumps({**receipt, **edit}))
        with pytest.raises(UntrustedJitError) as err:
            refuse_untrusted_jit(root)
        said = str(err.value)
        assert f"re-run `october_setup {root}" in said and "--skip-preflight g,p,u" not in said
        assert "--locked" not in said or edit.get("options", {}).get("locked") is None


def test_the_builder_builds_each_module_as_flashinfer_s_runtime_does(tmp_path):
    """With the real FlashInfer, one combined ``build_jit_specs`` ninja leaves its log in ``cached_ops/``,
    which the runtime's per-module ninja never reads (measured on the H200: the first use compiled again).
    The builder therefore calls each spec's own ``build`` (mocked JIT API: no CUDA here)."""
    from tests.fixtures.jit_standin import FAKE_FLASHINFER_JIT
    api_src = FAKE_FLASHINFER_JIT.replace('''class JitSpec:
    def __init__(self, name):
        self.name = name
''', '''class JitSpec:
    def __init__(self, name):
        self.name = name

    def build(self, verbose=None, need_lock=False):
        CALLS.append(("build", self.name))
        self.jit_library_path.parent.mkdir(parents=True, exist_ok=True)
        self.jit_library_path.write_bytes(("per-module " + self.name).encode())
''')
    assert api_src != FAKE_FLASHINFER_JIT
    out = JitStep().run(jit_api_context(tmp_path, MODULES, api_src)).to_json()
    assert [Path(m["path"]).read_bytes()[:10] for m in out["modules"]] == [b"per-module"] * 2


def _aot(root: Path) -> Path:
    return root / "src-flashinfer" / "flashinfer" / "data" / "aot"


def test_verified_libraries_are_placed_where_flashinfer_loads_prebuilt_modules(tmp_path, links):
    """FlashInfer loads ``<package>/data/aot/<uri>/<uri>.so`` without ninja; what is there must be the
    recorded bytes: a corrupted copy is noticed and replaced, a stale unrecorded one removed."""
    ctx = _ctx(tmp_path, links, tmp_path / "cache")
    step = JitStep(builder=STANDIN)
    out = step.run(ctx).to_json()
    aot = _aot(tmp_path)
    for m in out["modules"]:
        assert Path(m["aot_path"]) == aot / m["uri"] / f"{m['uri']}.so"
        assert sha256_file(Path(m["aot_path"])) == m["sha256"]
    assert json.loads((ctx.paths.jit / MANIFEST).read_text())["aot_dir"] == str(aot)
    copy = Path(out["modules"][0]["aot_path"])
    copy.write_bytes(copy.read_bytes()[:64])
    stale = aot / "batch_decode_old" / "batch_decode_old.so"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an older commit's module")
    assert "changed" in (step.verify(ctx, step.load(out)) or "")
    assert {u.path for u in untrusted_libraries(ctx.paths.jit)} == {copy, stale}
    again = step.run(ctx).to_json()
    assert {d["path"] for d in again["discarded"]} == {str(copy), str(stale)}
    assert not stale.exists() and sha256_file(copy) == out["modules"][0]["sha256"]
    assert step.verify(ctx, step.load(again)) is None and report(ctx.paths.jit)["ok"] is True


def test_a_second_stack_gets_the_aot_copies_from_the_shared_cache(tmp_path, links, monkeypatch):
    cache = tmp_path / "cache"
    first = JitStep(builder=STANDIN).run(_ctx(tmp_path / "a", links, cache)).to_json()
    monkeypatch.setenv("JIT_STANDIN_FAULT", "crash")       # the builder must not run
    second = JitStep(builder=STANDIN).run(_ctx(tmp_path / "b", links, cache)).to_json()
    for a, b in zip(first["modules"], second["modules"]):
        assert b["source"] == "shared-cache" and Path(b["aot_path"]).is_relative_to(_aot(tmp_path / "b"))
        assert sha256_file(Path(b["aot_path"])) == a["sha256"]


def test_smoke_refuses_a_corrupted_aot_copy(tmp_path, links):
    from october.installer.core.errors import JitError
    from october.installer.smoke.launch import refuse_untrusted_jit

    ctx = _ctx(tmp_path, links, tmp_path / "cache")
    out = JitStep(builder=STANDIN).run(ctx).to_json()
    refuse_untrusted_jit(ctx.paths.root)
    copy = Path(out["modules"][1]["aot_path"])
    copy.write_bytes(b"\x7fELF truncated")
    with pytest.raises(JitError) as err:
        refuse_untrusted_jit(ctx.paths.root)
    assert str(copy) in str(err.value)
