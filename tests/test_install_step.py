"""The ``install`` step end to end on stand-in forks (real git, real wheels, real uv, offline).

Stand-ins (see tests/fixtures/stack_forks.py): the vLLM and FlashInfer forks are tiny
projects with an in-tree build backend; the vLLM one consumes the base wheel named by
``VLLM_PRECOMPILED_WHEEL_LOCATION`` like the real setup.py does.  ``libcuda.so.1``
cannot exist on this machine: where a test needs "CUDA libraries exist", it points the
gate at ``libc.so.6`` (said in that test's docstring).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from october.installer.core.errors import InstallError
from october.installer.core.runner import Runner
from october.installer.install.guards import GuardSpec, run_guards
from october.installer.install.upstream import upstream_base
from october.installer.pyenv.uvcmd import uv_exe
from october.installer.steps.env import write_stack_env
from october.installer.steps.install import InstallStep
from october.installer.steps.results import InstallResult
from tests.fixtures import stack_forks as sf

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def links(tmp_path_factory: pytest.TempPathFactory) -> sf.Links:
    return sf.make_links(tmp_path_factory.mktemp("links"))


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _setup(tmp_path: Path, links: sf.Links, cache: Path, *, payload: bytes | None = None,
           vllm_deps: tuple[str, ...] = ("flashinfer-python==0.6.6",), vllm_upstream: str | None = None,
           wheel_commit: str | None = None):
    stack = tmp_path / "stack"
    forks = sf.make_forks(stack, tmp_path / "repos", vllm_deps=vllm_deps)
    wheel = sf.base_wheel(tmp_path, links.c_ext if payload is None else payload,
                          source_commit=forks.upstream_commit)
    sf.make_env(stack, links, cache / "uv")
    rec = sf.recipe(links, forks, tmp_path, vllm_upstream=vllm_upstream)
    ctx = sf.context(stack, rec, cache)
    write_stack_env(ctx)
    ctx.done["fetch"] = sf.record(sf.fetched({"vllm": (forks.vllm, forks.commits["vllm"]),
                                              "flashinfer": (forks.flashinfer, forks.commits["flashinfer"])}))
    ctx.done["wheel"] = sf.record(sf.verified_wheel(wheel, source_commit=wheel_commit))
    return ctx, forks, wheel


def _uv_into(ctx, *args: str) -> None:
    env = dict(os.environ, UV_CACHE_DIR=str(ctx.options.cache_dir / "uv"))
    env.pop("VIRTUAL_ENV", None)
    subprocess.run([uv_exe(), "pip", "install", "-q", "--python", str(ctx.paths.python), "--no-index",
                    *args], check=True, env=env)


def test_install_consumes_the_verified_wheel_and_lays_flashinfer_last(tmp_path, links, cache):
    """Happy path; ``import vllm._C`` is tried because the CUDA gate is pointed at libc.so.6
    (libcuda.so.1 cannot exist here), and the stand-in _C is a real compiled extension."""
    ctx, forks, wheel = _setup(tmp_path, links, cache)
    step = InstallStep(cuda_libs=("libc.so.6",))
    out = step.run(ctx).to_json()
    assert out["order"] == ["vllm", "flashinfer"]
    # the build consumed exactly the verified wheel's file
    consumed = json.loads((forks.vllm / "vllm" / "_precompiled.json").read_text())
    assert consumed["location"] == str(wheel)
    assert (forks.vllm / "vllm" / "_C.abi3.so").read_bytes() == links.c_ext
    # the base commit is the merge-base with the upstream, recorded and passed to the build
    assert out["vllm_base_commit"] == forks.upstream_commit == consumed["commit"]
    assert out["vllm_base_commit_source"] == "merge-base"
    assert out["checks"] == {"torch": "ok", "vllm": "ok", "flashinfer": "ok", "import vllm._C": "ok"}
    fi = next(f for f in out["forks"] if f["name"] == "flashinfer")
    assert fi["dist"] == "flashinfer-python" and fi["version"] == "0.6.7" and "--no-deps" in fi["args"]
    assert step.verify(ctx, step.load(out)) is None


def test_vllm_C_is_not_verifiable_without_cuda_and_says_so(tmp_path, links, cache):
    ctx, _, _ = _setup(tmp_path, links, cache)
    out = InstallStep(cuda_libs=("libcuda-does-not-exist.so.1",)).run(ctx).to_json()
    said = out["checks"]["import vllm._C"]
    assert said.startswith("not verifiable here: no CUDA driver (libcuda-does-not-exist.so.1")
    # the stand-in's gcc-built _C needs nothing torch lacks: checked statically, and said so
    assert "torch ABI checked statically" in said and "_C.abi3.so, all defined by the env's torch" in said


def test_vllm_C_that_does_not_import_fails_the_step(tmp_path, links, cache):
    """CUDA gate pointed at libc.so.6 (libcuda cannot exist here); the wheel's _C is not an ELF file."""
    ctx, _, _ = _setup(tmp_path, links, cache, payload=b"not an ELF file")
    with pytest.raises(InstallError) as err:
        InstallStep(cuda_libs=("libc.so.6",)).run(ctx)
    assert "import vllm._C" in str(err.value)


