"""`current verify`'s checks one by one, in-process and fast (bench/mutate.py's `verify` module).

The stack is written by hand in ``tmp_path`` as october_setup leaves one: a PEP 751 lock, the setup
receipt, the fetch and jit markers, ``.dist-info`` directories with real RECORD hashes, a real git
clone of the fork (at a path the lock records, not the default ``src/<fork>``) with a real submodule,
a base wheel file and a JIT library.  Nothing is mocked; no uv or Python env is needed because
verify reads the ``.dist-info`` directories only.  Each test plants one fault and checks that exactly
that difference is reported (tests/test_verify.py does the same on a stack october_setup built).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from october.installer.core.errors import LockError, StateError
from october.installer.core.hashing import sha256_file
from october.installer.core.paths import StackPaths
from october.installer.git.exclude import exclude_build_outputs
from october.installer.pyenv.dists import installed
from october.installer.verify.report import MAX_FILES_LISTED, Difference, format_report
from october.installer.verify.stack import read_stack_records, verify_stack

TORCH = "2.10.0+cu128"
JIT_LIB = "jit/.cache/cached_ops/batch_decode_k16/batch_decode_k16.so"
FORK_PATH = "src/fi-custom"          # recorded in the lock: verify must look here, not at src/flashinfer
KERNELS, KERNELS_BYTES = "flashinfer/_kernels.abi3.so", b"\x7fELF kernels the install copied in"
DATA_LINK = "flashinfer/data/include"
OUTPUTS = {KERNELS: "sha256:" + hashlib.sha256(KERNELS_BYTES).hexdigest(), DATA_LINK: "link:../../include"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid",
                           "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass(frozen=True)
class Stack:
    root: Path
    site: Path
    fork: Path
    sub_commit: str

    @property
    def paths(self) -> StackPaths:
        return StackPaths(self.root)

    def lock_text(self) -> str:
        return (self.root / "pylock.toml").read_text()


def _dist(site: Path, name: str, version: str, files: dict[str, bytes], direct: dict | None = None) -> Path:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = [f"{info.name}/METADATA,,"]
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
        rows.append(f"{rel},sha256={_b64(data)},{len(data)}")
    if direct is not None:
        (info / "direct_url.json").write_text(json.dumps(direct))
        rows.append(f"{info.name}/direct_url.json,,")
    rows.append(f"{info.name}/RECORD,,")                # RECORD owns every file of the distribution
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return info


def _lock(commit: str, wheel_sha: str, jit_sha: str, torch: str = TORCH) -> str:
    return f"""lock-version = "1.0"
created-by = "october"

[[packages]]
name = "torch"
version = "{torch}"
[[packages.wheels]]
name = "torch-2.10.0+cu128-cp312-cp312-linux_x86_64.whl"
url = "https://download.example/torch.whl"
hashes = {{ sha256 = "{'0' * 64}" }}

[[packages]]
name = "six"
version = "1.16.0"
[[packages.wheels]]
name = "six-1.16.0-py2.py3-none-any.whl"
url = "https://download.example/six.whl"
hashes = {{ sha256 = "{'1' * 64}" }}

[[packages]]
name = "gitdep"
version = "0.1"
vcs = {{ type = "git", url = "https://github.com/example/gitdep", commit-id = "{'2' * 40}" }}

[[packages]]
name = "flashinfer-python"
version = "0.5.0"
vcs = {{ type = "git", url = "https://github.com/example/flashinfer", commit-id = "{commit}" }}
[packages.tool.october]
fork = "flashinfer"
path = "{FORK_PATH}"

[tool.october.toolchain]
torch = "{torch}"

[tool.october.wheel]
filename = "vllm-0.18.0-cp38-abi3-manylinux1_x86_64.whl"
sha256 = "{wheel_sha}"

[[tool.october.jit]]
uri = "batch_decode_k16"
sha256 = "{jit_sha}"
"""


def _write_receipt(stack_root: Path, **extra: object) -> None:
    doc = {"lock": {"sha256": sha256_file(stack_root / "pylock.toml")}, "forks": [{"name": "flashinfer"}], **extra}
    (stack_root / "receipts" / "setup.json").write_text(json.dumps(doc))


def _build(tmp: Path) -> tuple[Path, str]:
    root = tmp / "stack"
    sub_src = tmp / "subsrc"
    sub_src.mkdir(parents=True)
    git(sub_src, "init", "-q")
    (sub_src / "s.txt").write_text("sub\n")
    git(sub_src, "add", "-A")
    git(sub_src, "commit", "-qm", "sub")
    fork = root / FORK_PATH
    fork.mkdir(parents=True)
    git(fork, "init", "-q")
    (fork / "pyproject.toml").write_text("[project]\nname = 'flashinfer-python'\n")
    (fork / ".gitignore").write_text("/flashinfer/data/\n")
    git(fork, "submodule", "add", "-q", str(sub_src), "3rdparty/sub")
    git(fork, "add", "-A")
    git(fork, "commit", "-qm", "fork")
    commit = git(fork, "rev-parse", "HEAD")
    exclude_build_outputs(fork)             # as fetch leaves a clone
    (fork / "flashinfer" / "data").mkdir(parents=True)          # what the fork's editable install left
    (fork / KERNELS).write_bytes(KERNELS_BYTES)
    os.symlink("../../include", fork / DATA_LINK)
    sub_commit = git(fork / "3rdparty" / "sub", "rev-parse", "HEAD")

    site = root / "env" / "lib" / "python3.12" / "site-packages"
    _dist(site, "torch", TORCH, {"torch/__init__.py": b"T = 1\n", "torch/lib/libtorch.so": b"\x7fELF" + b"t" * 64})
    _dist(site, "six", "1.16.0", {"six.py": b"# six\n"})
    _dist(site, "gitdep", "0.1", {}, {"url": "https://github.com/example/gitdep", "vcs_info": {"vcs": "git"}})
    _dist(site, "flashinfer-python", "0.5.0", {"__editable__.flashinfer.pth": b"../../../../src/fi-custom\n"}, {})

    wheel = root / "wheels" / "vllm-0.18.0-cp38-abi3-manylinux1_x86_64.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"PK base wheel bytes")
    lib = root / JIT_LIB
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF jit library")
    (root / "pylock.toml").write_text(_lock(commit, sha256_file(wheel), sha256_file(lib)))
    (root / "receipts").mkdir()
    _write_receipt(root)
    (root / ".state").mkdir()
    (root / ".state" / "fetch.json").write_text(json.dumps(
        {"format_version": 2, "outputs": {"forks": {"flashinfer": {"submodules": {"3rdparty/sub": sub_commit}}}}}))
    _write_install_marker(root, {"flashinfer": OUTPUTS})
    return root, sub_commit


def _write_install_marker(root: Path, build_outputs: dict | None) -> None:
    outputs = {} if build_outputs is None else {"build_outputs": build_outputs}
    (root / ".state" / "install.json").write_text(json.dumps({"format_version": 2, "outputs": outputs}))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One stack per module (git is the slow part); each test gets its own copy."""
    return _build(tmp_path_factory.mktemp("verify-template"))


