"""One set of conventions on every command (issue 19): -h, -q/-v (exclusive), --json with a
format_version (and on failure), one exit-code table, options checked before anything is written.

In-process (``setup_main`` / ``current_main``), the way the console scripts call them."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import jsonschema
import pytest

from october.installer.cli import common as cli_common
from october.installer.cli.main import current_main, setup_main
from october.installer.core import errors
from tests.fixtures.root import PROJECT_ROOT

# every command, with the least arguments that get it past click's own checks
COMMANDS: dict[str, tuple[str, ...]] = {
    "october_setup": ("s",),
    "october_setup kit": ("kit", "d"),
    "october_setup fleet": ("fleet", "s", "--address", "a:1", "--kit", "k"),
    "current doctor": ("doctor",),
    "current verify": ("verify", "--install", "x"),
    "current env": ("env",),
    "current recipes": ("recipes",),
    "current download": ("download", "--format", "awq"),
    "current smoke": ("smoke", "--install", "x", "--output", "o"),
}


def run(name: str, *args: str) -> int:
    return setup_main(list(args)) if name.startswith("october_setup") else current_main(list(args))


def schema(kind: str) -> dict:
    return json.loads((PROJECT_ROOT / "receipts" / f"{kind}.schema.json").read_text())


def readme_exit_codes() -> list[tuple[int, str]]:
    text = (PROJECT_ROOT / "README.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return [(int(c), m) for c, m in re.findall(r"^\| (\d+) \| (.*) \|$", section, re.M)]


def test_one_exit_code_table_in_the_readme_the_errors_module_and_every_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert readme_exit_codes() == list(errors.EXIT_CODES)
    codes = {c for c, _ in errors.EXIT_CODES}
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.OctoberError)]
    # every error class exits with a code the table explains, and every failure code has a class
    assert {c.exit_code for c in classes} <= codes
    # 0, 21 (a diagnostic smoke whose harness agreed), 130 and 143 (a signal stopped the run) and 141 (stdout's
    # reader left) are outcomes, not errors
    assert codes - {c.exit_code for c in classes} == {0, 21, 130, 141, 143}
    assert errors.FileSystemError.exit_code == 19 and errors.UsageError.exit_code == 2
    epilog = [ln.strip() for ln in cli_common.exit_codes_epilog().splitlines()[2:]]
    for name, args in COMMANDS.items():
        assert run(name, *args[: 1 if name.startswith(("current", "october_setup ")) else 0], "--help") == 0
        help_text = capsys.readouterr().out
        shown = " ".join(help_text.split("Exit codes:", 1)[1].split())
        for code, meaning in errors.EXIT_CODES:               # the same words, wrapped
            assert f"{code} {meaning}" in shown, (name, code)
        assert all(line in help_text for line in epilog), name


def test_every_command_has_h_quiet_verbose_json_and_a_plain_usage_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)          # were -q -v not refused, nothing lands in the checkout
    for name, args in COMMANDS.items():
        sub = args[: 1 if name.startswith(("current", "october_setup ")) else 0]
        assert run(name, *sub, "-h") == 0, name
        text = capsys.readouterr().out
        usage = text.splitlines()[0]
        assert usage.startswith(f"Usage: {name}") and "{" not in usage, (name, usage)
        for flag in ("-q, --quiet", "-v, --verbose", "--json", "-h, --help", "Exit codes:"):
            assert flag in text, (name, flag)
        # -q and -v together: refused with exit 2 before anything runs
        assert run(name, *args, "-q", "-v") == 2, name
        err = capsys.readouterr().err
        assert "--quiet and --verbose exclude each other" in err and "Traceback" not in err, (name, err)


def test_json_is_versioned_and_also_printed_on_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert current_main(["recipes", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, schema("recipes"))
    assert doc["format_version"] == 1 and {"current", "flashinfer-pr3812"} <= {r["name"] for r in doc["recipes"]}
    assert [r["models"] for r in doc["recipes"] if r["name"] == "flashinfer-pr3812"] == [[]]
    # a failure early in verify: the error as JSON on stdout (and the message on stderr)
    assert current_main(["verify", "--install", str(tmp_path / "none"), "--json"]) == 19
    out = capsys.readouterr()
    doc = json.loads(out.out)
    jsonschema.validate(doc, schema("error"))
    assert doc["exit_code"] == 19 and doc["command"] == "current verify" and "does not exist" in out.err
    # a usage error with --json: JSON too
    assert current_main(["smoke", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, schema("error"))
    assert doc["exit_code"] == 2 and "--install" in doc["error"]["message"]
    # verify of a stack that is no stack: still JSON, with the code of the error
    (tmp_path / "half").mkdir()
    code = current_main(["verify", "--install", str(tmp_path / "half"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, schema("error"))
    assert code == doc["exit_code"] != 0


def test_options_are_checked_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x")
    stack = tmp_path / "s"
    cases = [
        # (argv, exit code, words in the message)
        (["october_setup", str(stack), "--skip-preflight", "bogus"], 2, "unknown check: bogus"),
        (["october_setup", ""], 2, "the stack path is empty"),
        (["october_setup", "  "], 2, "the stack path is empty"),
        (["october_setup", str(stack), "--locked", "--lock-file", str(tmp_path / "nonexistent")], 19,
         "--lock-file"),
        (["october_setup", str(stack), "--kit", str(afile)], 19, f"--kit {afile} is a file"),
        (["october_setup", str(stack), "--cache-dir", str(afile)], 19, f"--cache-dir {afile} is a file"),
        (["current", "download", "--format", "awq", "--cache-dir", str(afile)], 19, f"--cache-dir {afile} is a file"),
        (["october_setup", "kit", str(tmp_path / "kit"), "--cache-dir", str(afile)], 19, "is a file"),
        (["october_setup", "kit", str(tmp_path / "kit"), "--lock-file", str(tmp_path / "nolock")], 19,
         "does not exist"),
        (["current", "env", "--install", str(tmp_path / "nonexistent")], 19, "does not exist"),
        (["current", "env", "--recipe", "nope"], 3, "there is no recipe 'nope'"),
        (["current", "smoke", "--install", str(stack), "--output", str(afile)], 19, "is a file"),
        (["current", "smoke", "--install", str(stack), "--output", "o", "--manifest", str(tmp_path)], 19,
         "is a directory"),
    ]
    for argv, code, text in cases:
        rc = setup_main(argv[1:]) if argv[0] == "october_setup" else current_main(argv[1:])
        err = capsys.readouterr().err
        assert rc == code, (argv, rc, err)
        assert text in err and "->" in err and "Traceback" not in err, (argv, err)
        assert "preflight: starting" not in err, argv
        # nothing written: no stack, no lock, no state, no kit, no cache
        assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"], (argv, list(tmp_path.iterdir()))


# every path option and argument, by command (the positional's place in COMMANDS' arguments where it has one)
PATH_PARAMS = {
    "october_setup": {"--recipe", "STACK", "--cache-dir", "--lock-file", "--kit", "--system-python"},
    "october_setup kit": {"--recipe", "DIR", "--cache-dir", "--lock-file", "--have"},
    "october_setup fleet": {"--recipe", "STACK", "--kit", "--receipt", "--lock-file", "--cache-dir", "--ship-dir", "--system-python"},
    "current doctor": {"--recipe", "--install", "--system-python"},
    "current verify": {"--install"},
    "current env": {"--recipe", "--install"},
    "current recipes": set(),
    "current download": {"--recipe", "--output", "--local-dir", "--cache-dir", "--fixtures", "--model-dir"},
    "current smoke": {"--recipe", "--install", "--output", "--manifest", "--fixtures"},
}
ARGUMENT_AT = {"october_setup": 0, "october_setup kit": 1, "october_setup fleet": 1}


def _click_command(name: str) -> object:
    from typer.main import get_command

    from october.installer.cli.main import setup_route
    from october.installer.cli.current import current_app

    if name.startswith("october_setup"):
        return get_command(setup_route(list(COMMANDS[name]))[0])
    return get_command(current_app).commands[COMMANDS[name][0]]    # type: ignore[attr-defined]


def test_an_empty_path_is_a_usage_error_for_every_path_option_of_every_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``--cache-dir ""`` was the current directory (git/, built/ and uv/ made there, exit 0): an empty or blank
    path given to any path option or argument of any command is a usage error (exit 2, expected / found / fix)
    before anything is written.  ``october_setup`` runs as its console script does, the plain fast path first."""
    from october.installer.october_setup import setup_main as console_setup

    monkeypatch.chdir(tmp_path)
    for name, base in COMMANDS.items():
        found = set()
        for param in _click_command(name).params:                      # type: ignore[attr-defined]
            if not cli_common.is_path_param(param):
                continue
            argument = param.param_type_name == "argument"
            flag = param.metavar if argument else max(param.opts, key=len)
            found.add(flag)
            for empty in ("", "  "):
                argv = list(base)
                if argument:
                    argv[ARGUMENT_AT[name]] = empty
                elif flag in argv:
                    argv[argv.index(flag) + 1] = empty
                else:
                    argv += [flag, empty]
                rc = console_setup(argv) if name.startswith("october_setup") else current_main(argv)
                err = capsys.readouterr().err
                assert rc == 2, (name, argv, rc, err)
                assert "usage error" in err and "empty" in err and f"found {empty!r}" in err and "->" in err, err
                assert flag in err and "Traceback" not in err, (argv, err)
                assert list(tmp_path.iterdir()) == [], (argv, list(tmp_path.iterdir()))
        assert found == PATH_PARAMS[name], name
    # with --json the refusal is the error document on stdout
    assert current_main(["verify", "--install", "", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, schema("error"))
    assert doc["command"] == "current verify" and doc["exit_code"] == 2 and "--install" in doc["error"]["message"]
