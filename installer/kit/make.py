"""``october_setup kit --recipe R DIR``: write an offline kit for one recipe (see :mod:`october.installer.kit`).

The manifest is written last, so a kit without ``kit.json`` is never taken for a finished one; the directory is
the tool's from the first byte on (:mod:`.owned`: ``kit-unfinished.json``, every wheel and repository recorded
before it is written), so an interrupted kit is resumed and nothing else is ever taken over or deleted.
"""

from __future__ import annotations

import hashlib
import shutil
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import git
from packaging.utils import parse_wheel_filename

from .. import __version__
from ..core.errors import KitError
from ..core.redact import redact_url
from ..core.runner import Runner
from ..git import git_env
from ..git.diagnose import remove_partial_objects
from ..git.mirror import PIN_REFS, open_mirror
from ..install.plan import installs_deps
from . import KIND, KIT_FORMAT, MANIFEST
from .against import committed_lock, kit_problems, lock_pins
from .gitcopy import KitRepos, Say
from .have import has
from .manifest import file_table, listed, write_manifest
from .owned import KitDir, held, open_kit_dir
from .wheels import WheelWant, compile_wants, fetch, from_lock, source_urls, torch_from_system
from ..recipe import ForkUse, Recipe
from ..wheels.download import download_wheel
from ..wheels.version_info import read_version_info

STEP = "kit"


@dataclass(frozen=True)
class KitOptions:
    recipe: Recipe
    out: Path
    cache_dir: Path
    lock: Path | None = None       # None: locks/<recipe>.pylock.toml when it exists, else uv pip compile
    have: Mapping[str, str] | None = None   # --have: what the target has (name -> version); not carried


