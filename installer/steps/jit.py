"""``jit``: pre-build the recipe's asymmetric FlashInfer modules into ``STACK/jit`` and record their hashes.

The builder (default :mod:`october.checks.jit_build`) runs in the stack env with the stack's runtime
environment; ``PYTHONPATH`` is this repository only so that the builder module is found.  The step trusts
nothing the builder says: each requested module must come back once, its library inside the workspace,
hashed by the step itself.  The build may have begun during install (:mod:`.jitearly`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..core.errors import CommandFailed, JitError
from ..core.hashing import sha256_file
from ..core.resources import stack_code_root
from ..engine import Reporter, StepContext
from ..jit.build import (
    JitBuild, ReadyEvent, builder_env as build_env, check_modules, check_unchanged, checkout_aot_dir, find_ready,
    module_fields, module_request, pending_discards, read_result, record_modules, require_success, version_from_paths,
    write_request,
)
from ..jit.cache import SharedJitCache, cache_key
from ..jit.integrity import discard, manifest_aot_dir, untrusted_libraries
from ..recipe.forks import traits_of
from .env import resolved_nvcc
from .jitearly import take_early
from .results import EnvResult, FetchResult, InstallResult, JitResult, PreflightResult

DEFAULT_BUILDER = "october.checks.jit_build"


def builder_env(ctx: StepContext, arch_list: str) -> dict[str, str]:
    """The builder's environment for this stack (:func:`october.installer.jit.build.builder_env`)."""
    return build_env(ctx.paths.root, arch_list, lambda: stack_code_root(ctx.options.cache_dir), os.environ)


def shared_cache_inputs(ctx: StepContext, arch_list: str, builder: str) -> dict[str, Any] | None:
    """What a built module's bytes depend on besides its request (FlashInfer commit, nvcc, arch list,
    torch build), or None when one is unknown (then nothing is shared)."""
    fetch = ctx.result(FetchResult)
    fork = next((f for f in ctx.recipe.forks if f.traits.jit_checkout), None)
    rec = fetch.forks.get(fork.name) if fetch is not None and fork is not None else None
    commit = rec.commit if rec is not None else None
    pre = ctx.result(PreflightResult)
    nvcc = pre.nvcc("version") if pre is not None else None
    env = ctx.result(EnvResult)
    torch = (env.torch if env is not None else None) or ctx.recipe.torch.version
    if not commit or not nvcc or not arch_list:
        return None
    return {"flashinfer_commit": commit, "nvcc": nvcc, "arch_list": arch_list, "torch": torch,
            "torch_cuda": env.torch_cuda if env is not None else None, "builder": builder}


