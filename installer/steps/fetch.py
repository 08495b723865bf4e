"""fetch: every fork cloned at its exact pinned commit, through the shared mirror cache.

For each fork: open the bare mirror of its URL in the cache dir, turn the pin into a full commit (a
prefix on its branch, or the lock's under ``--locked``), fetch it into the mirror only if missing, then
make ``STACK/src/<fork>`` a clone detached at that commit with submodules at their recorded commits.
"""

from __future__ import annotations

import shlex

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

from ..core.redact import redact_url
from ..engine import FETCH_BEGUN, JSON, StepContext
from ..git import git_env
from ..git.clonecheck import check_clone
from ..recipe import ForkUse
from .results import FetchResult, ForkRecord

# mirror/resolve/worktree (GitPython) are imported where the step runs, not on a no-op re-run


class FetchStep:
    name: ClassVar[str] = "fetch"
    # what it imports where used (never on a no-op), imported ahead while an earlier step waits (core.idle)
    warm: ClassVar[tuple[str, ...]] = (
        "october.installer.git.mirror", "october.installer.git.resolve", "october.installer.git.sdist",
        "october.installer.git.worktree")

    load = staticmethod(FetchResult.from_json)

    def inputs(self, ctx: StepContext) -> JSON:
        locked = ctx.options.locked
        return {"forks": [{"name": f.name, "url": redact_url(f.fetch_url),
                           "upstream": redact_url(f.upstream) if f.upstream else None,
                           "pin": f.pin.name, "commit": f.pin.commit, "branch": f.pin.branch,
                           "submodules": f.submodules,
                           **({"submodule_paths": list(f.submodule_paths)} if f.submodule_paths is not None else {}),
                           **({"sparse": {k: list(v) for k, v in f.sparse.items()}} if f.sparse else {}),
                           "allow_dirty": ctx.options.allow_dirty,
                           "locked": locked.commits.get(f.name) if locked is not None else None}
                          for f in ctx.recipe.forks]}

    def run(self, ctx: StepContext) -> FetchResult:
        ctx.announce(FETCH_BEGUN, None)     # the env of an identical stack may be copied meanwhile (.envearly)
        return FetchResult(forks={f.name: self._fork(ctx, f) for f in ctx.recipe.forks})

    def _fork(self, ctx: StepContext, fork: ForkUse) -> ForkRecord:
        from ..git.mirror import ensure_commit, open_mirror
        from ..git.resolve import resolve_pin
        from ..git.sdist import materialise
        from ..git.worktree import sync_clone

        o = ctx.options
        kit = o.kit
        source = kit.source_for(fork.fetch_url) if kit is not None else None
        sdist = fork.pin.sdist
        if sdist is not None and source is None:
            # an sdist-made fork: its git repository is made from the verified sdist, in the cache
            made = materialise(ctx.runner, self.name, o.cache_dir, sdist, fork.name, fork.pin.commit)
            ctx.ui.detail(f"{fork.name}: {sdist.filename} is commit {made.commit} (tag {made.tag}, {made.path})")
            source = str(made.path)
        mirror = open_mirror(o.cache_dir, fork.fetch_url, fork.name, source=source)
        # an index-scope lock (locks/<recipe>.pylock.toml) names no fork commits: the recipe's pins hold
        locked = o.locked.commits if o.locked is not None and o.locked.commits else None
        res = resolve_pin(ctx.runner, self.name, mirror, fork.pin, locked)
        if res.how == "prefix":
            ctx.ui.detail(f"{fork.name}: '{res.requested}' on branch '{res.branch}' is {res.commit}")
        fetched = ensure_commit(ctx.runner, self.name, mirror, res.commit)
        ctx.ui.detail(f"{fork.name}: fetched {res.commit} from {mirror.shown_url}" if fetched
                      else f"{fork.name}: {res.commit} already in the cache ({mirror.path})")
        if kit is not None:
            # what else the kit carries for this fork (the base wheel's source commit) goes into the
            # fork's mirror too, where the wheel step looks for it before asking the upstream
            for extra in kit.commits_for(fork.fetch_url):
                if extra != res.commit:
                    ensure_commit(ctx.runner, self.name, mirror, extra)
        dest = ctx.paths.fork(fork.name)
        out = sync_clone(ctx.runner, self.name, dest, mirror, res.commit, cache_dir=o.cache_dir,
                         submodules=fork.submodules, allow_dirty=o.allow_dirty, say=ctx.ui.detail,
                         submodule_paths=fork.submodule_paths, sparse=fork.sparse,
                         **({"rewrite": kit.source_for} if kit is not None else {}))
        if sdist is not None:
            # setuptools-scm (vLLM's version) reads the release tag: without it 0.1.dev1+g<sha>
            ctx.runner.run(["git", "-C", str(dest), "tag", "--force", f"v{sdist.version}", res.commit],
                           step=self.name, env=git_env())
        if out.kept:
            ctx.ui.warn(f"{fork.name}: {dest} was at a commit of yours that no branch held; kept as the branch "
                        f"{out.kept} (`git -C {shlex.quote(str(dest))} log {out.kept}`) before the checkout of {res.commit}")
        if out.dirty:
            ctx.ui.warn(f"{fork.name}: keeping {len(out.dirty)} local change(s) in {dest} "
                        "(--allow-dirty; recorded)")
            ctx.runner.note(self.name, f"# {fork.name}: dirty tree kept (--allow-dirty):\n"
                            + "\n".join(out.dirty))
        return ForkRecord(path=str(dest), url=redact_url(fork.fetch_url),
                          upstream=redact_url(fork.upstream) if fork.upstream else None,
                          pin=fork.pin.name, requested=res.requested, branch=res.branch,
                          commit=res.commit, submodules=dict(out.submodules),
                          submodule_paths=tuple(fork.submodule_paths) if fork.submodule_paths is not None else None,
                          dirty_allowed=o.allow_dirty, dirty=bool(out.dirty), sparse=dict(fork.sparse))

    def verify(self, ctx: StepContext, result: FetchResult) -> str | None:
        """Every fork's clone still at its commit, clean, submodules at their commits (forks in parallel)."""
        missing = [f.name for f in ctx.recipe.forks if f.name not in result.forks]
        if missing:
            return f"fork '{missing[0]}' has no record"

        def look(fork: ForkUse) -> str | None:
            rec = result.forks[fork.name]
            bad = check_clone(Path(rec.path), rec.commit, allow_dirty=rec.dirty_allowed,
                              submodules=dict(rec.submodules) if fork.submodules else None,
                              submodule_paths=fork.submodule_paths, sparse=rec.sparse)
            return f"fork '{fork.name}': {bad}" if bad is not None else None

        forks = list(ctx.recipe.forks)
        if len(forks) < 2:
            return look(forks[0]) if forks else None
        with ThreadPoolExecutor(max_workers=len(forks)) as pool:
            return next((bad for bad in pool.map(look, forks) if bad is not None), None)