@pytest.fixture
def stack(tmp_path: Path, template: tuple[Path, str]) -> Stack:
    src, sub_commit = template
    root = tmp_path / "stack"
    shutil.copytree(src, root, symlinks=True)
    fork = root / FORK_PATH
    site = root / "env" / "lib" / "python3.12" / "site-packages"
    (site / "flashinfer_python-0.5.0.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": fork.resolve().as_uri(), "dir_info": {"editable": True}}))
    (root / ".state" / "jit.json").write_text(json.dumps(
        {"format_version": 2, "outputs": {"modules": [{"uri": "batch_decode_k16", "path": str(root / JIT_LIB)}]}}))
    return Stack(root, site, fork, sub_commit)


def diffs(stack: Stack) -> list[Difference]:
    return list(verify_stack(stack.root).differences)


def only(stack: Stack) -> Difference:
    found = diffs(stack)
    assert len(found) == 1, [d.line() for d in found]
    return found[0]


# ------------------------------------------------------------------------------------ clean


def test_the_clean_stack_matches_its_lock_and_counts_what_it_checked(stack: Stack) -> None:
    seen: list[tuple[float, float | None]] = []
    said: list[str] = []
    report = verify_stack(stack.root, progress=said.append, hashed=lambda d, t: seen.append((d, t)))
    assert report.differences == () and report.ok
    assert dict(report.checked) == {"forks": 1, "build_outputs": 2, "distributions": 4, "files": 4, "bytecode": 0,
                                    "jit": 1, "wheel": 1}
    assert report.lock_sha256 == sha256_file(stack.root / "pylock.toml")
    total = 6 + 68 + 6 + len(b"../../../../src/fi-custom\n")
    assert seen and seen[-1] == (float(total), float(total))
    assert said == ["lock file", "fork clones", "fork build outputs", "distributions", "files no RECORD owns",
                    "bytecode", "base wheel", "JIT libraries"]
    lines = format_report(report)
    assert lines[0] == ("checked 1 fork(s) (2 build output(s)), 4 distribution(s), 4 file(s), 1 JIT library, "
                        "1 base wheel")
    assert lines[1].startswith(f"stack {stack.root.resolve()} matches its lock (sha256 {report.lock_sha256[:12]})")
    assert report.as_json()["ok"] is True and report.as_json()["differences"] == []


def test_the_report_lists_every_difference_and_what_to_run(stack: Stack) -> None:
    (stack.site / "six.py").write_bytes(b"# changed\n")
    (stack.root / "wheels" / "vllm-0.18.0-cp38-abi3-manylinux1_x86_64.whl").unlink()
    report = verify_stack(stack.root)
    assert not report.ok and len(report.differences) == 2
    assert len(format_report(report)) == 1                      # no "matches its lock" line
    err = report.error()
    assert isinstance(err, LockError) and "differs from its lock in 2 place(s)" in str(err)
    assert "--locked" in err.fix
    body = report.as_json()
    assert body["ok"] is False and [d["check"] for d in body["differences"]] == ["files", "wheel"]
    d = report.differences[0]
    assert d.line() == f"[{d.check}] {d.what}: expected {d.expected}, found {d.found}"
    assert d.fix and d.as_json() == {"check": d.check, "what": d.what, "expected": d.expected, "found": d.found,
                                     "fix": d.fix}
    assert report.differences[1].fix == err.fix.split("2. ")[1].split("\n")[0]      # each fix, in order


# ------------------------------------------------------------------------------- lock, receipt


def test_a_changed_lock_file_is_named(stack: Stack) -> None:
    (stack.root / "pylock.toml").write_text(stack.lock_text() + "# edited\n")
    d = only(stack)
    assert d.check == "lock" and "as the setup receipt recorded" in d.expected