@pytest.mark.parametrize("dep", ["torch-future==1.0", "torch-mover==1.0"])
def test_a_dependency_that_moves_torch_fails_naming_torch(tmp_path, links, cache, dep):
    ctx, _, _ = _setup(tmp_path, links, cache, vllm_deps=(dep,))
    with pytest.raises(InstallError) as err:
        InstallStep().run(ctx)
    text = str(err.value)
    assert "torch" in text and sf.TORCH in text and "vllm" in text
    assert json.loads(subprocess.run([str(ctx.paths.python), "-c",
                                      "import json, importlib.metadata as m; print(json.dumps(m.version('torch')))"],
                                     capture_output=True, text=True, check=True).stdout) == sf.TORCH


def test_guard_fires_when_a_non_editable_flashinfer_lands_over_the_fork(tmp_path, links, cache):
    ctx, forks, _ = _setup(tmp_path, links, cache)
    step = InstallStep()
    out = step.run(ctx).to_json()
    _uv_into(ctx, "--find-links", str(links.dir), "--reinstall", "--no-deps", "flashinfer-python==0.6.6")
    spec = GuardSpec(python=ctx.paths.python, torch_version=sf.TORCH,
                     forks={"vllm": forks.vllm, "flashinfer": forks.flashinfer})
    with pytest.raises(InstallError) as err:
        run_guards(ctx.runner, "install", spec)
    text = str(err.value)
    assert "flashinfer" in text and str(forks.flashinfer) in text and "from an index" in text
    assert "flashinfer" in (step.verify(ctx, step.load(out)) or "")


def test_guard_fires_when_torch_was_replaced(tmp_path, links, cache):
    ctx, forks, _ = _setup(tmp_path, links, cache)
    InstallStep().run(ctx)
    _uv_into(ctx, "--find-links", str(links.dir), "--no-deps", "torch==2.11.0")
    spec = GuardSpec(python=ctx.paths.python, torch_version=sf.TORCH, forks={"vllm": forks.vllm})
    with pytest.raises(InstallError) as err:
        run_guards(ctx.runner, "install", spec)
    assert f"torch {sf.TORCH} exactly" in str(err.value) and "torch 2.11.0" in str(err.value)


def test_a_changed_wheel_is_refused(tmp_path, links, cache):
    ctx, _, wheel = _setup(tmp_path, links, cache)
    with open(wheel, "ab") as fh:
        fh.write(b"tampered")
    with pytest.raises(InstallError) as err:
        InstallStep().run(ctx)
    assert "changed after it was verified" in str(err.value)


def test_rerun_with_a_new_wheel_rebuilds_the_fork(tmp_path, links, cache):
    ctx, forks, _wheel = _setup(tmp_path, links, cache)
    InstallStep().run(ctx)
    other = sf.base_wheel(tmp_path / "second", b"second payload", source_commit=forks.upstream_commit)
    ctx.done["wheel"] = sf.record(sf.verified_wheel(other))
    InstallStep().run(ctx)
    assert (forks.vllm / "vllm" / "_C.abi3.so").read_bytes() == b"second payload"


