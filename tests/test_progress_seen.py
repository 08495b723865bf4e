"""What a user sees (issue 19, item 2): a setup and a kit on the fixture world, recorded on a terminal
(a real pty: spinners and bars) and in a pipe (plain lines).  Neither may show a raw JSON line (a
probe's ``{"implementation": ...}`` or ``OCTOBER_TORCH {...}``) or uv's "Activate with" hint; the
kit is not silent on a terminal; in a pipe git reports phases, not a line per tenth of each."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import jsonschema
import pytest

from october.installer.cli.main import current_main
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.world import World, make_world

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
RAW_JSON = re.compile(r"^(?:[A-Z][A-Z0-9_]* )?[{\[]|\{\"")      # a line that is JSON, or carries a JSON object


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "october.installer.october_setup", *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI", "TERM")}
    env.update(TERM="xterm-256color", COLUMNS="120", LINES="40")
    return env


def in_pty(argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` with stdin/stdout/stderr on a pseudo-terminal; return its exit code and what it drew."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=PROJECT_ROOT, env=_env(),
                            close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:            # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=300), b"".join(chunks).decode("utf-8", "replace")


def in_pipe(argv: list[str]) -> tuple[int, str]:
    proc = subprocess.run(argv, cwd=PROJECT_ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    return proc.returncode, proc.stdout


def screen_lines(text: str) -> list[str]:
    """Every line a terminal showed, however briefly (redraws split at \\r), without colours or the
    spinner's glyph."""
    plain = ANSI.sub("", text)
    return [ln.strip().lstrip("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ ").strip() for ln in re.split(r"[\r\n]", plain) if ln.strip()]


def raw_lines(lines: list[str]) -> list[str]:
    """Lines showing JSON or uv's activation hint, with the "step: " prefix the spinner adds removed."""
    return [ln for ln in lines if RAW_JSON.search(re.sub(r"^[a-z]+: ", "", ln)) or "Activate with" in ln]


@pytest.fixture()
def world(tmp_path: Path) -> World:
    return make_world(tmp_path / "world")


@pytest.mark.slow
def test_a_setup_and_a_kit_on_a_terminal_and_in_a_pipe(world: World, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, str] = {}
    runs = {
        "setup, terminal": (in_pty, _argv(str(tmp_path / "s1"), "--recipe", str(world.recipe), "--cache-dir",
                                          str(tmp_path / "c1"))),
        "setup, pipe": (in_pipe, _argv(str(tmp_path / "s2"), "--recipe", str(world.recipe), "--cache-dir",
                                       str(tmp_path / "c2"))),
        "kit, terminal": (in_pty, _argv("kit", "--recipe", str(world.recipe), str(tmp_path / "k1"), "--cache-dir",
                                        str(tmp_path / "c3"))),
        "kit, pipe": (in_pipe, _argv("kit", "--recipe", str(world.recipe), str(tmp_path / "k2"), "--cache-dir",
                                     str(tmp_path / "c4"))),
    }
    for name, (how, argv) in runs.items():
        code, text = how(argv)
        seen[name] = text
        assert code == 0, (name, text[-3000:])
        lines = screen_lines(text)
        assert raw_lines(lines) == [], (name, raw_lines(lines))
        assert "Traceback" not in text, name
    # the steps and the kit's phases show, the same way, on a terminal and in a pipe
    for where in ("terminal", "pipe"):
        assert "==> preflight: starting" in seen[f"setup, {where}"] and "stack ready" in seen[f"setup, {where}"]
        kit = screen_lines(seen[f"kit, {where}"])
        assert sum(ln.startswith("==> kit: ") for ln in kit) >= 3, kit       # forks, wheels, manifest
        assert any(ln.startswith("kit: ok in") for ln in kit) and any("kit ready" in ln for ln in kit)
    # in a pipe: plain lines only, and git as phases (one line as each ends), not a line per tenth
    for name in ("setup, pipe", "kit, pipe"):
        assert "\x1b[" not in seen[name] and "\r" not in seen[name], name
        git_lines = [ln for ln in seen[name].splitlines() if "git: " in ln]
        assert git_lines, (name, seen[name])
        assert all(ln.rstrip().endswith(")") and "100% (" in ln for ln in git_lines), (name, git_lines)
    # a terminal gets live drawing (cursor movement / redraws), a pipe does not
    assert "\x1b[" in seen["setup, terminal"] and "\x1b[" in seen["kit, terminal"]

    # the stack's --json reports are versioned and match their schemas (verify, env)
    for cmd, kind in ((["verify", "--install", str(tmp_path / "s2"), "--json"], "verify"),
                      (["env", "--install", str(tmp_path / "s2"), "--json"], "env")):
        assert current_main(cmd) == 0, cmd
        doc = json.loads(capsys.readouterr().out)
        jsonschema.validate(doc, json.loads((PROJECT_ROOT / "receipts" / f"{kind}.schema.json").read_text()))
        assert doc["format_version"] == 1 and doc["kind"] == f"october-{kind}"


def test_probe_json_and_uv_hints_never_reach_the_spinner() -> None:
    """The lines measured on the H200 (issue 19): the system-torch probe behind its marker, the wheel
    probe's JSON, uv's activation hint.  The spinner's text is recorded by replacing the real
    spinner's ``update`` (rich draws it from a thread, too late to read back reliably)."""
    import io

    from rich.console import Console

    from october.installer.core.ui import ConsoleReporter

    ui = ConsoleReporter(console=Console(file=io.StringIO(), force_terminal=True, width=120))
    ui.step_start("preflight", "")
    shown: list[str] = []
    ui._status.update = shown.append
    for line in ('OCTOBER_TORCH {"base_prefix": "/opt/torch", "cuda": "13.0"}',
                 '{"implementation": "cpython", "version": [3, 12], "abi": "cp312"}',
                 "Activate with: source wstack/env/bin/activate", '[{"name": "torch"}]',
                 "Resolved 5 packages in 12ms"):
        ui.progress(line)
    ui.step_done("preflight", 0.1)
    assert shown == ["preflight: Resolved 5 packages in 12ms"]
