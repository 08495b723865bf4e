"""Real tier: the real FlashInfer 2f3f0f6d (../shared/real-forks) installed editable through the
``install`` step, on CPU, with its real ``build_backend.py`` and the real uv.

The stack env is real: Python 3.12, PyPI's torch 2.11.0 (the CUDA 13.0 build) with all its
dependencies, FlashInfer's build requirements and the fork's runtime needs, each at the version
``locks/20260702.pylock.toml`` says (about 3 GB on the first run; the uv cache under
``real_cache_dir()`` keeps it for later runs).  The recipe is the shipped ``20260702`` one, with the
FlashInfer fork only (the vLLM fork is not reachable here) and its index pointed at a loopback server
that counts requests; ``UV_INDEX_URL`` / ``PIP_INDEX_URL`` point nested processes there too.

Shown: no request reaches any index during the install (so no nested uv or pip fetched anything), the
build backend's nested ``uv pip install`` of cuTile's compile chain was recorded and refused, nothing
waited on uv's env lock, the env differs from before only by the fork itself, every index distribution
is at its locked version, the only unmet requirement is the one the recipe declares
(``cuda-tile>=1.4.0``), agreeing with ``uv pip check``, and ``import flashinfer`` (beside vLLM's pinned
``flashinfer-cubin`` 0.6.12) fails without the stack environment and works with it.
"""

from __future__ import annotations

import dataclasses
import http.server
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from october.installer.core.errors import InstallError
from october.installer.install import consistency
from october.installer.lock.indexlock import lock_path
from october.installer.lock.pylock import locked_state
from october.installer.pyenv import stackenv
from october.installer.pyenv.uvcmd import uv_exe
from october.installer.recipe import Sources, load_recipe
from october.installer.steps.env import write_stack_env
from october.installer.steps.install import InstallStep
from october.installer.lock.drift import installed_versions
from tests.conftest import real_cache_dir
from tests.fixtures import stack_forks as sf

pytestmark = pytest.mark.real

COMMIT = "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"
CHAIN = {"nvidia-cuda-nvcc", "nvidia-cuda-tileiras", "nvidia-nvvm", "nvidia-nvjitlink", "nvidia-cuda-crt"}


class _Counting(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).hits.append(self.path)
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def dead_index() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []
    handler = type("Handler", (_Counting,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", hits
    server.shutdown()
    server.server_close()


def _python312() -> str:
    found = subprocess.run([uv_exe(), "python", "find", "--no-python-downloads", "3.12"], capture_output=True,
                           text=True)
    if found.returncode == 0:
        return found.stdout.strip()
    # uv's search stops at a pyenv shim that cannot run 3.12; pyenv's own copies are fine
    for candidate in sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12")):
        return str(candidate)
    raise RuntimeError("real tier: expected a Python 3.12 interpreter (the recipe's minor version), found none:\n"
                       f"{found.stderr}\n  -> install one (e.g. `uv python install 3.12`)")


def _env_from_lock(stack: Path, fork_src: Path, uv_cache: Path) -> Path:
    """STACK/env: torch 2.11.0 + FlashInfer's build and runtime needs, versions held to the committed lock."""
    state = locked_state(lock_path("20260702"))
    work = stack.parent / "envspec"
    work.mkdir(parents=True, exist_ok=True)
    (work / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(state.packages.items())))
    reqs = [ln.strip() for ln in (fork_src / "requirements.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]
    # cuda-tile>=1.4.0 cannot resolve with torch 2.11.0's pins (the recipe's declared exception): as in the
    # stack, the resolvable 1.3.0 is what gets installed
    reqs = ["cuda-tile" if r.startswith("cuda-tile") else r for r in reqs]
    # flashinfer-cubin: vLLM 0.24.0 pins 0.6.12 and it stays under the 0.6.15 fork
    reqs += ["torch==2.11.0", "setuptools>=77.0.3,<81", "packaging>=24", "apache-tvm-ffi>=0.1.6,!=0.1.8,<0.2",
             "flashinfer-cubin"]
    (work / "requirements.txt").write_text("\n".join(reqs) + "\n")
    env = dict(os.environ, UV_CACHE_DIR=str(uv_cache), UV_LINK_MODE="hardlink")
    env.pop("VIRTUAL_ENV", None)
    subprocess.run([uv_exe(), "venv", "-q", "--python", _python312(), str(stack / "env")], check=True, env=env)
    subprocess.run([uv_exe(), "pip", "install", "-q", "--python", str(stack / "env" / "bin" / "python"),
                    "--index-url", "https://pypi.org/simple", "-r", str(work / "requirements.txt"),
                    "-c", str(work / "constraints.txt")], check=True, env=env)
    return stack / "env"


def _dist_infos(env: Path) -> set[str]:
    return {p.name for p in env.glob("lib/python*/site-packages/*.dist-info")}


@pytest.fixture()
def real_stack(tmp_path: Path, real_mirror: Path, dead_index: tuple[str, list[str]],
               monkeypatch: pytest.MonkeyPatch):
    """(ctx, fork checkout, env, index hits) for the shipped 20260702 recipe's FlashInfer fork."""
    index, hits = dead_index
    stack = tmp_path / "stack"
    src = stack / "src" / "flashinfer"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(real_mirror / "github.com/flashinfer-ai/flashinfer.git"),
                    str(src)], check=True)
    subprocess.run(["git", "-C", str(src), "checkout", "-q", "--detach", COMMIT], check=True)
    env = _env_from_lock(stack, src, real_cache_dir() / "uv")
    shipped = load_recipe("20260702")
    python = consistency.env_python_version(env)
    assert python is not None and python.startswith("3.12.")
    recipe = dataclasses.replace(shipped, python=python, forks=(shipped.fork("flashinfer"),), wheel=None,
                                 sources=Sources(index_url=index))
    ctx = sf.context(stack, recipe, tmp_path / "cache")
    write_stack_env(ctx)
    ctx.done["fetch"] = sf.record(sf.fetched({"flashinfer": (src, COMMIT)}))
    # anything nested that escaped the guard would ask this index (and be counted), not PyPI
    for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "PIP_INDEX_URL"):
        monkeypatch.setenv(var, index)
    return ctx, src, env, hits


