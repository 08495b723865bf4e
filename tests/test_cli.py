"""The `current` and `october_setup` command lines as a user runs them (real subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.root import PROJECT_ROOT


def current(*args: str, cwd: Path = PROJECT_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "october", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_help_lists_the_commands_in_one_vocabulary() -> None:
    out = current("--help").stdout
    for cmd in ("doctor", "verify", "env", "recipes", "download", "smoke"):
        assert cmd in out
    setup_help = subprocess.run([sys.executable, "-m", "october.installer.october_setup", "--help"], cwd=PROJECT_ROOT,
                                capture_output=True, text=True).stdout
    assert "--recipe" in setup_help and "--locked" in setup_help and "--skip-preflight" in setup_help
    assert "STACK" in setup_help and "<bool>" not in setup_help
    for cmd in ("doctor", "verify", "smoke", "env"):
        text = current(cmd, "--help").stdout
        assert "--install STACK" in text and "--stack" not in text and "<bool>" not in text, (cmd, text)
    smoke_help = current("smoke", "--help").stdout
    assert "<awq|fp16>" in smoke_help and "<reference|kernel|engine>" in smoke_help
    assert "<awq|fp16>" in current("download", "--help").stdout
    assert "--json" in current("doctor", "--help").stdout and "--json" in current("verify", "--help").stdout


def test_each_app_is_whole_in_the_module_that_makes_it() -> None:
    """No registration by import side effect: an app imported alone (a fresh interpreter) has all its
    commands; ``october_setup kit`` / ``fleet`` are routed to their apps, anything else is a STACK."""
    code = ("import typer; from october.installer.cli import common as cli_common; from october.installer.cli.current import current_app; "
            "print(sorted(typer.main.get_command(current_app).commands)); "
            "print(sorted(n for n in vars(cli_common) if n.endswith('_app')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["['doctor', 'download', 'env', 'recipes', 'smoke', 'verify']", "['new_app', 'run_app']"], out
    from october.installer.cli.main import fleet_app, kit_app, setup_app, setup_route
    assert setup_route(["kit", "d", "-q"]) == (kit_app, "october_setup kit", ["d", "-q"])
    assert setup_route(["fleet"]) == (fleet_app, "october_setup fleet", [])
    assert setup_route(["s", "kit"]) == (setup_app, "october_setup", ["s", "kit"])
    assert setup_route([]) == (setup_app, "october_setup", [])


def _doctor_rows(stdout: str) -> dict[str, str]:
    lines = stdout.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL"], lines[0]
    return {ln.split()[0]: ln.split()[1] for ln in lines[1:] if len(ln.split()) > 1
            and ln.split()[1] in ("passed", "failed", "skipped")}


def test_doctor_prints_a_table_and_its_exit_code_follows_it() -> None:
    """On any machine (a CPU box or the GPU machine): one row per check under a header, and exit 1
    exactly when a row failed; the JSON form says the same."""
    from october.installer.machine import CHECK_NAMES

    proc = current("doctor", "--recipe", "current")
    rows = _doctor_rows(proc.stdout)
    assert set(rows) <= set(CHECK_NAMES) and {"os", "arch", "nvcc", "gpu", "git", "uv"} <= set(rows), proc.stdout
    failed = [n for n, s in rows.items() if s == "failed"]
    assert proc.returncode == (1 if failed else 0), proc.stdout + proc.stderr
    assert rows["os"] == "passed" and rows["git"] == "passed"
    assert "cuda_arch" in rows          # the recipe pins CUDA: with no GPU to compare, the row says not checked
    passed, aside = sum(s == "passed" for s in rows.values()), sum(s == "skipped" for s in rows.values())
    assert ("all checks passed" if not failed else f"{passed} of {len(rows)} checks passed") \
        + (f" ({aside} skipped or not checked)" if aside else "") in proc.stdout
    as_json = current("doctor", "--recipe", "current", "--json")
    data = json.loads(as_json.stdout)
    assert as_json.returncode == proc.returncode and data["passed"] is (not failed)
    assert {c["name"]: c["status"] for c in data["checks"]} == rows and "gpus" in data["facts"]


def test_doctor_says_cuda_arch_is_not_checked_without_a_gpu_on_every_machine(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit: without a GPU, `current doctor` had no cuda_arch row.  It is a row on any machine (an
    nvidia-smi that finds no driver stands in for a GPU-less one): not checked, saying why and what the JIT
    modules are built for instead, in the table and the JSON alike."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\n"
                   "exit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    said = "not checked: no GPU here to compare with the recipe's [cuda].arch_list ('9.0'); the JIT modules are " \
           "built for that list"
    proc = current("doctor", "--recipe", "current")
    rows = _doctor_rows(proc.stdout)
    assert rows["gpu"] == "failed" and rows["cuda_arch"] == "skipped", proc.stdout
    assert f"cuda_arch  skipped  {said}" in proc.stdout
    data = json.loads(current("doctor", "--recipe", "current", "--json").stdout)
    [row] = [c for c in data["checks"] if c["name"] == "cuda_arch"]
    assert row["status"] == "skipped" and row["detail"] == said and row["found"] == "no GPU here", row


def test_doctor_fails_a_planted_os_mismatch_on_every_machine(tmp_path: Path) -> None:
    recipe = tmp_path / "plan9.toml"
    text = (PROJECT_ROOT / "recipes" / "current.toml").read_text()
    assert 'os = "Linux"' in text
    recipe.write_text(text.replace('os = "Linux"', 'os = "Plan9"', 1))
    proc = current("doctor", "--recipe", str(recipe), "--skip-preflight", "gpu,nvcc,cuda_arch")
    rows = _doctor_rows(proc.stdout)
    assert proc.returncode == 1 and rows["os"] == "failed" and rows["gpu"] == "skipped", proc.stdout


def test_doctor_unknown_skip_is_a_usage_error() -> None:
    proc = current("doctor", "--recipe", "current", "--skip-preflight", "bogus")
    assert proc.returncode == 2 and "bogus" in proc.stderr and "gpu" in proc.stderr


def test_download_unknown_format() -> None:
    proc = current("download", "--format", "int8", "--output", "x.json")
    assert proc.returncode == 2 and "awq" in proc.stderr and "fp16" in proc.stderr
    assert "run `current download --help`" in proc.stderr


def test_smoke_on_a_missing_stack_says_to_run_setup(tmp_path: Path) -> None:
    proc = current("smoke", "--install", str(tmp_path / "nostack"), "--format", "awq", "--output", str(tmp_path / "o"))
    assert proc.returncode != 0 and "october_setup" in proc.stderr


def _hinted(stderr: str, program: str) -> list[str]:
    """The command a message tells the user to run (between backticks), split as a shell splits it."""
    import shlex

    [hint] = [part for part in stderr.split("`")[1::2] if part.startswith(program + " ")]
    return shlex.split(hint)


def test_printed_commands_quote_the_paths_they_name(tmp_path: Path) -> None:
    """A copied hint must run on the path it names: a stack path with a space and a ``$`` is one shell word."""
    stack = tmp_path / "my stacks" / "st $HOME"
    stack.mkdir(parents=True)
    verified = current("verify", "--install", str(stack))
    assert verified.returncode == 18, verified.stderr
    assert _hinted(verified.stderr, "october_setup")[:2] == ["october_setup", str(stack)], verified.stderr
    smoked = current("smoke", "--install", str(stack), "--output", str(tmp_path / "o"), "--level", "kernel")
    assert smoked.returncode != 0
    assert _hinted(smoked.stderr, "october_setup")[:2] == ["october_setup", str(stack)], smoked.stderr


def test_smoke_reference_level_on_cpu_writes_a_failing_receipt(tmp_path: Path) -> None:
    """A stand-in stack whose env is the tool env (it has torch); on a CPU the graph check is
    skipped, so the receipt must say passed: false and the command must exit non-zero."""
    from october.installer.pyenv import stackenv
    stack = tmp_path / "stack"
    (stack / "receipts").mkdir(parents=True)
    (stack / "env").symlink_to(sys.prefix)
    (stack / "receipts" / "setup.json").write_text(json.dumps(
        {"recipe": {"name": "20260702"}, "forks": [{"name": "flashinfer", "commit": "2f3f0f6d" + "0" * 32}]}))
    stackenv.write(stack, stackenv.runtime_env(stack, "9.0", None))
    out = tmp_path / "smoke"
    proc = current("smoke", "--install", str(stack), "--format", "awq", "--output", str(out), "--level", "reference")
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["passed"] is False and proc.returncode != 0
    assert receipt["promised_level"] == "kernel" and receipt["proves"] == "nothing"     # graphs skipped
    statuses = {c["title"]: c["status"] for c in receipt["checks"]}
    assert statuses["changing decode graphs"] == "skipped"
    assert statuses["physical K16/V8"] == "passed"
    assert "changing decode graphs" in proc.stdout + proc.stderr


def test_misuse_gives_messages_not_tracebacks(tmp_path: Path) -> None:
    """Paths that are directories, files or unwritable: each is a message with a documented code."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        # (argv, module, exit code, text in stderr)
        (["october_setup", str(tmp_path / "s"), "--recipe", str(tmp_path)], 3, "Expected a TOML file, found a directory"),
        (["doctor", "--recipe", str(tmp_path)], 3, "Expected a TOML file, found a directory"),
        # a file where a directory belongs is exit 19 for every path option (README "Exit codes")
        (["download", "--format", "awq", "--output", str(afile / "x.json")], 19, "is a file"),
        (["smoke", "--install", str(tmp_path), "--format", "bogus", "--output", str(tmp_path / "o")], 2,
         "'bogus' is not one of 'awq', 'fp16'"),
        (["smoke", "--install", str(tmp_path), "--format", "awq", "--level", "bogus", "--output",
          str(tmp_path / "o")], 2, "'bogus' is not one of 'reference', 'kernel', 'engine'"),
        (["smoke", "--install", str(tmp_path), "--format", "awq", "--output", str(afile)], 19, "is a file"),
        (["october_setup", "/proc/no-such-dir/stack", "--recipe", "current", "--skip-preflight",
          "nvcc,gpu,ram,disk"], 19, "file system error"),
    ]
    bad_utf8 = tmp_path / "bad.toml"
    bad_utf8.write_bytes(b"name = \"\xff\xfe\"\n")
    cases.append((["october_setup", str(tmp_path / "s2"), "--recipe", str(bad_utf8)], 3, "Expected a UTF-8 TOML file"))
    for argv, code, text in cases:
        if argv[0] == "october_setup":
            proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", *argv[1:]], cwd=PROJECT_ROOT,
                                  capture_output=True, text=True, timeout=120)
        else:
            proc = current(*argv)
        assert "Traceback" not in proc.stderr, (argv, proc.stderr)
        assert proc.returncode == code, (argv, proc.returncode, proc.stderr)
        assert text in proc.stderr, (argv, proc.stderr)
        assert "->" in proc.stderr, (argv, proc.stderr)


