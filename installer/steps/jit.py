"""``jit``: pre-build the recipe's asymmetric FlashInfer modules into ``STACK/jit`` and record their hashes.

The build runs in the stack env (``STACK/env/bin/python -P -s -m <builder>``)
with the stack's runtime environment (:mod:`installer.stackenv`: ``FLASHINFER_WORKSPACE_BASE=STACK/jit``,
``FLASHINFER_CUDA_ARCH_LIST``, ``CUDA_HOME``, ...) set before flashinfer is imported, and
``PYTHONPATH`` = this repository only so
the builder module is found (it imports the standard library, flashinfer and
torch; nothing of the tool env).  The builder defaults to
:mod:`installer.jit.flashinfer_builder`; tests pass a stand-in.  The step trusts
nothing the builder says: each requested module must come back once, its
library must exist inside the workspace, and the step hashes it itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from installer import stackenv
from installer.errors import CommandFailed, JitError
from installer.hashing import sha256_file
from installer.jit.flashinfer_builder import EXIT_NOT_ASYMMETRIC, RESULT_FORMAT
from installer.pipeline import StepContext
from installer.recipe import JitModule
from installer.resources import stack_code_root
from installer.steps.env import resolved_nvcc

DEFAULT_BUILDER = "installer.jit.flashinfer_builder"
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV",
               "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST")


def module_request(i: int, m: JitModule) -> dict[str, Any]:
    return {"id": f"m{i}", "kind": m.kind, "q": m.q, "k": m.k, "v": m.v, "o": m.o, "head_dim": m.head_dim,
            "posenc": m.posenc, "backend": m.backend}


def builder_env(ctx: StepContext, arch_list: str) -> dict[str, str]:
    """The stack's own runtime environment (STACK/stack-env.json, written by the env step), plus
    ``PYTHONPATH`` = this repository (so the builder module is found) and ``MAX_JOBS``."""
    stack = stackenv.load(ctx.paths.root)
    if stack.get("FLASHINFER_CUDA_ARCH_LIST") != arch_list:
        raise JitError("the stack's runtime environment names other CUDA architectures than the recipe",
                       expected=f"FLASHINFER_CUDA_ARCH_LIST={arch_list} (recipe [cuda] arch_list)",
                       found=f"{stack.get('FLASHINFER_CUDA_ARCH_LIST')!r} in {stackenv.env_file(ctx.paths.root)}",
                       fix="re-run october_setup (the env step rewrites the stack environment)")
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env = stackenv.apply(stack, env)
    env["PYTHONPATH"] = str(stack_code_root(ctx.options.cache_dir))
    env.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
    return env


class JitStep:
    name: ClassVar[str] = "jit"

    def __init__(self, builder: str = DEFAULT_BUILDER) -> None:
        self.builder = builder

    def inputs(self, ctx: StepContext) -> Any:
        r = ctx.recipe
        return {"modules": [module_request(i, m) for i, m in enumerate(r.jit)],
                "arch_list": r.cuda.arch_list if r.cuda else None, "builder": self.builder,
                "nvcc": str(resolved_nvcc(ctx) or "")}

    def _arch_list(self, ctx: StepContext) -> str:
        cuda = ctx.recipe.cuda
        if cuda is None or not cuda.arch_list.strip():
            raise JitError("the recipe lists JIT modules but no CUDA architectures to build them for",
                           expected="[cuda] arch_list (e.g. '9.0') in the recipe", found="no [cuda] arch_list",
                           fix=f"add [cuda] arch_list to {ctx.recipe.path}")
        return cuda.arch_list

    def run(self, ctx: StepContext) -> Mapping[str, Any]:
        r = ctx.recipe
        arch_list = self._arch_list(ctx) if r.jit else (r.cuda.arch_list if r.cuda else "")
        workspace = ctx.paths.jit
        if not r.jit:
            return {"workspace": str(workspace), "arch_list": arch_list, "modules": [], "cached": True,
                    "builder": self.builder, "flashinfer_version": None}
        workspace.mkdir(parents=True, exist_ok=True)
        requests = [module_request(i, m) for i, m in enumerate(r.jit)]
        work = ctx.paths.state / "jit"
        work.mkdir(parents=True, exist_ok=True)
        request_path, result_path = work / "request.json", work / "result.json"
        result_path.unlink(missing_ok=True)
        request_path.write_text(json.dumps({"modules": requests, "result": str(result_path)}, indent=1),
                                encoding="utf-8")
        ctx.ui.info(f"building {len(requests)} JIT module(s) for sm {arch_list} into {workspace}")
        argv = [str(ctx.paths.python), "-P", "-s", "-m", self.builder, str(request_path)]
        failure: CommandFailed | None = None
        try:
            ctx.runner.run(argv, step=self.name, env=builder_env(ctx, arch_list), cwd=workspace)
        except CommandFailed as exc:
            failure = exc
        result = self._read_result(result_path, failure)
        if result.get("problem"):
            if failure is not None and failure.returncode == EXIT_NOT_ASYMMETRIC:
                raise JitError("the installed FlashInfer is not the asymmetric fork",
                               expected="a BatchDecodeWithPagedKVCacheWrapper.plan that accepts k_data_type/"
                                        "v_data_type, named or forwarded to _plan_impl (checks/asym.py), and an "
                                        "asymmetric paged prefill where the recipe asks for one",
                               found=str(result["problem"]),
                               fix="re-run october_setup so the install step lays the fork over whatever "
                                   "replaced it, and check the recipe pins the asymmetric fork commit")
            raise JitError("the JIT builder refused to run", expected="a clean start of the builder",
                           found=str(result["problem"]), fix=f"read {ctx.runner.log_path(self.name)}")
        if failure is not None:
            raise JitError("building the JIT modules failed", expected="the builder to exit 0",
                           found=f"exit code {failure.returncode}; last lines:\n{failure.tail}",
                           fix=f"read the full log {failure.log_path}") from failure
        modules = self._check(workspace, requests, r.jit, result)
        cached = all(m["cached"] for m in modules)
        ctx.ui.info(f"{len(modules)} JIT module(s) " + ("found cached" if cached else "built"))
        return {"workspace": str(workspace), "arch_list": arch_list, "modules": modules, "cached": cached,
                "builder": self.builder, "flashinfer_version": result.get("flashinfer_version")}

    @staticmethod
    def _read_result(path: Path, failure: CommandFailed | None) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError) as exc:
            found = f"{type(exc).__name__} reading {path}"
            if failure is not None:
                found += f"; the builder exited {failure.returncode}:\n{failure.tail}"
            raise JitError("the JIT builder left no result", expected=f"a JSON result in {path}", found=found,
                           fix=f"read the log {failure.log_path if failure else path.parent}") from None
        if not isinstance(data, dict) or data.get("format") != RESULT_FORMAT:
            raise JitError("the JIT builder's result has an unknown format", expected=f"format {RESULT_FORMAT}",
                           found=repr(data.get("format") if isinstance(data, dict) else data)[:100],
                           fix="use a builder from this version of the tool")
        return data

    @staticmethod
    def _check(workspace: Path, requests: list[dict[str, Any]], wanted: tuple[JitModule, ...],
               result: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every requested module came back once, inside the workspace, with the hash we compute."""
        got: dict[str, list[Mapping[str, Any]]] = {}
        for entry in result.get("modules", []):
            got.setdefault(str(entry.get("id")), []).append(entry)
        problems: list[str] = []
        modules: list[dict[str, Any]] = []
        uris: set[str] = set()
        for req, jm in zip(requests, wanted):
            label = (f"{jm.kind} q={jm.q} k={jm.k} v={jm.v} o={jm.o} head_dim={jm.head_dim} posenc={jm.posenc}")
            entries = got.get(req["id"], [])
            if len(entries) != 1:
                problems.append(f"{label}: {'not produced' if not entries else f'{len(entries)} results'}")
                continue
            e = entries[0]
            uri, path = str(e.get("uri") or ""), Path(str(e.get("path") or ""))
            if not uri or uri in uris:
                problems.append(f"{label}: {'no URI' if not uri else f'URI {uri} given twice'}")
                continue
            uris.add(uri)
            try:
                inside = path.resolve().is_relative_to(workspace.resolve())
            except OSError:
                inside = False
            if not path.is_file() or not inside:
                problems.append(f"{label}: library {path} " + ("is outside the workspace" if path.is_file()
                                                                 else "does not exist"))
                continue
            digest = sha256_file(path)
            if e.get("sha256") != digest:
                problems.append(f"{label}: the builder reported sha256 {e.get('sha256')}, the file has {digest}")
                continue
            modules.append({"uri": uri, "path": str(path), "sha256": digest, "kind": jm.kind, "q": jm.q, "k": jm.k,
                            "v": jm.v, "o": jm.o, "head_dim": jm.head_dim, "posenc": jm.posenc,
                            "backend": jm.backend, "cached": bool(e.get("cached"))})
        if problems:
            raise JitError(f"{len(problems)} JIT module(s) missing or wrong:\n"
                           + "\n".join(f"  - {p}" for p in problems),
                           expected=f"{len(requests)} built libraries under {workspace}, one per recipe entry",
                           found=f"{len(modules)} good", fix="read the jit log; a module the builder skipped is "
                           "not built, and the stack cannot serve it")
        return modules

    def verify(self, ctx: StepContext, outputs: Mapping[str, Any]) -> str | None:
        for m in outputs.get("modules", []):
            path = Path(m["path"])
            if not path.is_file():
                return f"JIT library {path} is missing"
            if sha256_file(path) != m["sha256"]:
                return f"JIT library {path} changed (sha256 differs)"
        return None
