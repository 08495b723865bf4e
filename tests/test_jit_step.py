"""The ``jit`` step with a stand-in builder that compiles real small C libraries (no CUDA here).

The stack env is a real uv venv holding a stand-in ``flashinfer`` wheel (asymmetric
``plan`` signature, or the symmetric one of upstream FlashInfer); the builder is
tests/fixtures/jit_standin.py, which runs the real builder's ``main`` and replaces only
the CUDA compile with gcc.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from october.installer.core.errors import JitError, StateError
from october.installer.core.hashing import sha256_file
from october.installer.recipe import JitModule
from october.installer.steps.env import write_stack_env
from october.installer.jit.build import check_modules
from october.installer.steps.jit import JitStep
from tests.fixtures import stack_forks as sf
from tests.fixtures.jit_ctx import STANDIN, jit_api_context, jit_context

MODULES = (JitModule(kind="decode", q="bf16", k="bf16", v="e4m3", o="bf16", head_dim=128),
           JitModule(kind="prefill", q="bf16", k="bf16", v="e4m3", o="bf16", head_dim=128, posenc=1),
           JitModule(kind="decode", q="f16", k="f16", v="e4m3", o="f16", head_dim=64))


@pytest.fixture(scope="session")
def links(tmp_path_factory: pytest.TempPathFactory) -> sf.Links:
    root = tmp_path_factory.mktemp("jitlinks")
    d = root / "links"
    links = sf.Links(d, b"")
    links.add("flashinfer-python", "0.6.7", {"flashinfer/__init__.py": sf.FLASHINFER_ASYM})
    links.add("flashinfer-python", "0.6.6", {"flashinfer/__init__.py": sf.FLASHINFER_SYMMETRIC})
    return links


def _ctx(tmp_path: Path, links: sf.Links, *, flashinfer: str = "0.6.7", modules=MODULES):
    return jit_context(tmp_path, links, modules, packages=[f"flashinfer-python=={flashinfer}"])


def test_builds_records_hashes_and_rerun_is_a_cache_hit(tmp_path, links):
    ctx = _ctx(tmp_path, links)
    step = JitStep(builder=STANDIN)
    out = step.run(ctx).to_json()
    assert out["cached"] is False and out["arch_list"] == "9.0" and out["flashinfer_version"] == "0.6.7"
    assert len(out["modules"]) == 3
    first = out["modules"][0]
    assert first["uri"].startswith("batch_decode_with_kv_cache_dtype_q_bf16_dtype_k_bf16_dtype_v_e4m3_")
    so = Path(first["path"])
    assert so == ctx.paths.jit / ".cache/flashinfer/0.6.7/90/cached_ops" / first["uri"] / f"{first['uri']}.so"
    assert first["sha256"] == sha256_file(so) and so.read_bytes()[:4] == b"\x7fELF"
    assert step.verify(ctx, step.load(out)) is None
    start = time.monotonic()
    again = step.run(ctx).to_json()
    assert time.monotonic() - start < 5
    assert again["cached"] is True and [m["sha256"] for m in again["modules"]] == [m["sha256"] for m in out["modules"]]
    so.write_bytes(b"changed")
    assert "changed" in (step.verify(ctx, step.load(out)) or "")


def test_builder_sees_the_env_it_needs(tmp_path, links, monkeypatch):
    """PYTHONPATH from the caller must not leak in; the builder finds only the repo root."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "elsewhere"))
    ctx = _ctx(tmp_path, links, modules=MODULES[:1])
    out = JitStep(builder=STANDIN).run(ctx).to_json()
    assert len(out["modules"]) == 1
    log = ctx.runner.log_path("jit").read_text()
    assert "-P -s -m tests.fixtures.jit_standin" in log


def test_symmetric_flashinfer_is_refused(tmp_path, links):
    ctx = _ctx(tmp_path, links, flashinfer="0.6.6")
    with pytest.raises(JitError) as err:
        JitStep(builder=STANDIN).run(ctx)
    text = str(err.value)
    assert "not the asymmetric fork" in text and "k_data_type" in text
    assert not (ctx.paths.jit / ".cache").exists()


