"""The contract between the tool and the checks (``checks/contract.py``): standard library only, the
schemas spell the same values, one manifest rule on both sides, one dispatch of the six checks, and
one JIT workspace watch."""

from __future__ import annotations

import ast
import json
import sys
import warnings
from pathlib import Path

import pytest

from tests.fixtures.imports import imported_module

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    import torch  # noqa: F401  (the engine's JIT check and the smoke CLI below import it)

from october.checks import contract

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    """The top-level names a module imports; our own package counts as ``october.checks`` or
    ``october.installer`` (the one import package holds both sides)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
            modules = [imported_module(node, path)]
        else:
            continue
        for name in modules:
            parts = name.split(".")
            names.add(".".join(parts[:2]) if parts[0] == "october" else parts[0])
    return names


def test_the_contract_imports_the_standard_library_only() -> None:
    found = _imports(ROOT / "checks" / "contract.py") - {"__future__"}
    assert sorted(n for n in found if n not in sys.stdlib_module_names) == []


def test_the_checks_import_neither_the_tool_nor_its_dependencies(tmp_path: Path) -> None:
    """checks/ runs in the stack env: stdlib, torch, the forks and its own modules; never installer/
    or jsonschema (not installed there)."""
    allowed = {"october.checks", "torch", "flashinfer", "vllm", "__future__"}
    for path in sorted((ROOT / "checks").rglob("*.py")):
        extra = sorted(n for n in _imports(path) if n not in allowed and n not in sys.stdlib_module_names)
        assert extra == [], path.name
    # the guard sees a planted import of the tool side (through the one import package, too)
    planted = tmp_path / "planted.py"
    planted.write_text("import jsonschema\nfrom october.installer.core.errors import OctoberError\n", encoding="utf-8")
    assert {"jsonschema", "october.installer"} <= _imports(planted) - allowed
    relative = tmp_path / "checks" / "kernel" / "planted.py"     # the modules import each other relatively
    relative.parent.mkdir(parents=True)
    relative.write_text("from ...installer.core.errors import OctoberError\nfrom ..contract import LEVELS\n")
    assert _imports(relative) == {"october.installer", "october.checks"}


def _schema(name: str) -> dict:
    return json.loads((ROOT / "receipts" / f"{name}.schema.json").read_text(encoding="utf-8"))


def test_the_smoke_schema_spells_the_contract() -> None:
    s = _schema("smoke")["properties"]
    assert s["format_version"]["const"] == contract.SMOKE_RECEIPT_FORMAT_VERSION
    assert s["kind"]["const"] == contract.SMOKE_RECEIPT_KIND
    assert tuple(s["level"]["enum"]) == contract.LEVELS
    assert tuple(s["promised_level"]["enum"]) == contract.PROMISES + (None,)
    assert tuple(_schema("smoke")["then"]["properties"]["level"]["enum"]) == contract.PROMISES
    assert tuple(s["selection"]["enum"]) == contract.FORMATS + (None,)
    assert tuple(s["proves"]["enum"]) == contract.PROOFS == tuple(dict.fromkeys(contract.PROVES.values())) + (contract.NOTHING,)
    item = s["checks"]["items"]["properties"]
    assert tuple(item["status"]["enum"]) == contract.STATUSES
    assert tuple(item["name"]["enum"]) == tuple(contract.TITLES)
    required = [c["contains"]["properties"]["name"]["const"] for c in s["checks"]["allOf"]]
    assert tuple(required) == contract.CHECK_NAMES
    assert tuple(s["engine"]["properties"]["compute_dtype"]["enum"]) == tuple(contract.COMPUTE_DTYPES) + (None,)


def test_the_download_schema_spells_the_contract() -> None:
    s = _schema("download")["properties"]
    assert s["format_version"]["const"] == contract.MANIFEST_FORMAT_VERSION
    assert s["kind"]["const"] == contract.MANIFEST_KIND
    assert tuple(s["selection"]["enum"]) == contract.FORMATS


def test_the_tool_reads_the_contract_facts() -> None:
    from october.installer import recipe
    from october.installer.recipe import jitmodules as derive
    from october.installer.smoke import launch as smoke
    assert recipe.MODEL_FORMATS is contract.FORMATS and smoke.FORMATS is contract.FORMATS
    assert smoke.LEVELS is contract.LEVELS and derive.COMPUTE_DTYPES is contract.COMPUTE_DTYPES


def test_proves_only_the_stack_at_the_promised_level() -> None:
    assert contract.proves("engine", "engine") == contract.proves("kernel", "kernel") == "stack"
    assert contract.proves("reference", "engine") == "harness"
    assert contract.proves("reference", "reference") == contract.proves("reference", None) == "harness"
    assert contract.proves("kernel", "engine") == "kernel"
    # the scenario hunt: an engine run with no promise said "stack" and passed (tied to no stack)
    assert contract.proves("engine", None) == "kernel" and contract.proves("kernel", None) == "kernel"


# ------------------------------------------------------------------ the manifest rule, both sides

def _manifest(**change: object) -> dict:
    doc = {"kind": contract.MANIFEST_KIND, "selection": "awq", "repo": "org/m", "revision": "a" * 40,
           "resolved_revision": "a" * 40, "local_path": "/models/m"}
    doc.update(change)
    return {k: v for k, v in doc.items() if v is not None}


@pytest.mark.parametrize("change, words", [
    ({"kind": "something-else"}, "kind"),
    ({"selection": "gguf"}, "selection one of awq, fp16"),
    ({"repo": None}, "a string 'repo'"),
    ({"resolved_revision": "b" * 40}, "resolved revision differs"),
])
def test_one_manifest_rule_refuses_on_both_sides(tmp_path: Path, change: dict, words: str) -> None:
    from october.checks.inputs import InputError
    from october.checks.inputs import load_manifest as checks_load
    from october.installer.core.errors import ReceiptError
    from october.installer.download.manifest import validate_manifest

    path = tmp_path / "m.json"
    path.write_text(json.dumps(_manifest(**change)))
    with pytest.raises(contract.ContractError, match=words):
        contract.parse_manifest(_manifest(**change), path)
    with pytest.raises(InputError, match=words) as err:
        checks_load(path)
    assert "current download" in str(err.value)
    # the tool applies the same rule after the full schema (which already refuses the first three)
    with pytest.raises(ReceiptError):
        validate_manifest(_manifest(**change))


def test_the_checks_read_a_good_manifest(tmp_path: Path) -> None:
    from october.checks.inputs import load_manifest as checks_load
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_manifest()))
    m = checks_load(path)
    assert (m.selection, m.repo, m.local_path, m.path) == ("awq", "org/m", "/models/m", str(path))


# ------------------------------------------------------------------ atomic write, one implementation

def test_one_atomic_write(tmp_path: Path) -> None:
    from october.installer.core import atomic
    assert atomic.write_json_atomic is contract.write_json_atomic
    path = tmp_path / "deep" / "x.json"
    contract.write_json_atomic(path, {"b": float("nan"), "a": 1})
    assert path.read_text() == '{\n  "a": 1,\n  "b": NaN\n}\n'
    with pytest.raises(ValueError):
        contract.write_json_atomic(path, {"a": float("nan")}, allow_nan=False)
    assert json.loads(path.read_text())["a"] == 1                  # the old file is left whole
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]   # no temp file left


# ------------------------------------------------------------------ one dispatch of the six checks

def test_a_level_table_must_name_exactly_the_six_checks() -> None:
    from october.checks.results import PASSED, CheckResult, in_order, run_checks

    table = {n: (lambda n=n: CheckResult(n, PASSED, "ok")) for n in reversed(contract.CHECK_NAMES)}
    assert [r.name for r in in_order(run_checks(table))] == list(contract.CHECK_NAMES)
    with pytest.raises(ValueError, match="must name"):
        run_checks({n: f for n, f in table.items() if n != "clean_memory"})
    with pytest.raises(ValueError, match="no result for"):
        in_order(run_checks({n: f for n, f in table.items() if n != "clean_memory"},
                            [n for n in contract.CHECK_NAMES if n != "clean_memory"]))


# ------------------------------------------------------------------ one JIT workspace watch

def _lib(ws: Path, uri: str, data: bytes) -> None:
    lib = ws / ".cache" / "flashinfer" / "0.6.15" / "90a" / "cached_ops" / uri / f"{uri}.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(data)


@pytest.mark.parametrize("after", ["gained", "changed", "none"])
def test_the_engine_jit_check_judges_the_run_watch(tmp_path: Path, after: str) -> None:
    """The engine level's JIT check reads the run's watch: a module built or rewritten while the
    engine ran fails it, as the kernel level's run-level problems do."""
    from october.checks.engine.checks import _jit
    from october.checks.engine.vllm_surface import ModelShape, Selection
    from october.checks.inputs import token_protocol
    from october.checks.workspace import Watch

    ws = tmp_path / "jit"
    _lib(ws, "mod_a", b"a")
    env: dict[str, str] = {}
    watch = Watch.start(ws, env)
    assert env == {"FLASHINFER_WORKSPACE_BASE": str(ws)}
    if after == "gained":
        _lib(ws, "mod_b", b"b")
    elif after == "changed":
        _lib(ws, "mod_a", b"rebuilt")
    sel = Selection(jit_modules=("mod_a",), jit_workspace=str(ws), setup_command="october_setup S --recipe r",
                    tokens=token_protocol({}))
    result = _jit(sel, ModelShape(2, 1, 64, 4), watch)
    entry, problems = watch.finish()
    assert result.measured["present"] == {"mod_a": str(ws / ".cache/flashinfer/0.6.15/90a/cached_ops/mod_a/mod_a.so")}
    if after == "none":
        assert result.status == "passed" and problems == [] and entry["unchanged"] is True
    else:
        assert result.status == "failed" and result.measured[after] == ["mod_b" if after == "gained" else "mod_a"]
        assert len(problems) == 1 and entry[after]


