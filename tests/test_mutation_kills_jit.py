"""JIT integrity rules one by one, on plain files (bench/mutate.py's `jit-integrity` module).

The libraries here are byte strings named ``*.so`` laid out as FlashInfer lays its builds out
(``.cache/.../cached_ops/<uri>/<uri>.so``, AOT ``<aot>/<uri>/<uri>.so``): the integrity rules read
paths and sha256s only, so no compiler is needed.  tests/test_jit_integrity.py covers the same rules
with libraries built by gcc through the jit step.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from october.installer.jit.integrity import (
    MANIFEST,
    MANIFEST_FORMAT,
    Untrusted,
    aot_libraries,
    discard,
    libraries,
    manifest_aot_dir,
    missing_libraries,
    module_dir,
    read_manifest,
    report,
    untrusted_libraries,
    write_manifest,
)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _lib(ws: Path, uri: str, data: bytes) -> Path:
    p = ws / ".cache" / "flashinfer" / "90" / "cached_ops" / uri / f"{uri}.so"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    (p.parent / "build.ninja").write_text("rule cc\n")
    return p


def _stack(tmp_path: Path, aot: bool = True) -> tuple[Path, Path | None, dict[str, dict[str, str]]]:
    ws = tmp_path / "jit"
    mods: dict[str, dict[str, str]] = {}
    aot_dir = tmp_path / "fork" / "flashinfer" / "data" / "aot" if aot else None
    for uri, data in (("mod_a", b"AAAA" * 100), ("mod_b", b"BBBB" * 50)):
        lib = _lib(ws, uri, data)
        mods[uri] = {"path": lib.relative_to(ws).as_posix(), "sha256": _sha(data), "key": f"k-{uri}"}
        if aot_dir is not None:
            (aot_dir / uri).mkdir(parents=True, exist_ok=True)
            (aot_dir / uri / f"{uri}.so").write_bytes(data)
    write_manifest(ws, mods, aot_dir)
    return ws, aot_dir, mods


def test_a_clean_workspace_is_trusted_and_complete(tmp_path: Path) -> None:
    ws, aot_dir, mods = _stack(tmp_path)
    assert read_manifest(ws) == mods
    assert manifest_aot_dir(ws) == aot_dir
    assert untrusted_libraries(ws) == []
    assert missing_libraries(ws) == []
    assert report(ws) == {"ok": True, "untrusted": [], "missing": []}
    body = json.loads((ws / MANIFEST).read_text())
    assert body["format"] == MANIFEST_FORMAT == 1 and body["aot_dir"] == str(aot_dir)
    assert (ws / MANIFEST).read_text() == json.dumps(body, indent=1, sort_keys=True)   # byte-stable
    assert not list(ws.glob(f".{MANIFEST}.*"))          # no temp file left behind


def test_write_manifest_keeps_only_path_sha256_and_key(tmp_path: Path) -> None:
    write_manifest(tmp_path / "new" / "ws", {"m": {"path": "p.so", "sha256": "ab", "key": "k", "extra": "x"}})
    tmp_path = tmp_path / "new" / "ws"                       # a workspace not made yet is made, parents too
    assert json.loads((tmp_path / MANIFEST).read_text())["modules"] == {"m": {"path": "p.so", "sha256": "ab", "key": "k"}}
    assert manifest_aot_dir(tmp_path) is None


@pytest.mark.parametrize("where", ["cached_ops", "aot"])
def test_changed_bytes_are_untrusted_and_reported(tmp_path: Path, where: str) -> None:
    ws, aot_dir, _ = _stack(tmp_path)
    assert aot_dir is not None
    victim = (ws / ".cache/flashinfer/90/cached_ops/mod_b/mod_b.so" if where == "cached_ops"
              else aot_dir / "mod_b" / "mod_b.so")
    victim.write_bytes(b"BBBB" * 49 + b"BBBC")           # same size, one byte differs
    bad = untrusted_libraries(ws)
    assert [b.path for b in bad] == [victim]
    assert bad[0].reason.startswith("bytes differ from the recorded sha256")
    assert report(ws)["ok"] is False
    assert report(ws)["untrusted"] == [{"path": str(victim), "reason": bad[0].reason}]


def test_an_unrecorded_library_is_untrusted(tmp_path: Path) -> None:
    ws, aot_dir, _ = _stack(tmp_path)
    assert aot_dir is not None
    stray = _lib(ws, "mod_c", b"CCCC")
    stray_aot = aot_dir / "mod_c" / "mod_c.so"
    stray_aot.parent.mkdir()
    stray_aot.write_bytes(b"CCCC")
    bad = untrusted_libraries(ws)
    assert sorted((str(b.path), b.reason) for b in bad) == sorted(
        [(str(stray), "not recorded by the jit step"), (str(stray_aot), "not recorded by the jit step")])


def test_an_extra_aot_directory_is_checked_too(tmp_path: Path) -> None:
    ws, _, _ = _stack(tmp_path, aot=False)
    other = tmp_path / "other-aot"
    (other / "mod_a").mkdir(parents=True)
    (other / "mod_a" / "mod_a.so").write_bytes(b"not the recorded bytes")
    assert untrusted_libraries(ws) == []
    bad = untrusted_libraries(ws, aot_dirs=(other, None))
    assert [b.path for b in bad] == [other / "mod_a" / "mod_a.so"]


@pytest.mark.parametrize("body", [
    {"format": 2, "modules": {}},                               # a foreign format is trusted for nothing
    {"format": "1", "modules": {}},
    {"modules": {}},
    {"format": 1, "modules": []},
    {"format": 1},
    ["format", 1],
])
def test_a_foreign_or_malformed_manifest_trusts_nothing(tmp_path: Path, body: object) -> None:
    ws, _, mods = _stack(tmp_path, aot=False)
    if isinstance(body, dict) and isinstance(body.get("modules"), dict):
        body = {**body, "modules": mods}                         # the right records under the wrong format
    (ws / MANIFEST).write_text(json.dumps(body))
    assert read_manifest(ws) == {}
    assert {b.reason for b in untrusted_libraries(ws)} == {"not recorded by the jit step"}
    assert len(untrusted_libraries(ws)) == 2


def test_an_unreadable_manifest_trusts_nothing(tmp_path: Path) -> None:
    ws, _, _ = _stack(tmp_path, aot=False)
    (ws / MANIFEST).write_text("{not json")
    assert read_manifest(ws) == {} and manifest_aot_dir(ws) is None
    (ws / MANIFEST).unlink()
    assert read_manifest(ws) == {} and manifest_aot_dir(ws) is None


@pytest.mark.parametrize("bad", [
    "a string",
    {"sha256": "ab"},                                  # no path
    {"path": "x.so"},                                  # no sha256
    {"path": 3, "sha256": "ab"},
    {"path": "x.so", "sha256": None},
])
def test_a_malformed_record_is_dropped_and_the_good_ones_kept(tmp_path: Path, bad: object) -> None:
    body = {"format": 1, "aot_dir": None,
            "modules": {"good": {"path": "g.so", "sha256": "ab", "key": "k"}, "bad": bad,
                        "nokey": {"path": "n.so", "sha256": "cd", "key": 7}}}
    (tmp_path / MANIFEST).write_text(json.dumps(body))
    assert read_manifest(tmp_path) == {"good": {"path": "g.so", "sha256": "ab", "key": "k"},
                                       "nokey": {"path": "n.so", "sha256": "cd"}}


def test_manifest_aot_dir_needs_a_non_empty_string(tmp_path: Path) -> None:
    for value, want in (("", None), (5, None), ("/x/aot", Path("/x/aot"))):
        (tmp_path / MANIFEST).write_text(json.dumps({"format": 1, "modules": {}, "aot_dir": value}))
        assert manifest_aot_dir(tmp_path) == want
    (tmp_path / MANIFEST).write_text(json.dumps([1]))
    assert manifest_aot_dir(tmp_path) is None


def test_missing_libraries_names_a_gone_build_and_a_gone_aot_copy(tmp_path: Path) -> None:
    ws, aot_dir, mods = _stack(tmp_path)
    assert aot_dir is not None
    (ws / mods["mod_a"]["path"]).unlink()
    (aot_dir / "mod_b" / "mod_b.so").unlink()
    assert missing_libraries(ws) == ["mod_a", "mod_b"]
    assert report(ws)["missing"] == ["mod_a", "mod_b"] and report(ws)["ok"] is False


def test_missing_without_an_aot_dir_looks_at_the_workspace_only(tmp_path: Path) -> None:
    ws, _, mods = _stack(tmp_path, aot=False)
    assert missing_libraries(ws) == []
    (ws / mods["mod_b"]["path"]).unlink()
    assert missing_libraries(ws, read_manifest(ws)) == ["mod_b"]


def test_libraries_are_the_cached_ops_shared_objects_only(tmp_path: Path) -> None:
    ws = tmp_path / "jit"
    assert libraries(ws) == []
    a = _lib(ws, "m", b"x")
    other = ws / ".cache" / "elsewhere" / "n.so"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"y")
    (ws / ".cache" / "flashinfer" / "90" / "cached_ops" / "m" / "dir.so").mkdir()
    assert libraries(ws) == [a]


def test_aot_libraries_follow_flashinfer_s_layout(tmp_path: Path) -> None:
    aot = tmp_path / "aot"
    assert aot_libraries(None) == [] and aot_libraries(aot) == []
    (aot / "m").mkdir(parents=True)
    good = aot / "m" / "m.so"
    good.write_bytes(b"x")
    (aot / "m" / "other.so").write_bytes(b"y")              # not <uri>/<uri>.so: FlashInfer does not load it
    (aot / "d" / "d.so").mkdir(parents=True)
    assert aot_libraries(aot) == [good]


def test_module_dir_is_the_cached_ops_build_directory_only(tmp_path: Path) -> None:
    lib = _lib(tmp_path, "m", b"x")
    assert module_dir(lib) == lib.parent
    assert module_dir(tmp_path / "cached_ops" / "m" / "n.so") is None
    assert module_dir(tmp_path / "elsewhere" / "m" / "m.so") is None


def test_discard_removes_each_module_directory_and_nothing_else(tmp_path: Path) -> None:
    ws, aot_dir, _ = _stack(tmp_path)
    assert aot_dir is not None
    a = ws / ".cache/flashinfer/90/cached_ops/mod_a/mod_a.so"
    b = ws / ".cache/flashinfer/90/cached_ops/mod_b/mod_b.so"
    aot_b = aot_dir / "mod_b" / "mod_b.so"
    loose = tmp_path / "loose" / "x.so"                      # not in a module directory: the file alone goes
    loose.parent.mkdir()
    loose.write_bytes(b"z")
    (loose.parent / "keep.txt").write_text("k")
    removed = discard([Untrusted(a, "r"), Untrusted(aot_b, "r"), Untrusted(loose, "r")])
    assert removed == [str(a.parent), str(aot_b.parent), str(loose)]
    assert not a.parent.exists() and not aot_b.parent.exists() and not loose.exists()
    assert b.is_file() and (aot_dir / "mod_a" / "mod_a.so").is_file() and (loose.parent / "keep.txt").is_file()
    assert discard([]) == []


def test_discard_twice_or_after_another_removal_is_quiet(tmp_path: Path) -> None:
    ws, _, _ = _stack(tmp_path, aot=False)
    a = ws / ".cache/flashinfer/90/cached_ops/mod_a/mod_a.so"
    loose = tmp_path / "x.so"
    loose.write_bytes(b"z")
    items = [Untrusted(a, "r"), Untrusted(loose, "r")]
    assert discard(items + items) == [str(a.parent), str(loose), str(a.parent), str(loose)]
    assert not a.parent.exists() and not loose.exists()
