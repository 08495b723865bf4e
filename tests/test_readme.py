"""The README's commands run as printed (issue 19, items 1 and 6).

Every fenced block of README.md is one of: run here (on a fresh copy of the checkout: tracked and
new files only, no .venv, so `uv run` builds the tool's env from nothing, as for a new user), skipped
with the reason (GPU, network, a cluster, the whole suite), or not commands.  A block the test does
not know fails it, so a new README block is classified when it is written.  Every `october_setup` /
`current` line of a skipped block is still parsed by the real command line (options, choices,
required options, no `...`), without running it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer

from october.installer.cli.main import current_app, setup_route
from october.installer.cli.common import click_exc
from tests.fixtures.root import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"

# first line of a block -> why it does not run here (None: it runs here)
BLOCKS: dict[str, str | None] = {
    "uv --version && git --version && cc --version": None,
    "uv run october_setup ./stack --recipe current": "needs network (GitHub forks, PyPI, the base wheel, the "
                                                     "Hugging Face model) and a CUDA GPU for the jit step and smoke",
    "uv run october_setup ./fi --recipe flashinfer-pr3812 --system-python /opt/torch/.venv/bin/python":
        "needs the H200 image's torch (/opt/torch) and a CUDA GPU",
    "uv run october_setup kit --recipe 20260702 ./kit-20260702         # on a machine with network access":
        "needs network (GitHub forks, PyPI, the 279 MB base wheel)",
    "uv sync --extra fleet          # Ray, for this command only (the single-node commands never import it)":
        "needs network (Ray from PyPI) and a Ray cluster",
    ". ./stack/activate && vllm serve Qwen/Qwen3-8B-AWQ --revision 4da05a8edb55c6046cce958586c33b61da07bb79 \\":
        "needs a provisioned stack and a CUDA GPU",
    "uv run --group test pytest": "the whole suite (10+ minutes, torch); CI runs it",
}
NOT_COMMANDS = ("forks.toml   the forks:",)        # the Layout tree


def readme_blocks() -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```$", README.read_text(encoding="utf-8"), re.M | re.S)


def commands(block: str) -> list[list[str]]:
    """Each command line of a block as argv (continuations joined, comments dropped, split at && and |)."""
    joined = block.replace("\\\n", " ")
    out: list[list[str]] = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        cur: list[str] = []
        for w in words + ["&&"]:
            if w in ("&&", "||", "|", ";"):
                if cur:
                    out.append(cur)
                cur = []
            else:
                cur.append(w)
    return out


def parse_only(argv: list[str]) -> None:
    """Parse ``october_setup ...`` / ``current ...`` as the real command would, without running it."""
    prog, args = argv[0], argv[1:]
    if prog == "october_setup":
        app, name, args = setup_route(list(args))
        typer.main.get_command(app).make_context(name, list(args))
        return
    group: Any = typer.main.get_command(current_app)
    ctx = group.make_context("current", [], resilient_parsing=True)     # (bare `current` would print help)
    sub = group.get_command(ctx, args[0])
    assert sub is not None, f"`current {args[0]}`: no such command"
    sub.make_context(f"current {args[0]}", list(args[1:]), parent=ctx)


def fresh_copy(dest: Path) -> Path:
    """The checkout as a fresh clone of this working tree would be: tracked and new (not ignored)
    files, symlinks kept, nothing built."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=PROJECT_ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, (p.decode() for p in listed)):
        src, dst = PROJECT_ROOT / rel, dest / rel
        if not (src.exists() or src.is_symlink()):
            continue                                     # deleted in the working tree
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    return dest


def test_every_block_is_known_and_every_command_parses() -> None:
    blocks = readme_blocks()
    assert len(blocks) >= 8
    seen = set()
    for block in blocks:
        first = block.splitlines()[0]
        if first.startswith(NOT_COMMANDS):
            continue
        assert first in BLOCKS, f"a README block this test does not know; classify it in BLOCKS: {first!r}"
        seen.add(first)
        assert "..." not in block, f"a README command with `...` cannot run as printed: {block!r}"
        for argv in commands(block):
            if argv[:2] == ["uv", "run"] and argv[2:3] in (["october_setup"], ["current"]):
                parse_only(argv[2:])
    assert seen == set(BLOCKS), f"BLOCKS lists blocks the README no longer has: {set(BLOCKS) - seen}"


def test_parse_only_catches_what_a_user_would_hit() -> None:
    """The dry parse is the real one: an unknown option, a bad choice, a missing required option fail."""
    parse_only(["current", "smoke", "--install", "./fi", "--output", "fi-smoke"])
    for argv in (["current", "smoke", "--install", "./fi", "--level", "kernel", "..."],
                 ["current", "smoke", "--install", "./fi"],
                 ["current", "download", "--format", "gguf"],
                 ["october_setup", "./s", "--bogus"]):
        with pytest.raises(click_exc.UsageError):
            parse_only(argv)


@pytest.mark.slow
def test_the_cpu_blocks_run_as_printed_on_a_fresh_copy(tmp_path: Path) -> None:
    """The prerequisites line and the first commands, with bash -e, in a copy without .venv (uv makes
    it from its cache, or from the index where the cache is cold: the tool's own dependencies only)."""
    clone = fresh_copy(tmp_path / "clone")
    assert not (clone / ".venv").exists() and (clone / "README.md").is_file()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH")}
    env.pop("UV_OFFLINE", None)        # a warm uv cache needs no network; a cold one (CI) fetches
    ran = 0
    for block in readme_blocks():
        if BLOCKS.get(block.splitlines()[0], "not listed") is not None:
            continue
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=clone, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (block, proc.stdout[-2000:], proc.stderr[-4000:])
        assert "Traceback" not in proc.stderr
        ran += 1
        if "current recipes" in block:
            assert "flashinfer-pr3812" in proc.stdout and "current" in proc.stdout
    assert ran >= 1
    # the tool's env is light, as the README says: no torch
    assert (clone / ".venv").is_dir() and not list((clone / ".venv").glob("lib/python3*/site-packages/torch"))