def test_a_setup_receipt_changed_since_its_step_wrote_it_is_named(stack: Stack) -> None:
    """The receipt step's marker records setup.json's sha256; an edit after it (a fork dropped, which would
    lower the smoke's promise) is a difference, never believed.  Without a marker there is nothing to
    compare with (an older stack): no difference."""
    from october.installer.engine import MARKER_FORMAT

    setup = stack.root / "receipts" / "setup.json"
    marker = stack.root / ".state" / "receipt.json"
    marker.write_text(json.dumps({"format_version": MARKER_FORMAT, "step": "receipt",
                                  "outputs": {"path": str(setup), "sha256": sha256_file(setup)}}))
    assert diffs(stack) == []
    written = sha256_file(setup)
    _write_receipt(stack.root, forks=[])
    d = only(stack)
    assert d.check == "receipt" and d.what == str(setup)
    assert d.expected == f"sha256 {written} (as the receipt step wrote it)" and "changed since" in d.found
    marker.unlink()
    assert diffs(stack) == []


def test_a_receipt_without_a_lock_hash_skips_that_check(stack: Stack) -> None:
    (stack.root / "pylock.toml").write_text(stack.lock_text() + "# edited\n")
    (stack.root / "receipts" / "setup.json").write_text(json.dumps({"forks": []}))
    assert diffs(stack) == []


@pytest.mark.parametrize("body", ["{not json", "\xff\xfe", ""])
def test_an_unreadable_receipt_is_a_state_error_not_a_traceback(stack: Stack, body: str) -> None:
    (stack.root / "receipts" / "setup.json").write_bytes(body.encode("latin-1"))
    with pytest.raises(StateError, match="setup receipt is unreadable") as info:
        read_stack_records(stack.paths)
    assert "re-run `october_setup" in info.value.fix


@pytest.mark.parametrize("body", [{"lock": "abc"}, {"lock": {"sha256": 5}}, {"lock": []}, {"forks": 3},
                                  {"forks": "x"}, [1, 2], "text", None])
def test_a_corrupt_receipt_is_a_state_error_not_a_traceback(stack: Stack, body: object) -> None:
    """Issue 22: a corrupt receipt ended in an AttributeError/TypeError traceback."""
    (stack.root / "receipts" / "setup.json").write_text(json.dumps(body))
    with pytest.raises(StateError, match="setup receipt is malformed") as info:
        verify_stack(stack.root)
    assert "lock.sha256" in info.value.expected and "re-run `october_setup" in info.value.fix


def test_a_receipt_with_only_some_fields_is_read(stack: Stack) -> None:
    (stack.root / "receipts" / "setup.json").write_text(json.dumps({"lock": None, "forks": None}))
    assert verify_stack(stack.root).ok
    (stack.root / "receipts" / "setup.json").write_text(json.dumps({"lock": {}, "forks": [{"name": "x", "dirty": 1}]}))
    assert verify_stack(stack.root).ok


@pytest.mark.parametrize("missing", ["pylock.toml", "receipts/setup.json"])
def test_a_half_missing_stack_is_a_state_error(stack: Stack, missing: str) -> None:
    (stack.root / missing).unlink()
    with pytest.raises(StateError, match="not a finished october stack") as info:
        verify_stack(stack.root)
    assert missing.split("/")[-1] in info.value.found
    assert "october_setup" in info.value.fix


def test_the_records_are_the_receipt_and_the_lock(stack: Stack) -> None:
    receipt, lock = read_stack_records(stack.paths)
    assert receipt["forks"] == [{"name": "flashinfer"}] and lock["lock-version"] == "1.0"


# ----------------------------------------------------------------------------- stack-env, activate


def _stack_env(stack: Stack, *, older: bool = False) -> dict:
    """stack-env.json and activate as the env step writes them, and its marker's record of both (``older``: a
    record from before activate's sha256 was recorded); -> the record."""
    from october.installer.engine import MARKER_FORMAT
    from october.installer.pyenv import stackenv

    env = stackenv.runtime_env(stack.root, "9.0", None)
    path = stackenv.write(stack.root, env)
    rec = {"path": str(path), "activate": str(stack.root / "activate"), "sha256": sha256_file(path),
           "activate_sha256": sha256_file(stack.root / "activate"), "env": env}
    if older:
        del rec["activate_sha256"]
    (stack.root / ".state" / "env.json").write_text(json.dumps(
        {"format_version": MARKER_FORMAT, "step": "env", "outputs": {"stack_env": rec}}))
    return rec


def _edit_workspace(stack: Stack, to: str) -> None:
    path = stack.root / "stack-env.json"
    doc = json.loads(path.read_text())
    doc["env"]["FLASHINFER_WORKSPACE_BASE"] = to
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def test_a_changed_stack_env_file_is_named_with_the_rerun_that_writes_it(stack: Stack) -> None:
    """The audit's false pass: FLASHINFER_WORKSPACE_BASE changed in stack-env.json (smoke and serving take their
    environment from it) verified as "matches its lock"."""
    rec = _stack_env(stack)
    assert diffs(stack) == []
    _edit_workspace(stack, "/tmp/elsewhere")
    d = only(stack)
    assert (d.check, d.what) == ("stack-env", str(stack.root / "stack-env.json"))
    assert d.expected == f"sha256 {rec['sha256']} (as the env step wrote it)"
    assert d.found == f"sha256 {sha256_file(stack.root / 'stack-env.json')}: it was changed since"
    assert f"october_setup {stack.root}" in d.fix and "writes stack-env.json and activate again" in d.fix
    assert "--locked" not in d.fix                       # set up without it: the same options, the same inputs
    assert verify_stack(stack.root).error().exit_code == 13


