"""``october.installer.pyenv.stackenv``: one runtime environment for every stack process, written once, read back strictly.

The activation file is sourced by a real ``sh`` here, so what a user's shell gets is what the
JSON says (and what the jit step and smoke get through :func:`october.installer.pyenv.stackenv.apply`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from october.installer.core.errors import StateError
from october.installer.pyenv import stackenv


def _env(tmp_path: Path, cuda: Path | None = None) -> dict[str, str]:
    return stackenv.runtime_env(tmp_path / "stack", "9.0", cuda)


def test_runtime_env_is_pure_and_names_the_stack_paths(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda-13.0"
    env = _env(tmp_path, cuda)
    assert env == _env(tmp_path, cuda)
    stack = tmp_path / "stack"
    assert env["FLASHINFER_WORKSPACE_BASE"] == str(stack / "jit")
    assert env["FLASHINFER_CUDA_ARCH_LIST"] == "9.0"
    assert env["FLASHINFER_DISABLE_VERSION_CHECK"] == "1"
    assert env["VIRTUAL_ENV"] == str(stack / "env")
    assert env["CUDA_HOME"] == str(cuda)
    assert env["PATH"].split(os.pathsep) == [str(stack / "env" / "bin"), str(cuda / "bin")]
    assert "CUDA_HOME" not in _env(tmp_path, None)
    assert _env(tmp_path, None)["PATH"] == str(stack / "env" / "bin")


def test_write_then_load_round_trips_and_activate_gives_a_shell_the_same_env(tmp_path: Path) -> None:
    cuda = tmp_path / "cu da's"          # a space and a quote: the activate file must quote
    env = _env(tmp_path, cuda)
    path = stackenv.write(tmp_path / "stack", env)
    assert path == tmp_path / "stack" / "stack-env.json"
    assert stackenv.load(tmp_path / "stack") == env
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/elsewhere", "FLASHINFER_WORKSPACE_BASE": "/home/u",
            "HOME": str(tmp_path)}
    out = subprocess.run(["sh", "-c", f". {stackenv.activate_file(tmp_path / 'stack')} && env -0"],
                         env=base, capture_output=True, check=True).stdout.decode()
    shell = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    applied = stackenv.apply(env, base)
    for key in env:
        assert shell[key] == applied[key], key
    assert shell["PATH"] == f"{env['PATH']}:/usr/bin:/bin"
    assert "PYTHONPATH" not in shell and "PYTHONPATH" not in applied
    assert shell["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / "stack" / "jit")


def test_apply_prepends_path_and_drops_foreign_settings() -> None:
    env = {"PATH": "/s/env/bin", "VIRTUAL_ENV": "/s/env", "FLASHINFER_WORKSPACE_BASE": "/s/jit"}
    out = stackenv.apply(env, {"PATH": "/usr/bin", "VIRTUAL_ENV": "/other", "CUDA_HOME": "/cuda-12",
                               "PYTHONHOME": "/x", "HOME": "/h"})
    assert out == {"PATH": "/s/env/bin:/usr/bin", "VIRTUAL_ENV": "/s/env", "FLASHINFER_WORKSPACE_BASE": "/s/jit",
                   "HOME": "/h"}
    assert stackenv.apply(env, {})["PATH"] == "/s/env/bin"


def test_missing_file_is_a_stack_state_error_with_a_fix(tmp_path: Path) -> None:
    with pytest.raises(StateError) as info:
        stackenv.load(tmp_path)
    assert info.value.exit_code == 18
    assert "stack-env.json" in str(info.value) and "october_setup" in str(info.value)


@pytest.mark.parametrize("text, words", [
    ("{not json", "damaged"),
    (json.dumps({"format_version": 2, "kind": "october-stack-env", "env": {}}), "unknown format"),
    (json.dumps([1, 2]), "unknown format"),
    (json.dumps({"format_version": 1, "kind": "october-stack-env", "env": {"PATH": "/x"}}), "incomplete"),
    (json.dumps({"format_version": 1, "kind": "october-stack-env", "env": "PATH=/x"}), "incomplete"),
])
def test_damaged_file_is_refused(tmp_path: Path, text: str, words: str) -> None:
    stackenv.write(tmp_path, _env(tmp_path))
    (tmp_path / "stack-env.json").write_text(text)
    with pytest.raises(StateError, match=words):
        stackenv.load(tmp_path)


def test_write_refuses_a_map_without_the_required_keys(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="FLASHINFER_WORKSPACE_BASE is missing"):
        stackenv.write(tmp_path, {"PATH": "/x", "VIRTUAL_ENV": "/v"})
    assert not (tmp_path / "stack-env.json").exists() and not (tmp_path / "activate").exists()
