"""``lock``: write ``STACK/pylock.toml`` (PEP 751) describing exactly what the stack env holds."""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Protocol, Sequence

from packaging.utils import canonicalize_name

from ..core.atomic import write_text_atomic
from ..core.errors import LockError
from ..core.hashing import sha256_file
from ..core.resources import stack_script
from ..core.runner import Completed
from ..lock.drift import lock_drift, read_toml, site_pth, site_startup, system_drift
from ..engine import StepContext
from ..pyenv.uvcmd import uv_exe
from ..recipe.forks import traits_of
from .env import stack_uv
from .lockearly import take_early
from .results import (
    EnvResult, FetchResult, ForkRecord, InstallResult, JitResult, LockResult, PreflightResult, WheelResult,
)

if TYPE_CHECKING:
    from ..lock.installed import Unlike
    from ..lock.pylock import Installed

# pylock (packaging.pylock, tomli_w) is imported where the lock is written, not on a no-op re-run

PROBE = stack_script("distributions.py")


class Runs(Protocol):
    """What runs the lock's commands: the step's runner, or the early start's (:mod:`.lockearly`)."""

    def run(self, argv: Sequence[str], *, step: str, env: Mapping[str, str] | None = None) -> Completed: ...


@dataclass(frozen=True)
class Listing:
    """What a lock is made from: the stack env's distributions as its own interpreter lists them
    (:data:`PROBE`), and uv's answer (files, hashes) for those that came from an index."""

    raw: Mapping[str, Any]
    index_packages: list[dict[str, Any]]


def list_env(ctx: StepContext, runner: Runs) -> Listing:
    """The env's :class:`Listing`, its commands run by ``runner``."""
    from ..lock.pylock import split_installed

    raw = probe_env(ctx, "lock", runner)
    _, dists = installed_distributions(ctx, "lock", raw)
    _, index, _ = split_installed(dists, fork_paths(ctx))
    return Listing(raw=raw, index_packages=_resolve_index_packages(ctx, index, runner))


def fork_paths(ctx: StepContext) -> dict[str, Path]:
    return {name: Path(rec.path) for name, rec in ctx.need(FetchResult).forks.items()}


def probe_env(ctx: StepContext, step: str, runner: Runs | None = None) -> dict[str, Any]:
    out = (runner or ctx.runner).run([str(ctx.paths.python), "-I", str(PROBE)], step=step).output
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith("{")), None)
    if line is None:
        raise LockError("could not list the stack env's packages", expected="a JSON line from checks/probes/distributions.py",
                        found=out[-200:] or "no output", fix=f"run {ctx.paths.python} -I {PROBE} by hand")
    return dict(json.loads(line))


def installed_distributions(ctx: StepContext, step: str, data: Mapping[str, Any] | None = None
                            ) -> tuple[str, list[Installed]]:
    """The env's own distributions (not a site-provided torch and its neighbours: :func:`system_section`)."""
    data = data if data is not None else probe_env(ctx, step)
    seen: dict[str, bool] = {}
    own = [d for d in data["distributions"] if not from_system_site(ctx, d, seen)]
    from ..lock.pylock import Installed

    return data["python"], [Installed(d["name"], d["version"], d["direct_url"]) for d in own]


def from_system_site(ctx: StepContext, dist: Mapping[str, Any], seen: dict[str, bool] | None = None) -> bool:
    """True for a distribution the system interpreter provides (outside the stack env).  ``seen`` keeps
    the answer per site directory: an image's hundreds of system distributions share two or three."""
    if not ctx.recipe.torch.from_system or not dist.get("site"):
        return False
    site, seen = str(dist["site"]), {} if seen is None else seen
    if site not in seen:
        seen[site] = not Path(site).resolve().is_relative_to(ctx.paths.env.resolve())
    return seen[site]