def test_an_edited_activate_file_is_named(stack: Stack) -> None:
    """`export EVIL=1` appended to the file the README tells users to source before serving."""
    rec = _stack_env(stack)
    with open(stack.root / "activate", "a") as fh:
        fh.write("export EVIL=1\n")
    d = only(stack)
    assert (d.check, d.what) == ("stack-env", str(stack.root / "activate"))
    assert d.expected == f"sha256 {rec['activate_sha256']} (as the env step wrote it)"
    assert "changed since" in d.found and "october_setup" in d.fix


def test_both_files_missing_are_both_named(stack: Stack) -> None:
    _stack_env(stack)
    (stack.root / "stack-env.json").unlink()
    (stack.root / "activate").unlink()
    found = diffs(stack)
    assert [(d.check, Path(d.what).name, d.found) for d in found] == [
        ("stack-env", "stack-env.json", "no such file"), ("stack-env", "activate", "no such file")]


def test_an_older_record_without_activate_s_hash_checks_the_text_its_env_makes(stack: Stack) -> None:
    """A stack set up before activate's sha256 was recorded: its activate must be the text the recorded env
    makes (what the env step wrote); untouched it verifies."""
    _stack_env(stack, older=True)
    written = sha256_file(stack.root / "activate")
    assert diffs(stack) == []
    with open(stack.root / "activate", "a") as fh:
        fh.write("export EVIL=1\n")
    d = only(stack)
    assert d.what == str(stack.root / "activate")
    assert d.expected == f"sha256 {written} (as the env step writes it from its recorded environment)"


def test_without_the_env_marker_the_receipt_s_record_is_compared(stack: Stack) -> None:
    """An older or copied stack without .state/env.json: the setup receipt's stack_env record (setup.json is
    itself checked against its step's marker)."""
    rec = _stack_env(stack, older=True)
    (stack.root / ".state" / "env.json").unlink()
    _write_receipt(stack.root, stack_env={k: v for k, v in rec.items() if k != "activate_sha256"})
    assert diffs(stack) == []
    _edit_workspace(stack, "/tmp/elsewhere")
    assert only(stack).what == str(stack.root / "stack-env.json")


def test_a_locked_stack_s_fix_reruns_with_its_lock(stack: Stack) -> None:
    """The re-run keeps the options the stack was set up with: --locked (and the lock it was locked from)
    is among the env step's inputs, so leaving it out would make every step run again."""
    _stack_env(stack)
    _write_receipt(stack.root, options={"locked": True, "allow_dirty": False, "skip_preflight": []},
                   lock={"sha256": sha256_file(stack.root / "pylock.toml"), "locked_from": "/locks/my lock.toml"})
    (stack.root / "activate").unlink()
    assert only(stack).fix.split("`")[1].endswith("--locked --lock-file '/locks/my lock.toml'")


# ---------------------------------------------------------------------------------------- forks


def test_the_fork_is_looked_for_where_the_lock_records_it(stack: Stack) -> None:
    # a clone at the default src/<fork> is not the stack's fork
    (stack.root / "src" / "flashinfer").mkdir(parents=True)
    assert diffs(stack) == []
    (stack.root / FORK_PATH).rename(stack.root / "src" / "moved")
    found = {d.check: d for d in diffs(stack)}
    assert found["forks"].found == "no clone" and FORK_PATH in found["forks"].what
    (stack.root / FORK_PATH).mkdir()            # a folder that is no clone: named once, its files not looked at
    assert [d.found for d in diffs(stack) if d.check == "forks"] == ["no clone"]


def test_a_fork_at_another_commit_is_named(stack: Stack) -> None:
    (stack.fork / "new.txt").write_text("x")
    git(stack.fork, "add", "-A")
    git(stack.fork, "commit", "-qm", "moved")
    d = only(stack)
    assert d.check == "forks" and d.found == f"HEAD at {git(stack.fork, 'rev-parse', 'HEAD')}"


def test_local_changes_are_named_unless_the_receipt_recorded_them(stack: Stack) -> None:
    (stack.fork / "pyproject.toml").write_text("# edited\n")
    d = only(stack)
    assert d.expected == "a clean tree (as set up)" and "pyproject.toml" in d.found
    _write_receipt(stack.root, forks=[{"name": "flashinfer", "dirty": True}])
    assert diffs(stack) == []
    _write_receipt(stack.root, forks=[{"name": "other", "dirty": True}, "junk"])
    assert len(diffs(stack)) == 1


def test_many_local_changes_are_listed_up_to_the_limit(stack: Stack) -> None:
    for i in range(MAX_FILES_LISTED + 3):
        (stack.fork / f"f{i:02d}.txt").write_text("x")
    d = only(stack)
    assert d.found.endswith("; ... 3 more") and d.found.count("f") >= MAX_FILES_LISTED
    assert f"f{MAX_FILES_LISTED - 1:02d}.txt" in d.found and f"f{MAX_FILES_LISTED:02d}.txt" not in d.found


def test_exactly_the_limit_of_local_changes_lists_them_all(stack: Stack) -> None:
    for i in range(MAX_FILES_LISTED):
        (stack.fork / f"f{i:02d}.txt").write_text("x")
    d = only(stack)
    assert "more" not in d.found and d.found.count(".txt") == MAX_FILES_LISTED


