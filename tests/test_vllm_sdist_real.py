"""Real tier: upstream vLLM 0.24.0 and 0.18.0, made from their PyPI sdists, through october_setup's fetch,
wheel and install steps with the real base wheels, on CPU (issue 18, deliverable 1).

Everything is real: the sdists and wheels from PyPI (downloaded once into ``real_cache_dir()``, where
``tests/test_wheel_real.py`` keeps the wheels; later runs verify the cached copies), the fork materialised
from the sdist by the fetch step, the real ``setup.py`` run by real uv, a Python 3.12 env with PyPI's torch
and the release's ``requirements/common.txt`` (uv cache under ``real_cache_dir()/uv``, as
``tests/test_install_real.py``).  During the install, every proxy variable and the index point at a
loopback server that records any request: vLLM's ``setup.py`` fetches its nightly wheel with urllib, which
honours them, so a request it made would be seen (``test_setup_py_without_location_asks_for_a_nightly``
shows the trap catching the real one).  Mocked: nothing; what a CPU machine cannot show (the extensions
loading on a driver) is checked statically and said so.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from october.installer.core.errors import InstallError
from october.installer.git.sdist import materialise
from october.installer.pyenv.uvcmd import uv_exe
from october.installer.recipe import Recipe, Sources, load_recipe
from october.installer.steps.fetch import FetchStep
from october.installer.steps.install import InstallStep
from october.installer.steps.results import WheelResult
from october.installer.steps.wheel import WheelStep
from october.installer.wheels.download import cache_path
from tests.conftest import real_cache_dir
from tests.fixtures import stack_forks as sf
from tests.test_install_real import _python312

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {"0.24.0": "vllm-0.24.0-pr3812", "0.18.0": str(ROOT / "tests/fixtures/recipes/vllm-0.18.0-sdist.toml")}
# `uv pip check` on the finished env: requirements/cuda.txt, as the editable package's metadata declares it
CUDA_TXT = {"0.24.0": 13, "0.18.0": 7}
PROXY_VARS = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


class _Recording(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def _record(self) -> None:
        type(self).hits.append(f"{self.command} {self.path}")
        self.send_error(403)

    do_GET = do_CONNECT = do_POST = do_HEAD = _record  # noqa: N815 - http.server's names

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def trap() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Recording,), {"hits": hits}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    server.server_close()


def _recipe(version: str, python: str, index: str) -> Recipe:
    shipped = load_recipe(RECIPES[version])
    vllm = shipped.fork("vllm")
    # PyPI's torch says 2.11.0 / 2.10.0 (the recipe's +cu130 names the PyTorch index's build of the same torch)
    torch = dataclasses.replace(shipped.torch, version=shipped.torch.version.split("+")[0], allow_system=False)
    return dataclasses.replace(shipped, python=python, forks=(vllm,), torch=torch, sources=Sources(index_url=index),
                               install=dataclasses.replace(shipped.install, exceptions=tuple(
                                   e for e in shipped.install.exceptions if e.package == "vllm")))


def _uv_env() -> dict[str, str]:
    env = dict(os.environ, UV_CACHE_DIR=str(real_cache_dir() / "uv"), UV_LINK_MODE="hardlink")
    env.pop("VIRTUAL_ENV", None)
    return env


def _make_env(stack: Path, recipe: Recipe, fork: Path) -> Path:
    """STACK/env: Python 3.12, PyPI's torch, the recipe's build requirements and supply (common.txt)."""
    env = _uv_env()
    subprocess.run([uv_exe(), "venv", "-q", "--python", _python312(), str(stack / "env")], check=True, env=env)
    reqs = [f"torch=={recipe.torch.version}", *recipe.build_requirements, *recipe.install.supply]
    subprocess.run([uv_exe(), "pip", "install", "-q", "--python", str(stack / "env" / "bin" / "python"),
                    "--index-url", "https://pypi.org/simple", *reqs], check=True, env=env)
    return stack / "env"


@dataclasses.dataclass
class Installed:
    ctx: object
    fork: Path
    env: Path
    wheel: dict
    out: dict
    seconds: float


def _stack(tmp: Path, version: str, trap: tuple[str, list[str]], mp: pytest.MonkeyPatch) -> Installed:
    url, hits = trap
    stack = tmp / f"stack-{version}"
    python = _python312()
    probe = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], capture_output=True,
                           text=True, check=True).stdout.strip()
    recipe = _recipe(version, probe, f"{url}/simple")
    ctx = sf.context(stack, recipe, real_cache_dir())
    fetch = FetchStep().run(ctx)
    ctx.done["fetch"] = sf.record(fetch)
    fork = Path(fetch.forks["vllm"].path)
    _make_env(stack, recipe, fork)
    wheel = WheelStep().run(ctx)
    assert isinstance(wheel, WheelResult)
    ctx.done["wheel"] = sf.record(wheel)
    for var in PROXY_VARS:
        mp.setenv(var, url)
    for var in ("no_proxy", "NO_PROXY"):
        mp.delenv(var, raising=False)
    for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "PIP_INDEX_URL"):
        mp.setenv(var, f"{url}/simple")
    before = list(hits)
    start = time.monotonic()
    out = InstallStep().run(ctx).to_json()
    seconds = time.monotonic() - start
    assert hits == before, f"the install made network requests: {hits[len(before):]}"
    mp.undo()
    return Installed(ctx, fork, stack / "env", wheel.to_json(), out, seconds)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, trap) -> dict[str, Installed]:
    out: dict[str, Installed] = {}
    tmp = tmp_path_factory.mktemp("vllm-sdist")
    for version in ("0.24.0", "0.18.0"):
        mp = pytest.MonkeyPatch()
        try:
            out[version] = _stack(tmp, version, trap, mp)
        finally:
            mp.undo()
    return out


@pytest.mark.parametrize("version", ["0.24.0", "0.18.0"])
def test_sdist_fork_installs_precompiled_offline_and_clean(installed, version: str) -> None:
    got = installed[version]
    out = got.out
    # the fork is the release, tagged: setuptools-scm's version is the release's, not 0.1.dev1+g<sha>
    assert [f["version"] for f in out["forks"]] == [f"{version}+precompiled"]
    env = dict(out["forks"][0]["env"])
    loc = env["VLLM_PRECOMPILED_WHEEL_LOCATION"]
    assert Path(loc).is_absolute() and Path(loc) == Path(got.wheel["path"]).resolve()
    assert "VLLM_PRECOMPILED_WHEEL_COMMIT" not in env and out["vllm_base_commit"] is None
    # the install left every tracked file as committed (0.18.0's wheel copies of vllm_flash_attn/*.py are
    # byte-identical to the release's)
    status = subprocess.run(["git", "-C", str(got.fork), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, check=True).stdout
    assert status == ""
    # the wheel is proved to be the sdist's release, file by file
    eq = got.wheel["source_equivalence"]
    assert eq["method"] == "sdist-files" and eq["python_files_identical"] > 1000
    assert eq["sdist_commit_id"].lstrip("g") == eq["wheel_commit_id"].lstrip("g") == got.wheel["source_commit"]
    assert "sdist-equivalence" in got.wheel["checks"]
    # only requirements/cuda.txt is unmet, each declared with a reason; uv's own check agrees
    judged = out["consistency"]
    assert judged["undeclared"] == [] and len(judged["declared"]) == CUDA_TXT[version]
    assert all(d["package"] == "vllm" for d in judged["declared"])
    check = subprocess.run([uv_exe(), "pip", "check", "--python", str(got.env / "bin" / "python")],
                           capture_output=True, text=True, env=_uv_env())
    assert f"Found {CUDA_TXT[version]} incompatibilities" in check.stdout + check.stderr, check.stdout + check.stderr
    # no driver here: each extension is checked statically, and the result says so
    imports = {k: v for k, v in out["checks"].items() if k.startswith("import vllm.")}
    assert imports and all("no CUDA driver" in v and "torch ABI checked statically" in v for v in imports.values()), \
        imports
    print(f"\nvLLM {version}: install step {got.seconds:.1f} s")


def test_materialising_is_deterministic(tmp_path: Path) -> None:
    """A second materialisation of the cached 0.18.0 sdist, elsewhere, makes forks.toml's commit again."""
    pin = load_recipe(RECIPES["0.18.0"]).fork("vllm").pin
    assert pin.sdist is not None
    cached = cache_path(real_cache_dir(), pin.sdist.sha256, pin.sdist.filename)
    if not cached.is_file():
        pytest.fail(f"expected the sdist cached at {cached} by the module's fetch (run the whole file)")
    local = cache_path(tmp_path, pin.sdist.sha256, pin.sdist.filename)
    local.parent.mkdir(parents=True)
    os.link(cached, local)
    made = materialise(sf.context(tmp_path / "s", load_recipe(RECIPES["0.18.0"]), tmp_path).runner, "fetch",
                       tmp_path, pin.sdist, "vllm", pin.commit)
    assert made.commit == pin.commit and made.tag == "v0.18.0" and made.recorded_commit_id == "gbcf2be961"
    # git refuses "dubious ownership" of files owned by another uid: ours are owned by us
    tree = subprocess.run(["git", "--git-dir", str(made.path), "ls-tree", "-r", "--name-only", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert "setup.py" in tree and "vllm/_version.py" not in tree and not any(".egg-info/" in t for t in tree)


def test_overwritten_tracked_file_is_named(installed, tmp_path: Path) -> None:
    """Planted: a fork of 0.18.0 whose vllm/vllm_flash_attn/__init__.py differs from the wheel's.  The real
    setup.py copies the wheel's file over it; the install fails naming the file."""
    got = installed["0.18.0"]
    fork = tmp_path / "fork"
    subprocess.run(["git", "-c", "advice.detachedHead=false", "clone", "-q", str(got.fork), str(fork)], check=True)
    target = fork / "vllm" / "vllm_flash_attn" / "__init__.py"
    target.write_text(target.read_text() + "\n# the fork's own change\n")
    commit = sf.commit_all(fork, "fork change")
    subprocess.run(["git", "-C", str(fork), "tag", "--force", "v0.18.0"], check=True, capture_output=True)
    ctx = got.ctx
    ctx.done["fetch"] = sf.record(sf.fetched({"vllm": (fork, commit)}))
    with pytest.raises(InstallError) as err:
        InstallStep().run(ctx)
    assert "overwrote 1 of its tracked file(s): vllm/vllm_flash_attn/__init__.py" in str(err.value)


def test_abi_drift_is_told_apart_from_a_missing_driver(installed, tmp_path: Path) -> None:
    """Planted: one torch symbol the 0.24.0 extension needs renamed in a copy of the real .so (same length,
    so the ELF stays valid).  Without a driver the guard names the drift; the real file passes."""
    got = installed["0.24.0"]
    ext = got.fork / "vllm" / "_C_stable_libtorch.abi3.so"
    data = ext.read_bytes()
    name = b"torch_dtype_float8_e8m0fnu\0"
    assert name in data
    ext.rename(tmp_path / "orig.so")
    try:
        ext.write_bytes(data.replace(name, b"torch_dtype_float8_e8m0fnX\0", 1))
        step = InstallStep()
        with pytest.raises(InstallError) as err:
            from october.installer.install.guards import run_guards
            run_guards(got.ctx.runner, "install", step.guard_spec(got.ctx, step._forks(got.ctx)))
        text = str(err.value)
        assert "torch ABI drift" in text and "torch_dtype_float8_e8m0fnX" in text
    finally:
        ext.unlink(missing_ok=True)
        shutil.move(tmp_path / "orig.so", ext)


def _real_behaviour(got: Installed, trap: tuple[str, list[str]], tmp: Path) -> dict[str, str]:
    """How the real setup.py treats the location variable: unset, and relative (the wheel in the fork's
    directory, uv started elsewhere)."""
    url, hits = trap
    out: dict[str, str] = {}
    base = _uv_env()
    base.update({v: url for v in PROXY_VARS}, VLLM_USE_PRECOMPILED="1")
    for v in ("no_proxy", "NO_PROXY", "VLLM_PRECOMPILED_WHEEL_LOCATION"):
        base.pop(v, None)
    argv = [uv_exe(), "pip", "install", "--python", str(got.env / "bin" / "python"), "--offline", "--no-deps",
            "--no-build-isolation", "--reinstall-package", "vllm", "-e", str(got.fork)]
    before = len(hits)
    done = subprocess.run(argv, capture_output=True, text=True, env=base, cwd=tmp, timeout=900)
    said = done.stdout + done.stderr
    out["unset"] = "nightly" if done.returncode != 0 and "wheels.vllm.ai" in said and len(hits) > before \
        else f"other (exit {done.returncode}, {len(hits) - before} requests): {said[-600:]}"
    rel = got.fork / "rel.whl"
    os.link(got.wheel["path"], rel)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(base, VLLM_PRECOMPILED_WHEEL_LOCATION="rel.whl"),
                              cwd=tmp, timeout=900)
    finally:
        rel.unlink()
    out["relative"] = "fork-dir" if done.returncode == 0 else f"other: {(done.stdout + done.stderr)[-600:]}"
    return out


def _stand_in_behaviour(tmp: Path) -> dict[str, str]:
    """The same two cases against the stand-in vLLM's backend (tests/fixtures/stack_forks.py), run as uv runs a
    PEP 517 backend: in the project's directory."""
    fork = tmp / "standin"
    sf.write_project(fork, "vllm", "0.18.0", "vllm", '__version__ = "0.18.0"\n', precompiled=True)
    wheel = sf.base_wheel(tmp, sf.compile_extension(tmp / "_C.abi3.so"))
    code = "import sys, backend; backend.build_editable(sys.argv[1])"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env["VLLM_USE_PRECOMPILED"] = "1"
    out_dir = tmp / "out"
    out_dir.mkdir()
    done = subprocess.run([sys.executable, "-c", code, str(out_dir)], cwd=fork, env=env, capture_output=True, text=True)
    out = {"unset": "nightly" if done.returncode != 0 and "wheels.vllm.ai" in done.stderr else f"other: {done.stderr[-400:]}"}
    shutil.copy(wheel, fork / "rel.whl")
    done = subprocess.run([sys.executable, "-c", code, str(out_dir)], cwd=fork, capture_output=True, text=True,
                          env=dict(env, VLLM_PRECOMPILED_WHEEL_LOCATION="rel.whl"))
    out["relative"] = "fork-dir" if done.returncode == 0 else f"other: {done.stderr[-400:]}"
    return out


def test_stand_in_handles_the_location_as_the_real_setup_py(installed, trap, tmp_path: Path) -> None:
    """The real setup.py, with VLLM_USE_PRECOMPILED=1: no location -> it goes for a nightly wheel from
    wheels.vllm.ai (its request reaches the recording proxy, so the trap the install runs under works); a
    relative location -> read from the fork's directory.  The stand-in must behave the same: a stand-in
    that quietly used some wheel, or read a relative path from the caller's directory, fails here."""
    real = _real_behaviour(installed["0.24.0"], trap, tmp_path)
    assert real == {"unset": "nightly", "relative": "fork-dir"}, real
    assert _stand_in_behaviour(tmp_path) == real


def test_the_real_engine_refuses_the_k16v8_pair_as_the_stand_in_does(installed) -> None:
    """Upstream 0.24.0 keeps one cache dtype for K and V: its real ``CacheConfig`` (what ``vllm.LLM`` builds
    from ``kv_cache_dtype``; on CPU the engine stops earlier, at the device) refuses the pair the harness
    passes.  Its message is the one the stand-in raises (``upstream_one_dtype``) and the one
    ``checks.engine.refusal`` turns into a named physical K16/V8 failure; a drift fails here."""
    import warnings

    from october.checks.engine.refusal import refused_cache_dtype
    with warnings.catch_warnings():  # torch warns at import when numpy is absent
        warnings.simplefilter("ignore", UserWarning)
        from october.checks.engine.vllm_surface import KV_CACHE_DTYPE

    py = installed["0.24.0"].env / "bin" / "python"
    code = ("import sys\nfrom vllm.config import CacheConfig\n"
            f"try:\n    CacheConfig(cache_dtype={KV_CACHE_DTYPE!r})\nexcept Exception as e:\n"
            "    sys.stdout.write('@@refusal@@' + type(e).__name__ + '\\n' + str(e) + '\\n')\n"
            "else:\n    print('@@refusal@@accepted')\n")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, VLLM_LOGGING_LEVEL="ERROR"))
    name, _, message = out.stdout.partition("@@refusal@@")[2].partition("\n")
    assert name == "ValidationError", out.stdout + out.stderr[-2000:]
    recorded = (ROOT / "tests/fixtures/vllm_0_24_0_cache_dtype_refusal.txt").read_text(encoding="utf-8")
    assert message == recorded, "the real refusal drifted from the stand-in's copy: re-record it"
    refusal = refused_cache_dtype(type("ValidationError", (ValueError,), {})(message.rstrip("\n")), KV_CACHE_DTYPE)
    assert refusal is not None and "fp8_e4m3" in refusal.accepts and len(refusal.accepts) == 15
    assert refusal.error.startswith("ValidationError: 1 validation error for CacheConfig")