def test_version_names_the_tool_and_the_checkout_commit() -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True).stdout.strip()
    for argv, prog in ((["-m", "october", "--version"], "current"),
                       (["-m", "october.installer.october_setup", "--version"], "october_setup")):
        proc = subprocess.run([sys.executable, *argv], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"{prog} 0.1.0 (git {head[:12]})"


def test_head_commit_reads_loose_packed_and_worktree_refs(tmp_path: Path) -> None:
    from october.installer.core.version import head_commit

    def git(*args: str, cwd: Path) -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()

    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "f").write_text("1")
    git("add", "f", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one", cwd=repo)
    first = git("rev-parse", "HEAD", cwd=repo)
    assert head_commit(repo) == first                       # loose ref
    git("pack-refs", "--all", cwd=repo)
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert head_commit(repo) == first                       # packed-refs
    git("worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"), cwd=repo)
    assert head_commit(tmp_path / "wt") == first            # a linked worktree (.git is a file)
    git("checkout", "-q", "--detach", cwd=repo)
    assert head_commit(repo) == first                       # detached HEAD
    assert head_commit(tmp_path) is None                    # not a checkout


def test_parse_errors_say_what_to_do() -> None:
    proc = current("smoke", "--format")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "'--format' requires an argument" in proc.stderr and "run `current smoke --help`" in proc.stderr
    proc = current("bogus")
    assert proc.returncode == 2 and "No such command 'bogus'" in proc.stderr and "run `current --help`" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", "s", "--bogus"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--bogus" in proc.stderr and "run `october_setup --help`" in proc.stderr


