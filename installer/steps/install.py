"""``install``: each fork into the stack env as the recipe says, then prove what ended up there.

Each fork is installed editable (vLLM on the verified local base wheel, re-hashed just before use;
FlashInfer ``--no-deps``, last) behind the nested-install guard; then the guards check torch, each fork's
``direct_url.json`` and import location and the base wheel's extension modules, every requirement is
checked against the recipe's declared exceptions, and a FlashInfer-mode fork is imported with the stack
environment.  Result: :class:`~october.installer.steps.results.InstallResult`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from ..core.atomic import write_json_atomic
from ..core.errors import InstallError, UnlikeRecordError
from ..core.hashing import sha256_file
from ..core.listing import first
from ..engine import ENV_COPIED, FORKS_INSTALLED, StepContext
from ..git import buildoutputs
from ..install import records
from ..install.forkinstall import install_forks
from ..install.importcheck import check_imports
from ..install.plan import (ForkSource, fork_inputs, fork_sources, install_settings, installs_deps, require_installable,
                            verified_wheel)
from ..install.state import editable_version, installed_state_problem
from ..install.upstream import plan_with_base
from ..lock.drift import installed_versions
from ..pyenv import stackenv
from ..recipe.install import as_json as policy_json
from . import copyfault, indexcheck, reuse
from .env import stack_uv, system_provided, system_torch_record
from .results import FetchResult, InstalledFork, InstallResult, WheelResult

STARTUP_MODULES = ("sitecustomize.py", "usercustomize.py")    # Python imports them as it starts

if TYPE_CHECKING:
    from ..install import consistency
    from ..install.guards import GuardReport, GuardSpec
    from ..pyenv.builtstack import Entry

# guards (the wheel's ELF/RECORD readers) and consistency (email's parsers) are imported where the step runs,
# not on a no-op re-run


class InstallStep:
    name: ClassVar[str] = "install"
    # what it imports where used (never on a no-op), imported ahead while an earlier step waits (core.idle)
    warm: ClassVar[tuple[str, ...]] = (
        "october.installer.jit.build", "october.installer.install.guards", "october.installer.pyenv.venv",
        "october.installer.lock.pylock", "october.installer.lock.installed")

    def __init__(self, *, cuda_libs: tuple[str, ...] | None = None) -> None:
        # the libraries that count as "CUDA exists" for importing the wheel's extension modules (tests: one
        # that exists on a CPU-only machine)
        self.cuda_libs = cuda_libs

    load = staticmethod(InstallResult.from_json)

    def inputs(self, ctx: StepContext) -> Any:
        r = ctx.recipe
        wheel = ctx.result(WheelResult)
        return {"forks": fork_inputs(r.forks),
                "policy": policy_json(r.install),
                "torch": r.torch.version, "sources": stack_uv(ctx).sources(),
                "wheel_sha256": wheel.wheel_sha256 if wheel else None,
                "locked": dict(ctx.options.locked.packages) if ctx.options.locked else None}

    def _forks(self, ctx: StepContext) -> list[ForkSource]:
        fetch = ctx.result(FetchResult)
        fetched = fetch.forks if fetch is not None else {}
        paths: dict[str, Path] = {}
        commits: dict[str, str] = {}
        for f in ctx.recipe.forks:
            rec = fetched.get(f.name)
            path = Path(rec.path) if rec is not None else ctx.paths.fork(f.name)
            require_installable(f.name, path)
            paths[f.name] = path
            commits[f.name] = rec.commit if rec is not None else ctx.runner.run(
                ["git", "-C", str(path), "rev-parse", "HEAD"], step=self.name).output.strip()
        return fork_sources(ctx.recipe.forks, paths, commits)

    def _wheel(self, ctx: StepContext) -> tuple[Path, str | None]:
        """The wheel step's base wheel, re-hashed just before use, and its source commit."""
        out = ctx.need(WheelResult)
        path = Path(out.path)
        verified_wheel(path, out.wheel_sha256)
        return path, out.source_commit

    def run(self, ctx: StepContext) -> InstallResult:
        r = ctx.recipe
        forks = self._forks(ctx)
        plan, base = plan_with_base(ctx.runner, self.name, forks, lambda: self._wheel(ctx), ctx.ui.detail)
        by_name = {f.use.name: f for f in forks}
        watches = self.watch_outputs(forks)
        entry, nested_out = reuse.forks_from_built_stack(ctx, self.name, forks)
        if nested_out is not None:      # only where this run copied the env: its fork installs are kept, the
            ctx.announce(ENV_COPIED, None)      # lock's listing may begin (an earlier run's copy is repaired below)
        # asked before the forks are installed: what was in their checkouts then is not this run's making
        unstorable = reuse.unstorable(ctx, self.name, forks) if entry is None else None
        uv = stack_uv(ctx)
        copied = reuse.env_copied_now(ctx)
        if copied is None:      # an env file edited since the env was made (built here or copied): put back
            records.repair(ctx.paths.env, ctx.trust, [f.dist for f in forks], warn=ctx.ui.warn,
                           reinstall=lambda args: uv.pip_install(ctx.runner, self.name, args, torch_index=True),
                           recorded=self.recorded_records(ctx))
        if nested_out is None:
            nested_out = install_forks(uv, ctx.runner, self.name, plan.installs, by_name,
                                       state=ctx.paths.state, env_bin=ctx.paths.env / "bin",
                                       torch_version=r.torch.version, info=ctx.ui.info, detail=ctx.ui.detail)
        made = {name: w.made(reuse.restored_outputs(entry, name)) for name, w in watches.items()}
        # every fork's files are in place: the work begun early may start (.jitearly, .lockearly)
        ctx.announce(FORKS_INSTALLED, forks)
        outputs = self.record_outputs(ctx, by_name, made)
        reuse.require_restored_outputs(entry, outputs, ctx.paths.root)
        uvs_own = self.require_intact(ctx, copied)
        report, judged, imported = self.judge(ctx, forks, entry)
        if entry is None:       # uv installed it in this run: held to the sources' wheels before it may be stored
            held_forks = [(f.path, f.dist, installs_deps(f.use)) for f in forks]
            unheld = indexcheck.hold_to_index(ctx, self.name, held_forks,
                                              report.facts.get("markers"))      # run whatever else keeps it out: it detects
            unstorable = unstorable or unheld
        facts = report.facts.get("forks", {})
        result = InstallResult(
            nested_installs=nested_out,
            consistency=judged.as_json(),
            imports_with_stack_env=imported,
            order=tuple(plan.order),
            forks=tuple(InstalledFork(name=f.use.name, path=str(f.path), commit=f.commit, mode=f.use.mode,
                                      dist=f.dist, version=editable_version(facts.get(f.use.name, {}), f.path),
                                      editable=True, args=tuple(inv.args), env={k: v for k, v in inv.env})
                        for inv in plan.installs for f in [by_name[inv.fork]]),
            torch=r.torch.version,
            wheel_path=str(plan.wheel) if plan.wheel else None,
            wheel_sha256=sha256_file(plan.wheel) if plan.wheel else None,
            vllm_base_commit=base.commit if base else None,
            vllm_base_commit_source=base.source if base else None,
            vllm_base_commit_detail=base.detail if base else None,
            checks=dict(report.results),
            build_outputs=outputs,
            installed=installed_versions(ctx.paths.env),
            settings=install_settings(r),
            pth=self.pth_files(ctx),
            records=records.record_digests(ctx.paths.env, ctx.trust),
            venv_files=uvs_own,
            site_entries=self.site_entries(ctx),
        )
        # beside the marker (which is removed while the step runs): what the next run's repair holds RECORDs to
        write_json_atomic(ctx.paths.install_records, dict(result.records or {}))
        if entry is None:
            reuse.store_built_stack(ctx, self.name, forks, nested_out, imported, unstorable)
        return result

    def require_intact(self, ctx: StepContext, copied: Entry | None) -> dict[str, str]:
        """Every file of every distribution in the env as its RECORD hashes it -> the venv's own files uv wrote; a
        difference in an env this run copied from the cache names the writer in the stack, or refuses the entry."""
        try:
            return records.require_intact(ctx.paths.env, ctx.trust, lambda: stack_uv(ctx).env()["UV_CACHE_DIR"],
                                          system_torch_record(ctx), lambda: self.venv_scaffold(ctx))
        except InstallError as exc:
            if copied is not None and isinstance(exc, UnlikeRecordError) and \
                    (changed := copyfault.changed_since_copy(ctx, copied, exc.paths)):
                raise copyfault.changed_copy(ctx, self.name, copied, exc, changed) from None   # a writer in the stack
            if copied is not None:      # copied from the cache by this run, as copied: the entry itself is wrong
                raise copyfault.refused_copy(ctx, self.name, copied, exc) from None
            raise

    def judge(self, ctx: StepContext, forks: list[ForkSource], entry: Entry | None
              ) -> tuple[GuardReport, consistency.Judgement, dict[str, str]]:
        """The install guards (each outcome that is not ok warned), the consistency verdict and the forks' imports
        with the stack environment -> (the guards' report, the verdict, fork -> version imported)."""
        spec = self.guard_spec(ctx, forks)
        from ..install.guards import run_guards
        from ..pyenv import builtrestore

        report = run_guards(ctx.runner, self.name, spec)
        for check, outcome in report.results.items():
            if outcome != "ok":
                ctx.ui.warn(f"{check}: {outcome}")
        judged = self.check_consistency(ctx, report.facts.get("markers"))
        # a copied stack's import verdicts: its bytes were hashed against the manifest and the guard has just
        # read what the stack path changed, so importing torch again would prove nothing new
        imported = builtrestore.recorded_imports(entry, ctx.paths.root) if entry is not None else {}
        if {f.use.name for f in forks if f.use.traits.import_check} - set(imported):
            imported = self.check_imports(ctx, forks)
        return report, judged, imported

    def venv_scaffold(self, ctx: StepContext) -> dict[str, str]:
        """What this run's uv writes into a new venv on the stack's interpreter (relative path -> sha256),
        from a throwaway one: the unowned files uv itself puts there, whatever its version."""
        from ..pyenv.venv import uv_venv_files

        r = ctx.recipe
        python = r.torch.system_python if r.torch.from_system and r.torch.system_python else r.python
        return uv_venv_files(lambda argv: ctx.runner.run(argv, step=self.name, env=stack_uv(ctx).env()), str(python))

    def watch_outputs(self, forks: list[ForkSource]) -> dict[str, buildoutputs.Watch]:
        """Each checkout's build outputs before the install (FlashInfer's AOT folder is the jit step's)."""
        from ..jit.build import checkout_aot_dir

        return {f.use.name: buildoutputs.Watch.start(f.path, [checkout_aot_dir(f.path)]) for f in forks}

    def record_outputs(self, ctx: StepContext, forks: dict[str, ForkSource],
                       made: dict[str, tuple[list[str], list[str]]]) -> dict[str, dict[str, str]]:
        """fork -> each build output its install made, with its digest; what was there before and the install
        left untouched is said, and not recorded (``current verify`` names it)."""
        out: dict[str, dict[str, str]] = {}
        for name, (mine, found) in made.items():
            checkout = forks[name].path
            if found:
                shown = first(found, 5)
                said = (f"fork {name}: {len(found)} file(s) git does not track were in {checkout} before the "
                        f"install, which did not make them ({shown}); not recorded as its build outputs")
                ctx.ui.warn(said)
                ctx.runner.note(self.name, f"# {said}")
            out[name] = buildoutputs.record(checkout, mine, ctx.trust)
        return out

    def check_consistency(self, ctx: StepContext, markers: Mapping[str, str] | None = None) -> consistency.Judgement:
        """Every installed requirement met, except the recipe's declared ``[[install.exceptions]]``; the markers
        read with ``markers``, the stack Python's own (the guards' probe), where it reported them."""
        from ..install import consistency

        judged = consistency.require_consistent(ctx.paths.env, ctx.recipe.python, system_provided(ctx),
                                                ctx.recipe.install.exceptions, markers)
        for c, e in judged.declared:
            ctx.ui.detail(f"declared exception: {c.describe()} ({e.why})")
        for e in judged.unused:
            ctx.ui.warn(f"declared exception not seen: {e.package} -> {e.requires}; the recipe may be stale")
        return judged

    def check_imports(self, ctx: StepContext, forks: list[ForkSource]) -> dict[str, str]:
        """``import flashinfer`` with the stack environment."""
        names = [f.use.name for f in forks if f.use.traits.import_check]
        if not names:
            return {}
        env = stackenv.apply(stackenv.load(ctx.paths.root), os.environ)
        return check_imports(ctx.runner, self.name, ctx.paths.python, ctx.paths.pycache_args(), names, env,
                             stackenv.env_file(ctx.paths.root))

    def guard_spec(self, ctx: StepContext, forks: list[ForkSource]) -> GuardSpec:
        from ..install.guards import spec_for

        wheel = ctx.need(WheelResult).to_json() if any(f.use.traits.base_wheel for f in forks) else None
        return spec_for(wheel, {f.use.name: f.path for f in forks}, python=ctx.paths.python,
                        torch_version=ctx.recipe.torch.version, cuda_libs=self.cuda_libs,
                        system_torch=system_torch_record(ctx))

    def verify(self, ctx: StepContext, result: InstallResult) -> str | None:
        if not ctx.paths.python.exists():
            return f"{ctx.paths.python} is missing"
        for f in result.forks:
            if not Path(f.path).is_dir():
                return f"the checkout {f.path} is missing"
        # a no-op re-run stays fast and writes nothing: the env's metadata files, not the stack's Python
        problem = installed_state_problem(ctx.paths.env, ctx.recipe.torch.version,
                                          {f.name: Path(f.path) for f in result.forks},
                                          system_torch=ctx.recipe.torch.from_system)
        if problem is not None:
            return problem
        problem = self.outputs_problem(ctx, result)
        if problem is not None:
            return problem
        # every RECORD'ed file; only those whose stat signature moved are read again
        if result.pth is None:      # the install's full check then records them (and the RECORDs)
            return "the env's startup files are not recorded (installed by an earlier october)"
        dists = records.installed(ctx.paths.env)         # read once for both questions
        bad = {**records.tampered(ctx.paths.env, ctx.trust, dists),
               **records.rewritten(ctx.paths.env, ctx.trust, result.records, dists)}
        if bad:
            return f"files differ from their RECORD ({records.describe(bad)})"
        # a .pth (or sitecustomize) added or changed since: it runs at every start; the install's full check names it
        now = self.pth_files(ctx)
        if now != result.pth:
            changed = sorted(n for n in set(now) | set(result.pth or {}) if now.get(n) != (result.pth or {}).get(n))
            return f"the env's .pth and sitecustomize files are not those its install left ({first(changed, 5)})"
        # a package folder or module added beside the installed ones (one shadowing a fork), or one swapped for a
        # link: the install's full check names what no RECORD owns
        if result.site_entries is None:
            return "the env's site-packages entries are not recorded (installed by an earlier october)"
        entries = self.site_entries(ctx)
        if entries != result.site_entries:
            changed = sorted(n for n in set(entries) | set(result.site_entries)
                             if entries.get(n) != result.site_entries.get(n))
            return f"the env's site-packages entries are not those its install left ({first(changed, 5)})"
        return None

    def site_entries(self, ctx: StepContext) -> dict[str, str]:
        """Each top-level entry of the env's site-packages (``lib/pythonX.Y/site-packages/NAME``) -> ``dir``,
        ``file`` or ``link``: one scan, no file read.  The bytecode folder aside: the stack's Python writes it
        wherever a user runs it without a pycache prefix (what is in it is ``current verify``'s)."""
        out: dict[str, str] = {}
        for site in sorted(ctx.paths.env.glob("lib/python*/site-packages")):
            with os.scandir(site) as found:
                for e in found:
                    if e.name != "__pycache__":
                        kind = "link" if e.is_symlink() else "dir" if e.is_dir() else "file"
                        out[f"{site.parent.name}/{e.name}"] = kind
        return dict(sorted(out.items()))

    def recorded_records(self, ctx: StepContext) -> dict[str, str] | None:
        """The RECORD digests the last finished install left (None: none, or unreadable: nothing held to)."""
        from ..core import jsonread

        try:
            data = jsonread.loads(ctx.paths.install_records.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None

    def pth_files(self, ctx: StepContext) -> dict[str, str]:
        """Each file of the env's site-packages that Python runs as it starts (``*.pth``, ``sitecustomize.py``,
        ``usercustomize.py``) -> its RECORD-style sha256 (an unchanged one: one stat; the RECORD check's own
        kind, so a RECORD'ed one keeps one entry in the file-trust store)."""
        return {p.name: ctx.trust.digest(p, "record-sha256", lambda q: records.record_hash(q, "sha256"))
                if p.is_file() else "not a file"
                for site in sorted(ctx.paths.env.glob("lib/python*/site-packages")) for p in sorted(site.iterdir())
                if p.name.endswith(".pth") or p.name in STARTUP_MODULES}

    def outputs_problem(self, ctx: StepContext, result: InstallResult) -> str | None:
        """Each recorded build output still in its checkout with its digest (an unchanged file: one stat)."""
        if result.build_outputs is None:
            return "the forks' build outputs are not recorded (installed by an earlier october)"
        for f in result.forks:
            bad = buildoutputs.changed(Path(f.path), result.build_outputs.get(f.name, {}), ctx.trust)
            if bad:
                return f"fork {f.name}'s build outputs differ from what its install left ({buildoutputs.describe(bad)})"
        return None