def test_a_tiny_qwen3_made_offline_is_a_local_model_the_tool_checks(installed, tmp_path: Path) -> None:
    """Issue 18, deliverable 3: ``bench/tiny_qwen3.py`` run by the real 0.24.0 env's Python (its real
    transformers and tokenizers, from requirements/common.txt) makes a random-weight Qwen3 (head dim 128, a
    local byte tokenizer), its calibrated V scales and a recipe pinning every file; ``current download
    --model-dir`` checks the copy in place and writes the manifest the engine level reads, scales included.
    Planted: one byte of the weights changed -- refused (exit 19 is a download failure), nothing written."""
    py = installed["0.24.0"].env / "bin" / "python"
    model, fixtures, recipe, out = (tmp_path / n for n in ("model", "fixtures", "tiny.toml", "out"))
    made = subprocess.run([str(py), str(ROOT / "bench/tiny_qwen3.py"), str(model), "--fixtures", str(fixtures),
                           "--recipe-from", str(ROOT / "recipes/vllm-0.24.0-pr3812.toml"),
                           "--recipe-out", str(recipe)], capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    info = json.loads(made.stdout)
    cfg = json.loads((model / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["head_dim"] == 128
    tok = subprocess.run([str(py), "-c", "import sys; from transformers import AutoTokenizer as A; "
                          "t = A.from_pretrained(sys.argv[1]); s = 'K16/V8 caché: ok'; "
                          "print(t.decode(t.encode(s, add_special_tokens=False)) == s)", str(model)],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert tok.stdout.strip().endswith("True"), tok.stderr[-2000:]
    loaded = load_recipe(str(recipe))
    assert loaded.models["fp16"].repo == "local/tiny-qwen3" and loaded.models["fp16"].revision == info["revision"]
    cmd = [sys.executable, "-m", "october", "download", "--recipe", str(recipe), "--format", "fp16",
           "--model-dir", str(model), "--output", str(out), "--fixtures", str(fixtures), "-q"]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    manifest = json.loads((out / "fp16-download.json").read_text())
    assert manifest["scales"]["num_layers"] == 2 and len(manifest["files"]) == 5
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    (out / "fp16-download.json").unlink()
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bad.returncode != 0 and "model.safetensors" in bad.stdout + bad.stderr
    assert not (out / "fp16-download.json").exists()