def _checkout(runner: Runner, cache_dir: Path, fork: ForkUse, commit: str, dest: Path) -> Path:
    """A plain checkout of ``commit`` (for uv to read the fork's metadata), from the shared mirror."""
    mirror = open_mirror(cache_dir, fork.fetch_url, fork.name)
    shutil.rmtree(dest, ignore_errors=True)
    ref = f"{PIN_REFS}/{commit}"
    for args in (["init", "--quiet", str(dest)],
                 ["-C", str(dest), "fetch", "--quiet", "--no-tags", "--depth=1", mirror.path.as_uri(), f"+{ref}:{ref}"],
                 ["-C", str(dest), "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit]):
        runner.run(["git", *args], step=STEP, env=git_env())
    return dest


def _build_system_requires(cache_dir: Path, fork: ForkUse, commit: str) -> list[str]:
    mirror = open_mirror(cache_dir, fork.fetch_url, fork.name)
    with git.Repo(mirror.path) as repo:
        try:
            text = repo.git.show(f"{commit}:pyproject.toml")
        except git.GitCommandError:
            return ["setuptools>=40.8.0"]          # PEP 517's default for a project without pyproject.toml
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KitError(f"fork '{fork.name}': pyproject.toml at {commit} is not valid TOML",
                       expected="a readable [build-system] table", found=str(exc),
                       fix="fix the fork, or install it without build isolation") from None
    reqs = data.get("build-system", {}).get("requires", [])
    return [str(r) for r in reqs] if isinstance(reqs, list) else []


def _prune(kit: KitDir, *, keep_wheels: set[str], keep_repos: set[str]) -> None:
    """Drop what this recipe no longer needs from an earlier kit (uv's --find-links would offer an old wheel):
    only what a kit run recorded, a file no run wrote is refused by name (:meth:`KitDir.prune`)."""
    kit.prune({f"wheels/{name}" for name in keep_wheels} | keep_repos)
    for rel in sorted(keep_repos):
        if (kit.root / rel / "objects").is_dir():
            remove_partial_objects(kit.root / rel)          # nothing half-written goes into the manifest


def _dedupe(wants: list[WheelWant]) -> list[WheelWant]:
    seen: dict[str, WheelWant] = {}
    for w in wants:
        prior = seen.get(w.filename)
        if prior is not None and prior.sha256 and w.sha256 and prior.sha256 != w.sha256:
            raise KitError(f"two different files are both named {w.filename}", expected="one sha256 per file name",
                           found=f"{prior.sha256} and {w.sha256}", fix="check the recipe's sources and the lock")
        seen.setdefault(w.filename, w)
    return list(seen.values())


class _Phases:
    """Progress as every long command shows it: a ``==> kit: <phase>`` line per phase, bars, ``n of N``."""

    def __init__(self, ui: Any) -> None:
        self.ui, self._name, self._began = ui, "", 0.0

    def start(self, text: str) -> None:
        self.end()
        if self.ui is not None:
            self._name, self._began = "kit", time.monotonic()
            self.ui.task_start("kit", text)

    def end(self) -> None:
        if self.ui is not None and self._name:
            self.ui.step_done(self._name, time.monotonic() - self._began)
        self._name = ""

    def bytes(self, label: str) -> Callable[[int, int | None], None] | None:
        return None if self.ui is None else (lambda done, total: self.ui.transfer(label, done, total, "B"))

    def count(self, label: str, done: int, total: int) -> None:
        if self.ui is not None:
            self.ui.transfer(label, done, total, "")


def make_kit(opts: KitOptions, say: Say = lambda _: None, ui: Any = None) -> Path:
    """Write the kit; return the path of its manifest.  ``ui`` shows its progress (None: silent)."""
    if opts.out.exists() and not opts.out.is_dir():
        open_kit_dir(opts.out)                  # its error: a file where the kit should be
    with held(opts.out):
        kit = open_kit_dir(opts.out, opts.recipe.name)
        # one work folder per kit directory (each held by its run): two kits of one recipe from one cache at once
        # removed each other's work
        where = hashlib.sha256(str(opts.out.resolve()).encode()).hexdigest()[:12]
        work = opts.cache_dir / "kit-work" / f"{opts.recipe.name}-{where}"
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(opts.cache_dir / "kit-work" / opts.recipe.name, ignore_errors=True)   # an earlier version's
        work.mkdir(parents=True)
        echo = None if ui is None else ui.detail if ui.verbose else ui.progress
        runner = Runner(opts.cache_dir / "kit-logs" / opts.recipe.name, echo=echo)
        try:
            return _make(opts, kit, runner, work, say, _Phases(ui))
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _make(opts: KitOptions, kit: KitDir, runner: Runner, work: Path, say: Say, phases: _Phases) -> Path:
    r, out = opts.recipe, opts.out
    wheels_dir = out / "wheels"
    base, base_path, wheel_source = _base_wheel(opts, kit, say, phases, wheels_dir)

    phases.start(f"{len(r.forks)} fork(s) at their pins, with submodules")
    repos = KitRepos(runner, STEP, opts.cache_dir, out, say, claim=kit.claim)
    commits = {fork.name: repos.add_fork(fork, wheel_source=wheel_source if fork.traits.base_wheel else None)
               for fork in r.forks}

    system_torch = torch_from_system(r)
    lock = opts.lock or committed_lock(r)
    phases.start("the env's wheels" + (f" (lock {lock.name})" if lock is not None else " (uv pip compile)"))
    wants, lock_info = _env_wants(opts, runner, work, say, commits, base_path, lock, bool(system_torch))
    # a build requirement the lock pins is resolved to the lock's version where it fits: --find-links offers the
    # kit's wheels to the env too, so one of another version is refused where the kit is used (kit/against.py)
    pins = lock_pins(lock) if lock is not None else None
    for fork in r.forks:
        if fork.build_isolation:
            build_reqs = _build_system_requires(opts.cache_dir, fork, commits[fork.name])
            wants += compile_wants(runner, STEP, r, work / "build" / fork.name, build_reqs, "build", have=pins)
    wants, left_out = _without_had(opts, _dedupe(wants), say)
    say(f"{len(wants)} wheel(s)")
    kit.claim(*(f"wheels/{w.filename}" for w in wants))
    for i, w in enumerate(wants):
        phases.count("wheels in the kit", i, len(wants))
        fetch(w, opts.cache_dir, wheels_dir, source_urls(r))
    phases.count("wheels in the kit", len(wants), len(wants))
    phases.start("kit.json (sha256 of every file)")

    _prune(kit, keep_wheels={w.filename for w in wants} | ({r.wheel.filename} if r.wheel else set()),
           keep_repos={c.path for c in repos.repos.values()})
    files = file_table(out)
    doc: dict[str, Any] = {
        "format_version": KIT_FORMAT, "kind": KIND,
        "tool": {"name": "october", "version": __version__},
        "recipe": {"name": r.name, "sha256": r.sha256},
        "target": {"python": r.python, "arch": r.preflight.arch},
        "torch": {"requirement": r.torch.requirement, "from_system": system_torch},
        "lock": lock_info,
        "forks": {name: commit for name, commit in sorted(commits.items())},
        "repos": sorted((c.as_json() for c in repos.repos.values()), key=lambda d: str(d["path"])),
        "base_wheel": base,
        "wheels": sorted(({"filename": w.filename, "package": w.package, "role": w.role,
                           "sha256": files[f"wheels/{w.filename}"]["sha256"], "url": redact_url(w.url)}
                          for w in wants), key=lambda d: d["filename"]),
        "left_out": sorted(left_out, key=lambda d: d["filename"]),
        "files": files,
        "size_bytes": sum(int(f["size"]) for f in files.values()),
    }
    _require_usable(doc, r, lock, out)
    path = out / MANIFEST
    write_manifest(path, doc)
    kit.finished()
    phases.end()
    return path


def _base_wheel(opts: KitOptions, kit: KitDir, say: Say, phases: _Phases,
                wheels_dir: Path) -> tuple[dict[str, Any] | None, Path | None, str | None]:
    """The recipe's base wheel in the kit -> (its kit.json entry, its path, the commit it was built from); all
    None for a recipe without one."""
    r = opts.recipe
    if r.wheel is None:
        return None, None, None
    phases.start(f"base wheel {r.wheel.filename}")
    say(f"base wheel {r.wheel.filename}")
    got = download_wheel(r.wheel.url, r.wheel.filename, opts.cache_dir, sha256=r.wheel.sha256,
                         progress=phases.bytes(r.wheel.filename))
    kit.claim(f"wheels/{r.wheel.filename}")
    path = fetch(WheelWant(r.wheel.name, r.wheel.filename, got.path.as_uri(), got.sha256, "base"),
                 opts.cache_dir, wheels_dir)
    entry = {"filename": r.wheel.filename, "sha256": got.sha256, "url": redact_url(r.wheel.url)}
    return entry, path, read_version_info(path).commit


def _env_wants(opts: KitOptions, runner: Runner, work: Path, say: Say, commits: Mapping[str, str],
               base_path: Path | None, lock: Path | None, system_torch: bool) -> tuple[list[WheelWant], dict[str, Any]]:
    """The wheels of the env: the lock's (``lock``), else each root's resolution by ``uv pip compile`` -> (the
    wheels, kit.json's ``lock``); torch left out where the target's system provides it."""
    r = opts.recipe
    skip = ["torch"] if system_torch else []
    if lock is not None:
        say(f"wheels of the lock {lock.name}")
        return from_lock(lock, r, skip=skip), {"source": "lock", "name": lock.name}
    say("wheels of the env, resolved by uv pip compile (no committed lock)")
    # the env's roots as the env step installs them; one resolution per root, the kit takes their union
    common = ([] if system_torch else [r.torch.requirement]) + list(r.build_requirements) + list(r.install.supply)
    # the base wheel's own requirements only when a precompiled fork installs its dependencies (a
    # --no-deps one never installs them: 447 MB of flashinfer-cubin alone)
    base_root = base_path is not None and any(f.traits.base_wheel and installs_deps(f) for f in r.forks)
    roots: list[tuple[str, list[str], dict[str, str]]] = [("env", common + ([str(base_path)] if base_root else []), {})]
    for fork in r.forks:
        if installs_deps(fork):
            src = _checkout(runner, opts.cache_dir, fork, commits[fork.name], work / "src" / fork.name)
            env = {"VLLM_USE_PRECOMPILED": "1", "VLLM_PRECOMPILED_WHEEL_LOCATION": str(base_path)} \
                if fork.traits.base_wheel and base_path is not None else {}
            roots.append((f"fork-{fork.name}", common + [str(src)], env))
    wants: list[WheelWant] = []
    for label, reqs, env in roots:
        wants += [w for w in compile_wants(runner, STEP, r, work / "compile" / label, reqs, "lock", skip=skip,
                                           extra_env=env, have=opts.have)
                  if w.filename != (r.wheel.filename if r.wheel else None)]
    return wants, {"source": "uv pip compile"}


def _without_had(opts: KitOptions, wants: list[WheelWant], say: Say) -> tuple[list[WheelWant], list[dict[str, str]]]:
    """``wants`` without the wheels the target already has (``--have``; a build requirement is always kept) ->
    (the wheels kept, kit.json's ``left_out``)."""
    if not opts.have:
        return wants, []
    kept: list[WheelWant] = []
    left_out: list[dict[str, str]] = []
    for w in wants:
        version = str(parse_wheel_filename(w.filename)[1])
        if w.role != "build" and has(opts.have, w.package, version):
            left_out.append({"package": w.package, "version": version, "filename": w.filename,
                             "why": "the target has it (--have)"})
        else:
            kept.append(w)
    say(f"{len(left_out)} wheel(s) left out: the target has them (--have)")
    return kept, left_out


def _require_usable(doc: Mapping[str, Any], r: Recipe, lock: Path | None, out: Path) -> None:
    """The kit checked as the node that uses it will check it: here, where it can be made again, not there."""
    problems = kit_problems(doc, r, lock)
    if problems:
        raise KitError(f"the kit made in {out} would be refused where it is used: {listed(problems)}",
                       expected=f"every wheel of the kit as {lock.name if lock else 'its kit.json'} records it",
                       found=f"{len(problems)} difference(s)",
                       fix=("a fork's build requirements need other versions of packages the lock pins: give that "
                            "fork `build_isolation = false` in the recipe, or lock those versions")
                           if any("a build requirement of" in p for p in problems) else
                           "make the kit again (a file may have changed while it was made)")
