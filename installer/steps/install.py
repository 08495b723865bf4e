"""``install``: each fork into the stack env as the recipe says, then prove what ended up there.

vLLM (mode ``vllm-precompiled``): editable, ``VLLM_USE_PRECOMPILED=1``,
``VLLM_PRECOMPILED_WHEEL_LOCATION`` = the verified local base wheel (re-hashed
just before use), ``VLLM_PRECOMPILED_WHEEL_COMMIT`` = the upstream base commit
computed here (see :mod:`october.installer.install.upstream`).  FlashInfer (mode
``flashinfer``): editable, ``--no-deps``, installed last.  Each fork install gets the
recipe's ``[forks.build_env]`` and runs behind the nested-install guard
(:mod:`october.installer.install.nested`).  Afterwards the guards check torch, each fork's
``direct_url.json`` and import location, and import the base wheel's compiled
extension modules where CUDA libraries exist; every installed requirement is checked
against the recipe's declared exceptions (:mod:`october.installer.install.consistency`); a
FlashInfer-mode fork is imported with the stack environment (:mod:`october.installer.pyenv.stackenv`).

Reads: the fetch result's forks (path, commit; without one, ``STACK/src/<name>``
and ``git rev-parse HEAD``); the wheel result's path, ``wheel_sha256`` and
source commit.  Result: :class:`~october.installer.steps.results.InstallResult`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote, urlparse

from ..core.errors import CommandFailed, InstallError
from ..core.hashing import sha256_file
from ..core.redact import redact_url
from ..engine import FORKS_INSTALLED, StepContext
from ..install import consistency, nested, overwritten, records
from ..install.plan import ForkSource, InstallPlan, UvInstall, fork_sources, make_plan
from ..install.upstream import BaseCommit, upstream_base
from ..pyenv import stackenv
from ..recipe.install import as_json as policy_json
from .env import stack_key, stack_uv
from .results import EnvResult, FetchResult, InstalledFork, InstallResult, WheelResult

if TYPE_CHECKING:
    from ..install.guards import GuardSpec
    from ..pyenv import builtstack

# guards (the wheel's ELF/RECORD readers) is imported where the step runs, not on a no-op re-run



class InstallStep:
    name: ClassVar[str] = "install"

    def __init__(self, *, cuda_libs: tuple[str, ...] | None = None) -> None:
        # Which libraries count as "CUDA exists" for importing the wheel's extension modules; tests
        # point it at a library that exists on a CPU-only machine.
        self.cuda_libs = cuda_libs

    def load(self, outputs: Mapping[str, Any]) -> InstallResult:
        return InstallResult.from_json(outputs)

    # ------------------------------------------------------------------ inputs

    def inputs(self, ctx: StepContext) -> Any:
        r = ctx.recipe
        wheel = ctx.result(WheelResult)
        return {"forks": [{"name": f.name, "url": redact_url(f.url), "upstream": redact_url(f.upstream or ""),
                           "commit": f.pin.commit, "mode": f.mode, "deps": f.deps,
                           "build_isolation": f.build_isolation, "build_env": dict(f.build_env),
                           "nested_installs": dict(f.nested_installs)} for f in r.forks],
                "policy": policy_json(r.install),
                "torch": r.torch.version, "sources": stack_uv(ctx).sources(),
                "wheel_sha256": wheel.wheel_sha256 if wheel else None,
                "locked": dict(ctx.options.locked.packages) if ctx.options.locked else None}

    # --------------------------------------------------------------------- run

    def _forks(self, ctx: StepContext) -> list[ForkSource]:
        fetch = ctx.result(FetchResult)
        fetched = fetch.forks if fetch is not None else {}
        paths: dict[str, Path] = {}
        commits: dict[str, str] = {}
        for f in ctx.recipe.forks:
            rec = fetched.get(f.name)
            path = Path(rec.path) if rec is not None else ctx.paths.fork(f.name)
            if not (path / "pyproject.toml").exists() and not (path / "setup.py").exists():
                raise InstallError(f"the checkout of fork '{f.name}' is not an installable project",
                                   expected=f"{path} with a pyproject.toml or setup.py",
                                   found="neither" if path.exists() else "no such directory",
                                   fix="re-run october_setup so the fetch step checks the fork out again")
            paths[f.name] = path
            commits[f.name] = rec.commit if rec is not None else ctx.runner.run(
                ["git", "-C", str(path), "rev-parse", "HEAD"], step=self.name).output.strip()
        return fork_sources(ctx.recipe.forks, paths, commits)

    def _wheel(self, ctx: StepContext) -> tuple[Path, str, str | None]:
        out = ctx.need(WheelResult)
        path = Path(out.path)
        want = out.wheel_sha256
        if not path.is_file():
            raise InstallError("the verified base wheel is gone", expected=f"the file {path}",
                               found="no such file", fix="re-run october_setup (the wheel step fetches it again)")
        got = sha256_file(path)
        if got != want:
            raise InstallError(f"the base wheel {path.name} changed after it was verified",
                               expected=f"sha256 {want}", found=f"sha256 {got}",
                               fix="re-run october_setup (the wheel step verifies it again)")
        return path, got, out.source_commit

    def plan(self, ctx: StepContext, forks: list[ForkSource]) -> tuple[InstallPlan, BaseCommit | None]:
        precompiled = [f for f in forks if f.use.traits.base_wheel]
        if not precompiled:
            return make_plan(forks), None
        wheel, _sha, wheel_commit = self._wheel(ctx)
        vllm = precompiled[0]
        if vllm.use.pin.sdist is not None:
            # made from the release's sdist: no history, no upstream commit to claim; setup.py needs none,
            # since the wheel location is set (VLLM_PRECOMPILED_WHEEL_COMMIT only picks a nightly)
            ctx.ui.detail(f"vLLM fork made from {vllm.use.pin.sdist.filename}: no upstream base commit")
            return make_plan(forks, wheel=wheel), None
        base = upstream_base(ctx.runner, self.name, vllm.path, vllm.use.upstream, wheel_commit=wheel_commit)
        ctx.ui.detail(f"vLLM upstream base commit {base.commit} ({base.detail})")
        return make_plan(forks, wheel=wheel, base_commit=base.commit), base

    def run(self, ctx: StepContext) -> InstallResult:
        r = ctx.recipe
        forks = self._forks(ctx)
        plan, base = self.plan(ctx, forks)
        by_name = {f.use.name: f for f in forks}
        entry = self.built_entry(ctx)
        nested_out = self.forks_from_built_stack(ctx, entry, forks) if entry is not None else None
        if nested_out is None:
            entry = None
            self.repair(ctx, [f.dist for f in forks])
            guard = nested.install_guard(ctx.paths.state / "build-guard")
            nested_out = {}
            for inv in plan.installs:
                ctx.ui.info(f"installing fork {inv.fork} ({inv.why})")
                before = overwritten.snapshot(ctx.runner, self.name, by_name[inv.fork].path)
                nested_out[inv.fork] = self._install_guarded(ctx, inv, guard, by_name[inv.fork])
                overwritten.check(ctx.runner, self.name, inv.fork, by_name[inv.fork].path, before)
        # every fork's files are in place: work that needs no more than that (the JIT build) may begin
        # while the checks below run (october.installer.steps.jitearly)
        ctx.announce(FORKS_INSTALLED, forks)
        self.check_records(ctx)
        spec = self.guard_spec(ctx, forks)
        from ..install.guards import run_guards

        report = run_guards(ctx.runner, self.name, spec)
        for check, outcome in report.results.items():
            if outcome != "ok":
                ctx.ui.warn(f"{check}: {outcome}")
        judged = self.check_consistency(ctx)
        # A copied stack takes the import verdict of the stack the entry was made from: the env and the
        # fork outputs are its bytes (hashed against the manifest), the checkouts its commits (fetch
        # checked them clean), the system torch the same files (the key's stat signatures); what the
        # stack path changed (the editable finders, direct_url.json, links) the install guard has just
        # read from this stack (each fork's import location and direct_url).  Importing torch again
        # would cost seconds and prove nothing new.
        imported = dict(builtstack_imports(entry, ctx.paths.root)) if entry is not None else {}
        if {f.use.name for f in forks if f.use.traits.import_check} - set(imported):
            imported = self.check_imports(ctx, forks)
        facts = report.facts.get("forks", {})
        result = InstallResult(
            nested_installs=nested_out,
            consistency=judged.as_json(),
            imports_with_stack_env=imported,
            order=tuple(plan.order),
            forks=tuple(InstalledFork(name=f.use.name, path=str(f.path), commit=f.commit, mode=f.use.mode,
                                      dist=f.dist, version=_editable_version(facts.get(f.use.name, {}), f.path),
                                      editable=True, args=tuple(inv.args), env={k: v for k, v in inv.env})
                        for inv in plan.installs for f in [by_name[inv.fork]]),
            torch=r.torch.version,
            wheel_path=str(plan.wheel) if plan.wheel else None,
            wheel_sha256=sha256_file(plan.wheel) if plan.wheel else None,
            vllm_base_commit=base.commit if base else None,
            vllm_base_commit_source=base.source if base else None,
            vllm_base_commit_detail=base.detail if base else None,
            checks=dict(report.results),
        )
        if entry is None:
            self.store_built_stack(ctx, forks, nested_out, imported)
        return result

    # ------------------------------------------------------------ the built-stack cache

    def built_entry(self, ctx: StepContext) -> "builtstack.Entry | None":
        """The built-stack cache entry the env step copied the env from, when it still holds for this
        stack (same key, the same base wheel), else None."""
        from ..pyenv import builtstack

        env = ctx.result(EnvResult)
        if env is None or env.built_from is None or stack_key(ctx) != env.built_from:
            return None
        entry = builtstack.find(ctx.options.cache_dir, env.built_from)
        wheel = ctx.result(WheelResult)
        if entry is None or entry.facts.get("wheel_sha256") != (wheel.wheel_sha256 if wheel else None):
            return None
        return entry

    def forks_from_built_stack(self, ctx: StepContext, entry: "builtstack.Entry",
                               forks: list[ForkSource]) -> dict[str, Any] | None:
        """Each fork's build outputs copied from the entry into its checkout instead of building it;
        -> the nested-install verdicts the entry's build had, or None when the entry is refused (what
        was copied is removed again and the forks are installed as usual)."""
        from ..pyenv import builtstack
        from .env import refuse_entry

        root = ctx.paths.root
        made: list[Path] = []
        try:
            for f in forks:
                before = overwritten.changed_tracked(ctx.runner, self.name, f.path)
                ctx.ui.info(f"fork {f.use.name}: its build outputs from the cache ({entry.path})")
                builtstack.restore_fork_outputs(entry, f.use.name, f.path, root, created=made)
                after = overwritten.changed_tracked(ctx.runner, self.name, f.path)
                if after != before:
                    raise builtstack.EntryRefused(f"it changes tracked files of fork {f.use.name}: {after[:3]}")
        except (builtstack.EntryRefused, OSError) as exc:
            for p in sorted(made, key=lambda q: len(q.parts), reverse=True):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
            refuse_entry(ctx, self.name, entry, str(exc), drop_env=False)
            return None
        ctx.runner.note(self.name, f"# fork build outputs copied from the built-stack cache entry {entry.path}")
        return dict(builtstack.placed(entry.facts.get("nested_installs") or {}, root))

    def store_built_stack(self, ctx: StepContext, forks: list[ForkSource], nested_out: Mapping[str, Any],
                          imported: Mapping[str, str]) -> None:
        """Store this finished env and the forks' build outputs for the next stack with the same key
        (see :mod:`october.installer.pyenv.builtstack`); a stack that cannot be stored is said so, not
        failed."""
        from ..git import git_env
        from ..pyenv import builtstack

        env = ctx.result(EnvResult)
        if env is None:       # an env no env step of this stack recorded is nobody's to copy
            return
        key = stack_key(ctx)
        if key is None:
            return
        wheel = ctx.result(WheelResult)
        outputs: dict[str, tuple[Path, list[Path]]] = {}
        for f in forks:
            listed = ctx.runner.run(["git", "-C", str(f.path), "ls-files", "-z", "--others"], step=self.name,
                                    env=git_env()).output
            outputs[f.use.name] = (f.path, [Path(p) for p in listed.split("\0") if p])
        facts = {"interpreter": builtstack.interpreter_identity(ctx.paths.env), "imports": dict(imported),
                 "wheel_sha256": wheel.wheel_sha256 if wheel else None, "nested_installs": dict(nested_out),
                 "env": {"torch": env.torch, "torch_cuda": env.torch_cuda, "torch_source": env.torch_source,
                         "system_torch": dict(env.system_torch) if env.system_torch is not None else None}}
        try:
            entry = builtstack.store(ctx.options.cache_dir, key, ctx.paths.root, ctx.paths.env, outputs, facts)
        except (builtstack.EntryRefused, OSError) as exc:
            ctx.ui.detail(f"this stack is not kept in the built-stack cache: {exc}")
            ctx.runner.note(self.name, f"# not stored in the built-stack cache: {exc}")
            return
        if entry is not None:
            ctx.runner.note(self.name, f"# stored in the built-stack cache: {entry.path}")

    def _install_guarded(self, ctx: StepContext, inv: UvInstall, guard: Path, src: ForkSource) -> dict[str, Any]:
        """One fork's ``uv pip install`` with the nested-install guard first on PATH; judge what its
        build backend tried to install by itself against the recipe's ``[forks.nested_installs]``."""
        shadow = nested.shadowing(ctx.paths.env / "bin")
        if shadow:
            raise InstallError("the stack env holds its own package installer, which a fork's build would use "
                               "instead of the guard", expected=f"no uv in {ctx.paths.env / 'bin'}", found=", ".join(str(p) for p in shadow),
                               fix="remove the package that installs it from the recipe's requirements, or "
                                   "re-run october_setup (the env step makes a fresh env)")
        log = ctx.paths.state / "nested" / f"{inv.fork}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.unlink(missing_ok=True)
        env = {**inv.env_dict, **nested.guard_env(guard, log, os.environ.get("PATH", ""))}
        try:
            stack_uv(ctx).pip_install(ctx.runner, self.name, inv.args, extra_env=env)
        except CommandFailed as exc:
            raise _install_failed(inv.fork, ctx.recipe.torch.version, exc) from exc
        verdict = nested.judge(nested.read_attempts(log), src.use.nested_installs)
        if verdict.undeclared or verdict.unparsed:
            what = ", ".join(verdict.undeclared) or "; ".join(verdict.unparsed)
            raise InstallError(
                f"the build of fork '{inv.fork}' tried to install packages by itself (refused): {what}",
                expected="a build that installs nothing outside the recipe's sources, or each such package "
                         f"declared in the recipe's [forks.nested_installs] of '{inv.fork}'",
                found="\n    " + "\n    ".join(a.command for a in verdict.attempts),
                fix=f"set the fork's build knobs in [forks.build_env] (e.g. BUILD_NVEP = \"0\") so it does not, "
                    "supply what it needs through [install] supply, or declare why the stack does not need it "
                    f"in [forks.nested_installs]; log: {ctx.runner.log_path(self.name)}")
        for name, why in verdict.refused_declared.items():
            ctx.ui.detail(f"{inv.fork}: its build asked for {name}; refused, not needed ({why})")
        return verdict.as_json()

    def repair(self, ctx: StepContext, forks: list[str]) -> None:
        """Put back every index distribution whose files no longer match its RECORD (an edit in the
        env since it was installed), from its source at the installed version (the forks, ``forks``,
        are installed again below anyway)."""
        bad = records.tampered(ctx.paths.env, ctx.trust)
        args = records.reinstall_args(ctx.paths.env, sorted(bad), forks)
        if args:
            ctx.ui.warn(f"re-installing what no longer matches its RECORD: {records.describe(bad)}")
            stack_uv(ctx).pip_install(ctx.runner, self.name, args, torch_index=True)

    def check_records(self, ctx: StepContext) -> None:
        """Every file of every distribution in the env as its RECORD hashes it, before install is done."""
        bad = records.tampered(ctx.paths.env, ctx.trust)
        if bad:
            raise InstallError(f"installed files differ from their distribution's RECORD: {records.describe(bad)}",
                               expected="every file in the stack env with the hash its RECORD lists",
                               found=f"{sum(len(v) for v in bad.values())} file(s) in {len(bad)} distribution(s)",
                               fix=f"uv's cache served these bytes: delete {stack_uv(ctx).env()['UV_CACHE_DIR']} (a "
                                   "cache edited through a stack that hard-linked it) and re-run october_setup")

    def check_consistency(self, ctx: StepContext) -> consistency.Judgement:
        """Every installed requirement met, except the recipe's declared ``[[install.exceptions]]``."""
        version = consistency.env_python_version(ctx.paths.env) or ctx.recipe.python
        found = consistency.conflicts(consistency.installed(ctx.paths.env), version, system_provided(ctx))
        judged = consistency.judge(found, ctx.recipe.install.exceptions)
        if judged.undeclared:
            lines = "\n".join(f"  - {c.describe()}" for c in judged.undeclared)
            raise InstallError(f"the stack env is inconsistent: {len(judged.undeclared)} requirement(s) unmet "
                               f"that the recipe does not declare:\n{lines}",
                               expected="every installed distribution's requirements met, or the conflict declared "
                                        "in the recipe's [[install.exceptions]] with the reason",
                               found=f"{len(judged.undeclared)} undeclared, {len(judged.declared)} declared",
                               fix="supply the missing package through [install] supply (it must resolve with "
                                   "the pinned torch), or declare the conflict if it is intended")
        for c, e in judged.declared:
            ctx.ui.detail(f"declared exception: {c.describe()} ({e.why})")
        for e in judged.unused:
            ctx.ui.warn(f"declared exception not seen: {e.package} -> {e.requires}; the recipe may be stale")
        return judged

    def check_imports(self, ctx: StepContext, forks: list[ForkSource]) -> dict[str, str]:
        """``import flashinfer`` with the stack environment (STACK/stack-env.json), as jit, smoke and
        serving run it: a FlashInfer fork laid over an index ``flashinfer-cubin`` of another version
        imports only with the version check the stack environment disables."""
        names = [f.use.name for f in forks if f.use.traits.import_check]
        if not names:
            return {}
        env = stackenv.apply(stackenv.load(ctx.paths.root), os.environ)
        out: dict[str, str] = {}
        for name in names:
            code = f"import {name}; print('OCTOBER_IMPORT', {name}.__version__)"
            done = ctx.runner.run([str(ctx.paths.python), *ctx.paths.pycache_args(), "-I", "-c", code], step=self.name,
                                  env=env, check=False)
            line = next((ln for ln in done.output.splitlines() if ln.startswith("OCTOBER_IMPORT ")), None)
            if done.returncode != 0 or line is None:
                last = (done.output.strip().splitlines() or ["no output"])[-1]
                raise InstallError(f"`import {name}` fails in the stack env with the stack's environment",
                                   expected=f"`import {name}` to work with {stackenv.env_file(ctx.paths.root)} applied",
                                   found=f"exit code {done.returncode}: {last[:400]}",
                                   fix=f"read {ctx.runner.log_path(self.name)}; a missing module means the fork "
                                       "needs a runtime package: supply it through the recipe's [install] supply")
            out[name] = line.split(" ", 1)[1].strip()
        return out

    def guard_spec(self, ctx: StepContext, forks: list[ForkSource], *, cuda_libs: tuple[str, ...] | None = None
                   ) -> GuardSpec:
        from ..install.guards import GuardSpec, extension_files, import_guard

        checkouts = {f.use.name: f.path for f in forks}
        imports = import_guard(ctx.need(WheelResult).to_json(), checkouts) \
            if any(f.use.traits.base_wheel for f in forks) else ()
        files = extension_files(ctx.need(WheelResult).to_json(), checkouts, imports) if imports else {}
        libs = cuda_libs or self.cuda_libs
        extra = {"cuda_libs": libs} if libs else {}
        return GuardSpec(python=ctx.paths.python, torch_version=ctx.recipe.torch.version,
                         forks=checkouts, imports=imports, files=files,
                         system_torch=system_torch_record(ctx), **extra)

    # ------------------------------------------------------------------ verify

    def verify(self, ctx: StepContext, result: InstallResult) -> str | None:
        if not ctx.paths.python.exists():
            return f"{ctx.paths.python} is missing"
        for f in result.forks:
            if not Path(f.path).is_dir():
                return f"the checkout {f.path} is missing"
        # A no-op re-run must stay fast and write nothing: read the env's metadata files
        # directly instead of starting the stack's Python (the full guards ran at install time).
        problem = installed_state_problem(ctx.paths.env, ctx.recipe.torch.version,
                                          {f.name: Path(f.path) for f in result.forks},
                                          system_torch=ctx.recipe.torch.from_system)
        if problem is not None:
            return problem
        # every RECORD'ed file; only those whose stat signature moved are read again
        bad = records.tampered(ctx.paths.env, ctx.trust)
        return f"files differ from their RECORD ({records.describe(bad)})" if bad else None