@pytest.mark.parametrize("fault,words", [("skip", "not produced"), ("outside", "outside the workspace"),
                                         ("crash", "stand-in build failed on purpose")])
def test_builder_faults_fail_the_step(tmp_path, links, monkeypatch, fault, words):
    monkeypatch.setenv("JIT_STANDIN_FAULT", fault)
    ctx = _ctx(tmp_path, links)
    with pytest.raises(JitError) as err:
        JitStep(builder=STANDIN).run(ctx)
    assert words in str(err.value)


def test_a_builder_that_lies_about_a_hash_is_caught(tmp_path, links):
    ctx = _ctx(tmp_path, links, modules=MODULES[:1])
    step = JitStep(builder=STANDIN)
    step.run(ctx)
    result = ctx.paths.state / "jit" / "result.json"
    data = json.loads(result.read_text())
    data["modules"][0]["sha256"] = "0" * 64
    with pytest.raises(JitError) as err:
        check_modules(ctx.paths.jit, [{"id": "m0"}], MODULES[:1], data)
    assert "reported sha256" in str(err.value)


def test_no_arch_list_is_refused(tmp_path, links):
    ctx = _ctx(tmp_path, links)
    ctx.options = type(ctx.options)(stack=ctx.options.stack, cache_dir=ctx.options.cache_dir,
                                    recipe=type(ctx.recipe)(**{**ctx.recipe.__dict__, "cuda": None}))
    with pytest.raises(JitError) as err:
        JitStep(builder=STANDIN).run(ctx)
    assert "arch_list" in str(err.value)


def test_real_builder_against_a_stand_in_of_the_flashinfer_jit_api(tmp_path, links):
    """The default builder (october.checks.jit_build) runs unchanged; what is mocked is FlashInfer's
    JIT API and torch's dtypes (no CUDA build can run here): stubs with the signatures read from
    mcgrof/flashinfer, so a wrong argument count or keyword in our calls fails this test."""
    ctx = jit_api_context(tmp_path, MODULES)
    out = JitStep().run(ctx).to_json()
    uris = [m["uri"] for m in out["modules"]]
    assert uris[0] == ("batch_decode_with_kv_cache_dtype_q_bf16_dtype_k_bf16_dtype_v_e4m3_dtype_o_bf16_dtype_idx_i32_"
                       "head_dim_qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False")
    assert uris[1].startswith("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_k_bf16_dtype_v_e4m3_")
    assert "posenc_1" in uris[1] and uris[1].endswith("_f16qk_False")
    assert out["cached"] is False and JitStep().run(ctx).to_json()["cached"] is True


def test_builder_env_uses_one_resolved_nvcc_path(tmp_path: Path) -> None:
    """nvcc reached through a link is resolved once, so the JIT build files name one toolkit path."""
    from october.installer.steps.jit import builder_env

    toolkit = tmp_path / "cuda-12.9"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (tmp_path / "cuda").symlink_to(toolkit)
    links = sf.make_links(tmp_path)
    rec = sf.recipe(links, None, tmp_path)
    ctx = sf.context(tmp_path / "stack", rec, tmp_path / "cache")
    ctx.done["preflight"] = sf.record(sf.preflight_facts(nvcc={"path": str(tmp_path / "cuda" / "bin" / "nvcc")}))
    write_stack_env(ctx)
    env = builder_env(ctx, "9.0")
    assert env["CUDA_HOME"] == str(toolkit.resolve())
    assert env["PATH"].split(":")[1] == str(toolkit.resolve() / "bin")
    assert env["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / "stack" / "jit")
    assert env["FLASHINFER_CUDA_ARCH_LIST"] == "9.0"


def test_builder_env_comes_from_the_stack_env_file(tmp_path, links, monkeypatch):
    """The builder gets STACK/stack-env.json laid over the caller's env (not values of its own): a
    FLASHINFER_WORKSPACE_BASE from the caller is dropped, and without the file the step refuses."""
    from october.installer.pyenv import stackenv
    from october.installer.steps.jit import builder_env

    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "home-cache"))
    ctx = _ctx(tmp_path, links, modules=MODULES[:1])
    env = builder_env(ctx, "9.0")
    stack = stackenv.load(ctx.paths.root)
    assert {k: env[k] for k in stack if k != "PATH"} == {k: v for k, v in stack.items() if k != "PATH"}
    assert env["PATH"].startswith(stack["PATH"] + ":")
    assert env["FLASHINFER_WORKSPACE_BASE"] == str(ctx.paths.jit)
    with pytest.raises(JitError, match="other CUDA architectures"):
        builder_env(ctx, "8.9")
    stackenv.env_file(ctx.paths.root).unlink()
    with pytest.raises(StateError, match="no runtime environment file"):
        JitStep(builder=STANDIN).run(ctx)


