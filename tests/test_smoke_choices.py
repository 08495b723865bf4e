"""`current smoke --install STACK` needs nothing the setup receipt already says (issue 19, item 1):
recipe and promised level from STACK/receipts/setup.json, the format from that recipe's models;
options override, and receipt.json records every choice and where it came from."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import jsonschema
import pytest

from october.installer.cli.main import current_main
from october.installer.core.errors import ReceiptError, SmokeError, UsageError
from october.installer.pyenv import stackenv
from tests.fixtures.root import PROJECT_ROOT
from october.installer.smoke import choices
from october.installer.smoke.launch import SmokeOptions

FI = {"name": "flashinfer", "commit": "2f3f0f6d" + "0" * 32}
VLLM = {"name": "vllm", "commit": "758786e23230a4a1a9b2b6046fb516943751b3ae"}


def _stack(tmp: Path, recipe: str, forks: list[dict[str, str]]) -> Path:
    """A stand-in stack whose env is the tool env (it has torch, not FlashInfer)."""
    stack = tmp / "stack"
    (stack / "receipts").mkdir(parents=True)
    (stack / "env").symlink_to(sys.prefix)
    (stack / "receipts" / "setup.json").write_text(json.dumps({
        "recipe": {"name": recipe, "path": str(PROJECT_ROOT / "recipes" / f"{recipe}.toml"),
                   "sha256": hashlib.sha256((PROJECT_ROOT / "recipes" / f"{recipe}.toml").read_bytes()).hexdigest()},
        "forks": forks, "promises": "engine" if len(forks) > 1 else "kernel", "jit": []}))
    stackenv.write(stack, stackenv.runtime_env(stack, "9.0", None))
    return stack


def _resolve(stack: Path, cwd: Path, promised: str, **given: object) -> tuple[SmokeOptions, dict]:
    opts = SmokeOptions(install=stack, output=cwd / "o", **{"format": None, **given})  # type: ignore[arg-type]
    return choices.resolve(opts, promised, cwd)


def test_a_flashinfer_only_stack_needs_no_format_and_the_receipt_records_the_choices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's own line for the FlashInfer-only stack, as printed (no --format, no --recipe):
    on this CPU machine without FlashInfer the kernel checks are unsupported (exit 1), but the run
    happens and says why."""
    stack = _stack(tmp_path, "flashinfer-pr3812", [FI])
    monkeypatch.chdir(tmp_path)
    code = current_main(["smoke", "--install", str(stack), "--output", "fi-smoke", "--json", "-q"])
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, json.loads((PROJECT_ROOT / "receipts" / "result.schema.json").read_text()))
    receipt = json.loads((tmp_path / "fi-smoke" / "receipt.json").read_text())
    jsonschema.validate(receipt, json.loads((PROJECT_ROOT / "receipts" / "smoke.schema.json").read_text()))
    assert code == 1 == out["exit_code"] and receipt["passed"] is False
    assert receipt["level"] == "kernel" == receipt["promised_level"] and receipt["selection"] is None
    assert receipt["stack"]["choices"] == {
        "recipe": {"value": "flashinfer-pr3812", "source": "setup receipt"},
        "format": {"value": None, "source": "recipe"},
        "level": {"value": "kernel", "source": "setup receipt"}}
    assert out["result"]["choices"] == receipt["stack"]["choices"]


def test_options_override_the_stack_and_the_override_is_recorded(tmp_path: Path) -> None:
    stack = _stack(tmp_path, "flashinfer-pr3812", [FI])
    opts, made = _resolve(stack, tmp_path, "kernel", recipe="current", format="fp16", level="reference")
    assert (opts.recipe, opts.format, opts.level) == ("current", "fp16", "reference")
    assert made == {"recipe": {"value": "current", "source": "option", "stack_says": "flashinfer-pr3812"},
                    "format": {"value": "fp16", "source": "option", "stack_says": None},
                    "level": {"value": "reference", "source": "option", "stack_says": "kernel"}}


def test_a_two_model_recipe_takes_the_format_of_the_manifest_here(tmp_path: Path) -> None:
    stack = _stack(tmp_path, "current", [FI, VLLM])
    (tmp_path / "fp16-download.json").write_text(json.dumps({"selection": "fp16"}))
    opts, made = _resolve(stack, tmp_path, "engine")
    assert opts.format == "fp16" and made["format"] == {"value": "fp16", "source": "download manifest"}
    # --manifest names the selection too
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "m.json").write_text(json.dumps({"selection": "awq"}))
    opts, made = _resolve(stack, tmp_path / "elsewhere", "engine", manifest=tmp_path / "elsewhere" / "m.json")
    assert opts.format == "awq" and made["format"]["source"] == "download manifest"
    # two manifests here: ambiguous, said so, with the way out
    (tmp_path / "awq-download.json").write_text(json.dumps({"selection": "awq"}))
    with pytest.raises(UsageError, match="several download manifests") as info:
        _resolve(stack, tmp_path, "engine")
    assert "--format awq or --format fp16" in str(info.value)
    # none at all: the engine level needs a model; a kernel run takes the recipe's first selection
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SmokeError, match="no download manifest") as info:
        _resolve(stack, empty, "engine")
    assert "current download --format awq" in str(info.value)
    opts, made = _resolve(stack, empty, "engine", level="kernel")
    assert opts.format == "awq" and made["format"] == {"value": "awq", "source": "recipe"}