@pytest.mark.parametrize("command", [["october.installer.october_setup", "STACK"], ["october", "verify", "--install", "STACK"]])
@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("in_exec", [False, True])
def test_ctrl_c_while_the_tool_imports_is_the_interrupt_message_not_a_traceback(
        tmp_path: Path, command: list[str], as_json: bool, in_exec: bool) -> None:
    """A real SIGINT that arrives while the tool is still importing (before the command's own handler is in
    place): a ``rich`` ahead of the real one on PYTHONPATH sends it as it is imported, which both command lines
    do early.  The interrupt's message and 130, as later in a run, and with ``--json`` the error document.
    ``in_exec``: it lands in code ``exec`` runs from a string, as a dataclass's generated methods are made at
    import; CPython then took it for unhandled and ``python -m`` ended by SIGINT (-2) after our message
    (13 of 40 early Ctrl-Cs)."""
    shadow = tmp_path / "shadow" / "rich"
    shadow.mkdir(parents=True)
    # Python's own Ctrl-C handler first: a shell starts a background job (a CI runner's `cmd &`) with SIGINT
    # ignored, and Python then leaves it ignored
    send = "os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\n"
    (shadow / "__init__.py").write_text("import os, signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                                        + (f"exec({send!r})\n" if in_exec else send))
    args = [a.replace("STACK", str(tmp_path / "stack")) for a in command] + (["--json"] if as_json else [])
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "shadow"))
    run = subprocess.run([sys.executable, "-m", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                         timeout=60, env=env)
    assert run.returncode == 130, run
    assert "Traceback" not in run.stderr, run.stderr
    assert "error: interrupted: stopped by the user; re-run the same command to resume" in run.stderr
    assert not (tmp_path / "stack").exists()
    if as_json:
        doc = json.loads(run.stdout)
        assert doc["kind"] == "october-error" and doc["exit_code"] == 130 and doc["ok"] is False
        import jsonschema

        schema = json.loads((PROJECT_ROOT / "receipts" / "error.schema.json").read_text())
        jsonschema.validate(doc, schema)
    else:
        assert run.stdout == ""


@pytest.mark.parametrize("args", [["october", "recipes"], ["october", "recipes", "--json"], ["october", "--help"],
                                  ["october", "verify", "--help"], ["october.installer.october_setup", "--help"],
                                  ["october.installer.october_setup", "kit", "--help"]])
def test_a_reader_that_left_is_141_and_no_message(args: list[str]) -> None:
    """``current recipes | head -1``: stdout's reader has left before the output is written (its read end is
    closed before the command starts, so every write fails).  A shell's 141 (SIGPIPE), nothing on stderr: not
    "file system error ... Broken pipe" (19), nor Python's "Exception ignored" (120).  ``--help`` too: click
    makes a broken pipe exit 1, as if the command had failed."""
    read, write = os.pipe()
    os.close(read)
    try:
        run = subprocess.run([sys.executable, "-m", *args], cwd=PROJECT_ROOT, stdout=write,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert (run.returncode, run.stderr) == (141, ""), run


def test_a_failure_keeps_its_exit_code_when_the_reader_left(tmp_path: Path) -> None:
    """A command that failed says why on stderr and keeps its code; its --json error document had nowhere to go."""
    read, write = os.pipe()
    os.close(read)
    try:
        run = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(tmp_path / "none"), "--json"],
                             cwd=PROJECT_ROOT, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert run.returncode == 19, run
    assert run.stderr.startswith("error: file system error: --install") and "Traceback" not in run.stderr
    assert "Exception ignored" not in run.stderr


def test_a_no_op_whose_reader_left_is_141_too(tmp_path: Path) -> None:
    """The review: the no-op's summary is printed outside the command's guard, and a closed stdout ended in a
    traceback (rc 1)."""
    from tests.fixtures.world import make_world
    from tests.test_setup_e2e import setup

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    setup(world, stack, cache)
    read, write = os.pipe()
    os.close(read)
    try:
        run = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe",
                              str(world.recipe), "--cache-dir", str(cache)], cwd=PROJECT_ROOT, stdout=write,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert "Traceback" not in run.stderr and run.returncode == 141, run


