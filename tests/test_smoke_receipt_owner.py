"""A smoke receipt on disk speaks for the run that left it, or is not there (a scenario hunt of `current
smoke`): two runs into one --output are one too many (exit 5); a run refused before its checks leaves no
earlier receipt; a receipt the command does not stand behind (the stack Python crashed after writing it, its
exit code and receipt disagree, it names another stack or level) is moved to receipt.rejected.json; a
--recipe other than the stack's is no stack verdict.  Real runs of ``python -m october.checks.smoke`` (level
reference, CPU) in fake stacks whose env is the test env, or a shell script standing in for the stack's
Python that runs it and then misbehaves as a crash would."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from october.installer.core.errors import ReceiptError, SmokeBusyError, SmokeError, UsageError
from october.installer.smoke.launch import SmokeOptions, load_receipt, run_smoke, this_run
from october.installer.smoke.mutex import output_lock
from tests.fixtures.root import PROJECT_ROOT
from tests.test_smoke_installer import _stack

PASSED = PROJECT_ROOT / "receipts" / "examples" / "kernel-smoke-flashinfer-2f3f0f6d-h200.json"


def _opts(stack: Path, out: Path, **kw: object) -> SmokeOptions:
    return SmokeOptions(install=stack, format="awq", output=out, level="reference", device="cpu", **kw)  # type: ignore[arg-type]


def _python_then(stack: Path, before: str, after: str) -> None:
    """The stack's Python: a shell script running ``before`` (python code, argv = the smoke's), the real smoke
    in the test env, then ``after`` (shell)."""
    (stack / "env").unlink()
    (stack / "env" / "bin").mkdir(parents=True)
    fake = stack / "env" / "bin" / "python"
    fake.write_text(f"#!/bin/sh\n{sys.executable} -c '{before}' \"$@\" || exit 3\n{sys.executable} \"$@\"\n{after}\n")
    fake.chmod(0o755)


def test_a_second_run_into_the_same_output_directory_is_refused(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(PASSED, out / "receipt.json")
    with output_lock(out):
        with pytest.raises(SmokeBusyError) as busy:
            run_smoke(_opts(stack, out), cwd=tmp_path, echo=lambda _: None)
    assert busy.value.exit_code == 5 and f"the output directory {out}" in str(busy.value)
    assert (out / "receipt.json").is_file()        # the holder's, not this refused run's to remove
    assert run_smoke(_opts(stack, out), cwd=tmp_path, echo=lambda _: None) == 1     # free again (CPU: not passed)


def test_a_run_refused_before_its_checks_leaves_no_earlier_passed_receipt(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(PASSED, out / "receipt.json")
    shutil.copy(PASSED, out / "receipt.rejected.json")
    (stack / "env").unlink()                       # no stack Python: exit 17
    with pytest.raises(SmokeError) as err:
        run_smoke(_opts(stack, out), cwd=tmp_path, echo=lambda _: None)
    assert err.value.exit_code == 17 and not (out / "receipt.json").exists()
    assert not (out / "receipt.rejected.json").exists()          # an earlier run's is not left to be read as this one's
    shutil.copy(PASSED, out / "receipt.json")     # a usage error: --diagnostic-cache on the reference level
    with pytest.raises(UsageError):
        run_smoke(_opts(stack, out, diagnostic_cache="bf16"), cwd=tmp_path, echo=lambda _: None)
    assert not (out / "receipt.json").exists()


def test_a_refused_run_with_no_earlier_receipt_writes_nothing(tmp_path: Path) -> None:
    """Nothing to remove: refused before the output folder or its lock is made (``current smoke --install D
    --output D`` on an empty D left a lock file there, and `october_setup D` then refused D as not empty)."""
    empty = tmp_path / "d"
    empty.mkdir()
    with pytest.raises(SmokeError) as err:
        run_smoke(_opts(empty, empty), cwd=tmp_path, echo=lambda _: None)
    assert err.value.exit_code == 17 and list(empty.iterdir()) == []
    with pytest.raises(UsageError):
        run_smoke(_opts(empty, tmp_path / "o", diagnostic_cache="bf16"), cwd=tmp_path, echo=lambda _: None)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("after, error, match", [
    ("exit 139", SmokeError, "did not run"),                   # a crash at interpreter shutdown, after the write
    ("exit 0", ReceiptError, "exit code and receipt disagree"),   # the receipt says not passed
])
def test_a_receipt_the_command_rejects_is_set_aside(tmp_path: Path, after: str, error: type, match: str) -> None:
    stack = _stack(tmp_path)
    _python_then(stack, "pass", after)
    out = tmp_path / "out"
    with pytest.raises(error, match=match):
        run_smoke(_opts(stack, out), cwd=tmp_path, echo=lambda _: None)
    assert not (out / "receipt.json").exists()
    assert load_receipt(out / "receipt.rejected.json")["level"] == "reference"    # kept to read


def test_a_receipt_that_names_another_stack_is_not_this_run_s(tmp_path: Path) -> None:
    """The stack info swapped under the checks (as another run into the same output did) makes a receipt for
    another lock: refused and set aside."""
    stack = _stack(tmp_path)
    swap = ("import json, sys; a = sys.argv[1:]; p = a[a.index(\"--stack-info\") + 1]; d = json.load(open(p)); "
            "d[\"lock_sha256\"] = \"0\" * 64; json.dump(d, open(p, \"w\"))")
    _python_then(stack, swap, "")
    out = tmp_path / "out"
    with pytest.raises(ReceiptError, match="is not this run's") as err:
        run_smoke(_opts(stack, out), cwd=tmp_path, echo=lambda _: None)
    assert "lock_sha256" in (err.value.found or "")
    assert not (out / "receipt.json").exists() and (out / "receipt.rejected.json").is_file()


def test_this_run_holds_the_receipt_to_the_stack_and_level_asked(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    out = tmp_path / "out"
    run_smoke(_opts(stack, out), cwd=tmp_path, echo=lambda _: None)
    receipt = load_receipt(out / "receipt.json")
    info = json.loads((out / "stack-info.json").read_text())
    this_run(receipt, info, "reference", out / "receipt.json")
    for key, other in (("setup_receipt", "/elsewhere/setup.json"), ("promised_level", "kernel"),
                       ("forks", {"flashinfer": "0" * 40}), ("jit", [{"uri": "x", "sha256": "0" * 64}]),
                       ("recipe", {"name": "other", "sha256": None})):
        with pytest.raises(ReceiptError, match=key):
            this_run(receipt, {**info, key: other}, "reference", out / "receipt.json")
    with pytest.raises(ReceiptError, match="level"):
        this_run(receipt, info, "kernel", out / "receipt.json")


def test_a_recipe_other_than_the_stack_s_is_no_stack_verdict(tmp_path: Path) -> None:
    """--recipe 20260702 on a stack set up from current: the selection and pins checked are another recipe's,
    said in the receipt's reasons; --recipe naming the stack's own recipe file is no override."""
    stack = _stack(tmp_path)
    setup = json.loads((stack / "receipts" / "setup.json").read_text())
    current = PROJECT_ROOT / "recipes" / "current.toml"
    setup["recipe"] = {"name": "current", "sha256": hashlib.sha256(current.read_bytes()).hexdigest(),
                       "path": str(current)}
    (stack / "receipts" / "setup.json").write_text(json.dumps(setup))
    run_smoke(_opts(stack, tmp_path / "a", recipe="20260702"), cwd=tmp_path, echo=lambda _: None)
    reasons = load_receipt(tmp_path / "a" / "receipt.json")["reasons"]
    assert any("--recipe 20260702: the stack was set up from current" in r and "no stack verdict" in r
               for r in reasons), reasons
    run_smoke(_opts(stack, tmp_path / "b", recipe=str(current)), cwd=tmp_path, echo=lambda _: None)
    assert not any("--recipe" in r for r in load_receipt(tmp_path / "b" / "receipt.json")["reasons"])


def test_an_earlier_rejected_receipt_alone_goes_too(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(PASSED, out / "receipt.rejected.json")
    (stack / "env").unlink()
    with pytest.raises(SmokeError):
        run_smoke(_opts(stack, out), cwd=tmp_path, echo=lambda _: None)
    assert sorted(p.name for p in out.iterdir()) == [".october-smoke-output.lock"]
