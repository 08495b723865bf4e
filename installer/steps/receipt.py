"""``receipt``: ``STACK/receipts/setup.json``, what was set up and how, validated against its schema."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar

from .. import __version__
from ..core.errors import CommandFailed, ToolMissing
from ..core.hashing import fingerprint, sha256_file
from ..core.redact import redact_url
from ..core.resources import checkout_root
from ..core.runner import Runner
from ..engine import StepContext
from ..pyenv import stackenv
from ..recipe.forks import promise_of
from .results import EnvResult, FetchResult, InstallResult, JitResult, PreflightResult, ReceiptResult, WheelResult


def tool_git_commit(runner: Runner) -> tuple[str, bool]:
    """The tool's own commit (``unknown`` outside a checkout) and whether its tree is dirty."""
    root = checkout_root()
    if root is None:  # an installed tool: no checkout to ask
        return "unknown", False
    try:
        head = runner.run(["git", "-C", str(root), "rev-parse", "HEAD"], step="receipt", check=False,
                          timeout=30)
        dirty = runner.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           step="receipt", check=False, timeout=30)
    except (ToolMissing, CommandFailed):
        return "unknown", False
    commit = head.output.strip()
    if head.returncode != 0 or len(commit) != 40:
        return "unknown", False
    return commit, bool(dirty.output.strip())


def torch_record(ctx: StepContext) -> dict[str, Any]:
    """Where the stack's torch comes from: the recipe's index, or the system (version, CUDA build, path)."""
    t = ctx.recipe.torch
    env = ctx.result(EnvResult)
    if t.from_system:
        return dict((env.system_torch if env is not None else None) or {"source": "system", "version": None})
    return {"source": "index", "version": t.version, "index": redact_url(t.index_url) if t.index_url else None}


def promised_level(ctx: StepContext) -> str:
    """The smoke level this stack promises (:func:`promise_of` over each fork's mode, name and installed
    distribution): engine with the vLLM fork, kernel with FlashInfer alone, else reference."""
    install = ctx.result(InstallResult)
    dists = {f.name: f.dist for f in install.forks} if install is not None else {}
    return promise_of([{"mode": f.mode, "name": f.name, "dist": dists.get(f.name)}
                       for f in ctx.recipe.forks]) or "reference"


class ReceiptStep:
    name: ClassVar[str] = "receipt"
    # what it imports where used (never on a no-op), imported ahead while an earlier step waits (core.idle)
    warm: ClassVar[tuple[str, ...]] = ("october.installer.core.schemas",)

    load = staticmethod(ReceiptResult.from_json)

    def inputs(self, ctx: StepContext) -> Any:
        """The options it records, and every earlier step's whole result and when it finished: the
        receipt records all of them, so it is written again whenever any earlier step ran."""
        o = ctx.options
        return {"allow_dirty": o.allow_dirty, "skip": list(o.skip_preflight), "cache_dir": str(o.cache_dir),
                "steps": [[r.name, r.finished_at, fingerprint(r.result.to_json())] for r in ctx.done.values()
                          if r.name != self.name]}

    def build(self, ctx: StepContext) -> dict[str, Any]:
        o = ctx.options
        commit, dirty = tool_git_commit(ctx.runner)
        fetched = ctx.result(FetchResult)
        fetch = fetched.forks if fetched is not None else {}
        pre = ctx.result(PreflightResult)
        wheel = ctx.result(WheelResult)
        install = ctx.result(InstallResult)
        jit = ctx.result(JitResult)
        env_file = stackenv.env_file(ctx.paths.root)
        return {
            "format_version": 1, "kind": "october-setup-receipt",
            "tool": {"name": "october", "version": __version__, "git_commit": commit, "git_dirty": dirty},
            "recipe": {"name": ctx.recipe.name, "path": str(ctx.recipe.path), "sha256": ctx.recipe.sha256},
            "stack": str(ctx.paths.root),
            "lock": {"path": str(ctx.paths.pylock), "sha256": sha256_file(ctx.paths.pylock),
                     "locked_from": str(o.locked.path) if o.locked else None},
            "forks": [{k: v for k, v in {"name": n, "url": r.url, "commit": r.commit, "pin": r.pin,
                                         "requested": r.requested, "branch": r.branch,
                                         "dirty_allowed": r.dirty_allowed, "dirty": r.dirty,
                                         "submodules": dict(r.submodules),
                                         "submodules_selected": list(r.submodule_paths)
                                         if r.submodule_paths is not None else None}.items()
                       if v is not None or k == "branch"}
                      for n, r in sorted(fetch.items())],
            "wheel": wheel.to_json() if wheel is not None else None,
            # the forks' build outputs stay in the install step's marker: their digests are the no-op's and
            # verify's, and a file such as vLLM's _precompiled.json names where the stack was made
            "install": {k: v for k, v in install.to_json().items() if k not in ("build_outputs", "pth", "records")}
            if install is not None else None,
            "jit": jit.libraries if jit is not None else [],
            "stack_env": {"path": str(env_file), "sha256": sha256_file(env_file),
                          "activate": str(stackenv.activate_file(ctx.paths.root)),
                          "env": stackenv.load(ctx.paths.root)} if env_file.is_file() else None,
            "machine": dict(pre.machine or pre.facts) if pre is not None else None,
            "preflight": {"checks": [dict(c) for c in pre.checks], "skipped": list(pre.skipped)}
            if pre is not None else None,
            "steps": [{"name": r.name, "status": r.status, "seconds": r.seconds, "finished_at": r.finished_at}
                      for r in ctx.done.values()],
            "options": {"allow_dirty": o.allow_dirty, "skip_preflight": list(o.skip_preflight),
                        "locked": o.locked is not None, "cache_dir": str(o.cache_dir)},
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "torch": torch_record(ctx),
            "cuda_arch_list": [str(c) for c in ctx.recipe.cuda.arch_list] if ctx.recipe.cuda else None,
            "promises": promised_level(ctx),
        }

    def run(self, ctx: StepContext) -> ReceiptResult:
        doc = self.build(ctx)
        from ..core.schemas import write_receipt  # jsonschema: not on a no-op re-run

        write_receipt("setup", ctx.paths.setup_receipt, doc)
        return ReceiptResult(path=str(ctx.paths.setup_receipt), sha256=sha256_file(ctx.paths.setup_receipt))

    def verify(self, ctx: StepContext, result: ReceiptResult) -> str | None:
        p = ctx.paths.setup_receipt
        if not p.exists():
            return "setup.json is missing"
        if sha256_file(p) != result.sha256:
            return "setup.json was changed"
        return None