def system_section(ctx: StepContext, data: Mapping[str, Any]) -> dict[str, Any] | None:
    """``[tool.october.system]``: the system's torch (version, CUDA build, where) and every other
    distribution the stack uses from the system's site directories, name -> version."""
    if not ctx.recipe.torch.from_system:
        return None
    env = ctx.result(EnvResult)
    rec = dict((env.system_torch or {}) if env is not None else {})
    seen: dict[str, bool] = {}
    system = [d for d in data["distributions"] if from_system_site(ctx, d, seen)]
    others: dict[str, str] = {}
    for d in system:        # a name in two sites: the first on sys.path, the one Python imports (the probe's order)
        if canonicalize_name(d["name"]) != "torch":
            others.setdefault(str(canonicalize_name(d["name"])), str(d["version"]))
    # where they were found, in sys.path's order: verify and the no-op hold the packages to them
    found = dict.fromkeys(str(d["site"]) for d in system)
    path = [str(p) for p in data.get("path") or [] if str(p) in found]
    sites = list(dict.fromkeys([*path, *found]))
    # the .pth files the stack's Python runs: those of every site directory the env's own .pth adds (one that
    # held no distribution at setup included), and of those the packages came from
    pth_sites = list(dict.fromkeys([*(str(d) for d in rec.get("site_packages") or []), *sites]))
    return {"torch": {k: rec.get(k) for k in ("version", "cuda", "path", "python", "python_version")},
            "packages": dict(sorted(others.items())), "sites": sites, "pth": site_pth(pth_sites),
            "pth_sites": pth_sites, "startup": site_startup(pth_sites)}


def _resolve_index_packages(ctx: StepContext, dists: Sequence[Installed], runner: Runs,
                            work_dir: str = "lock-compile") -> list[dict[str, Any]]:
    """Ask uv which files (URLs + hashes) the installed ``name==version`` pins are (``work_dir``: under the stack's
    state folder, one per caller: the early listing may run beside another)."""
    if not dists:
        return []
    work = ctx.paths.state / work_dir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    req = work / "requirements.in"
    req.write_text("".join(f"{d.name}=={d.version}\n" for d in dists), encoding="utf-8")
    out = work / "pylock.toml"
    uv = stack_uv(ctx)
    # the interpreter the env's Python is (its markers and tags are the env's): uv keeps what it learnt of it
    # by its path, so a second stack's new env is not queried again (~50 ms; the env's own path is new each time)
    python = os.path.realpath(ctx.paths.python)
    runner.run([uv_exe(), "pip", "compile", str(req), "--no-deps", "--no-header", "--quiet",
                "--python", python, *uv.sources(torch_index=True), "-o", str(out)],
               step="lock", env=uv.env())
    with open(out, "rb") as fh:
        packages = list(tomllib.load(fh).get("packages", []))
    unhashed = [str(f.get("url") or f.get("path") or f.get("name")) for p in packages
                for f in [*p.get("wheels", []), *([p["sdist"]] if "sdist" in p else [])] if not f.get("hashes")]
    if unhashed:
        raise _unhashed_error(unhashed, runner.run([uv_exe(), "--version"], step="lock").output)
    shutil.rmtree(work, ignore_errors=True)
    return packages


def _unhashed_error(unhashed: list[str], version_output: str) -> LockError:
    """uv listed files without a hash: below the floor, uv is the cause (upgrade it); at or above it,
    the source served a file uv could not hash (named: the recipe's sources are what to look at)."""
    from packaging.version import InvalidVersion, Version

    from ..core.redact import redact_url
    from ..machine.probes import first_line, parse_uv
    from ..machine.rules import UV_FLOOR

    line, version = first_line(version_output) or "uv", parse_uv(version_output)
    try:
        old = version is None or Version(version) < Version(UV_FLOOR)
    except InvalidVersion:
        old = True
    first = redact_url(unhashed[0])
    found = f"{len(unhashed)} file(s) without a hash from {line} (first: {first})"
    if old:
        return LockError(f"{line} wrote a lock without hashes", expected=f"a sha256 for every file (uv {UV_FLOOR} or "
                         "later hashes the files of a --find-links directory and of an index that serves none)",
                         found=found, fix=f"upgrade the uv the tool runs ({uv_exe()}) to {UV_FLOOR} or later "
                         "(`uv sync` in the project, or reinstall the tool), then re-run october_setup")
    return LockError("uv could not give a hash for a file the env was installed from", expected="a sha256 for every file",
                     found=found, fix="check that the recipe's [sources] serve that file (a find-links directory "
                     "or index that can be read), then re-run october_setup")