def test_a_moved_submodule_is_named(stack: Stack) -> None:
    sub = stack.fork / "3rdparty" / "sub"
    (sub / "t.txt").write_text("y")
    git(sub, "add", "-A")
    git(sub, "commit", "-qm", "moved")
    found = [d for d in diffs(stack) if " submodule " in d.what]
    assert len(found) == 1
    assert found[0].what.endswith("submodule 3rdparty/sub")
    assert found[0].expected == f"commit {stack.sub_commit}" and found[0].found == f"commit {git(sub, 'rev-parse', 'HEAD')}"


def test_a_submodule_the_fetch_did_not_record_is_named(stack: Stack) -> None:
    marker = stack.root / ".state" / "fetch.json"
    marker.write_text(json.dumps({"format_version": 2, "outputs": {"forks": {"flashinfer": {
        "submodules": {"3rdparty/sub": stack.sub_commit, "3rdparty/gone": "c" * 40}}}}}))
    d = only(stack)
    assert d.what.endswith("submodule 3rdparty/gone")
    assert (d.expected, d.found) == (f"commit {'c' * 40}", "no such submodule")


# ----------------------------------------------------------------------------- fork build outputs


def test_a_changed_build_output_is_named_with_both_digests(stack: Stack) -> None:
    """vLLM's precompiled setup.py copies _C.abi3.so (the kernel that writes the KV cache) into the checkout,
    where git ignores it: a replaced copy is named, although `git status` is clean."""
    (stack.fork / KERNELS).write_bytes(b"\x7fELF another kernel")
    d = only(stack)
    assert (d.check, d.what) == ("forks", f"fork flashinfer ({stack.fork}) build output {KERNELS}")
    assert (d.expected, d.found) == (OUTPUTS[KERNELS], "sha256:" + sha256_file(stack.fork / KERNELS))
    assert "october_setup" in d.fix and "--locked" in d.fix


def test_a_missing_build_output_and_a_moved_link_are_named(stack: Stack) -> None:
    (stack.fork / KERNELS).unlink()
    (stack.fork / DATA_LINK).unlink()
    os.symlink("/elsewhere/include", stack.fork / DATA_LINK)
    found = {d.what.rsplit(" ", 1)[1]: (d.expected, d.found) for d in diffs(stack)}
    assert found == {KERNELS: (OUTPUTS[KERNELS], "missing"), DATA_LINK: (OUTPUTS[DATA_LINK], "link:/elsewhere/include")}
    # a link replaced by a file holding what it pointed at is a change too: the record says "link"
    (stack.fork / DATA_LINK).unlink()
    (stack.fork / DATA_LINK).write_text("../../include")
    assert [d.found for d in diffs(stack) if d.what.endswith(DATA_LINK)] == [
        "sha256:" + sha256_file(stack.fork / DATA_LINK)]


def test_a_file_no_install_recorded_is_named_and_its_command_removes_it(stack: Stack) -> None:
    """A planted extension module and a sourceless .pyc (both import) are named; bytecode in __pycache__
    (checked against its source by Python) and FlashInfer's AOT folder (verify/jit.py's) are not."""
    planted = [stack.fork / "flashinfer" / "_planted.abi3.so", stack.fork / "flashinfer" / "shadow.pyc"]
    for p in planted:
        p.write_bytes(b"\x7fELF planted")
    (stack.fork / "flashinfer" / "__pycache__").mkdir()
    (stack.fork / "flashinfer" / "__pycache__" / "x.cpython-312.pyc").write_bytes(b"bytecode")
    d = only(stack)
    assert d.check == "forks" and d.what == f"files in {stack.fork} git does not track that no install recorded"
    assert d.found == "2 other file(s): flashinfer/_planted.abi3.so; flashinfer/shadow.pyc"
    assert d.fix.startswith("nothing set up put them there: remove them with `rm -f -- ")
    command = d.fix.split("`")[1]
    subprocess.run(["bash", "-c", command], check=True)
    assert not any(p.exists() for p in planted) and diffs(stack) == []


def test_a_stack_whose_install_recorded_no_build_outputs_is_named(stack: Stack) -> None:
    """A stack installed by an october that did not record them (or whose record is gone): nothing to hold
    its outputs to, so it is named; the re-run (the install step's no-op check says the same) records them."""
    _write_install_marker(stack.root, None)
    d = only(stack)
    assert d.what == f"fork flashinfer ({stack.fork}) build output"
    assert d.found == "none recorded (installed by an earlier october, or its record is gone)" and "--locked" in d.fix
    (stack.root / ".state" / "install.json").unlink()
    assert only(stack).found == d.found
    _write_install_marker(stack.root, {"flashinfer": {}})       # recorded: none; both files are then unrecorded
    assert only(stack).found == f"2 other file(s): {KERNELS}; {DATA_LINK}"


def test_build_output_digests_of_what_is_gone_unreadable_or_a_folder(tmp_path: Path) -> None:
    from october.installer.core.filetrust import FileTrust
    from october.installer.git import buildoutputs as bo

    (tmp_path / "a.so").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    assert bo.signatures(tmp_path, ["gone.so", "a.so"]).keys() == {"a.so"}
    assert bo.record(tmp_path, ["gone.so", "a.so", "d"], FileTrust(tmp_path / "t.json")) == {
        "a.so": "sha256:" + hashlib.sha256(b"x").hexdigest(), "d": "dir"}
    want = {"a.so/inner": "sha256:" + "0" * 64, "d": "dir", "gone.so": "link:x"}
    assert [(c.rel, c.found) for c in bo.changed(tmp_path, want)] == [
        ("a.so/inner", "unreadable (NotADirectoryError)"), ("gone.so", "missing")]
    five = [bo.Changed(f"f{i}", "sha256:", "missing") for i in range(5)]
    assert bo.describe(five) == ", ".join(f"f{i} (missing)" for i in range(5))
    assert bo.describe([*five, bo.Changed("f5", "sha256:", "sha256:1")]).endswith("f4 (missing), ... 1 more")