def test_the_jit_builder_is_told_the_quota_s_cpus_not_the_host_s(tmp_path: Path, links, monkeypatch) -> None:
    """``MAX_JOBS`` for FlashInfer's ninja: on a 192-core host whose affinity gives 4 CPUs and whose cgroup allows one
    it is 1, without a quota 4, never 192; a ``MAX_JOBS`` the user set is kept.  Mocked: the cgroup file
    (``core.cpus.CGROUP``), as one of the same format, and the affinity and host counts (no such host here)."""
    from october.installer.steps.jit import builder_env
    from october.installer.core import cpus

    monkeypatch.delenv("MAX_JOBS", raising=False)
    ctx = _ctx(tmp_path, links)
    monkeypatch.setattr(os, "cpu_count", lambda: 192)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(cpus, "PROC_CGROUP", tmp_path / "no-proc-self-cgroup")
    monkeypatch.setattr(cpus, "CGROUP", _cgroup_v2(tmp_path / "cg", "100000 100000\n"))
    assert builder_env(ctx, "9.0")["MAX_JOBS"] == "1"
    monkeypatch.setattr(cpus, "CGROUP", _cgroup_v2(tmp_path / "cg", "max 100000\n"))
    assert builder_env(ctx, "9.0")["MAX_JOBS"] == "4"
    monkeypatch.setenv("MAX_JOBS", "3")
    assert builder_env(ctx, "9.0")["MAX_JOBS"] == "3"


def _cgroup_v2(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.max").write_text(text)
    return root


def test_a_module_the_fork_cannot_build_names_the_recipe_not_the_install(tmp_path) -> None:
    """The new-user hunt: an asymmetric prefill module asked of a fork with an asymmetric decode only was said as
    "the installed FlashInfer is not the asymmetric fork" with the fix "re-run october_setup so the install step
    lays the fork over whatever replaced it" (a re-run failed the same way).  The builder's own finding
    (checks/jit_build.asymmetric_problem's text) now names the [[jit.modules]] of the recipe to change."""
    from october.checks.jit_build import EXIT_NOT_ASYMMETRIC
    from october.installer.core.errors import CommandFailed
    from october.installer.jit.build import require_success

    said = ("the recipe asks for an asymmetric prefill module (k=bf16, v=e4m3) but BatchPrefillWithPagedKVCacheWrapper"
            ".plan takes no k_data_type; flashinfer 0.6.7 from /stack/src/flashinfer/flashinfer/__init__.py")
    failure = CommandFailed("jit", ["python", "-m", "builder"], EXIT_NOT_ASYMMETRIC, "", tmp_path / "jit.log")
    with pytest.raises(JitError) as err:
        require_success({"problem": said}, failure, tmp_path / "jit.log", tmp_path / "my.toml")
    text = str(err.value)
    assert "cannot build a module the recipe's [jit] asks for" in text and f"[[jit.modules]] in {tmp_path / 'my.toml'}" in text
    assert "not the asymmetric fork" not in text and "lays the fork over" not in text
    with pytest.raises(JitError, match="not the asymmetric fork"):    # a symmetric FlashInfer is still said so
        require_success({"problem": "plan takes no k_data_type (flashinfer 0.6.6: not the asymmetric fork)"}, failure,
                        tmp_path / "jit.log")