def test_real_flashinfer_editable_install_fetches_nothing_and_changes_only_the_fork(real_stack) -> None:
    ctx, src, env, hits = real_stack
    uv_cache = real_cache_dir() / "uv"
    before = installed_versions(env)
    before_infos = _dist_infos(env)
    assert "flashinfer-python" not in before

    start = time.monotonic()
    out = InstallStep().run(ctx).to_json()
    seconds = time.monotonic() - start

    assert hits == [], f"an index was contacted during the install: {hits}"
    # Not a speed claim (benches make those): a nested uv that waited on the env lock would wait uv's
    # lock timeout (UV_LOCK_TIMEOUT, 300 s by default) before failing.  The install alone takes 60-70 s on
    # this 2-core machine and has taken 130 s under a loaded CI run, so the bound sits between the two.
    assert seconds < 240, f"the install took {seconds:.0f} s (a nested uv waiting on the env lock?)"
    nested = out["nested_installs"]["flashinfer"]
    assert set(nested["refused"]) == CHAIN and nested["undeclared"] == [] and nested["unparsed"] == []
    assert nested["attempts"] and all(a.startswith("uv pip install --python ") for a in nested["attempts"])
    assert out["forks"][0]["env"] == {"BUILD_NCCL_EP": "0", "BUILD_NIXL_EP": "0", "BUILD_NVEP": "0"}

    after = installed_versions(env)
    assert {k: v for k, v in after.items() if before.get(k) != v} == {"flashinfer-python": "0.6.15"}
    assert _dist_infos(env) - before_infos == {"flashinfer_python-0.6.15.dist-info"}
    assert before_infos <= _dist_infos(env)
    locked = locked_state(lock_path("20260702")).packages
    off_lock = {n: v for n, v in after.items() if n != "flashinfer-python" and locked.get(n) != v}
    assert off_lock == {}, f"installed outside the lock: {off_lock}"

    judged = out["consistency"]
    assert judged["undeclared"] == []
    assert [(d["package"], d["requirement"], d["found"]) for d in judged["declared"]] == \
        [("flashinfer-python", "cuda-tile>=1.4.0", "1.3.0")]
    # oracle: uv's own check finds the same single conflict
    check = subprocess.run([uv_exe(), "pip", "check", "--python", str(env / "bin" / "python")],
                           capture_output=True, text=True, env=dict(os.environ, UV_CACHE_DIR=str(uv_cache)))
    assert "Found 1 incompatibility" in check.stdout + check.stderr, check.stdout + check.stderr
    assert "cuda-tile" in check.stdout + check.stderr
    # import flashinfer: refused beside the 0.6.12 cubin without the stack environment, works with it
    py = str(env / "bin" / "python")
    plain = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    bare = subprocess.run([py, "-c", "import flashinfer"], env=plain, capture_output=True, text=True)
    assert bare.returncode != 0 and "flashinfer-cubin version (0.6.12) does not match" in bare.stderr, bare.stderr
    with_env = stackenv.apply(stackenv.runtime_env(ctx.paths.root, "9.0", None), plain)
    ok = subprocess.run([py, "-c", "import flashinfer; print(flashinfer.__version__, flashinfer.__file__)"],
                        env=with_env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    version, where = ok.stdout.split()[-2:]
    assert version == "0.6.15" and Path(where).is_relative_to(src)
    assert out["imports_with_stack_env"] == {"flashinfer": "0.6.15"}
    # the build left the fork's tree clean (only ignored build files), and no NIXL patch was applied
    status = subprocess.run(["git", "-C", str(src), "status", "--porcelain"], capture_output=True, text=True,
                            check=True).stdout
    assert status == ""


def test_real_backend_without_the_recipes_knobs_is_stopped_naming_what_it_wanted(real_stack) -> None:
    """Planted: the recipe's [forks.build_env] removed.  The real backend then also asks for NCCL's
    and NIXL's wheels (EP backends on by default); the guard refuses them, nothing is fetched, and the
    step fails naming both."""
    ctx, src, env, hits = real_stack
    before = installed_versions(env)
    fi = dataclasses.replace(ctx.recipe.fork("flashinfer"), build_env={})
    ctx.options = dataclasses.replace(ctx.options, recipe=dataclasses.replace(ctx.recipe, forks=(fi,)))
    with pytest.raises(InstallError) as err:
        InstallStep().run(ctx)
    text = str(err.value)
    assert "nvidia-nccl-cu13" in text and "nixl-cu13" in text and "BUILD_NVEP" in text
    assert hits == []
    after = installed_versions(env)
    assert {k: v for k, v in after.items() if before.get(k) != v} == {"flashinfer-python": "0.6.15"}
