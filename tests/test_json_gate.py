"""JSON someone else may have written (a shared cache, a kit, a stack's records) goes through
installer/core/jsonread.py: ``json.loads`` raises RecursionError, not ValueError, on deep nesting, and a
planted ``[[[[...`` ended every run that read it with a traceback (exit 70) past each ``except ValueError``.
Real files planted where the tool reads them; nothing mocked."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from october.installer.core import cachekey, jsonread
from october.installer.core.errors import FetchError, KitError
from october.installer.core.filetrust import FileTrust
from tests.fixtures.root import PROJECT_ROOT

DEEP = "[" * 100_000


def test_deep_nesting_is_malformed_json_like_any_other() -> None:
    with pytest.raises(RecursionError):
        json.loads(DEEP)                    # what the gate is for: if the stdlib changes, this says so
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        jsonread.loads(DEEP)
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        jsonread.loads(DEEP.encode())
    assert jsonread.loads('{"a": [1]}') == {"a": [1]}


def test_planted_deep_json_in_the_shared_caches_and_a_kit_is_refused_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-stack manifest, a JIT entry, a kit manifest, a stack's file-trust record and an sdist
    repository's record, each planted as 100,000 brackets: not taken (or refused with its error), never a
    RecursionError."""
    from october.installer.jit.cache import ENTRY, SharedJitCache
    from october.installer.kit.manifest import read_manifest
    from october.installer.pyenv import builtstack

    monkeypatch.setenv("OCTOBER_KEY_FILE", str(tmp_path / "keys" / "cache.key"))
    monkeypatch.delenv(cachekey.KEY_ENV, raising=False)
    cache = tmp_path / "cache"
    key = "0" * 64
    entry = builtstack.built_dir(cache) / key
    entry.mkdir(parents=True)
    (entry / builtstack.MANIFEST).write_text(DEEP)
    assert builtstack.find(cache, key) is None

    jit = SharedJitCache(cache / "jit")
    signing = cachekey.load_key(cache=cache)
    assert signing is not None
    d = jit.entry_dir(key, signing)
    d.mkdir(parents=True)
    (d / ENTRY).write_text(DEEP)
    found = jit.restore(key, tmp_path / "ws")
    assert found.restored is None and "unreadable" in (found.refused or "")

    kit = tmp_path / "kit"
    kit.mkdir()
    from october.installer.kit import MANIFEST
    (kit / MANIFEST).write_text(DEEP)
    with pytest.raises(KitError, match="cannot be read"):
        read_manifest(kit)

    trust = tmp_path / "trust.json"
    trust.write_text(DEEP)
    assert FileTrust(trust).entries == {}


def test_a_damaged_sdist_record_in_the_cache_is_named_with_its_fix(tmp_path: Path) -> None:
    """The record a materialised sdist repository keeps in the cache, planted unreadable or not an object: a
    FetchError saying to remove it (a KeyError/AttributeError/RecursionError traceback before)."""
    from october.installer.core.runner import Runner
    from october.installer.git import sdist
    from october.installer.recipe import SdistSource

    src = SdistSource(url="https://example.invalid/x-1.0.tar.gz", sha256="a" * 64, version="1.0")
    dest = sdist.repo_path(tmp_path, src, "x")
    dest.mkdir(parents=True)
    for planted in (DEEP, "[1, 2]", "{"):
        (dest / sdist.RECORD).write_text(planted)
        with pytest.raises(FetchError, match="unreadable") as err:
            sdist.materialise(Runner(tmp_path / "logs"), "fetch", tmp_path, src, "x", "b" * 40)
        assert f"remove {dest}" in (err.value.fix or "")


def test_the_tool_reads_no_json_file_past_the_gate() -> None:
    """Every ``json.loads``/``json.load`` of a file's content in installer/ and checks/ is the contract's
    ``json_loads`` (``jsonread.loads`` in the tool; a call whose argument reads a file: ``read_text``,
    ``read_bytes``, ``read_regular``, an open file).  A planted one is seen."""
    reads = ("read_text(", "read_bytes(", "read_regular(", ".read(")

    def offenders(source: str) -> list[int]:
        tree = ast.parse(source)
        read_names = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                      and any(r in ast.unparse(node.value) for r in reads)
                      for t in node.targets if isinstance(t, ast.Name)}      # t = p.read_text(); json.loads(t)
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "json" \
                    and node.func.attr in ("loads", "load"):
                arg = ast.unparse(node.args[0]) if node.args else ""
                if node.func.attr == "load" or any(r in arg for r in reads) or arg in read_names:
                    found.append(node.lineno)
        return found

    assert offenders("import json\nx = json.loads(p.read_text())\ny = json.loads(s)\n") == [2]
    assert offenders("import json\nwith open(p) as f:\n    x = json.load(f)\n") == [3]
    assert offenders("import json\nt = p.read_text()\nx = json.loads(t)\n") == [3]
    assert offenders("import json\nx = json.loads(open(p).read())\n") == [2]
    bad = {str(p.relative_to(PROJECT_ROOT)): lines
           for p in sorted([*(PROJECT_ROOT / "installer").rglob("*.py"), *(PROJECT_ROOT / "checks").rglob("*.py")])
           if "__pycache__" not in p.parts and (lines := offenders(p.read_text(encoding="utf-8")))}
    # pyenv/bytecode.py's stack-side script reads its own stdin, which the tool writes; json_loads itself; the
    # probes run by path with -I (stdlib only, no contract) and catch RecursionError where they parse
    assert set(bad) <= {"installer/pyenv/bytecode.py", "checks/contract.py", "checks/probes/distributions.py",
                        "checks/probes/install_facts.py"}, bad
    for probe in ("distributions.py", "install_facts.py"):
        assert "RecursionError" in (PROJECT_ROOT / "checks" / "probes" / probe).read_text()


def test_the_stack_side_readers_refuse_deep_json_with_their_own_errors(tmp_path: Path) -> None:
    """The download manifest and stack info (contract.read_json_object), a scales file (scales.load_scales)
    and the probes' direct_url.json: a usage-style error or an "unreadable" value, never a RecursionError."""
    from october.checks.contract import ContractError, read_json_object
    from october.checks.scales import load_scales
    from october.installer.core.errors import OctoberError
    from october.installer.download.manifest import load_manifest

    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    with pytest.raises(ContractError, match="is not JSON"):
        read_json_object(deep, "download manifest")
    with pytest.raises(Exception, match="invalid JSON") as err:
        load_scales(deep)
    assert not isinstance(err.value, RecursionError)
    with pytest.raises(OctoberError):
        load_manifest(deep)
