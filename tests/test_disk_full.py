"""A full disk is exit 19 and says "disk full", wherever it happens: our own writes, git, uv.

Real parts: a real tiny tmpfs filled to the last byte (mounted for the test; it needs root, as on
the development and CI machines; elsewhere the test skips and says why), real git, the real CLI.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from rich.console import Console

from october.installer.cli.main import guarded
from october.installer.core.errors import CommandFailed, DiskFullError, FetchError
from october.installer.core.fscause import as_disk_full
from october.installer.core.runner import Runner
from october.installer.core.ui import ConsoleReporter
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.gitrepos import git
from tests.fixtures.world import make_world


@pytest.fixture
def full_dir(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "full"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tiny tmpfs here (needs root): {done.stderr.strip()}")
    try:
        with open(where / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _reporter() -> tuple[ConsoleReporter, io.StringIO]:
    out = io.StringIO()
    return ConsoleReporter(console=Console(file=out, width=200)), out


def test_our_own_write_to_a_full_disk_is_exit_19() -> None:
    ui, out = _reporter()

    def write() -> None:
        with open("/dev/full", "w") as fh:
            fh.write("x")

    with pytest.raises(typer.Exit) as e:
        guarded(write, ui)
    assert e.value.exit_code == 19 and "disk full" in out.getvalue() and "df -h" in out.getvalue()


def test_a_steps_error_caused_by_a_full_disk_is_exit_19() -> None:
    """A step that maps git's failure to its own error (exit 8) still ends as 19 when git said ENOSPC."""
    err = FetchError("fork 'x': cloning the mirror failed", expected="git to succeed",
                     found="exit 128: fatal: write error: No space left on device", fix="check the disk")
    full = as_disk_full(err)
    assert isinstance(full, DiskFullError) and full.exit_code == 19
    assert "No space left on device" in full.message and full.title == "disk full"
    failed = CommandFailed("env", ["uv", "venv"], 2, "error: failed to write: No space left on device (os error 28)",
                           None)
    assert as_disk_full(failed) is not None
    assert as_disk_full(FetchError("x", expected="a", found="exit 128: repository not found")) is None


def test_git_running_out_of_space_is_disk_full(tmp_path: Path, full_dir: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    git("init", "-q", "-b", "main", cwd=src)
    (src / "blob").write_bytes(os.urandom(400_000))
    git("add", "-A", cwd=src)
    git("commit", "-q", "-m", "big", cwd=src)
    with pytest.raises(DiskFullError) as e:
        Runner(tmp_path / "logs").run(["git", "clone", "-q", str(src), str(full_dir / "dest")], step="fetch")
    assert e.value.exit_code == 19 and "No space left on device" in e.value.message


def test_setup_with_a_full_cache_disk_exits_19_and_says_so(tmp_path: Path, full_dir: Path) -> None:
    world = make_world(tmp_path / "world")
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(tmp_path / "stack"),
                           "--recipe", str(world.recipe), "--cache-dir", str(full_dir / "cache"),
                           "--skip-preflight", "nvcc,gpu,cuda_arch"], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 19, proc.stderr
    assert "disk full" in proc.stderr and "Traceback" not in proc.stderr and "->" in proc.stderr


def test_a_write_the_env_does_not_permit_is_exit_19_naming_it_not_an_install_failure(tmp_path: Path) -> None:
    """The scenario hunt: the stack env's site-packages made unwritable while a step had to write there (the
    install step in the hunt, the env step here): exit 11, "installing fork 'alpha' failed ... uv exit code 2", the cause only in the quoted output.
    Now a step's error whose command said so (uv's "Read-only file system (os error 30)", "Permission denied
    (os error 13)", git's ": Permission denied") is exit 19 naming the refused write and what to do.  Planted:
    site-packages bind-mounted read-only (root here and in CI; elsewhere it skips and says why)."""
    from october.installer.core.fscause import as_not_permitted
    from october.installer.pyenv.uvcmd import uv_exe

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"

    def setup() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe",
                               str(world.recipe), "--cache-dir", str(cache), "--skip-preflight", "nvcc,gpu,cuda_arch"],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)

    assert setup().returncode == 0
    site = next((stack / "env" / "lib").glob("python*/site-packages"))
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    subprocess.run([uv_exe(), "pip", "uninstall", "--python", str(stack / "env" / "bin" / "python"), "tinydep"],
                   check=True, capture_output=True, env=env)
    done = subprocess.run(["mount", "--bind", str(site), str(site)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here (needs root): {done.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(site)], check=True, capture_output=True)
        proc = setup()
    finally:
        subprocess.run(["umount", "-l", str(site)], capture_output=True)
    assert proc.returncode == 19, proc.stderr
    assert "Read-only file system (os error 30)" in proc.stderr and "ls -ld PATH" in proc.stderr, proc.stderr
    assert f"`{stack / 'env' / 'lib'}`" in proc.stderr and "Traceback" not in proc.stderr
    assert setup().returncode == 0
    # the review: only a failed command's last errors count, and not every "Permission denied" is the file
    # system's: ssh's key refusal, a warning above a network failure, a device


    def failed(tail: str) -> FetchError:
        err = FetchError("fork 'x': git failed", expected="git to succeed", found="exit 128")
        err.__cause__ = CommandFailed("fetch", ["git", "fetch"], 128, tail, tmp_path / "fetch.log")
        return err

    for tail in ("git@github.com: Permission denied (publickey).\nfatal: Could not read from remote repository.",
                 "warning: unable to access '/root/.config/git/ignore': Permission denied\n"
                 "fatal: unable to access 'https://example.invalid/x.git/': Could not resolve host: example.invalid",
                 "RuntimeError: /dev/nvidia-uvm: Permission denied"):
        assert as_not_permitted(failed(tail)) is None, tail
    assert as_not_permitted(FetchError("x", expected="a", found="error: a.py: Permission denied")) is None  # no command
    found = as_not_permitted(failed("error: unable to create file a.py: Permission denied\n"
                                    "fatal: Could not reset index file to revision 'HEAD'."))
    assert found is not None and found.exit_code == 19 and found.what == "fork 'x': git failed"
    assert found.found == f"error: unable to create file a.py: Permission denied (full log: {tmp_path / 'fetch.log'})"