def test_the_workspace_is_the_selections_then_the_environment(tmp_path: Path) -> None:
    from october.checks.workspace import base
    assert base({"jit_workspace": str(tmp_path)}, {"FLASHINFER_WORKSPACE_BASE": "/elsewhere"}) == tmp_path
    assert base(None, {"FLASHINFER_WORKSPACE_BASE": "/elsewhere"}) == Path("/elsewhere")
    assert base({}, {}) is None


# ------------------------------------------------------------------ one token-count rule

def test_one_token_count_rule() -> None:
    from october.checks.inputs import token_protocol
    recipe = {"smoke": {"prompt_tokens": 1024, "max_new_tokens": 16}}
    assert token_protocol(recipe).as_json() == {"prompt_tokens": 1024, "max_new_tokens": 16, "source": "recipe [smoke]"}
    assert token_protocol(recipe).source == "recipe [smoke]"
    over = token_protocol(recipe, (96, 12))
    assert (over.prompt_tokens, over.max_new_tokens) == (96, 12)
    assert over.source == "override --token-counts 96,12 (not the recipe's 1024 + 16)"
    assert token_protocol({}).as_json() == {"prompt_tokens": 8192, "max_new_tokens": 128,
                                            "source": "default (the seed's 8,192 + 128 protocol)"}


def test_the_old_token_flags_are_gone(capsys: pytest.CaptureFixture[str]) -> None:
    from october.checks.smoke import parse_args
    with pytest.raises(SystemExit):
        parse_args(["--output", "o", "--prompt-tokens", "5"])
    assert parse_args(["--output", "o", "--token-counts", "96,12"]).token_counts == (96, 12)
