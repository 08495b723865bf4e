"""One `current smoke` per stack and GPU; the selection facts `current smoke` hands the stack env."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from october.installer.core.errors import SmokeBusyError
from october.installer.pyenv import stackenv
from tests.fixtures.root import PROJECT_ROOT
from october.installer.smoke.launch import SmokeOptions, run_smoke
from october.installer.smoke.mutex import SmokeMutex, gpu_key
from october.installer.smoke.selection import selection_info

ROOT = Path(__file__).resolve().parent.parent
HOLDER = """
import sys, time
from pathlib import Path
from october.installer.smoke.mutex import SmokeMutex
with SmokeMutex(Path(sys.argv[1]), sys.argv[2], {"OCTOBER_LOCK_DIR": sys.argv[3]}):
    print("held", flush=True)
    time.sleep(120)
"""


def _stack(tmp: Path, name: str = "stack") -> Path:
    stack = tmp / name
    (stack / "receipts").mkdir(parents=True)
    (stack / "env").symlink_to(sys.prefix)
    shipped = hashlib.sha256((PROJECT_ROOT / "recipes" / "current.toml").read_bytes()).hexdigest()
    (stack / "receipts" / "setup.json").write_text(json.dumps({"recipe": {"name": "current", "sha256": shipped},
                                                               "forks": [{"name": "vllm", "commit": "7" * 40}, {"name": "flashinfer", "commit": "2" * 40}]}))
    stackenv.write(stack, stackenv.runtime_env(stack, "9.0", None))
    return stack


def test_a_second_smoke_on_the_same_stack_is_refused_naming_the_holder(tmp_path: Path) -> None:
    env = {"OCTOBER_LOCK_DIR": str(tmp_path / "locks")}
    stack = _stack(tmp_path)
    with SmokeMutex(stack, "cpu", env):
        with pytest.raises(SmokeBusyError) as exc:
            with SmokeMutex(stack, "cpu", env):
                pass
    assert exc.value.exit_code == 5
    msg = str(exc.value)
    assert f"pid {os.getpid()}" in msg and str(stack / ".october-smoke.lock") in msg and "kill" in msg
    with SmokeMutex(stack, "cpu", env):           # released: free again
        pass


def test_the_gpu_is_one_lock_across_stacks(tmp_path: Path) -> None:
    env = {"OCTOBER_LOCK_DIR": str(tmp_path / "locks"), "CUDA_VISIBLE_DEVICES": "1,2"}
    a, b = _stack(tmp_path, "a"), _stack(tmp_path, "b")
    assert gpu_key(env) == "1" and gpu_key({}) == "0"
    with SmokeMutex(a, "auto", env):
        with pytest.raises(SmokeBusyError, match="GPU 1"):
            with SmokeMutex(b, "cuda", env):
                pass
        with SmokeMutex(b, "cpu", env):             # a CPU run holds no GPU
            pass
        with SmokeMutex(b, "cuda", {**env, "CUDA_VISIBLE_DEVICES": "3"}):   # another GPU
            pass
    assert not (b / ".october-smoke.lock").read_text()      # the holder record is cleared on release


def test_current_smoke_while_another_process_holds_the_stack_exits_5(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    locks = tmp_path / "locks"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(stack), "cpu", str(locks)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        opts = SmokeOptions(install=stack, format="awq", output=tmp_path / "out", level="reference", device="cpu")
        started = time.monotonic()
        with pytest.raises(SmokeBusyError) as exc:
            run_smoke(opts, cwd=tmp_path, echo=lambda s: None, base_env={**os.environ, "OCTOBER_LOCK_DIR": str(locks)})
        assert time.monotonic() - started < 5 and f"pid {holder.pid}" in str(exc.value)
        assert not (tmp_path / "out" / "receipt.json").exists()
        proc = subprocess.run([sys.executable, "-c", "from october.installer.cli.main import current_app; current_app()",
                               "smoke", "--install", str(stack), "--format", "awq", "--output", str(tmp_path / "o2"),
                               "--level", "reference"], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "OCTOBER_LOCK_DIR": str(locks)}, timeout=120)
        assert proc.returncode == 5, proc.stderr
        assert f"pid {holder.pid}" in proc.stderr + proc.stdout
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    with SmokeMutex(stack, "cpu", {"OCTOBER_LOCK_DIR": str(locks)}):    # the kernel dropped the dead holder's lock
        pass


def test_selection_info_for_the_current_recipe(tmp_path: Path) -> None:
    info = selection_info(tmp_path / "stack", "current", "fp16")
    assert info is not None
    assert info["compute_dtype"] == info["k_cache_dtype"] == "float16" and info["v_cache_dtype"] == "fp8_e4m3"
    uris = [m["uri"] for m in info["jit_modules"]]  # type: ignore[union-attr]
    assert uris[0].startswith("batch_decode_with_kv_cache_dtype_q_f16_dtype_k_f16_dtype_v_e4m3_")
    assert info["jit_workspace"] == str(tmp_path / "stack" / "jit")
    assert info["setup_command"] == f"october_setup {tmp_path / 'stack'} --recipe current"
    assert "smoke" not in info          # the token counts are the stack info's own `smoke` (one source)
    assert info["shape"] == {"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                             "num_hidden_layers": 36}
    new = selection_info(tmp_path / "s", "20260702", "awq")
    assert new is not None and new["compute_dtype"] == "bfloat16"
    assert selection_info(tmp_path, None, "awq") is None and selection_info(tmp_path, "no-such", "awq") is None


def test_current_smoke_hands_the_selection_to_the_stack_env(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    out = tmp_path / "out"
    opts = SmokeOptions(install=stack, format="fp16", output=out, level="reference", device="cpu")
    assert run_smoke(opts, cwd=tmp_path, echo=lambda s: None) == 1          # CPU: graphs skipped
    info = json.loads((out / "stack-info.json").read_text())
    assert info["selection"]["compute_dtype"] == "float16" and info["selection"]["format"] == "fp16"