# --------------------------------------------------------------------------------- distributions


def test_a_missing_distribution_is_named(stack: Stack) -> None:
    shutil.rmtree(stack.site / "six-1.16.0.dist-info")
    (stack.site / "six.py").unlink()                      # the whole distribution gone, not just its RECORD
    d = only(stack)
    assert (d.check, d.what, d.found) == ("distributions", "six", "not installed")


def test_an_extra_distribution_is_named_with_where_it_came_from(stack: Stack) -> None:
    _dist(stack.site, "evil", "1.0", {"evil.py": b"x"})
    _dist(stack.site, "evil2", "1.0", {"evil2.py": b"y"}, {"url": "https://evil.example/e.whl"})
    found = {d.what: d for d in diffs(stack)}
    assert set(found) == {"evil", "evil2"}
    assert found["evil"].found == "evil 1.0 installed (from an index or a find-links folder), not in the lock"
    assert found["evil2"].found == "evil2 1.0 installed (from https://evil.example/e.whl), not in the lock"


def test_a_wrong_version_is_named(stack: Stack) -> None:
    meta = stack.site / "six-1.16.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("1.16.0", "1.17.0"))
    d = only(stack)
    assert (d.expected, d.found) == ("version 1.16.0", "version 1.17.0")


def test_a_fork_not_installed_editable_from_its_clone_is_named(stack: Stack) -> None:
    direct = stack.site / "flashinfer_python-0.5.0.dist-info" / "direct_url.json"
    direct.write_text(json.dumps({"url": stack.fork.resolve().as_uri(), "dir_info": {}}))
    d = only(stack)
    assert d.check == "distributions" and d.found == "a non-editable copy"
    direct.write_text(json.dumps({"url": (stack.root / "src" / "other").as_uri(), "dir_info": {"editable": True}}))
    assert only(stack).found == str((stack.root / "src" / "other").resolve())
    direct.write_text(json.dumps({"url": "https://x/y", "dir_info": {"editable": True}}))
    assert only(stack).found == "a non-editable copy"
    direct.write_text("{torn")
    assert only(stack).found == "a non-editable copy"


def test_dist_info_without_name_or_metadata_is_skipped(stack: Stack) -> None:
    (stack.site / "broken-1.0.dist-info").mkdir()
    half = stack.site / "half-1.0.dist-info"
    half.mkdir()
    (half / "METADATA").write_text("Metadata-Version: 2.1\nName: half\n")
    assert sorted(installed(stack.root / "env")) == ["flashinfer-python", "gitdep", "six", "torch"]
    assert installed(stack.root / "nothing") == {}


# ---------------------------------------------------------------------------------------- files


def test_a_changed_and_a_missing_file_are_named(stack: Stack) -> None:
    (stack.site / "torch" / "__init__.py").write_bytes(b"T = 2\n")
    (stack.site / "torch" / "lib" / "libtorch.so").unlink()
    d = only(stack)
    assert d.check == "files" and d.what == f"torch {TORCH}"
    assert d.found == "2 file(s) differ: torch/__init__.py (changed), torch/lib/libtorch.so (missing)"


def test_many_changed_files_are_listed_up_to_the_limit(stack: Stack) -> None:
    files = {f"pkg/m{i:02d}.py": b"a" for i in range(MAX_FILES_LISTED + 2)}
    _dist(stack.site, "six-extra", "1.0", files)
    for rel in files:
        (stack.site / rel).write_bytes(b"b")
    d = next(d for d in diffs(stack) if d.check == "files")
    assert d.found.startswith(f"{MAX_FILES_LISTED + 2} file(s) differ") and d.found.endswith(", ... 2 more")


def test_a_missing_record_and_an_unknown_hash_are_named(stack: Stack) -> None:
    (stack.site / "six-1.16.0.dist-info" / "RECORD").unlink()
    record = stack.site / "torch-2.10.0+cu128.dist-info" / "RECORD"
    record.write_text(record.read_text() + "torch/x.py,nohash=abc,1\ntorch/y.py,,\n")
    found = {d.what: d for d in diffs(stack)}
    assert found["six RECORD"].found == "no RECORD file"
    assert found[f"torch {TORCH}"].found == "1 file(s) differ: torch/x.py (unsupported hash type nohash)"


def test_a_record_row_without_a_size_is_still_hashed(stack: Stack) -> None:
    record = stack.site / "six-1.16.0.dist-info" / "RECORD"
    record.write_text(f"six.py,sha256={_b64(b'other')}\n"                    # two fields: hash, no size
                      "six-1.16.0.dist-info/METADATA,,\nsix-1.16.0.dist-info/RECORD,,\n")
    d = only(stack)
    assert d.what == "six 1.16.0" and d.found == "1 file(s) differ: six.py (changed)"
    assert MAX_FILES_LISTED == 20


def test_a_record_row_without_an_equals_sign_is_not_hashed(stack: Stack) -> None:
    record = stack.site / "six-1.16.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + "six_extra.py,sha256,3\nsix_short.py\nsix_two.py,sha256\n\n")
    assert diffs(stack) == []