def stale_env(ctx: StepContext, step: str, stale: Sequence[Unlike]) -> LockError:
    """The env holds other bytes than the files the lock would name (a wheel republished under its file name, the
    old one installed from uv's cache or a built-stack entry; or uv's cache edited with the RECORD rows, which the
    install step's :mod:`.indexcheck` finds); -> the error to raise.  Nothing is removed: which
    bytes are right is the user's to say (the old ones verified at setup; a republished file may be the fault),
    and the fix names the commands for either answer."""
    import shlex

    from ..lock.installed import describe
    from ..pyenv import builtstack
    from .reuse import stack_key

    names = [u.name for u in stale]
    key = stack_key(ctx, step)
    entry = builtstack.find(ctx.options.cache_dir, key) if key is not None else None
    uv = stack_uv(ctx)
    clean = " ".join(shlex.quote(x) for x in ["env", f"UV_CACHE_DIR={uv.env()['UV_CACHE_DIR']}", uv_exe(), "cache",
                                                 "clean", *names])
    gone = " ".join(shlex.quote(str(p)) for p in [ctx.paths.env, *([entry.path] if entry is not None else [])])
    return LockError(f"the stack env does not hold the files its lock would name: {', '.join(names)} installed from "
                     "other bytes than the sources now serve under the same file name (a wheel republished under "
                     "its name, or uv's cache edited where it keeps the wheel unpacked)",
                     expected="each index package installed from the file the lock names (its sha256)",
                     found=describe(stale),
                     fix="find out who republished it or wrote uv's cache (nothing was removed).  To keep what is installed, put the "
                         "original file back in the recipe's sources and re-run october_setup; to take the new "
                         f"file, run `rm -rf {gone}` and `{clean}`, then re-run october_setup")


def toolchain_facts(ctx: StepContext, python_version: str) -> dict[str, Any]:
    """Stable facts about the toolchain (no free disk, no paths): the lock must be reproducible."""
    from .preflight import uv_line

    r = ctx.recipe
    words = uv_line(ctx, "lock").split()      # the preflight's reading of this same uv, else asked again
    facts: dict[str, Any] = {"python": python_version, "torch": r.torch.version,
                             "uv": words[1] if len(words) > 1 else " ".join(words)}
    if r.cuda is not None:
        facts.update({"cuda": r.cuda.version, "cuda-arch-list": r.cuda.flashinfer_arch_list, "cuda-variant": r.cuda.variant})
    pre = ctx.result(PreflightResult)
    if pre is not None:
        facts.update({key: pre.facts[key] for key in ("os", "arch") if pre.facts.get(key)})
        facts.update({tool: v for tool in ("nvcc", "cc", "cxx", "git") if (v := pre.tool(tool).get("version"))})
        gpus = [{k: g.get(k) for k in ("name", "compute_capability", "driver") if g.get(k)} for g in pre.gpus]
        if gpus:
            facts["gpus"] = gpus
    return facts


def wheel_for_lock(wheel: WheelResult) -> dict[str, Any]:
    """``[tool.october.wheel]``: the base wheel (its hash under the key ``sha256``), its tags, retag and
    extension modules, and the compiled-source comparison (TOML has no null: absent values left out)."""
    out: dict[str, Any] = {"filename": wheel.filename, "url": wheel.url, "sha256": wheel.wheel_sha256,
                           "trust": wheel.trust}
    optional = {"source_commit": wheel.source_commit, "wheel-tags": list(wheel.wheel_tags) or None,
                "retag": [dict(r) for r in wheel.retag] or None,
                "extensions": [e["module"] for e in wheel.extensions] or None}
    out.update({k: v for k, v in optional.items() if v is not None})
    eq = wheel.source_equivalence
    if eq and eq.get("method") == "sdist-files":
        out["source-equivalence"] = {k.replace("_", "-"): v for k, v in eq.items() if k != "wheel_only"}
    elif eq:
        out["source-equivalence"] = {
            "source-commit": eq["source_commit"], "fork-commit": eq["fork_commit"],
            "compared-in": eq["compared_in"], "fetched-upstream": bool(eq["fetched_upstream"]),
            "paths": [{k: v for k, v in p.items() if v is not None} for p in eq["paths"]]}
    return out


def fork_for_lock(rec: ForkRecord) -> dict[str, Any]:
    """A fork under ``[tool.october.forks]``: where it came from, its commit and submodules (no nulls)."""
    out: dict[str, Any] = {"url": rec.url, "commit": rec.commit, "pin": rec.pin, "branch": rec.branch,
                           "requested": rec.requested, "submodules": dict(rec.submodules) or None}
    return {k: v for k, v in out.items() if v is not None}


def upstream_base_fork(install: InstallResult | None) -> str | None:
    """The fork whose upstream base commit the install found (the one the base wheel serves, by its mode's
    traits, whatever its name), under which the lock records it; None: no base commit."""
    if install is None or not install.vllm_base_commit:
        return None
    return next((f.name for f in install.forks if traits_of(f.mode).base_wheel), None)