@pytest.mark.parametrize("args", [["october", "recipes"], ["october.installer.october_setup", "--help"]])
def test_a_closed_stdout_is_no_traceback(args: list[str]) -> None:
    """The odd-environment hunt: started with stdout closed (``>&-``, Python's ``sys.stdout`` is None), every
    command did its work, then its last flush raised AttributeError: a traceback and exit 1."""
    run = subprocess.run(["bash", "-c", 'exec "$0" "$@" >&-', sys.executable, "-m", *args],
                         cwd=PROJECT_ROOT, stderr=subprocess.PIPE, text=True, timeout=120)
    assert "Traceback" not in run.stderr and run.returncode == 0, run


def test_a_setup_whose_progress_reader_left_goes_on_to_the_end(tmp_path: Path) -> None:
    """The odd-environment hunt: ``october_setup ... 2>&1 | head -2``: the progress on stderr lost its reader, rich
    raised SystemExit(1) at its next line, and the setup stopped after the preflight (a healthy ``current
    verify`` said 1 the same way, the exit code of a failed smoke check).  The progress goes quiet, the stack is
    set up, and the exit code is the work's."""
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    read, write = os.pipe()
    os.close(read)
    try:
        run = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe",
                              str(world.recipe), "--cache-dir", str(cache)], cwd=PROJECT_ROOT,
                             stdout=subprocess.PIPE, stderr=write, text=True, timeout=300)
    finally:
        os.close(write)
    assert run.returncode == 0, run
    assert [st["status"] for st in json.loads((stack / "receipts" / "setup.json").read_text())["steps"]] == ["ran"] * 5
    read, write = os.pipe()
    os.close(read)
    try:
        run = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                             stdout=subprocess.PIPE, stderr=write, text=True, timeout=300)
    finally:
        os.close(write)
    assert run.returncode == 0, run


