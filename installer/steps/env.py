"""``env``: the stack's own venv at the recipe's exact Python, with the pinned torch and build deps."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from ..core.atomic import write_text_atomic
from ..core.errors import CommandFailed, EnvError, InstallError
from ..core.hashing import sha256_or_none
from ..engine import StepContext, read_marker, written_sha256
from ..install.plan import install_settings
from ..lock.drift import differences, drift, installed_versions
from ..pyenv import scaffold, sitebytecode, stackenv, systorch, venv
from ..pyenv.uvcmd import StackUv, missing_find_links, uv_exe
from ..pyenv.venv import python_matches
from .results import EnvResult, PreflightResult
from .torchearly import drop as drop_warm_torch
from .torchearly import settle as settle_warm_torch

if TYPE_CHECKING:
    from ..install import consistency


def resolved_nvcc(ctx: StepContext) -> Path | None:
    """The nvcc preflight found, with links resolved: FlashInfer bakes the nvcc path into its build
    files, so the same toolkit reached by another path would force a full rebuild."""
    pre = ctx.result(PreflightResult)
    path = pre.nvcc("path") if pre is not None else None
    return Path(path).resolve() if path else None


def stack_uv(ctx: StepContext) -> StackUv:
    """uv for this stack's env: its paths, the recipe, the cache, the --locked packages; after each install, before
    anything starts the env's Python, the env's unowned bytecode is held to its sources
    (:func:`october.installer.install.records.require_own_bytecode`) and what a ``.pth`` runs at every start to its
    wheel (:func:`october.installer.steps.indexcheck.hold_started`)."""
    locked = ctx.options.locked

    def checked_install(step: str) -> None:
        from ..install.records import owned, require_own_bytecode
        from .indexcheck import hold_started

        recorded = owned(ctx.paths.env)         # the env's RECORD rows, read once for both
        require_own_bytecode(ctx.paths.env, recorded, lambda: stack_uv(ctx).env()["UV_CACHE_DIR"])
        hold_started(ctx, step, recorded)

    return StackUv(ctx.paths, ctx.recipe, ctx.options.cache_dir, locked.packages if locked is not None else None,
                   checked_install)


def stack_runtime_env(ctx: StepContext) -> dict[str, str]:
    """The stack's runtime environment for this recipe and machine."""
    nvcc = resolved_nvcc(ctx)
    arch_list = ctx.recipe.cuda.flashinfer_arch_list if ctx.recipe.cuda else ""
    return stackenv.runtime_env(ctx.paths.root, arch_list, nvcc.parent.parent if nvcc else None)


def write_stack_env(ctx: StepContext) -> dict[str, Any]:
    """Write STACK/stack-env.json and STACK/activate; -> {path, activate, sha256, activate_sha256, env}: the
    env step's record of both (its ``verify`` compares them, so does ``current verify``; ``current smoke``
    refuses a stack-env.json that differs)."""
    return stackenv.record(ctx.paths.root, stack_runtime_env(ctx))


