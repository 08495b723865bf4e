"""The fleet driver under `uv run` (how a user of a uv project runs it, and how CI runs the tests) does
not make Ray ship the driver's folder to the nodes: Ray's own uv hook (ray._private.worker.
_maybe_modify_runtime_env, run here for real under a real `uv run`) would set a ``working_dir`` and a
``uv run`` worker command for every node.  Seen in the Ray fleet tests: one node's copy of the folder
removed under another's running task ("No module named 'october.installer.core.atomic'")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.fixtures.root import PROJECT_ROOT

pytest.importorskip("ray")

# what a node's workers would get as their runtime env, asked of Ray in a driver under `uv run`
ASK = ("import json; from october.installer.fleet.cluster import import_ray; import_ray(); "
       "from ray._private.worker import _maybe_modify_runtime_env; "
       "print(json.dumps(_maybe_modify_runtime_env(None, False) or {}))")


def runtime_env_under_uv_run(*, ray_first: bool = False, **env: str) -> dict[str, object]:
    """``ray_first``: the driver imported ray before the fleet code did (Ray read its switch then)."""
    uv = shutil.which("uv")
    assert uv, "uv is on PATH wherever the tests run (.ci/run installs it)"
    base = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_UV_RUN_RUNTIME_ENV"}
    code = ("import ray; " if ray_first else "") + ASK
    done = subprocess.run([uv, "run", "--no-sync", "python", "-c", code], cwd=PROJECT_ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_driver_under_uv_run_ships_no_folder_to_the_nodes() -> None:
    assert runtime_env_under_uv_run() == {}
    assert runtime_env_under_uv_run(ray_first=True) == {}           # ray imported before: its switch turned off
    assert runtime_env_under_uv_run(ray_first=True, RAY_ENABLE_UV_RUN_RUNTIME_ENV="False") == {}   # Ray's reading


def test_planted_the_propagation_turned_on_ships_the_folder() -> None:
    """The check above can fail: with Ray's propagation on (the user's explicit choice, kept), the
    same driver would give every node the driver's folder and a `uv run` worker command."""
    for ray_first in (False, True):
        shipped = runtime_env_under_uv_run(ray_first=ray_first, RAY_ENABLE_UV_RUN_RUNTIME_ENV="1")
        assert shipped.get("working_dir") == str(PROJECT_ROOT) and "uv" in str(shipped.get("py_executable"))
