"""What a reviewer acting as a demanding user found (session 14), each planted and watched:

- a password in a recipe's torch index URL reached the setup receipt, an error message's text reached
  stderr and ``--json`` unmasked, and an sdist fork's URL reached the cache's record;
- a hand-edited receipt crashed ``current verify``'s fix line and ``current env`` with a traceback;
- a hub or a git remote that accepts a connection and never answers hung the command for ever;
- SIGTERM's message said "stopped by stopped by", and a pid file that could not be written (a full disk)
  left its temporary file behind and named no path.

Real parts throughout (a loopback socket that never answers, real git, real receipts); the full disk is
the one stand-in: ``Path.write_text`` raising ENOSPC, since a full filesystem cannot be made here
without root.
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import socket
import subprocess
import threading
import time
import types
from pathlib import Path
from typing import Any, Iterator

import pytest

SECRET = "SEKRETpassw0rd4242"


# ------------------------------------------------------------------ secrets


def test_the_receipt_records_the_torch_index_without_its_password() -> None:
    from october.installer.steps.receipt import torch_record

    def ctx(url: str | None) -> Any:
        torch = types.SimpleNamespace(from_system=False, version="2.9.1", index_url=url)
        return types.SimpleNamespace(recipe=types.SimpleNamespace(torch=torch), result=lambda kind: None)

    got = torch_record(ctx(f"https://oct:{SECRET}@download.example/whl/cu128"))
    assert SECRET not in json.dumps(got) and got["index"] == "https://***@download.example/whl/cu128"
    assert torch_record(ctx("https://download.pytorch.org/whl/cu128"))["index"] == \
        "https://download.pytorch.org/whl/cu128"
    assert torch_record(ctx(None))["index"] is None


def _guarded(fn: Any, *, json_command: str = "setup") -> tuple[int, str, str]:
    """Run ``fn`` as a command does (october.installer.cli.common.guarded): (exit code, display, stdout)."""
    import contextlib

    import typer
    from rich.console import Console

    from october.installer.cli.common import guarded
    from october.installer.core.ui import ConsoleReporter

    shown, printed = io.StringIO(), io.StringIO()
    ui = ConsoleReporter(console=Console(file=shown, width=300))
    with contextlib.redirect_stdout(printed), pytest.raises(typer.Exit) as exc:
        guarded(fn, ui, json_command=json_command)
    return exc.value.exit_code, shown.getvalue(), printed.getvalue()


def test_an_error_s_text_is_masked_on_the_display_and_in_json() -> None:
    from october.installer.core.errors import RecipeError

    def fails() -> None:
        raise RecipeError("recipe.toml", "torch.index", expected="an http(s) URL",
                          found=f"'ftp://oct:{SECRET}@127.0.0.1/simple/'")

    code, shown, printed = _guarded(fails)
    assert code == RecipeError.exit_code
    assert "ftp://***@127.0.0.1/simple/" in shown and SECRET not in shown
    assert json.loads(printed)["error"]["message"].count("***@127.0.0.1") == 1 and SECRET not in printed


def test_an_sdist_fork_s_url_is_recorded_in_the_cache_without_its_password(tmp_path: Path) -> None:
    from october.installer.core.errors import FetchError
    from october.installer.core.runner import Runner
    from october.installer.git.sdist import RECORD, materialise, repo_path
    from october.installer.recipe import SdistSource
    from tests.test_sdist_fork import _placed

    cache = tmp_path / "cache"
    placed = _placed(cache)
    sdist = SdistSource(url=f"https://oct:{SECRET}@files.example/vllm-9.9.0.tar.gz", sha256=placed.sha256,
                        version="9.9.0")
    with pytest.raises(FetchError):                 # a wrong pin: the repository is made all the same
        materialise(Runner(tmp_path / "logs"), "fetch", cache, sdist, "vllm", "0" * 40)
    record = (repo_path(cache, sdist, "vllm") / RECORD).read_text()
    assert SECRET not in record and "https://***@files.example/vllm-9.9.0.tar.gz" in record


# ------------------------------------------------------------------ hand-edited receipts


@pytest.mark.parametrize("value", [5, "x", [1], None])
def test_the_fix_line_of_a_hand_edited_receipt_is_written_not_a_traceback(tmp_path: Path, value: Any) -> None:
    from october.installer.core.paths import StackPaths
    from october.installer.verify.fix import setup_command

    paths = StackPaths(tmp_path / "s")
    for key in ("recipe", "torch", "options"):
        assert setup_command(paths, {"recipe": {"name": "x", "path": "/r/x.toml"}, key: value}).startswith(
            f"october_setup {paths.root}")
    assert setup_command(paths, [1]) == f"october_setup {paths.root}"   # type: ignore[arg-type]


@pytest.mark.parametrize("receipt", ["[]", '"s"', "5", '{"recipe": "x"}', '{"recipe": [1], "forks": 3}'])
def test_current_env_reads_a_malformed_receipt_as_unknown(tmp_path: Path, receipt: str) -> None:
    from october.installer.cli.envreport import stack_report

    stack = tmp_path / "s"
    (stack / "receipts").mkdir(parents=True)
    (stack / "receipts" / "setup.json").write_text(receipt)
    (stack / ".state").mkdir()
    (stack / ".state" / "jit.json").write_text('{"outputs": {"modules": 5}}')
    report = stack_report(stack)
    assert report["recipe"] is None and report["jit_modules"] is None
    json.dumps(report)


# ------------------------------------------------------------------ peers that never answer


@pytest.fixture()
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never sends a byte."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


def test_a_hub_that_never_answers_ends_in_an_error_not_a_hang(silent_port: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from october.installer.core.errors import DownloadError
    from october.installer.download import hub

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent_port}")
    monkeypatch.setattr(hub, "HUB_TIMEOUT_S", 1.0)
    start = time.monotonic()
    with pytest.raises(DownloadError) as exc:
        hub.fetch_snapshot_info("org/model", "a" * 40, ["*.json"])
    assert time.monotonic() - start < 30
    assert "could not reach the hub" in str(exc.value)


def test_a_git_remote_that_never_answers_ends_in_an_error_not_a_hang(silent_port: int) -> None:
    """git's own low-speed limit, set by git_env for every git the tool runs (a user's value wins)."""
    from october.installer.git import git_env

    env = git_env({**os.environ, "GIT_HTTP_LOW_SPEED_TIME": "2"})
    assert env["GIT_HTTP_LOW_SPEED_LIMIT"] == "1000" and env["GIT_HTTP_LOW_SPEED_TIME"] == "2"
    assert git_env({})["GIT_HTTP_LOW_SPEED_TIME"] == "60"
    start = time.monotonic()
    done = subprocess.run(["git", "ls-remote", f"http://127.0.0.1:{silent_port}/fork.git"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and time.monotonic() - start < 30, done.stderr


# ------------------------------------------------------------------ signals and a full disk


def test_sigterm_s_message_says_it_once() -> None:
    from october.installer.pipeline.plan import Terminated

    def stopped() -> None:
        raise Terminated(signal.SIGTERM)

    code, shown, _ = _guarded(stopped)
    assert code == 143 and "stopped by SIGTERM; re-run the same command to resume" in shown
    assert "stopped by stopped by" not in shown


def test_a_pid_file_that_cannot_be_written_is_named_and_leaves_nothing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from october.installer.core.stackmutex import StackLock

    real = Path.write_text

    def full(self: Path, *a: Any, **kw: Any) -> int:
        if ".pid." in self.name:
            raise OSError(errno.ENOSPC, "No space left on device")      # as write() raises it: no filename
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "write_text", full)
    lockfile = tmp_path / ".october.lock"
    with pytest.raises(OSError) as exc:
        with StackLock(lockfile):
            pass
    assert exc.value.errno == errno.ENOSPC and ".october.lock.pid." in str(exc.value.filename)
    assert [p.name for p in tmp_path.iterdir() if ".pid." in p.name] == []


# ------------------------------------------------------------------ hostile forks and recipes (session 24)


def _setup(world: Any, stack: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    import sys

    from tests.fixtures.root import PROJECT_ROOT

    return subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe",
                           str(world.recipe), "--cache-dir", str(cache), "--skip-preflight", "nvcc,gpu,cuda_arch"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", ["/ABS/victim", "../../../../victim"])
def test_a_submodule_name_leading_outside_the_clone_is_refused_and_nothing_is_removed(tmp_path: Path,
                                                                                     name: str) -> None:
    """The scenario hunt: a fork whose .gitmodules names a submodule "/tmp/x/victim" made the fetch step
    remove that directory ("what a killed run left": its git directory would be .git/modules/<name>) and
    report success; "../.." names once .git/modules exists.  Such names are refused before anything is
    removed or written for them (exit 8)."""
    from tests.fixtures.gitrepos import git
    from tests.fixtures.world import make_world, publish

    world = make_world(tmp_path / "world")
    victim = tmp_path / "victim"
    (victim / "data").mkdir(parents=True)
    (victim / "data" / "file.txt").write_text("keep me\n")
    stack, cache = tmp_path / "a" / "b" / "stack", tmp_path / "cache"
    assert _setup(world, stack, cache).returncode == 0          # a re-run: .git/modules exists
    beta = world.root / "work" / "beta"
    gitmodules = beta / ".gitmodules"
    shown = str(victim) if name.startswith("/ABS") else name
    gitmodules.write_text(gitmodules.read_text().replace('[submodule "third_party/gamma"]', f'[submodule "{shown}"]'))
    world.set_pin("beta", publish(beta, world.beta_bare, "hostile submodule name"))
    git("config", "--file", str(gitmodules), "--get-regexp", "submodule", cwd=beta)
    proc = _setup(world, stack, cache)
    assert proc.returncode == 8, proc.stderr
    assert "names a submodule this tool will not place" in proc.stderr and repr(shown) in proc.stderr
    assert (victim / "data" / "file.txt").read_text() == "keep me\n"


def test_a_fork_url_beginning_with_a_dash_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    """The scenario hunt: a forks.toml URL "--upload-pack=touch PWNED; false" with a prefix pin reached
    `git fetch` as an option, and git ran the command.  The recipe refuses such a URL (exit 3, naming the
    key), and every git command that takes a URL has it after `--`."""
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    pwned = tmp_path / "PWNED"
    text = world.forks_toml.read_text()
    url = next(line for line in text.splitlines() if line.strip().startswith("url") and "alpha" in line)
    world.forks_toml.write_text(text.replace(url, f'url = "--upload-pack=touch {pwned}; false"'))
    proc = _setup(world, tmp_path / "stack", tmp_path / "cache")
    assert proc.returncode == 3, proc.stderr
    assert "not beginning with '-'" in proc.stderr and not pwned.exists()
    # below the recipe: git reads what follows `--` as a repository, never as an option
    from october.installer.core.errors import FetchError
    from october.installer.core.runner import Runner
    from october.installer.git.mirror import ensure_commit, open_mirror

    mirror = open_mirror(tmp_path / "cache2", f"--upload-pack=touch {pwned}; false", "alpha")
    with pytest.raises(FetchError):
        ensure_commit(Runner(tmp_path / "logs"), "fetch", mirror, "0" * 40)
    assert not pwned.exists()