class EnvStep:
    name: ClassVar[str] = "env"
    # what it imports where used (never on a no-op), imported ahead while an earlier step waits (core.idle)
    warm: ClassVar[tuple[str, ...]] = (
        "october.installer.steps.reuse", "october.installer.pyenv.builtstack", "october.installer.pyenv.builtkey",
        "october.installer.pyenv.builtrestore",
        "october.installer.install.consistency")

    load = staticmethod(EnvResult.from_json)

    def inputs(self, ctx: StepContext) -> Any:
        r = ctx.recipe
        locked = ctx.options.locked
        return {"python": r.python, "torch": r.torch.version, "torch_index": r.torch.index_url,
                "build": list(r.build_requirements), "supply": list(r.install.supply),
                "sources": stack_uv(ctx).sources(torch_index=True),
                "locked": {"packages": dict(locked.packages), "hashes": {k: list(v) for k, v in locked.hashes.items()}}
                if locked else None, "stack_env": stack_runtime_env(ctx)}

    def run(self, ctx: StepContext) -> EnvResult:
        from .reuse import env_from_built_stack

        link = scaffold.linked(ctx.paths.env)
        if link is not None:            # the link goes, never what it points at (uv venv --clear would empty that)
            ctx.paths.env.unlink()
            ctx.runner.note(self.name, f"# {ctx.paths.env} was {link}; removed the link")
        if scaffold.clear_unfinished(ctx.paths.env):     # a killed run's half env is never trusted
            ctx.runner.note(self.name, f"# {ctx.paths.env} had no pyvenv.cfg (a run killed while making it); removed")
        # the RECORDs an install left in the env made before: not what this env's install is to be held to
        ctx.paths.install_records.unlink(missing_ok=True)
        try:
            made = env_from_built_stack(ctx, self.name)
            if made is not None:
                drop_warm_torch(ctx)        # begun during the fetch for a probe that will not run
            else:
                made = run_on_system_torch(ctx, self.name) if ctx.recipe.torch.from_system else self._make(ctx)
        except CommandFailed as exc:
            gone = missing_find_links(ctx.recipe)
            if not gone:
                raise
            raise EnvError(f"the recipe's [sources] find_links names a folder that is not there: {gone[0]}",
                           expected=f"a folder of wheels (a relative path is taken from {ctx.recipe.path.parent})",
                           found=f"no such folder, and `{' '.join(exc.argv[:3])} ...` failed (full log: {exc.log_path})",
                           fix=f"make {gone[0]} the folder of wheels, or fix find_links in {ctx.recipe.path}") from None
        if made.scaffold is not None:       # copied from the cache: recorded as the entry made them
            return made
        return dataclasses.replace(made, scaffold=scaffold.record(ctx.paths.env), scripts=scaffold.scripts(ctx.paths.env))

    def _make(self, ctx: StepContext) -> EnvResult:
        r = ctx.recipe
        # A half-made env from a killed run is never trusted: start it over (the uv cache makes it cheap).
        ctx.ui.info(f"creating {ctx.paths.env} with Python {r.python}")
        try:
            ctx.runner.run([uv_exe(), "venv", "--clear", "--python", r.python, str(ctx.paths.env)],
                           step=self.name, env=stack_uv(ctx).env())
        except CommandFailed as exc:
            said = venv.missing_python(exc.tail)
            if said is None:
                raise
            # the machine has no such Python and uv could not fetch one (an offline node: a DNS error)
            raise EnvError(f"no Python {r.python} for the stack env (the recipe's [python] version)",
                           expected=f"a Python {r.python} on this machine, or one uv can download",
                           found=f"`uv venv --python {r.python}` said {said!r} (full log: {exc.log_path})",
                           fix=f"install it (`uv python install {r.python}` where the network allows, or the "
                               "site's module), or change [python] version in the recipe to a Python this machine "
                               "has (`uv python list`)") from None
        got = venv.pyvenv_version(ctx.paths.env)
        venv.require_python(r.python, got)
        ctx.ui.info(f"installing {r.torch.requirement}" + (f" and {len(r.build_requirements)} build requirements"
                                                           if r.build_requirements else ""))
        # [install] supply: runtime needs of a --no-deps fork, resolved here under the torch constraint
        stack_uv(ctx).pip_install(ctx.runner, self.name,
                                  [r.torch.requirement, *r.build_requirements, *r.install.supply], torch_index=True)
        if ctx.options.locked is not None:
            self._install_locked_files(ctx)
        venv.require_torch(ctx.paths.env, r.torch.version, r.torch.index_url)
        venv.require_torch_cuda(ctx.paths.env, r.torch.version, r.cuda.version if r.cuda is not None else None)
        return EnvResult(path=str(ctx.paths.env), python=str(ctx.paths.python), python_version=got,
                         torch=r.torch.version, site_packages=tuple(venv.site_packages(ctx.paths.env)),
                         stack_env=write_stack_env(ctx))

    def _install_locked_files(self, ctx: StepContext) -> None:
        """--locked: every index package of the lock from a file with the locked sha256 (uv refuses others)."""
        locked = ctx.options.locked
        assert locked is not None
        lines = venv.locked_lines(locked.packages, locked.hashes, locked.path)
        req = ctx.paths.state / "locked-requirements.txt"
        write_text_atomic(req, "\n".join(lines) + "\n")
        ctx.ui.info(f"installing {len(lines)} locked files from {locked.path.name} (hashes enforced)")
        venv.install_locked(stack_uv(ctx), ctx.runner, self.name, req, locked.path)

    def verify(self, ctx: StepContext, result: EnvResult) -> str | None:
        link = scaffold.linked(ctx.paths.env)
        if link is not None:
            return f"{ctx.paths.env} is {link}, not the folder the env step made"
        if not ctx.paths.python.exists():
            return f"{ctx.paths.python} is missing"
        moved = scaffold.changed(ctx.paths.env, result.scaffold) if result.scaffold is not None else []
        moved += scaffold.scripts_changed(ctx.paths.env, result.scripts)
        if moved:
            return "; ".join(f"{p}: expected {want}, found {got}" for p, want, got in moved)
        if ctx.recipe.torch.from_system:
            problem = system_torch_env_problem(ctx, result)
            if problem is not None:
                return problem
        elif not python_matches(ctx.recipe.python, venv.pyvenv_version(ctx.paths.env)):
            return "the env's Python version changed"
        elif not venv.dist_info_present(ctx.paths.env, "torch", ctx.recipe.torch.version):
            return f"torch {ctx.recipe.torch.version} is no longer installed"
        # both files as this step wrote them (a record older than activate's sha256: the text its env makes);
        # a changed or missing one runs the step again, which writes both
        changed = stackenv.changed_files(ctx.paths.root, result.stack_env)
        return "; ".join(c.reason() for c in changed) or changed_by_hand(ctx)