def test_verify_of_a_stack_whose_path_the_locale_cannot_write_says_so(tmp_path: Path) -> None:
    """The odd-environment hunt: ``LC_ALL=POSIX PYTHONUTF8=0 current verify --install <non-ASCII path>`` ended in a
    UnicodeEncodeError traceback (70).  As setup does for STACK: exit 19, the locale named, a fix."""
    stack = tmp_path / "st\u00e4ck"
    stack.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_")} | {
        "LC_ALL": "POSIX", "LANG": "C", "PYTHONUTF8": "0"}
    run = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack).encode()],
                         cwd=PROJECT_ROOT, capture_output=True, env=env, timeout=120)
    err = run.stderr.decode(errors="replace")
    assert run.returncode == 19 and "Traceback" not in err and "LC_ALL=C.UTF-8" in err, err


@pytest.mark.parametrize("stack", ["./st", "ABS"])
def test_a_removed_current_directory_is_named_before_anything_runs(tmp_path: Path, stack: str) -> None:
    """The odd-environment hunt: in a directory removed under the shell, a relative STACK failed with "cannot use
    a path ... No such file or directory" (no path, no cause) and an absolute one ran preflight to install before
    uv failed in the lock step.  Exit 19 at once, the cause named, nothing made."""
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    gone = tmp_path / "gone"
    gone.mkdir()
    target = "./st" if stack == "./st" else str(tmp_path / "st")
    run = subprocess.run(["bash", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone),
                          sys.executable, "-m", "october.installer.october_setup", target, "--recipe", str(world.recipe),
                          "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(PROJECT_ROOT)))
    assert run.returncode == 19 and "the current directory no longer exists" in run.stderr, run.stderr
    assert not (tmp_path / "st").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_in_a_command_outside_its_guard_is_the_interrupt_message_and_130(tmp_path: Path, as_json: bool) -> None:
    """The review: typer turns a KeyboardInterrupt raised in a command body outside ``guarded`` into a silent
    ``Exit(130)``, and one raised in exec'd string code then ended ``python -m`` by SIGINT (-2).  Every command
    (``cli_common.Command``) now answers it as the guard does: the message, the ``--json`` document, 130."""
    (tmp_path / "ctrlc_app.py").write_text(
        "import sys\n"
        "from october.installer.cli.common import command, json_option, new_app, run_app\n"
        "app = new_app('t')\n"
        "@command(app)\n"
        "def go(as_json: bool = json_option('x')) -> None:\n"
        "    exec('raise KeyboardInterrupt')\n"
        "sys.exit(run_app(app, 't', sys.argv[1:]))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(PROJECT_ROOT)]))
    run = subprocess.run([sys.executable, "-m", "ctrlc_app", *(["--json"] if as_json else [])], cwd=PROJECT_ROOT,
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 130, run
    assert "error: interrupted: stopped by the user; re-run the same command to resume" in run.stderr, run.stderr
    if as_json:
        doc = json.loads(run.stdout)
        assert doc["exit_code"] == 130 and doc["ok"] is False


def test_a_bug_is_an_internal_error_with_its_traceback_and_json_not_a_bare_crash(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario hunt: a TypeError in a message's own formatting ended the run in a bare traceback, exit 1,
    and ``--json`` printed nothing.  Any exception no check made an error of its own is now exit 70 ("internal
    error"), its traceback on stderr with secrets masked, and the --json error document on stdout."""
    from october.installer.core.cliargs import CommandExit, run_guarded
    from october.installer.core.ui import ConsoleReporter

    monkeypatch.setenv("HF_TOKEN", "hf_supersecretvalue123456")

    def buggy() -> None:
        raise TypeError("argument of type 'NoneType' is not iterable (token hf_supersecretvalue123456)")

    with pytest.raises(CommandExit) as ended:
        run_guarded(buggy, ConsoleReporter(), json_command="october_setup")
    assert ended.value.code == 70
    out, err = capsys.readouterr()
    assert "Traceback" in err and "TypeError" in err and "internal error" in err and "please report it" in err
    assert "hf_supersecretvalue123456" not in out + err
    doc = json.loads(out)
    assert doc["exit_code"] == 70 and doc["ok"] is False and doc["error"]["title"] == "internal error"