# -------------------------------------------------------------------------------- torch, wheel, jit


def test_a_different_or_missing_torch_is_named(stack: Stack) -> None:
    meta = stack.site / "torch-2.10.0+cu128.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace(TORCH, "2.10.0+cu126"))
    by = {d.check: d for d in diffs(stack)}
    assert by["torch"].expected == f"torch {TORCH} (the recipe's build)" and by["torch"].found == "torch 2.10.0+cu126"
    meta.unlink()
    by = {d.check: d for d in diffs(stack)}
    assert by["torch"].found == "no torch"


def test_a_lock_without_a_torch_build_skips_the_torch_check(stack: Stack) -> None:
    text = stack.lock_text().replace(f'[tool.october.toolchain]\ntorch = "{TORCH}"\n', "")
    (stack.root / "pylock.toml").write_text(text)
    _write_receipt(stack.root)
    meta = stack.site / "torch-2.10.0+cu128.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace(TORCH, "9.9"))
    assert [d.check for d in diffs(stack)] == ["distributions"]


def test_a_changed_or_missing_base_wheel_is_named(stack: Stack) -> None:
    wheel = stack.root / "wheels" / "vllm-0.18.0-cp38-abi3-manylinux1_x86_64.whl"
    wheel.write_bytes(b"PK other bytes")
    d = only(stack)
    assert d.check == "wheel" and d.found == f"sha256 {sha256_file(wheel)}"
    wheel.unlink()
    assert only(stack).found == "no such file"


def test_a_lock_without_a_base_wheel_checks_none(stack: Stack) -> None:
    text = stack.lock_text()
    start = text.index("[tool.october.wheel]")
    text = text[:start] + text[text.index("[[tool.october.jit]]"):]
    (stack.root / "pylock.toml").write_text(text)
    _write_receipt(stack.root)
    (stack.root / "wheels" / "vllm-0.18.0-cp38-abi3-manylinux1_x86_64.whl").unlink()
    report = verify_stack(stack.root)
    assert report.ok and report.checked["wheel"] == 0


def test_a_changed_or_missing_jit_library_is_named(stack: Stack) -> None:
    lib = stack.root / "jit" / ".cache" / "cached_ops" / "batch_decode_k16" / "batch_decode_k16.so"
    lib.write_bytes(b"\x7fELF other")
    d = only(stack)
    assert d.check == "jit" and d.what == f"batch_decode_k16 ({lib})"
    assert d.found == f"sha256 {sha256_file(lib)} ({lib.stat().st_size} bytes)"
    lib.unlink()
    d = only(stack)
    assert d.found == "no such file" and d.what == f"batch_decode_k16 ({lib})"     # where the marker placed it
    assert d.expected == f"the built library batch_decode_k16.so under {stack.root / 'jit'}"


def test_a_jit_library_the_marker_does_not_name_is_found_under_jit(stack: Stack) -> None:
    (stack.root / ".state" / "jit.json").write_text(json.dumps({"format_version": 2, "outputs": {"modules": [
        {"uri": "other"}, "junk", {"uri": "batch_decode_k16"}]}}))
    assert diffs(stack) == []
    lib = stack.root / "jit" / ".cache" / "cached_ops" / "batch_decode_k16" / "batch_decode_k16.so"
    lib.write_bytes(b"changed")
    assert only(stack).check == "jit"


def test_exactly_the_limit_of_changed_files_lists_them_all(stack: Stack) -> None:
    files = {f"pkg/m{i:02d}.py": b"a" for i in range(MAX_FILES_LISTED)}
    _dist(stack.site, "six-extra", "1.0", files)
    for rel in files:
        (stack.site / rel).write_bytes(b"b")
    d = next(d for d in diffs(stack) if d.check == "files")
    assert d.found.startswith(f"{MAX_FILES_LISTED} file(s) differ") and "more" not in d.found


def test_a_jit_library_the_marker_places_outside_jit_is_checked_there(stack: Stack) -> None:
    """The jit step's AOT copy (``aot_path`` in its marker, outside STACK/jit): FlashInfer loads it first,
    so verify hashes it, and a copy the marker names must exist."""
    lib = stack.root / JIT_LIB
    aot = stack.root / "src" / "aot" / "batch_decode_k16" / "batch_decode_k16.so"
    aot.parent.mkdir(parents=True)
    shutil.copyfile(lib, aot)
    (stack.root / ".state" / "jit.json").write_text(json.dumps({"format_version": 2, "outputs": {"modules": [
        {"uri": "batch_decode_k16", "path": str(lib), "aot_path": str(aot)}]}}))
    report = verify_stack(stack.root)
    assert report.differences == () and report.checked["jit"] == 2        # the workspace library and its AOT copy
    aot.write_bytes(b"changed")
    d = only(stack)
    assert d.what == f"batch_decode_k16 ({aot.resolve()})" and d.found.startswith("sha256 ")
    aot.unlink()
    d = only(stack)
    assert d.what == f"batch_decode_k16 ({aot})" and d.found == "no such file" and "AOT copy" in d.expected


# ------------------------------------------------------------------------------ submodule selection


def _fetched(stack: Stack, **fork: object) -> None:
    (stack.root / ".state" / "fetch.json").write_text(json.dumps(
        {"format_version": 2, "outputs": {"forks": {"flashinfer": fork}}}))