def changed_by_hand(ctx: StepContext) -> str | None:
    """What makes the env again although its own inputs did not change, held to the install step's record
    when that install was made on this env (its marker written after the env step's: a run stopped between
    the two left an older one): the forks' install settings changed since (an install over the env it filled
    would keep what it put there), or distributions were installed or removed by hand (``uv pip install`` /
    ``uninstall``; the lock would take the change).  An install record of a tool before the listing: the
    lock, when its step wrote it after that install.  The re-run then installs what a new stack gets."""
    env_m, install_m, lock_m = (ctx.paths.marker(n) for n in ("env", "install", "lock"))
    if not _later(install_m, env_m):
        return None
    outputs = (read_marker(install_m) or {}).get("outputs") or {}
    settings, installed = outputs.get("settings"), outputs.get("installed")
    if isinstance(settings, str) and settings != install_settings(ctx.recipe):
        return "the forks' install settings changed since their install (the new one starts from a new env)"
    if isinstance(installed, dict):
        changed = differences({str(k): str(v) for k, v in installed.items()}, installed_versions(ctx.paths.env))
    elif _later(lock_m, install_m) and written_sha256(lock_m) == sha256_or_none(ctx.paths.pylock):
        changed = drift(ctx.paths.env, ctx.paths.pylock)
    else:
        return None
    return f"distributions were installed or removed since the install step: {changed}" if changed else None


def _later(a: Path, b: Path) -> bool:
    """Whether marker ``a`` was written after marker ``b`` (both there)."""
    try:
        return a.stat().st_mtime_ns > b.stat().st_mtime_ns
    except OSError:
        return False