def test_install_records_each_forks_build_outputs_and_its_noop_check_holds_them(tmp_path, links, cache, monkeypatch):
    """The vLLM stand-in's build copies _C.abi3.so into the checkout (git ignores it), as the real precompiled
    setup.py does: the result records it by sha256; the no-op check names it when it changes or goes, and
    takes an unchanged one from its stat signature without reading it."""
    import dataclasses
    import time

    from october.installer.core.hashing import sha256_bytes, sha256_file
    from october.installer.git import buildoutputs

    ctx, forks, _ = _setup(tmp_path, links, cache)
    step = InstallStep()
    result = step.run(ctx)
    so, meta = forks.vllm / "vllm" / "_C.abi3.so", forks.vllm / "vllm" / "_precompiled.json"
    assert result.build_outputs == {"vllm": {"vllm/_C.abi3.so": "sha256:" + sha256_bytes(links.c_ext),
                                             "vllm/_precompiled.json": "sha256:" + sha256_file(meta)},
                                    "flashinfer": {}}
    assert step.load(result.to_json()) == result and step.verify(ctx, result) is None
    clean = so.read_bytes()
    so.write_bytes(clean[:-1] + bytes([clean[-1] ^ 1]))
    assert step.verify(ctx, result) == ("fork vllm's build outputs differ from what its install left "
                                        "(vllm/_C.abi3.so (changed))")
    so.unlink()
    assert "vllm/_C.abi3.so (missing)" in (step.verify(ctx, result) or "")
    so.write_bytes(clean)
    assert step.verify(ctx, result) is None
    time.sleep(1.1)             # older than file trust's racy window: its signature is kept
    ctx.trust.save()

    def unread(path, *_args):
        raise AssertionError(f"{path} was looked at beyond its stat signature")

    monkeypatch.setattr(buildoutputs, "trusted_digest", unread)
    assert step.verify(ctx, result) is None
    # a result of an october that recorded no build outputs: the install runs again and records them
    old = InstallResult.from_json({k: v for k, v in result.to_json().items() if k != "build_outputs"})
    assert old == dataclasses.replace(result, build_outputs=None) and old.chain_json() == result.chain_json()
    assert "build outputs are not recorded" in (step.verify(ctx, old) or "")


def test_a_rerun_records_what_its_install_made_not_what_it_found(tmp_path, links, cache):
    """Before a re-run: a replaced _C.abi3.so (the build writes it again: its own bytes are recorded) and a
    planted extension module (the build leaves it untouched: not recorded, said, and `current verify` names it)."""
    from october.installer.core.hashing import sha256_bytes

    ctx, forks, _ = _setup(tmp_path, links, cache)
    step = InstallStep()
    step.run(ctx)
    (forks.vllm / "vllm" / "_C.abi3.so").write_bytes(b"\x7fELF replaced")
    (forks.vllm / "vllm" / "_planted.abi3.so").write_bytes(b"\x7fELF planted")
    again = step.run(ctx).build_outputs or {}
    assert sorted(again["vllm"]) == ["vllm/_C.abi3.so", "vllm/_precompiled.json"]
    assert again["vllm"]["vllm/_C.abi3.so"] == "sha256:" + sha256_bytes(links.c_ext)
    assert (f"fork vllm: 1 file(s) git does not track were in {forks.vllm} before the install, which did not "
            "make them (vllm/_planted.abi3.so)") in ctx.runner.log_path("install").read_text()


def test_unreachable_upstream_fails_closed(tmp_path, links, cache):
    ctx, _forks, _ = _setup(tmp_path, links, cache, vllm_upstream=str(tmp_path / "no-such-upstream"))
    with pytest.raises(InstallError) as err:
        InstallStep().run(ctx)
    text = str(err.value)
    assert "upstream base commit" in text and "no-such-upstream" in text and "git fetch" in text


def test_unreachable_upstream_falls_back_to_a_wheel_commit_git_proves(tmp_path):
    """Upstream missing; the wheel's source commit (a 9-char prefix, as _version.py has it) is resolved
    in the clone and checked as an ancestor of HEAD."""
    forks = sf.make_forks(tmp_path / "stack", tmp_path / "repos")
    runner = Runner(tmp_path / "logs")
    base = upstream_base(runner, "install", forks.vllm, str(tmp_path / "gone"),
                         wheel_commit=forks.upstream_commit[:9])
    assert (base.commit, base.source) == (forks.upstream_commit, "wheel-source-commit")
    # a commit that is not an ancestor of the fork (a later upstream commit) is refused
    (forks.upstream / "later.txt").write_text("x")
    later = sf.commit_all(forks.upstream, "later")
    sf.git(forks.vllm, "fetch", "-q", str(forks.upstream), "main")
    with pytest.raises(InstallError) as err:
        upstream_base(runner, "install", forks.vllm, str(tmp_path / "gone"), wheel_commit=later)
    assert "not an ancestor" in str(err.value)
    # reachable upstream: the merge-base, even after upstream moved on
    base = upstream_base(runner, "install", forks.vllm, str(forks.upstream))
    assert (base.commit, base.source) == (forks.upstream_commit, "merge-base")

