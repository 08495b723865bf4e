"""october.installer.smoke (launch, manifest, stackinfo): planning (pure), stack facts, errors, and one real subprocess run."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from october.installer.core.errors import FileSystemError, ReceiptError, SmokeError, StateError, UsageError
from october.installer.pyenv import stackenv
from october.installer.smoke.launch import (
    REPO_ROOT,
    SmokeOptions,
    load_receipt,
    plan_smoke,
    run_smoke,
    stack_python,
)
from october.installer.smoke.manifest import resolve_manifest
from october.installer.smoke.stackinfo import stack_info

FI = {"name": "flashinfer", "commit": "2b532f7b9236d89e45d571bc3bbf63d1e40d1f7d"}
VLLM = {"name": "vllm", "commit": "758786e23230a4a1a9b2b6046fb516943751b3ae"}


RECIPE = REPO_ROOT / "recipes" / "20260702.toml"
RECIPE_SHA = hashlib.sha256(RECIPE.read_bytes()).hexdigest()


def _stack(tmp: Path, forks: list[dict[str, str]] | None = None, jit: list[dict[str, str]] | None = None) -> Path:
    stack = tmp / "stack"
    stack.mkdir()
    # STACK/env is the tool env itself, so STACK/env/bin/python is its python *with* its venv
    # (a lone symlink to sys.executable would start the base interpreter without torch).
    (stack / "env").symlink_to(sys.prefix)
    (stack / "pylock.toml").write_text('lock-version = "1.0"\n')
    (stack / "receipts").mkdir()
    (stack / "receipts" / "setup.json").write_text(json.dumps({
        "recipe": {"name": "current", "sha256": RECIPE_SHA, "path": str(RECIPE)},
        "forks": [FI, VLLM] if forks is None else forks, "jit": jit or []}))
    stackenv.write(stack, stackenv.runtime_env(stack, "9.0", None))
    return stack


def test_plan_is_pure_and_complete(tmp_path: Path) -> None:
    opts = SmokeOptions(install=tmp_path / "nowhere", format="awq", output=tmp_path / "o",
                        level="engine", fixtures=tmp_path / "fx", seed=3)
    plan = plan_smoke(opts, Path("/s/env/bin/python"), Path("/m/awq-download.json"),
                      Path("/o/stack-info.json"), {"PYTHONPATH": "/x"})
    assert plan.argv == ("/s/env/bin/python", "-m", "october.checks.smoke", "--format", "awq",
                         "--output", str(tmp_path / "o"), "--stack-info", "/o/stack-info.json",
                         "--device", "auto", "--seed", "3", "--level", "engine",
                         "--manifest", "/m/awq-download.json", "--fixtures", str(tmp_path / "fx"))
    assert plan.env["PYTHONPATH"] == f"{REPO_ROOT}:/x"
    assert (REPO_ROOT / "checks" / "smoke.py").is_file()
    assert plan.receipt == tmp_path / "o" / "receipt.json"
    assert not (tmp_path / "o").exists()               # planning touched nothing


def test_plan_leaves_out_what_was_not_given(tmp_path: Path) -> None:
    plan = plan_smoke(SmokeOptions(install=tmp_path, format="fp16", output=tmp_path), Path("py"),
                      None, Path("i.json"), {})
    assert "--level" not in plan.argv and "--manifest" not in plan.argv
    assert "--fixtures" not in plan.argv and plan.env["PYTHONPATH"] == str(REPO_ROOT)


@pytest.mark.parametrize(("field", "value"), [("format", "gguf"), ("level", "turbo")])
def test_plan_rejects_unknown_choices(tmp_path: Path, field: str, value: str) -> None:
    opts = SmokeOptions(install=tmp_path, format="awq", output=tmp_path)
    opts = SmokeOptions(**{**opts.__dict__, field: value})
    with pytest.raises(UsageError, match="Expected") as err:
        plan_smoke(opts, Path("py"), None, Path("i.json"), {})
    assert err.value.exit_code == 2


def test_missing_stack_python_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(SmokeError) as info:
        stack_python(tmp_path / "stack")
    text = str(info.value)
    assert "env/bin/python" in text and "found nothing" in text and "october_setup" in text
    assert info.value.exit_code == 17
    # a run began there and recorded its command (it stopped before the env step): that command finishes it
    _began(tmp_path / "stack")
    with pytest.raises(SmokeError) as info:
        stack_python(tmp_path / "stack")
    assert f"run `october_setup {tmp_path / 'stack'} --recipe 20260702 --cache-dir /c --kit /k` to finish it" in \
        str(info.value)


def _began(stack: Path) -> None:
    """``.state/recipe-used.json`` as a run of ``october_setup STACK --recipe 20260702 --cache-dir /c --kit /k`` writes it
    as it begins (pipeline/plan.py record_recipe)."""
    (stack / ".state").mkdir(parents=True, exist_ok=True)
    (stack / ".state" / "recipe-used.json").write_text(json.dumps(
        {"name": "20260702", "path": str(RECIPE), "sha256": RECIPE_SHA,
         "options": {"cache_dir": "/c", "kit": "/k", "skip_preflight": []}}))


def test_manifest_default_and_when_it_may_be_missing(tmp_path: Path) -> None:
    opts = SmokeOptions(install=tmp_path, format="awq", output=tmp_path)
    with pytest.raises(SmokeError, match="current download --format awq"):
        resolve_manifest(opts, tmp_path)
    ref = SmokeOptions(install=tmp_path, format="awq", output=tmp_path, level="reference")
    assert resolve_manifest(ref, tmp_path) is None
    (tmp_path / "awq-download.json").write_text("{}")
    assert resolve_manifest(opts, tmp_path) == tmp_path / "awq-download.json"
    with pytest.raises(SmokeError, match="does not exist"):
        resolve_manifest(SmokeOptions(install=tmp_path, format="awq", output=tmp_path,
                                      manifest=tmp_path / "x.json"), tmp_path)


def test_stack_info_reads_lock_and_setup_receipt(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    info = stack_info(stack, None)
    assert info["lock_sha256"] == hashlib.sha256(b'lock-version = "1.0"\n').hexdigest()
    assert info["recipe"] == {"name": "current", "sha256": RECIPE_SHA}
    assert info["forks"]["vllm"].startswith("758786e2")
    assert info["promised_level"] == "engine" and info["asym_prefill"] is False
    assert info["smoke"] == {"prompt_tokens": 8192, "max_new_tokens": 128}     # the recipe's [smoke]


def _git(repo: Path, *args: str) -> str:
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _repo(path: Path, name: str, text: str) -> str:
    """A git repository at ``path`` whose one commit holds ``name``; -> that commit."""
    path.mkdir()
    _git(path, "init", "-q")
    (path / name).write_text(text)
    _git(path, "add", name)
    _git(path, "commit", "-q", "-m", "pinned")
    return _git(path, "rev-parse", "HEAD")


def test_a_fork_checkout_moved_or_edited_since_setup_is_refused(tmp_path: Path) -> None:
    """Session 34's review: the smoke receipt names the setup receipt's fork commits, while the engine imports the
    editable checkout as it is.  A checkout moved to another commit, or edited, since setup made the receipt name
    commits the stack did not run.  Now refused, naming the checkout; a fork set up ``--allow-dirty`` (the
    receipt says ``dirty``) is held to its commit only."""
    repo = tmp_path / "repo"
    pinned = _repo(repo, "kernel.py", "K = 16\n")
    stack = _stack(tmp_path, forks=[{"name": "flashinfer", "commit": pinned}])
    (stack / "src").mkdir()
    repo = repo.rename(stack / "src" / "flashinfer")
    assert stack_info(stack, None)["forks"] == {"flashinfer": pinned}
    (repo / "kernel.py").write_text("K = 8\n")
    with pytest.raises(SmokeError, match="local changes the setup receipt does not say") as info:
        stack_info(stack, None)
    assert "kernel.py" in str(info.value) and "current verify" in str(info.value)
    receipt = stack / "receipts" / "setup.json"
    receipt.write_text(json.dumps({**json.loads(receipt.read_text()),
                                   "forks": [{"name": "flashinfer", "commit": pinned, "dirty": True}]}))
    assert stack_info(stack, None)["forks"] == {"flashinfer": pinned}
    receipt.write_text(json.dumps({**json.loads(receipt.read_text()), "forks": [{"name": "flashinfer", "commit": pinned}]}))
    (repo / ".git" / "index").write_bytes(b"not an index")
    with pytest.raises(SmokeError, match="checkout cannot be looked at") as info:
        stack_info(stack, None)
    assert "git: " in str(info.value)
    (repo / ".git" / "index").unlink()
    _git(repo, "reset", "-q")                       # the index read again from HEAD
    receipt.write_text(json.dumps({**json.loads(receipt.read_text()),
                                   "forks": [{"name": "flashinfer", "commit": pinned, "dirty": True}]}))
    _git(repo, "commit", "-q", "-am", "moved")
    with pytest.raises(SmokeError, match="not at the commit the setup receipt names") as info:
        stack_info(stack, None)
    assert pinned in str(info.value) and _git(repo, "rev-parse", "HEAD") in str(info.value)


def test_a_hidden_edit_in_a_submodule_is_refused_when_the_receipt_selects_every_submodule(tmp_path: Path) -> None:
    """Session 35's review: a receipt leaves ``submodules_selected`` out when every submodule is selected (verify
    reads it so); the smoke read it as none, and a skip-worktree edit inside a submodule passed."""
    sub, repo = tmp_path / "sub", tmp_path / "repo"
    sub_head = _repo(sub, "g.py", "G = 1\n")
    _repo(repo, "README", "fork\n")
    _git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "third_party/sub")
    _git(repo, "commit", "-q", "-m", "pinned")
    pinned = _git(repo, "rev-parse", "HEAD")
    stack = _stack(tmp_path, forks=[{"name": "flashinfer", "commit": pinned,
                                     "submodules": {"third_party/sub": sub_head}}])
    (stack / "src").mkdir()
    repo = repo.rename(stack / "src" / "flashinfer")
    assert stack_info(stack, None)["forks"] == {"flashinfer": pinned}
    _git(repo / "third_party" / "sub", "update-index", "--skip-worktree", "g.py")
    (repo / "third_party" / "sub" / "g.py").write_text("G = 666\n")
    with pytest.raises(SmokeError, match="local changes the setup receipt does not say") as info:
        stack_info(stack, None)
    assert "g.py" in str(info.value) and "skip-worktree" in str(info.value)


def test_the_promise_comes_from_the_setup_receipt_forks(tmp_path: Path) -> None:
    from october.installer.recipe.forks import promise_of

    def promised_level(forks: dict[str, str]) -> str | None:        # fork names alone
        return promise_of([{"name": n} for n in forks])

    assert promised_level({"vllm": "a", "flashinfer": "b"}) == "engine"
    assert promised_level({"flashinfer": "b"}) == "kernel" and promised_level({}) is None
    asym = "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_k_bf16_dtype_v_e4m3_x"
    info = stack_info(_stack(tmp_path, [FI], [{"uri": asym, "sha256": "0" * 64}]), None)
    assert info["promised_level"] == "kernel" and info["asym_prefill"] is True
    assert info["jit"] == [{"uri": asym, "sha256": "0" * 64}]


@pytest.mark.parametrize(("mode", "promises"), [("flashinfer", "kernel"), ("vllm-precompiled", "engine")])
def test_the_promise_comes_from_fork_modes_whatever_the_forks_are_called(tmp_path: Path, mode: str,
                                                                         promises: str) -> None:
    """Fork names are free-form (a recipe may call its FlashInfer fork anything): the installed forks' modes
    (setup.json's install.forks) give the promise.  Planted: a fork named ``fi-asym``, which the name rule
    alone refuses."""
    stack = _stack(tmp_path, [{**FI, "name": "fi-asym"}])
    receipt = stack / "receipts" / "setup.json"
    with pytest.raises(SmokeError, match="promises nothing"):
        stack_info(stack, None)                                   # names only: nothing to go by
    data = json.loads(receipt.read_text())
    receipt.write_text(json.dumps({**data, "install": {"forks": [{"name": "fi-asym", "mode": mode}]}}))
    assert stack_info(stack, None)["promised_level"] == promises
    receipt.write_text(json.dumps({**data, "install": {"forks": [{"name": "fi-asym", "mode": mode}]},
                                   "promises": promises}))
    assert stack_info(stack, None)["promised_level"] == promises


def _mark(stack: Path) -> None:
    """The receipt step's marker, as october_setup leaves it (the sha256 of the setup.json it wrote)."""
    from october.installer.core.atomic import write_json_atomic
    from october.installer.engine import MARKER_FORMAT

    receipt = stack / "receipts" / "setup.json"
    write_json_atomic(stack / ".state" / "receipt.json", {
        "format_version": MARKER_FORMAT, "step": "receipt",
        "outputs": {"path": str(receipt), "sha256": hashlib.sha256(receipt.read_bytes()).hexdigest()}})


@pytest.mark.parametrize("edit", ["promise-kernel", "promise-reference", "consistent"])
def test_a_receipt_edited_since_setup_is_refused(tmp_path: Path, edit: str) -> None:
    """The review's false pass: setup.json of a vLLM stack edited to promise ``kernel`` made the smoke run
    (and pass) the kernel level only; an edit that also drops the vLLM fork from the receipt's forks is
    consistent in itself.  The receipt must be the one the receipt step wrote (its marker's sha256)."""
    stack = _stack(tmp_path)                                      # forks flashinfer and vllm
    receipt = stack / "receipts" / "setup.json"
    data = json.loads(receipt.read_text())
    receipt.write_text(json.dumps({**data, "promises": "engine"}))
    _mark(stack)
    assert stack_info(stack, None)["promised_level"] == "engine"
    if edit == "consistent":
        data = {**data, "forks": [FI], "promises": "kernel"}
    else:
        data = {**data, "promises": edit.split("-")[1]}
    receipt.write_text(json.dumps(data))
    with pytest.raises(SmokeError) as err:
        stack_info(stack, None)
    assert "changed since october_setup wrote it" in str(err.value) and "current verify" in str(err.value)
    assert err.value.exit_code == 17


def test_an_unmarked_receipt_never_promises_less_than_its_forks(tmp_path: Path) -> None:
    """Without a marker (a receipt from before it, or a copied stack) the promise is the highest of the
    receipt's own word and its forks': a lower ``promises`` cannot lower it, a higher one is kept."""
    stack = _stack(tmp_path)
    receipt = stack / "receipts" / "setup.json"
    data = json.loads(receipt.read_text())
    receipt.write_text(json.dumps({**data, "promises": "kernel"}))
    assert stack_info(stack, None)["promised_level"] == "engine"
    receipt.write_text(json.dumps({**data, "forks": [FI], "promises": "engine"}))
    assert stack_info(stack, None)["promised_level"] == "engine"


def test_an_unmarked_receipt_edited_to_drop_a_fork_keeps_the_env_s_promise(tmp_path: Path) -> None:
    """With no marker to compare setup.json with, an edit that drops the vLLM fork from it would lower an
    engine stack's promise to the kernel level; the env's installed distributions say engine still."""
    stack = _stack(tmp_path, forks=[FI])
    (stack / "env").unlink()
    site = stack / "env" / "lib" / "python3.12" / "site-packages"
    (site / "flashinfer_python-0.6.15.dist-info").mkdir(parents=True)
    assert stack_info(stack, None)["promised_level"] == "kernel"
    (site / "vllm-0.1.dev1+g758786e.dist-info").mkdir()
    assert stack_info(stack, None)["promised_level"] == "engine"


def test_one_rule_for_the_promise_the_highest_any_fork_gives() -> None:
    """:func:`promise_of` reads mode, name and installed distribution; no one of them lowers it, and the
    setup receipt writes what it gives (an editable vLLM fork under another name is still the engine)."""
    from october.installer.recipe.forks import promise_of
    from october.installer.steps.receipt import promised_level as setup_promise
    from october.installer.steps.results import InstalledFork, InstallResult

    assert promise_of([{"name": "fi", "mode": "flashinfer"}, {"name": "v", "mode": "editable", "dist": "vllm"}]) == "engine"
    assert promise_of([{"name": "x", "mode": "editable", "dist": "flashinfer-python"}]) == "kernel"
    assert promise_of([{"name": "x", "mode": "editable", "dist": "FlashInfer_Python"}]) == "kernel"
    assert promise_of([{"name": "x", "mode": "editable", "dist": "numpy"}]) is None and promise_of([]) is None

    class Ctx:       # the two things promised_level reads of a StepContext
        recipe = type("Recipe", (), {"forks": [type("Fork", (), {"name": "myvllm", "mode": "editable"})()]})()

        @staticmethod
        def result(kind):
            assert kind is InstallResult
            return type("R", (), {"forks": (InstalledFork(name="myvllm", path="p", commit="c" * 40,
                                                          mode="editable", dist="vllm"),)})()

    assert setup_promise(Ctx()) == "engine"


def test_a_stack_that_promises_nothing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SmokeError, match="promises nothing") as err:
        stack_info(_stack(tmp_path, []), None)
    assert err.value.exit_code == 17
    (tmp_path / "stack" / "receipts" / "setup.json").unlink()
    with pytest.raises(SmokeError, match="no setup receipt"):
        stack_info(tmp_path / "stack", None)
    _began(tmp_path / "stack")                # the run that stopped before its receipt: its own command finishes it
    with pytest.raises(SmokeError, match="no setup receipt") as err:
        stack_info(tmp_path / "stack", None)
    assert f"run `october_setup {tmp_path / 'stack'} --recipe 20260702 --cache-dir /c --kit /k` to finish it" in \
        str(err.value)


