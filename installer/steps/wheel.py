"""``wheel``: download the vLLM base (precompiled) wheel, verify it, and put it in ``STACK/wheels``.

Which sha256 to trust (recipe > lock under ``--locked`` > trust on first use), the stack Python's tags,
the download into the shared cache, every check in one read of the wheel, the compiled sources compared
at the wheel's source commit and the fork's, and only then a reflink (or copy, never a hard link) into
``STACK/wheels``: any failure leaves it without a wheel.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Mapping

from ..core.clonefile import clone_or_copy
from ..core.errors import LockError, WheelError
from ..core.hashing import sha256_file
from ..core.redact import redact_url
from ..engine import JSON, StepContext
from ..lock.pylock import LockedState
from ..recipe import BaseWheel, ForkUse, Recipe
from .results import FetchResult, NoWheel, WheelResult, wheel_result_from_json
from ..wheels.version_info import VERSION_FILE

if TYPE_CHECKING:
    from ..wheels.download import Downloaded, DownloadPolicy
    from ..wheels.tags import PythonFacts
    from ..wheels.verify import WheelExpectation, WheelReport

# download (httpx), equivalence (GitPython), tags and verify are imported where the step runs, not on a no-op

SKIPPED = "recipe has no [wheel]"


def choose_sha256(wheel: BaseWheel, locked: LockedState | None) -> tuple[str | None, str]:
    """(expected sha256 or None, trust): the recipe's pin, else the lock's under --locked, else TOFU."""
    lock_sha = locked.wheel_sha256 if locked is not None else None
    if wheel.sha256:
        if lock_sha and lock_sha != wheel.sha256:
            raise LockError(f"the lock {locked.path if locked else ''} and the recipe pin different base wheels",
                            expected=f"sha256 {lock_sha} (the lock)", found=f"sha256 {wheel.sha256} (the recipe)",
                            fix="re-run without --locked to write a new lock, or restore the recipe's [wheel]")
        return wheel.sha256, "pinned"
    if locked is not None:
        if not lock_sha:
            raise LockError(f"--locked, but the lock {locked.path} records no sha256 for the base wheel",
                            expected="the base wheel's sha256 in the lock (written on the first run)",
                            found="none", fix="run october_setup once without --locked to record it")
        return lock_sha, "locked"
    return None, "tofu"


def precompiled_fork(recipe: Recipe) -> ForkUse | None:
    """The fork the base wheel serves: mode ``vllm-precompiled``, else the fork named ``vllm``."""
    by_mode = next((f for f in recipe.forks if f.traits.base_wheel), None)
    return by_mode if by_mode is not None else next((f for f in recipe.forks if f.name == "vllm"), None)


def expectation(recipe: Recipe, tags: list[str], facts: PythonFacts) -> WheelExpectation:
    from ..wheels.verify import WheelExpectation

    w = recipe.wheel
    assert w is not None
    return WheelExpectation(
        filename=w.filename, name=w.name, version=w.version, supported_tags=frozenset(tags),
        marker_env=dict(facts.markers), torch=(w.requires_torch or recipe.torch.version).lstrip("="),
        cuda_variant=w.cuda_variant or (recipe.cuda.variant if recipe.cuda else None),
        cudart_major=w.cudart_major, python_version=facts.version)


def _clear_installed(wheels_dir: Path) -> None:
    """The step owns STACK/wheels: drop earlier wheels so a failed run leaves none behind."""
    if not wheels_dir.is_dir():
        return
    for p in wheels_dir.iterdir():
        if p.is_file() and (p.suffix == ".whl" or p.name.endswith(".tmp")):
            p.unlink()


def place(source: Path, dest: Path, sha256: str) -> None:
    """Reflink (else copy) the verified file to ``dest`` atomically, then re-hash it.  Never a hard link:
    an edit to the stack's wheel would be the cache's."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.unlink(missing_ok=True)
    clone_or_copy(source, tmp)
    got = sha256_file(tmp)
    if got != sha256:
        tmp.unlink()
        raise WheelError(f"copying the verified wheel to {dest.parent} changed it",
                         expected=f"sha256 {sha256}", found=f"sha256 {got}",
                         fix="check the disk under the stack (free space, errors), then re-run")
    os.replace(tmp, dest)


