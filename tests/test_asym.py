"""october.checks.flashinfer_asym: 'asymmetric' decided by what plan accepts, on hand-written forms, the stand-in, and the real
FlashInfer (the 2f3f0f6d source from ../shared/real-forks and the released flashinfer-python wheel)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from october.checks import flashinfer_asym
from tests.conftest import real_cache_dir

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "fake_flashinfer"
RECORDED = ROOT / "tests" / "fixtures" / "real_signatures" / "flashinfer-2f3f0f6d.json"
REAL_COMMIT = "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"
RELEASED = "0.7.4"        # the released flashinfer-python checked (symmetric, forwarding plan)


class Explicit:
    def plan(self, indptr, indices, last, hq, hkv, d, page, q_data_type="float16", kv_data_type=None, *,  # type: ignore[no-untyped-def]
             k_data_type=None, v_data_type=None):
        raise AssertionError("the probe must not run an explicit plan")


class Forwarding:
    def plan(self, indptr, indices, last, hq, hkv, d, page, *deprecated_positional_args, **kwargs):  # type: ignore[no-untyped-def]
        if deprecated_positional_args:
            raise AssertionError("unexpected")
        return self._plan_impl(indptr, indices, last, hq, hkv, d, page, **kwargs)

    def _plan_impl(self, indptr, indices, last, hq, hkv, d, page, *, q_data_type="float16", kv_data_type=None,  # type: ignore[no-untyped-def]
                   k_data_type=None, v_data_type=None):
        raise AssertionError("the probe must not reach the implementation")


class ForwardingSymmetric(Forwarding):
    def _plan_impl(self, indptr, indices, last, hq, hkv, d, page, *, q_data_type="float16", kv_data_type=None):  # type: ignore[no-untyped-def, override]
        raise AssertionError("unreachable")


class DropsKwargs(Forwarding):
    def plan(self, indptr, indices, last, hq, hkv, d, page, **kwargs):  # type: ignore[no-untyped-def, override]
        return self._plan_impl(indptr, indices, last, hq, hkv, d, page)


class Symmetric:
    def plan(self, indptr, indices, last, hq, hkv, d, page, q_data_type="float16", kv_data_type=None):  # type: ignore[no-untyped-def]
        pass


class Opaque:
    def plan(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("needs a GPU")


@pytest.mark.parametrize(("cls", "ok", "form", "says"), [
    (Explicit, True, "explicit", "names k_data_type"),
    (Forwarding, True, "forwarding", "forwards to w._plan_impl"),
    (ForwardingSymmetric, False, None, "symmetric FlashInfer"),
    (DropsKwargs, False, None, "does not pass k_data_type"),
    (Symmetric, False, None, "does not accept k_data_type"),
    (Opaque, False, None, "cannot follow"),
])
def test_forms(cls: type, ok: bool, form: str | None, says: str) -> None:
    v = flashinfer_asym.plan_verdict(cls, "w")
    assert (v.asymmetric, v.form) == (ok, form) and says in v.reason, v


def test_missing_wrapper_is_refused() -> None:
    class Fi:
        __version__ = "9"
    caps = flashinfer_asym.capabilities(Fi)
    assert caps.problem() and "has no BatchDecodeWithPagedKVCacheWrapper" in caps.problem()  # type: ignore[operator]


def _caps_in_subprocess(pythonpath: list[Path], env_extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Import flashinfer from ``pythonpath`` in a fresh interpreter and print october.checks.flashinfer_asym's verdict."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in [ROOT, *pythonpath]),
               FLASHINFER_DISABLE_VERSION_CHECK="1", **(env_extra or {}))
    code = ("import json, flashinfer; from october.checks.flashinfer_asym import capabilities; "
            "print(json.dumps({'file': flashinfer.__file__, **capabilities(flashinfer).as_json()}))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("api", "decode", "prefill"), [("0.6.15", "forwarding", None), ("explicit", "explicit",
                                                                                          "explicit"),
                                                        ("symmetric", None, None)])
def test_stand_in_api_forms(api: str, decode: str | None, prefill: str | None) -> None:
    caps = _caps_in_subprocess([FAKE], {"FAKE_FLASHINFER_API": api})
    assert caps["decode"]["form"] == decode and caps["paged_prefill"]["form"] == prefill
    assert caps["decode"]["asymmetric"] is (decode is not None) and caps["ragged_prefill"] is True


def test_stand_in_signatures_equal_the_recorded_real_ones() -> None:
    """The stand-in's 0.6.15 form has exactly the public signatures recorded from the real 2f3f0f6d source."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(FAKE)]))
    env.pop("FAKE_FLASHINFER_API", None)
    code = """
import inspect, json, flashinfer
from flashinfer.jit.attention import modules
from flashinfer.jit import core
out = {}
for cls in ("BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper"):
    for name in ("__init__", "plan", "_plan_impl", "run"):
        fn = getattr(getattr(flashinfer, cls), name, None)
        if fn is not None and (name != "_plan_impl" or "Decode" in cls):
            out[cls + "." + name] = [[p.name, p.kind.name, p.default is not inspect.Parameter.empty]
                                     for p in inspect.signature(fn).parameters.values()]
for fn in (modules.gen_batch_decode_module, modules.gen_batch_prefill_module, modules.get_batch_decode_uri,
           modules.get_batch_prefill_uri, core.build_jit_specs):
    out[fn.__name__] = [[p.name, p.kind.name, p.default is not inspect.Parameter.empty]
                        for p in inspect.signature(fn).parameters.values()]
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fake = json.loads(proc.stdout.strip().splitlines()[-1])
    real = json.loads(RECORDED.read_text())["signatures"]
    assert sorted(fake) == sorted(real)
    for key in real:
        assert fake[key] == real[key], key


# ---------------------------------------------------------------- the real tier


def _tvm_ffi_site(tmp: Path) -> Path:
    """apache-tvm-ffi (what ``import flashinfer`` needs beyond torch here) from PyPI, unpacked."""
    site = real_cache_dir() / f"tvm-ffi-py{sys.version_info.major}{sys.version_info.minor}"
    if not (site / "tvm_ffi").is_dir():
        subprocess.run(["uv", "pip", "install", "--quiet", "--python", sys.executable, "--target", str(site),
                        "apache-tvm-ffi>=0.1.11,!=0.1.8,<0.2", "numpy", "requests", "tqdm", "packaging", "jinja2",
                        "filelock", "nvidia-ml-py", "click", "einops", "tabulate"],
                       check=True, timeout=600)
    return site


@pytest.mark.real
def test_real_2f3f0f6d_source_is_asymmetric_decode_only(real_mirror: Path, tmp_path: Path) -> None:
    """The real PR #3812 head imports without a GPU: its decode plan forwards to _plan_impl (accepted), its
    paged prefill plan has no k_data_type (decode-only), and the ragged prefill is there."""
    src = tmp_path / "fi"
    subprocess.run(["git", "clone", "-q", str(real_mirror / "github.com/flashinfer-ai/flashinfer.git"), str(src)],
                   check=True, timeout=120)
    assert subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip() == REAL_COMMIT
    caps = _caps_in_subprocess([src, _tvm_ffi_site(tmp_path)])
    assert caps["file"] == str(src / "flashinfer" / "__init__.py")
    assert caps["decode"]["asymmetric"] and caps["decode"]["form"] == "forwarding"
    assert caps["decode"]["target"] == "_plan_impl"
    assert not caps["paged_prefill"]["asymmetric"] and "k_data_type" in caps["paged_prefill"]["reason"]
    assert caps["ragged_prefill"] is True
    # the recorded signatures are what the script extracts from this source today
    from tests.fixtures.signatures import extract
    assert extract(src) == json.loads(RECORDED.read_text())["signatures"]


@pytest.mark.real
def test_released_flashinfer_wheel_is_refused(tmp_path: Path) -> None:
    """flashinfer-python from PyPI (symmetric; same forwarding plan) must be refused by the same function."""
    dl = real_cache_dir() / "flashinfer-python"
    wheels = sorted(dl.glob(f"flashinfer_python-{RELEASED}-*.whl"))
    if not wheels:
        subprocess.run(["uv", "run", "--no-project", "--with", "pip", "python", "-m", "pip", "download", "--quiet",
                        "--no-deps", "--only-binary=:all:", "-d", str(dl), f"flashinfer-python=={RELEASED}"],
                       check=True, timeout=600)
        wheels = sorted(dl.glob(f"flashinfer_python-{RELEASED}-*.whl"))
    assert wheels, f"no flashinfer_python-{RELEASED} wheel in {dl}"
    site = tmp_path / "released"
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(site)
    caps = _caps_in_subprocess([site, _tvm_ffi_site(tmp_path)])
    assert caps["file"] == str(site / "flashinfer" / "__init__.py") and caps["version"] == RELEASED
    assert caps["decode"]["asymmetric"] is False and caps["decode"]["form"] is None
    assert "_plan_impl" in caps["decode"]["reason"] and "symmetric FlashInfer" in caps["decode"]["reason"]