def run_on_system_torch(ctx: StepContext, step: str) -> EnvResult:
    """The env on the system interpreter, its site directories visible, torch never installed here."""
    r = ctx.recipe
    python = r.torch.system_python
    assert python is not None
    # located, not imported: the import is proved below, once, by the stack env's own interpreter (torch's
    # cold start costs seconds; importing it in the system interpreter as well paid it twice)
    facts = systorch.probe(ctx.runner, step, Path(python), locate=True)
    systorch.require_usable(r, facts, python, python_matches(r.python, facts.get("python")))
    ctx.ui.info(f"creating {ctx.paths.env} on {python} (torch {facts.get('version')} from its site packages)")
    ctx.runner.run([uv_exe(), "venv", "--clear", "--system-site-packages", "--python", python, str(ctx.paths.env)],
                   step=step, env=stack_uv(ctx).env())
    systorch.write_pth(ctx.paths.env, facts)
    wanted = [*r.build_requirements, *r.install.supply]
    system = systorch.site_distributions(systorch.site_dirs(facts))
    if ctx.options.kit is not None:
        from ..kit.have import require_left_out_present

        require_left_out_present(ctx.options.kit.root, list(ctx.options.kit.manifest.get("left_out") or ()),
                                 system, python)
    needed = systorch.unmet(wanted, system)
    if needed:
        ctx.ui.info(f"installing {len(needed)} of {len(wanted)} build/runtime requirements (the rest, and torch, "
                    "come from the system interpreter)")
        excludes = systorch.write_excludes(ctx.paths.state / "system-excludes.txt", system, needed,
                                           _offline_packages(ctx))
        stack_uv(ctx).pip_install(ctx.runner, step, ["--excludes", str(excludes), *needed])
    linked = 0
    if facts.get("file"):
        counts = sitebytecode.seed(sitebytecode.roots(Path(str(facts["file"])), facts.get("stdlib")),
                                   facts.get("cache_tag"), ctx.paths.run_pycache, ctx.paths.root)
        linked = sum(counts)
        ctx.runner.note(step, f"# {counts[0]} compiled module(s) of the site torch and {sum(counts[1:])} of its "
                              "interpreter's standard library offered to this run's pycache prefix "
                              "(pyenv/sitebytecode.py)")
    settle_warm_torch(ctx)          # the modules it compiled during the fetch are what the probe reads
    seen = systorch.probe(ctx.runner, step, ctx.paths.python, python_args=ctx.paths.pycache_args())
    if linked and seen.get("error"):
        # the site's own bytecode may be what failed (a damaged .pyc with a good header): without it, once more
        shutil.rmtree(ctx.paths.run_pycache, ignore_errors=True)
        ctx.runner.note(step, "# the probe failed with the site's bytecode offered; again without it")
        seen = systorch.probe(ctx.runner, step, ctx.paths.python, python_args=ctx.paths.pycache_args())
    systorch.require_seen(ctx.paths.env, facts, seen, ctx.runner.log_path(step))
    got = venv.pyvenv_version(ctx.paths.env)
    version, cuda = facts.get("version"), facts.get("cuda")
    return EnvResult(path=str(ctx.paths.env), python=str(ctx.paths.python), python_version=got,
                     torch=str(version) if version is not None else None,
                     torch_cuda=str(cuda) if cuda is not None else None, torch_source="system",
                     system_torch=systorch.record(facts), site_packages=tuple(venv.site_packages(ctx.paths.env)),
                     stack_env=write_stack_env(ctx))


def _offline_packages(ctx: StepContext) -> set[str] | None:
    """What an offline install can take (the kit's wheels, or a ``no_index`` recipe's find-links), by
    canonical name; None when an index serves the rest."""
    if ctx.options.kit is not None:
        return systorch.kit_packages(ctx.options.kit.wheels_dir)
    src = ctx.recipe.sources
    if src.no_index:
        return set().union(*(systorch.kit_packages(Path(d)) for d in src.find_links if Path(d).is_dir()))
    return None


def system_torch_env_problem(ctx: StepContext, result: EnvResult) -> str | None:
    """What changed in a system-torch env, without starting a process (no-op re-runs stay fast)."""
    return systorch.env_problem(ctx.paths.env, ctx.recipe.torch.system_python, result.system_torch or {})


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


def system_provided(ctx: StepContext) -> list[consistency.Dist]:
    """A site-provided torch's interpreter's distributions (they meet the env's requirements), else none."""
    from ..install import consistency      # the no-op never asks: its email/metadata imports are not its

    rec = system_torch_record(ctx)
    if rec is None:
        return []
    return consistency.installed_in([Path(d) for d in rec.get("site_packages") or []])