class JitStep:
    name: ClassVar[str] = "jit"

    def __init__(self, builder: str = DEFAULT_BUILDER) -> None:
        self.builder = builder

    load = staticmethod(JitResult.from_json)

    def inputs(self, ctx: StepContext) -> Any:
        r = ctx.recipe
        return {"modules": [module_request(i, m) for i, m in enumerate(r.jit)],
                "arch_list": r.cuda.flashinfer_arch_list if r.cuda else None, "builder": self.builder,
                "nvcc": str(resolved_nvcc(ctx) or "")}

    def run(self, ctx: StepContext) -> JitResult:
        r = ctx.recipe
        workspace = ctx.paths.jit
        if not r.jit:
            arch_list = r.cuda.flashinfer_arch_list if r.cuda else ""
            return JitResult(workspace=str(workspace), arch_list=arch_list, modules=(), cached=True,
                             builder=self.builder, flashinfer_version=None)
        # begun during install's checks (a 2-tuple: never false), else prepared now
        build, started = take_early(ctx, self) or (self.prepare(ctx, ctx.ui, known_aot_dir(ctx, workspace)), None)
        if build.argv is None:
            modules = [{**build.ready[k], **module_fields(jm)} for k, jm in zip(build.keys, r.jit) if k is not None]
            ctx.ui.info(f"{len(modules)} JIT module(s) verified: none to build")
            return self._finish(ctx, build, modules, result=None)
        failure: CommandFailed | None = None
        try:
            if started is not None:
                started.attach(ctx.runner.echo)
                started.wait()
            else:
                ctx.runner.run(build.argv, step=self.name, env=build.env, cwd=workspace)
        except CommandFailed as exc:
            failure = exc
        return self.complete(ctx, build, failure)

    def prepare(self, ctx: StepContext, ui: Reporter, aot: Path | None) -> JitBuild:
        """Everything before the builder runs: untrusted libraries discarded (in ``aot`` too), verified
        modules found, and, when some are still to build, the request file and the builder's command."""
        r = ctx.recipe
        if r.cuda is None or not r.cuda.arch_list:
            raise JitError("the recipe lists JIT modules but no CUDA architectures to build them for",
                           expected="[cuda] arch_list (e.g. '9.0') in the recipe", found="no [cuda] arch_list",
                           fix=f"add [cuda] arch_list to {r.path}")
        arch_list = r.cuda.flashinfer_arch_list
        workspace = ctx.paths.jit
        workspace.mkdir(parents=True, exist_ok=True)
        requests = [module_request(i, m) for i, m in enumerate(r.jit)]
        discarded = self._discard_untrusted(ctx, ui, workspace, aot)
        inputs = shared_cache_inputs(ctx, arch_list, self.builder)
        keys = [cache_key(inputs, q) if inputs else None for q in requests]
        cache = SharedJitCache(ctx.options.cache_dir / "jit") if inputs else None

        def say(event: ReadyEvent) -> None:     # what finding the verified modules met
            if event.kind == "refused":
                ui.warn(event.text)
                ctx.runner.note("jit", event.text)
            else:
                ui.info(f"JIT module {event.text[:60]}... restored from the shared cache (sha256 verified)")

        ready = find_ready(workspace, keys, cache, say)
        build = JitBuild(workspace=workspace, aot=aot, requests=requests, keys=keys, inputs=inputs, cache=cache,
                         ready=ready, discarded=discarded)
        if cache is not None and all(k in ready for k in keys):
            return build
        request_path, build.result_path = write_request(ctx.paths.state / "jit", requests)
        ui.info(f"building {len(requests)} JIT module(s) for sm {arch_list} into {workspace}")
        build.argv = [str(ctx.paths.python), *ctx.paths.pycache_args(), "-P", "-s", "-m", self.builder,
                      str(request_path)]
        build.env = builder_env(ctx, arch_list)
        return build

    def complete(self, ctx: StepContext, build: JitBuild, failure: CommandFailed | None) -> JitResult:
        """The builder has ended (``failure``: it exited non-zero): check every module, record them."""
        assert build.result_path is not None
        result = read_result(build.result_path, failure)
        require_success(result, failure, ctx.runner.log_path(self.name), ctx.recipe.path)
        modules = check_modules(build.workspace, build.requests, ctx.recipe.jit, result)
        check_unchanged(modules, build.keys, build.ready)
        cached = all(m["cached"] for m in modules)
        ctx.ui.info(f"{len(modules)} JIT module(s) " + ("found cached" if cached else "built"))
        return self._finish(ctx, build, modules, result=result)

    @staticmethod
    def _discard_untrusted(ctx: StepContext, ui: Reporter, workspace: Path, aot: Path | None
                           ) -> list[dict[str, str]]:
        """A library whose bytes are not what this step recorded is removed so the builder compiles it
        again (in the AOT directory too, where FlashInfer would load it without any check)."""
        bad = untrusted_libraries(workspace, aot_dirs=(aot,))
        earlier, every = pending_discards(discards_path(ctx), bad)
        for item in earlier:
            ui.info(f"JIT library {item['path']} was discarded before, by a run (or a build begun early) that "
                    f"did not finish ({item['reason']}): recorded now")
        for item in bad:
            ui.warn(f"JIT library {item.path} is not trusted ({item.reason}): rebuilding it")
            ctx.runner.note("jit", f"discarded {item.path}: {item.reason}")
        discard(bad)
        return every

    def _finish(self, ctx: StepContext, build: JitBuild, modules: list[dict[str, Any]], *,
                result: Mapping[str, Any] | None) -> JitResult:
        workspace, inputs, cache = build.workspace, build.inputs, build.cache
        aot = (Path(result["aot_dir"]) if result is not None and result.get("aot_dir")
               else known_aot_dir(ctx, workspace))
        stored = record_modules(build, modules, aot, ctx.trust)
        version = result.get("flashinfer_version") if result is not None else version_from_paths(workspace, modules)
        done = JitResult(workspace=str(workspace), arch_list=ctx.recipe.cuda.flashinfer_arch_list if ctx.recipe.cuda else "",
                         modules=tuple(modules), cached=all(m["cached"] for m in modules), builder=self.builder,
                         flashinfer_version=str(version) if version is not None else None,
                         discarded=tuple(build.discarded),
                         shared_cache={"dir": str(cache.root), "key_inputs": dict(inputs or {}),
                                       "restored": sum(m["source"] == "shared-cache" for m in modules),
                                       "stored": stored} if cache is not None else None)
        discards_path(ctx).unlink(missing_ok=True)      # in this result from here on
        return done

    def verify(self, ctx: StepContext, result: JitResult) -> str | None:
        for m in result.modules:
            for path in [Path(m["path"])] + ([Path(m["aot_path"])] if m.get("aot_path") else []):
                if not path.is_file():
                    return f"JIT library {path} is missing"
                # re-read only when its stat signature moved since it was hashed
                if ctx.trust.digest(path, "sha256", sha256_file) != m["sha256"]:
                    return f"JIT library {path} changed (sha256 differs)"
        return None


def discards_path(ctx: StepContext) -> Path:
    """The libraries discarded as untrusted that no jit result has recorded yet (the run that discarded
    them ended first); the step that finishes folds them into its result, so the receipt names them."""
    return ctx.paths.state / "jit" / "discarded.json"


def known_aot_dir(ctx: StepContext, workspace: Path, *, checkout: Path | None = None) -> Path | None:
    """FlashInfer's AOT directory for this stack without starting it: the one recorded last time, else
    ``<package>/data/aot`` of the checkout install recorded, else of ``checkout`` (a build begun early)."""
    recorded = manifest_aot_dir(workspace)
    if recorded is not None:
        return recorded
    install = ctx.result(InstallResult)
    for f in install.forks if install is not None else ():
        if traits_of(f.mode).jit_checkout and f.path:
            return checkout_aot_dir(Path(f.path))
    if install is None and checkout is not None:
        return checkout_aot_dir(checkout)
    return None