def test_plan_takes_the_stack_runtime_env(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    runtime = stackenv.load(stack)
    opts = SmokeOptions(install=stack, format="awq", output=tmp_path / "o")
    plan = plan_smoke(opts, Path("py"), None, Path("i.json"),
                      {"PYTHONPATH": "/elsewhere", "FLASHINFER_WORKSPACE_BASE": "/home/u", "HOME": "/home/u"}, runtime)
    assert plan.env["FLASHINFER_WORKSPACE_BASE"] == str(stack / "jit")
    assert plan.env["FLASHINFER_DISABLE_VERSION_CHECK"] == "1" and plan.env["FLASHINFER_CUDA_ARCH_LIST"] == "9.0"
    assert plan.env["PYTHONPATH"] == str(REPO_ROOT) and "HOME" not in plan.env
    assert "--level" not in plan.argv                    # the promise decides, in october.checks.smoke


def test_a_stack_without_its_runtime_env_is_refused(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    stackenv.env_file(stack).unlink()
    with pytest.raises(StateError, match="runtime environment") as err:
        run_smoke(SmokeOptions(install=stack, format="awq", output=tmp_path / "o", level="reference"),
                  cwd=tmp_path, echo=lambda _: None)
    # the stack's own command (its receipt's recipe: this receipt's name is not its file's, so by path), not "NAME"
    assert f"re-run `october_setup {stack} --recipe {RECIPE}`: its env step writes stack-env.json" in str(err.value)


def _recorded_stack_env(stack: Path) -> dict:
    """The env step's marker with its record of stack-env.json and activate, as october_setup leaves it."""
    from october.installer.engine import MARKER_FORMAT

    env = stackenv.runtime_env(stack, "9.0", None)
    path = stackenv.write(stack, env)
    rec = {"path": str(path), "activate": str(stack / "activate"), "sha256": _sha(path),
           "activate_sha256": _sha(stack / "activate"), "env": env}
    (stack / ".state").mkdir(exist_ok=True)
    (stack / ".state" / "env.json").write_text(json.dumps(
        {"format_version": MARKER_FORMAT, "step": "env", "outputs": {"stack_env": rec}}))
    return rec


def _edit_workspace(stack: Path, to: str) -> None:
    doc = json.loads(stackenv.env_file(stack).read_text())
    doc["env"]["FLASHINFER_WORKSPACE_BASE"] = to
    stackenv.env_file(stack).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def test_a_changed_stack_env_file_is_refused_before_the_stack_runs(tmp_path: Path) -> None:
    """The audit's false pass: the smoke ran with a FLASHINFER_WORKSPACE_BASE edited into stack-env.json (its
    receipt said modules_before 0 where the stack's own workspace had 2).  It is refused (exit 17, expected /
    found / fix) before the stack's Python starts: no smoke.log, no receipt.  Untouched, the smoke runs."""
    stack = _stack(tmp_path)
    rec = _recorded_stack_env(stack)
    untouched = SmokeOptions(install=stack, format="awq", output=tmp_path / "ran", level="reference", device="cpu")
    assert run_smoke(untouched, cwd=tmp_path, echo=lambda _: None) == 1       # CPU: CUDA graphs skipped
    assert load_receipt(tmp_path / "ran" / "receipt.json")["level"] == "reference"
    _edit_workspace(stack, str(tmp_path / "elsewhere"))
    out = tmp_path / "o"
    with pytest.raises(SmokeError) as info:
        run_smoke(SmokeOptions(install=stack, format="awq", output=out, level="reference", device="cpu"),
                  cwd=tmp_path, echo=lambda _: None)
    err = info.value
    assert err.exit_code == 17 and "runtime environment was changed since october_setup wrote it" in str(err)
    assert err.expected == f"{stack / 'stack-env.json'} with sha256 {rec['sha256']} (as the env step wrote it)"
    assert err.found == f"sha256 {_sha(stackenv.env_file(stack))}: it was changed since"
    assert err.fix == f"run `current verify --install {stack}`; it names the re-run that writes it again"
    # nothing run, no receipt (passed or not): the folder holds only the lock a run into it takes
    assert [p.name for p in out.iterdir()] == [".october-smoke-output.lock"]


def test_a_changed_stack_env_file_exits_17_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from october.installer.cli.main import current_main

    stack = _stack(tmp_path)
    _recorded_stack_env(stack)
    _edit_workspace(stack, str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    code = current_main(["smoke", "--install", str(stack), "--level", "reference", "--output", "o", "--json", "-q"])
    out = json.loads(capsys.readouterr().out)
    message = out["error"]["message"]
    assert code == 17 == out["exit_code"] and out["error"]["title"] == "smoke failed to run"
    assert "Expected" in message and "stack-env.json" in message and "current verify" in message
    assert not (tmp_path / "o" / "receipt.json").exists()


def test_without_the_env_marker_the_setup_receipt_s_record_is_compared(tmp_path: Path) -> None:
    """An older or copied stack without .state/env.json: the setup receipt's stack_env sha256 (setup.json is
    itself refused when it differs from its own marker).  Neither record: nothing to compare with."""
    from october.installer.smoke.launch import trusted_runtime_env

    stack = _stack(tmp_path)
    _recorded_stack_env(stack)
    assert trusted_runtime_env(stack) == stackenv.load(stack)            # untouched: its environment
    (stack / ".state" / "env.json").unlink()
    receipt = stack / "receipts" / "setup.json"
    _edit_workspace(stack, str(tmp_path / "elsewhere"))
    assert trusted_runtime_env(stack)["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / "elsewhere")
    stackenv.write(stack, stackenv.runtime_env(stack, "9.0", None))
    receipt.write_text(json.dumps({**json.loads(receipt.read_text()),
                                   "stack_env": {"sha256": _sha(stackenv.env_file(stack))}}))
    _edit_workspace(stack, str(tmp_path / "elsewhere"))
    with pytest.raises(SmokeError, match="runtime environment was changed"):
        trusted_runtime_env(stack)


def test_a_missing_stack_env_file_with_a_record_is_still_load_s_state_error(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    _recorded_stack_env(stack)
    stackenv.env_file(stack).unlink()
    with pytest.raises(StateError, match="no runtime environment file"):
        run_smoke(SmokeOptions(install=stack, format="awq", output=tmp_path / "o", level="reference"),
                  cwd=tmp_path, echo=lambda _: None)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_real_subprocess_in_a_fake_stack(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    out = tmp_path / "smoke-out"
    lines: list[str] = []
    opts = SmokeOptions(install=stack, format="awq", output=out, level="reference", device="cpu")
    rc = run_smoke(opts, cwd=tmp_path, echo=lines.append)
    assert rc == 1                                       # CPU: CUDA graphs skipped
    receipt = load_receipt(out / "receipt.json")
    assert receipt["stack"]["recipe"]["name"] == "current"
    assert receipt["stack"]["forks"]["flashinfer"].startswith("2b532f7b")
    assert receipt["promised_level"] == "engine" and receipt["proves"] == "nothing"     # graphs skipped
    assert any("proves the harness only" in r for r in receipt["reasons"])
    assert "changing decode graphs" in "\n".join(lines) and "passed: false" in "\n".join(lines)
    assert (out / "smoke.log").read_text().count("october.checks.smoke") >= 1


def _smoke_with_stack_python(tmp_path: Path, script: str) -> SmokeError:
    """Smoke a stack whose env Python is ``script`` (a shell script standing in for a broken interpreter);
    -> the SmokeError it must raise."""
    stack = _stack(tmp_path)
    (stack / "env").unlink()                  # the link to the tool env, not the env itself
    (stack / "env" / "bin").mkdir(parents=True)
    fake = stack / "env" / "bin" / "python"
    fake.write_text(script)
    fake.chmod(0o755)
    opts = SmokeOptions(install=stack, format="awq", output=tmp_path / "o", level="reference")
    with pytest.raises(SmokeError) as info:
        run_smoke(opts, cwd=tmp_path, echo=lambda _: None)
    return info.value


def test_a_crashing_stack_python_is_a_smoke_error(tmp_path: Path) -> None:
    err = _smoke_with_stack_python(tmp_path, "#!/bin/sh\necho 'Fatal Python error: boom' >&2\nexit 2\n")
    assert "exit code 2" in str(err) and "smoke.log" in str(err)


def test_a_bad_manifest_is_refused_before_the_stack_runs(tmp_path: Path) -> None:
    """Not JSON, not schema-valid, or for the other format: each says how to write a good one,
    and the stack's Python is never started (no smoke.log)."""
    stack = _stack(tmp_path)
    (tmp_path / "bad.json").write_text("not json")
    (tmp_path / "odd.json").write_text('{"format_version": 1}')
    for name in ("bad.json", "odd.json"):
        opts = SmokeOptions(install=stack, format="awq", output=tmp_path / name.replace(".", "-"),
                            level="reference", manifest=tmp_path / name)
        with pytest.raises(ReceiptError) as info:
            run_smoke(opts, cwd=tmp_path, echo=lambda _: None)
        assert "not one `current download` wrote" in str(info.value)
        assert f"current download --format awq --recipe {RECIPE} --output" in str(info.value)
        assert not (tmp_path / name.replace(".", "-") / "smoke.log").exists()


def test_a_python_without_torch_is_a_smoke_error(tmp_path: Path) -> None:
    err = _smoke_with_stack_python(tmp_path, "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    assert "No module named" in str(err) and "smoke.log" in str(err)


def test_receipt_that_breaks_the_schema_is_refused(tmp_path: Path) -> None:
    from october.installer.core.errors import ReceiptError
    (tmp_path / "receipt.json").write_text(json.dumps({"kind": "october-smoke-receipt", "passed": True}))
    with pytest.raises(ReceiptError, match="does not match"):
        load_receipt(tmp_path / "receipt.json")


def test_fixtures_pointing_nowhere_is_refused_at_every_level(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = _stack(tmp_path)
    opts = SmokeOptions(install=stack, format="awq", output=tmp_path / "o", level="reference",
                        fixtures=tmp_path / "no-such-dir")
    with pytest.raises(FileSystemError) as info:
        run_smoke(opts, cwd=tmp_path, echo=lambda _: None)
    assert "--fixtures" in str(info.value) and "nothing there" in str(info.value)
    opts = SmokeOptions(install=stack, format="awq", output=tmp_path / "o", level="reference")
    with pytest.raises(FileSystemError) as info:
        run_smoke(opts, cwd=tmp_path, echo=lambda _: None, base_env={"KNLP_KV_FIXTURES": str(tmp_path / "gone")})
    assert "$KNLP_KV_FIXTURES" in str(info.value)
    assert not (tmp_path / "o" / "smoke.log").exists()


def test_a_relative_knlp_kv_fixtures_reaches_the_checks_as_the_directory_the_user_meant(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 18's audit (a false fail): the checks run in the code root, so a relative $KNLP_KV_FIXTURES,
    checked here against the user's directory, named another one there.  The stack's Python (a script
    that records its arguments) is given the absolute directory."""
    stack = _stack(tmp_path)
    (stack / "env").unlink()
    (stack / "env" / "bin").mkdir(parents=True)
    argv = tmp_path / "argv"
    fake = stack / "env" / "bin" / "python"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\nexit 2\n')
    fake.chmod(0o755)
    (tmp_path / "scales").mkdir()
    monkeypatch.chdir(tmp_path)
    opts = SmokeOptions(install=stack, format="awq", output=tmp_path / "o", level="reference")
    with pytest.raises(SmokeError):
        run_smoke(opts, cwd=tmp_path, echo=lambda _: None, base_env={**os.environ, "KNLP_KV_FIXTURES": "scales"})
    args = argv.read_text().splitlines()
    assert args[args.index("--fixtures") + 1] == str(tmp_path / "scales")


def test_a_recipe_changed_since_setup_is_refused_before_anything_is_read_from_it(tmp_path: Path) -> None:
    """The review's finding: the smoke read the [smoke] token counts, dtypes and JIT list again from the
    recipe file while the receipt kept the setup-time sha256.  Planted: the recipe file edited after setup
    (a copy of it, pointed at by the receipt)."""
    stack = _stack(tmp_path)
    recipe = tmp_path / "r.toml"
    recipe.write_bytes(RECIPE.read_bytes())
    receipt = stack / "receipts" / "setup.json"
    data = json.loads(receipt.read_text())
    receipt.write_text(json.dumps({**data, "recipe": {**data["recipe"], "path": str(recipe)}}))
    assert stack_info(stack, None)["smoke"] == {"prompt_tokens": 8192, "max_new_tokens": 128}
    recipe.write_text(recipe.read_text().replace("prompt_tokens = 8192", "prompt_tokens = 16"))
    with pytest.raises(SmokeError) as err:
        stack_info(stack, None)
    assert "changed since the stack was set up" in str(err.value) and RECIPE_SHA in str(err.value)
    # the scenario hunt: the last run's receipt (passed) stayed in --output when the run was refused so
    old = tmp_path / "o" / "receipt.json"
    old.parent.mkdir()
    old.write_text('{"passed": true}')
    with pytest.raises(SmokeError) as err:
        run_smoke(SmokeOptions(install=stack, format="awq", output=tmp_path / "o", level="reference"), cwd=tmp_path,
                  echo=lambda _: None, base_env=dict(os.environ))
    assert "changed since the stack was set up" in str(err.value) and not old.exists()
    # the recorded file gone: the smoke would read the shipped recipe of that name, which must match too
    recipe.unlink()
    with pytest.raises(SmokeError) as err:
        stack_info(stack, None)
    assert "recipes/current.toml changed since" in str(err.value)


def test_a_manifest_of_another_model_than_the_recipe_pins_is_refused(tmp_path: Path) -> None:
    """The review's finding: only the format was compared, so another model with the same attention shape
    could be smoked under the recipe's name.  The recipe's selection for the format names repo and revision."""
    from october.installer.smoke.manifest import check_model
    from october.installer.smoke.selection import selection_info

    stack = _stack(tmp_path)
    sel = selection_info(stack, "current", "awq")
    assert sel is not None and sel["repo"] and len(sel["revision"]) == 40
    manifest = tmp_path / "awq-download.json"
    manifest.write_text(json.dumps({"selection": "awq", "repo": sel["repo"], "revision": sel["revision"]}))
    check_model(manifest, sel)
    for planted in ({"repo": "someone/other-model"}, {"revision": "0" * 40}):
        manifest.write_text(json.dumps({"selection": "awq", "repo": sel["repo"], "revision": sel["revision"]} | planted))
        with pytest.raises(UsageError) as err:
            check_model(manifest, sel)
        assert "another model than the recipe pins" in str(err.value) and sel["repo"] in str(err.value)


def _reporter() -> tuple[object, object]:
    import io

    from rich.console import Console

    from october.installer.core.ui import ConsoleReporter

    out = io.StringIO()
    return ConsoleReporter(console=Console(file=out, width=300)), out


def test_a_smoke_that_fails_is_never_reported_ok_and_a_crash_shows_no_traceback(tmp_path: Path) -> None:
    """Session 18's audit: the smoke's step line said "ok" before a table of failed checks, and a harness that
    crashed put its whole traceback into the error.  Now the line says how it ended (passed, NOT passed,
    did not finish), and the error shows the crash's last line and where the log is."""
    stack = _stack(tmp_path)
    ui, out = _reporter()
    opts = SmokeOptions(install=stack, format="awq", output=tmp_path / "o1", level="reference", device="cpu")
    assert run_smoke(opts, cwd=tmp_path, echo=lambda _: None, ui=ui) == 1
    said = out.getvalue()
    assert "smoke: NOT passed in" in said and "ok in" not in said, said

    (stack / "env").unlink()
    (stack / "env" / "bin").mkdir(parents=True)
    fake = stack / "env" / "bin" / "python"
    fake.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho '  File \"x.py\", line 1' >&2\n"
                    "echo \"AttributeError: module 'torch' has no attribute 'float8_e4m3fn'\" >&2\nexit 3\n")
    fake.chmod(0o755)
    ui, out = _reporter()
    opts = SmokeOptions(install=stack, format="awq", output=tmp_path / "o2", level="reference")
    with pytest.raises(SmokeError) as info:
        run_smoke(opts, cwd=tmp_path, echo=lambda _: None, ui=ui)
    text = str(info.value)
    assert "Traceback" not in text and "File \"x.py\"" not in text, text
    assert "exit code 3: AttributeError: module 'torch' has no attribute 'float8_e4m3fn'" in text
    assert "smoke.log" in text and "did not finish (exit 3)" in out.getvalue() and "ok in" not in out.getvalue()