def test_a_recipe_option_that_names_nothing_is_refused(tmp_path: Path) -> None:
    from october.installer.core.errors import RecipeError

    stack = _stack(tmp_path, "flashinfer-pr3812", [FI])
    with pytest.raises(RecipeError, match="there is no recipe 'nope'"):
        _resolve(stack, tmp_path, "kernel", recipe="nope")


def test_a_receipt_without_a_recipe_asks_for_one(tmp_path: Path) -> None:
    stack = _stack(tmp_path, "current", [FI])
    (stack / "receipts" / "setup.json").write_text(json.dumps({"forks": [FI]}))
    with pytest.raises(UsageError, match="names no recipe"):
        _resolve(stack, tmp_path, "kernel")
    opts, made = _resolve(stack, tmp_path, "kernel", recipe="flashinfer-pr3812")
    assert opts.format is None and made["recipe"] == {"value": "flashinfer-pr3812", "source": "option",
                                                      "stack_says": None}


def _download_argv(hint: str) -> list[str]:
    """The `current download ...` command of a hint, parsed by the real command line (well-formed: its
    options exist and take those values), as argv after `current download`."""
    import re
    import shlex

    import typer

    from october.installer.cli.current import current_app

    found = re.search(r"`(current download [^`]*)`", hint)
    assert found is not None, hint
    argv = shlex.split(found.group(1))
    assert argv[:2] == ["current", "download"]
    download = typer.main.get_command(current_app).commands["download"]  # type: ignore[attr-defined]
    download.make_context("download", argv[2:])
    return argv[2:]


def test_the_missing_manifest_hint_downloads_the_stacks_own_recipe(tmp_path: Path) -> None:
    """`current download` without --recipe takes the recipe `current`: the hint for a stack of another recipe
    names it (a shipped one by name, one's own by its path), whichever way the format was chosen."""
    from october.installer.recipe import load_recipe
    from october.installer.smoke.manifest import check_manifest, resolve_manifest

    stack = _stack(tmp_path, "20260702", [FI, VLLM])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SmokeError, match="no download manifest") as info:      # format from the recipe: none here
        _resolve(stack, empty, "engine")
    assert _download_argv(str(info.value)) == ["--format", "awq", "--recipe", "20260702", "--output", "."]
    opts, _made = _resolve(stack, empty, "engine", format="fp16")
    with pytest.raises(SmokeError, match="no download manifest") as info:      # --format given
        resolve_manifest(opts, empty, "engine")
    argv = _download_argv(str(info.value))
    assert argv == ["--format", "fp16", "--recipe", "20260702", "--output", "."]
    assert "fp16" in load_recipe(argv[3]).models
    with pytest.raises(SmokeError, match="does not exist") as info:            # --manifest that is not there
        resolve_manifest(dataclasses.replace(opts, manifest=empty / "m.json"), empty, "engine")
    assert _download_argv(str(info.value)) == ["--format", "fp16", "--recipe", "20260702", "--output",
                                               str(empty / "m.json")]
    (empty / "bad.json").write_text("not json")
    with pytest.raises(ReceiptError, match="not one `current download` wrote") as info:
        check_manifest(empty / "bad.json", "fp16", stack, opts.recipe)
    assert _download_argv(str(info.value))[:4] == ["--format", "fp16", "--recipe", "20260702"]

    # a recipe of one's own: download finds it by the path the setup receipt records
    own = tmp_path / "my recipes" / "mine.toml"
    own.parent.mkdir()
    own.write_text((PROJECT_ROOT / "recipes" / "current.toml").read_text())
    receipt = stack / "receipts" / "setup.json"
    receipt.write_text(json.dumps({**json.loads(receipt.read_text()), "recipe": {"name": "mine", "path": str(own)}}))
    with pytest.raises(SmokeError, match="no download manifest") as info:
        resolve_manifest(dataclasses.replace(opts, recipe="mine"), empty, "engine")
    assert _download_argv(str(info.value)) == ["--format", "fp16", "--recipe", str(own), "--output", "."]


def test_a_recipe_without_models_takes_no_format_and_no_engine_level(tmp_path: Path) -> None:
    """The new-user hunt: ``--level engine`` on a FlashInfer-only stack said "no download manifest" and told the
    user to run a download its recipe refuses (exit 2, no awq model); ``--format awq`` on such a stack was
    taken and recorded.  A format for a recipe without models is a usage error (as download says), and the
    engine level on such a stack is refused saying it loads a model, with the kernel level as the fix."""
    stack = _stack(tmp_path, "flashinfer-pr3812", [FI])
    with pytest.raises(UsageError, match="names no model"):
        _resolve(stack, tmp_path, "kernel", format="awq")
    with pytest.raises(SmokeError) as refused:
        _resolve(stack, tmp_path, "kernel", level="engine")
    assert "loads a model" in refused.value.message and "--level kernel" in refused.value.message
    assert "current download" not in refused.value.message
    opts, record = _resolve(stack, tmp_path, "kernel")          # what the stack promises still resolves
    assert opts.format is None and record["format"] == {"value": None, "source": "recipe"}