def test_a_fork_the_fetch_marker_does_not_record_has_no_submodule_check(stack: Stack) -> None:
    (stack.root / ".state" / "fetch.json").write_text(json.dumps({"format_version": 2, "outputs": {"forks": {}}}))
    assert diffs(stack) == []                              # nothing recorded to compare the submodule with


def test_an_unselected_submodule_is_expected_as_an_uninitialized_gitlink(stack: Stack) -> None:
    _fetched(stack, submodules={}, submodule_paths=[])
    d = only(stack)                                        # checked out, though the recipe does not select it
    assert d.what.endswith("submodule 3rdparty/sub") and d.expected == "not checked out (the recipe does not select it)"
    assert d.found == f"checked out at commit {stack.sub_commit}"
    git(stack.fork, "submodule", "-q", "deinit", "-f", "3rdparty/sub")
    assert diffs(stack) == []                              # the gitlink, left alone, as set up
    _fetched(stack, submodules={"3rdparty/sub": stack.sub_commit}, submodule_paths=["3rdparty/sub"])
    d = only(stack)                                        # selected and recorded: it must be checked out
    assert (d.expected, d.found) == (f"commit {stack.sub_commit}", "not checked out")


@pytest.mark.parametrize("where", ["fetch", "receipt"])
def test_the_selection_comes_from_the_fetch_marker_else_the_receipt(stack: Stack, where: str) -> None:
    other = {"3rdparty/other": "c" * 40}                  # recorded, so the selection is read at all
    if where == "fetch":
        _fetched(stack, submodules=other, submodule_paths=["3rdparty/other"])
    else:
        _fetched(stack, submodules=other)
        _write_receipt(stack.root, forks=[{"name": "flashinfer", "submodules_selected": ["3rdparty/other"]}])
    found = {d.what.rsplit(" ", 1)[-1]: d for d in diffs(stack)}
    assert set(found) == {"3rdparty/sub", "3rdparty/other"}
    assert found["3rdparty/sub"].expected == "not checked out (the recipe does not select it)"
    assert found["3rdparty/other"].found == "no such submodule"
    _fetched(stack, submodules=other, submodule_paths=["3rdparty"])          # a parent path selects what is under it
    sub = next(d for d in diffs(stack) if d.what.endswith("3rdparty/sub"))
    assert (sub.expected, sub.found) == ("commit (none)", f"commit {stack.sub_commit}")


def test_one_fix_is_given_as_is_not_numbered(stack: Stack) -> None:
    (stack.root / "wheels" / "vllm-0.18.0-cp38-abi3-manylinux1_x86_64.whl").unlink()
    d = only(stack)
    assert verify_stack(stack.root).error().fix == f"{d.fix}\n     then run `current verify` again"


@pytest.mark.parametrize("extra", [MAX_FILES_LISTED, MAX_FILES_LISTED + 2])
def test_unowned_files_are_listed_up_to_the_limit(stack: Stack, extra: int) -> None:
    for i in range(extra):
        (stack.site / f"stray{i:02d}.py").write_text("x")
    d = only(stack)
    assert d.check == "files" and d.found.startswith(f"{extra} other file(s): ")
    assert d.found.count("stray") == MAX_FILES_LISTED
    assert d.found.endswith("; ... 2 more") if extra > MAX_FILES_LISTED else "more" not in d.found


def test_torch_from_the_system_is_checked_where_the_lock_records_it(stack: Stack, tmp_path: Path) -> None:
    system = tmp_path / "sys" / "torch"
    (system.parent / f"torch-{TORCH}.dist-info").mkdir(parents=True)
    (system.parent / f"torch-{TORCH}.dist-info" / "METADATA").write_text(f"Name: torch\nVersion: {TORCH}\n")
    system.mkdir()
    (system / "__init__.py").write_text("")
    text = stack.lock_text()
    text = text[:text.index("[[packages]]")] + text[text.index('[[packages]]\nname = "six"'):]  # no torch row
    text += f'\n[tool.october.system]\ntorch = {{ path = "{system}" }}\n'
    (stack.root / "pylock.toml").write_text(text)
    _write_receipt(stack.root)
    by = {d.check: d for d in diffs(stack)}                   # torch in the env: it would shadow the system's
    assert by["torch"].found.startswith(f"torch {TORCH} installed in ")
    shutil.rmtree(stack.site / "torch-2.10.0+cu128.dist-info")
    shutil.rmtree(stack.site / "torch")
    assert diffs(stack) == []                                  # the recorded torch, in its place
    meta = system.parent / f"torch-{TORCH}.dist-info" / "METADATA"
    meta.write_text("Name: torch\nVersion: 9.9\n")
    by = {d.check: d for d in diffs(stack)}
    assert by["torch"].what == "system torch" and by["torch"].found == "torch 9.9 there"
    meta.write_text(f"Name: torch\nVersion: {TORCH}\n")
    (system / "__init__.py").unlink()
    assert {d.check: d for d in diffs(stack)}["torch"].found == f"torch {TORCH} there"
    shutil.rmtree(system.parent)
    assert {d.check: d for d in diffs(stack)}["torch"].found == f"no torch at {system}"


def test_a_jit_library_no_record_names_is_named_with_a_command_that_removes_it(stack: Stack) -> None:
    stray = stack.root / "jit" / ".cache" / "cached_ops" / "stray" / "stray.so"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"\x7fELF stray")
    d = only(stack)
    assert d.check == "jit" and d.found == "a library no record names (10 bytes)"
    assert str(stray.resolve()) in d.fix and "--locked" not in d.fix