class WheelStep:
    name: ClassVar[str] = "wheel"
    # what it imports where used (never on a no-op), imported ahead while an earlier step waits (core.idle)
    warm: ClassVar[tuple[str, ...]] = (
        "october.installer.wheels.download", "october.installer.wheels.tags", "october.installer.wheels.verify",
        "october.installer.git.equivalence", "october.installer.git.sdistmatch")

    load = staticmethod(wheel_result_from_json)

    def __init__(self, *, policy: DownloadPolicy | None = None) -> None:
        self.policy = policy
        self._facts: dict[str, PythonFacts] = {}

    def _python(self, ctx: StepContext) -> PythonFacts:
        from ..wheels.tags import probe_python

        key = str(ctx.paths.python)
        if key not in self._facts:
            self._facts[key] = probe_python(ctx.runner, ctx.paths.python, step=self.name)
        return self._facts[key]

    def inputs(self, ctx: StepContext) -> JSON:
        w = ctx.recipe.wheel
        if w is None:
            return {"wheel": None}
        locked = ctx.options.locked
        fork = precompiled_fork(ctx.recipe)
        # the stack Python's tags are not probed here (a no-op starts no process): the env step's
        # fingerprint (its Python version) is chained into ours
        return {"wheel": asdict(w), "locked": locked is not None,
                "locked_wheel_sha256": locked.wheel_sha256 if locked else None,
                "torch": ctx.recipe.torch.version,
                "cuda_variant": ctx.recipe.cuda.variant if ctx.recipe.cuda else None,
                "fork": {"name": fork.name, "commit": fork.pin.commit,
                         "upstream": redact_url(fork.upstream or "")} if fork else None}

    def run(self, ctx: StepContext) -> WheelResult | NoWheel:
        from ..git.equivalence import check_source_equivalence
        from ..git.sdistmatch import check_sdist_equivalence
        from ..wheels.download import DownloadPolicy, download_wheel, seen_path
        from ..wheels.tags import supported_tags
        from ..wheels.verify import verify_wheel

        w = ctx.recipe.wheel
        if w is None:
            return NoWheel(SKIPPED)
        want_sha, trust = choose_sha256(w, ctx.options.locked)
        _clear_installed(ctx.paths.wheels)
        facts = self._python(ctx)
        tags = supported_tags(facts)
        ctx.ui.info(f"base wheel {w.filename} ({trust}{': ' + want_sha[:12] if want_sha else ''})")
        if trust == "tofu":
            ctx.ui.warn(f"[wheel] has no sha256: trusting {w.filename} on first use; its hash goes into the "
                        "lock and --locked runs enforce it")
        got = download_wheel(w.url, w.filename, ctx.options.cache_dir, sha256=want_sha,
                             policy=self.policy or DownloadPolicy(),
                             progress=lambda done, total: ctx.ui.transfer(w.filename, done, total, "B"))
        ctx.runner.note(self.name, f"# wheel {redact_url(w.url)} -> {got.path} sha256={got.sha256} "
                                   f"size={got.size} transferred={got.transferred} "
                                   f"resumed_from={got.resumed_from} cached={got.cached} trust={trust}")
        checks = ["sha256"] if want_sha else []
        try:
            report = verify_wheel(got.path, expectation(ctx.recipe, tags, facts))
        except WheelError:
            if trust == "tofu":
                got.path.unlink(missing_ok=True)   # unverified bytes do not stay in the cache,
                seen_path(ctx.options.cache_dir, w.url).unlink(missing_ok=True)  # nor count as trusted
            raise
        checks += report.checks
        info = report.version_info
        source_commit = info.commit if info else None
        equivalence = None
        fork = precompiled_fork(ctx.recipe)
        if fork is not None:
            if info is None or info.commit is None:
                raise WheelError(f"the base wheel {w.filename} does not say which commit it was built from",
                                 expected=f"__commit_id__ (or a +g<hash> version) in {VERSION_FILE}",
                                 found=f"no {VERSION_FILE}" if info is None else
                                       f"version {info.version!r} and no commit id",
                                 fix="use a vLLM release wheel built by vLLM's setup.py (PyPI or wheels.vllm.ai), "
                                     f"so its compiled sources can be compared with the {fork.name} fork's")
            rec = ctx.need(FetchResult).forks.get(fork.name)
            clone = Path(rec.path) if rec is not None else ctx.paths.fork(fork.name)
            fork_commit = rec.commit if rec is not None else fork.pin.commit
            if fork.pin.sdist is not None:
                sdist_eq = check_sdist_equivalence(
                    ctx.runner, clone, fork_commit, got.path, wheel_commit=info.commit, wheel_version=w.version,
                    sdist=fork.pin.sdist, fork_name=fork.name, step=self.name)
                checks += ["source-commit", "sdist-equivalence"]
                ctx.ui.detail(f"the sdist-made fork is the wheel's release: {sdist_eq['python_files_identical']} "
                              f"Python files identical, commit {info.commit}")
                return self._finish(ctx, got, trust, source_commit, checks, report, sdist_eq)
            equivalence = check_source_equivalence(
                ctx.runner, clone, info.commit, fork_commit, paths=w.compiled_sources, upstream=fork.upstream,
                cache_dir=ctx.options.cache_dir, fork_url=fork.fetch_url, wheel_version=w.version,
                fork_name=fork.name, step=self.name)
            source_commit = equivalence.source_commit
            checks += ["source-commit", "source-equivalence"]
            ctx.ui.detail(f"compiled sources ({', '.join(w.compiled_sources)}) equal at wheel commit "
                          f"{equivalence.source_commit[:12]} and fork commit {equivalence.fork_commit[:12]}")
        return self._finish(ctx, got, trust, source_commit, checks, report,
                            equivalence.as_json() if equivalence is not None else None)

    def _finish(self, ctx: StepContext, got: Downloaded, trust: str, source_commit: str | None, checks: list[str],
                report: WheelReport, equivalence: Mapping[str, JSON] | None) -> WheelResult:
        w = ctx.recipe.wheel
        assert w is not None
        for r in report.retag:
            ctx.ui.detail(f"accepted retag: WHEEL says {r.wheel}, the file name {r.filename}")
        dest = ctx.paths.wheels / w.filename
        place(got.path, dest, got.sha256)
        ctx.ui.detail(f"verified {w.filename}: {', '.join(checks)}")
        return WheelResult(path=str(dest), filename=w.filename, url=redact_url(w.url), wheel_sha256=got.sha256,
                           size=got.size, mtime_ns=dest.stat().st_mtime_ns, trust=trust,
                           source_commit=source_commit, checks=tuple(checks), wheel_tags=tuple(report.wheel_tags),
                           retag=tuple(r.as_json() for r in report.retag),
                           extensions=tuple(e.as_json() for e in report.extensions),
                           source_equivalence=equivalence)

    def verify(self, ctx: StepContext, result: WheelResult | NoWheel) -> str | None:
        if isinstance(result, NoWheel):
            return None if ctx.recipe.wheel is None else "the recipe now has a [wheel]"
        path = Path(result.path)
        if not path.is_file():
            return f"{path} is missing"
        st = path.stat()
        if st.st_size != result.size:
            return f"{path.name} changed size"
        if st.st_mtime_ns == result.mtime_ns:
            return None  # untouched since it was verified: no need to re-read ~430 MB on a no-op run
        if sha256_file(path) != result.wheel_sha256:
            return f"{path.name} no longer has sha256 {result.wheel_sha256}"
        return None