def builtstack_imports(entry: "builtstack.Entry", root: Path) -> Mapping[str, str]:
    """The ``import <fork>`` verdicts recorded in a built-stack cache entry (fork -> version)."""
    from ..pyenv import builtstack

    got = builtstack.placed(entry.facts.get("imports") or {}, root)
    return {str(k): str(v) for k, v in got.items()} if isinstance(got, dict) else {}


def system_torch_record(ctx: StepContext) -> Mapping[str, Any] | None:
    """The env step's record of a site-provided torch (None when the env installs its own)."""
    if not ctx.recipe.torch.from_system:
        return None
    env = ctx.result(EnvResult)
    rec = env.system_torch if env is not None else None
    if rec is None:
        raise InstallError("the env step's record of the system torch is missing", expected="env step outputs "
                           "with system_torch", found="none", fix="re-run october_setup (the env step runs again)")
    return rec


def installed_state_problem(env: Path, torch_version: str, forks: Mapping[str, Path], *,
                            system_torch: bool = False) -> str | None:
    """Why the env no longer matches what install left (torch build, editable forks), or None."""
    site = sorted(env.glob("lib/python*/site-packages"))
    if not site:
        return f"no site-packages under {env}"
    sp = site[0]
    if system_torch:
        if any(sp.glob("torch-*.dist-info")):
            return f"a torch was installed into {sp} over the system torch"
    elif not (sp / f"torch-{torch_version}.dist-info").is_dir():
        found = sorted(p.name for p in sp.glob("torch-*.dist-info")) or ["no torch"]
        return f"torch {torch_version} is no longer installed (found {', '.join(found)})"
    editable: dict[Path, str] = {}
    for direct in sp.glob("*.dist-info/direct_url.json"):
        try:
            info = json.loads(direct.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        url = str(info.get("url", ""))
        if url.startswith("file://") and info.get("dir_info", {}).get("editable"):
            editable[Path(unquote(urlparse(url).path)).resolve()] = direct.parent.name
    for name, path in forks.items():
        if path.resolve() not in editable:
            return f"fork {name} is no longer installed editable from {path}"
    return None


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([A-Za-z0-9_.]+)'")
_TORCH_SPEC = re.compile(r"\btorch(\[[^\]]*\])?\s*(==|>=|<=|!=|~=|<|>)\s*\d")


def _install_failed(fork: str, torch: str, exc: CommandFailed) -> InstallError:
    lines = [ln for ln in exc.tail.rstrip().splitlines() if not ln.startswith("Using Python")][-12:]
    said = "\n".join("    | " + ln for ln in lines)
    # a resolver line about a torch version (e.g. "depends on torch==2.11.0"), not any line that
    # merely contains "torch" (a build error under a path named torch/ is not a torch conflict)
    moves_torch = any(_TORCH_SPEC.search(ln) for ln in lines)
    # the last ModuleNotFoundError: uv's output also carries warnings such as torch's "No module named 'numpy'"
    missing = next((m.group(1) for ln in reversed(exc.tail.splitlines()) if (m := _NO_MODULE.search(ln))), None)
    if missing and not moves_torch:
        # e.g. vLLM 0.24.0's setup.py imports setuptools_rust; with --no-build-isolation the env must hold it
        return InstallError(f"the build of fork '{fork}' needs the module '{missing}', which the stack env lacks",
                            expected=f"'{missing}' installed before the fork is built (--no-build-isolation)",
                            found=f"uv exit code {exc.returncode}: No module named '{missing}'",
                            fix=f"add its package (e.g. {missing.split('.')[0].replace('_', '-')}) to the recipe's "
                                f"[build] requirements; full log: {exc.log_path}")
    what = (f"installing fork '{fork}' would move torch away from the pinned {torch}" if moves_torch
            else f"installing fork '{fork}' failed")
    return InstallError(what, expected=f"the fork to install with torch held at torch=={torch} (recipe [torch]) "
                        "and every dependency resolvable", found=f"uv exit code {exc.returncode}:\n{said}\n",
                        fix=(f"the fork or a dependency needs a torch other than {torch}: pick a recipe whose "
                             "torch matches the fork" if moves_torch else "read uv's message above")
                        + f"; full log: {exc.log_path}")


def _editable_version(info: Mapping[str, Any], path: Path) -> str | None:
    for d in info.get("dists", []):
        du = d.get("direct_url") or {}
        if du.get("dir_info", {}).get("editable") and str(du.get("url", "")).rstrip("/").endswith(path.name):
            return str(d.get("version"))
    return None


def system_provided(ctx: StepContext) -> list[consistency.Dist]:
    """A site-provided torch's interpreter's distributions (they meet the env's requirements), else none."""
    rec = system_torch_record(ctx)
    if rec is None:
        return []
    return consistency.installed_in([Path(d) for d in rec.get("site_packages") or []])