class LockStep:
    name: ClassVar[str] = "lock"
    # what it imports where used (never on a no-op), imported ahead while an earlier step waits (core.idle)
    warm: ClassVar[tuple[str, ...]] = (
        "october.installer.lock.installed", "october.installer.lock.pylock", "october.installer.machine.rules",
        "october.installer.steps.reuse")

    load = staticmethod(LockResult.from_json)

    def inputs(self, ctx: StepContext) -> Any:
        locked = ctx.options.locked
        # a kit's sources name the lock's files (a moved kit, another kit: its wheels' URLs); without a kit they
        # are the recipe's (its sha256), and a stack of an earlier version keeps its fingerprint (no re-lock,
        # which needs the index, on an offline node)
        kit = {"sources": stack_uv(ctx).sources(torch_index=True)} if ctx.recipe.kit is not None else {}
        return {"recipe": ctx.recipe.sha256, "locked": locked.sha256 if locked else None, **kit}

    def run(self, ctx: StepContext) -> LockResult:
        from ..lock.installed import unlike_locked
        from ..lock.pylock import build_lock, diff_against, dumps, split_installed

        # begun during install's checks when the env is still as it was then, else made now
        listing = take_early(ctx, self) or list_env(ctx, ctx.runner)
        python_version, dists = installed_distributions(ctx, self.name, listing.raw)
        fetch = ctx.need(FetchResult).forks
        forks, _, other = split_installed(dists, fork_paths(ctx))
        missing = sorted(set(fetch) - set(forks))
        if missing:
            raise LockError("a fork is not installed as an editable checkout",
                            expected=f"{', '.join(missing)} installed editable from STACK/src",
                            found="another copy or none", fix="re-run october_setup (the install step re-runs)")
        stale = unlike_locked(listing.index_packages, ctx.paths.env)
        if stale:
            raise stale_env(ctx, self.name, stale)
        ctx.ui.info(f"locking {len(dists)} distributions ({len(forks)} forks)")
        tool: dict[str, Any] = {
            "format-version": 1,
            "recipe": {"name": ctx.recipe.name, "sha256": ctx.recipe.sha256},
            "forks": {n: fork_for_lock(rec) for n, rec in sorted(fetch.items())},
            "toolchain": toolchain_facts(ctx, python_version),
        }
        wheel = ctx.result(WheelResult)
        if wheel is not None:
            tool["wheel"] = wheel_for_lock(wheel)
        install = ctx.result(InstallResult)
        base_fork = upstream_base_fork(install)
        if base_fork is not None and install is not None:
            tool["forks"].setdefault(base_fork, {})["upstream-base"] = install.vllm_base_commit
        system = system_section(ctx, listing.raw)
        if system is not None:
            tool["system"] = system
        jit = ctx.result(JitResult)
        if jit is not None and jit.modules:
            tool["jit"] = jit.libraries
        lock = build_lock(python_version=python_version, index_packages=listing.index_packages,
                          forks={n: (forks[n], fetch[n].to_json()) for n in forks}, other=other, tool=tool)
        if ctx.options.locked is not None:
            problems = diff_against(ctx.options.locked, lock)
            if problems:
                raise LockError(f"the stack differs from the lock {ctx.options.locked.path} in "
                                f"{len(problems)} place(s): " + "; ".join(problems),
                                expected="exactly the locked packages and commits",
                                found="the differences listed", fix="update the lock deliberately (run without --locked) "
                                "or fix the recipe's sources so they serve the locked files")
        write_text_atomic(ctx.paths.pylock, dumps(lock))
        return LockResult(path=str(ctx.paths.pylock), sha256=sha256_file(ctx.paths.pylock),
                          packages=len(lock["packages"]))

    def verify(self, ctx: StepContext, result: LockResult) -> str | None:
        if not ctx.paths.pylock.exists():
            return "pylock.toml is missing"
        if sha256_file(ctx.paths.pylock) != result.sha256:
            return "pylock.toml was changed"
        lock = read_toml(ctx.paths.pylock)          # read once for both questions
        if lock is None:
            return None
        changed = lock_drift(ctx.paths.env, lock)
        if changed:
            return f"the env changed since the lock was written: {changed}"
        # not this tool's to put back: the lock is written again to say what the stack now uses (and names it)
        system = system_drift(lock, ctx.paths.env) if ctx.recipe.torch.from_system else None
        if system:
            return f"the system interpreter's packages changed since the lock was written: {system}"
        section = ((lock.get("tool") or {}).get("october") or {}).get("system")
        if ctx.recipe.torch.from_system and isinstance(section, dict) and "pth_sites" not in section:
            return "the lock predates its record of the system site folders' .pth files (written again to hold them)"
        # a lock without `startup` (sitecustomize modules) is held to them from its next writing: writing it again
        # for that alone ran a new resolution, which failed where the sources are gone (the upgrade hunt)
        return None
