"""``receipt``: ``STACK/receipts/setup.json``, what was set up and how, validated against its schema."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar, Mapping

from october.installer import __version__

from october.installer.steps.env import stackenv
from october.installer.core.errors import CommandFailed, ToolMissing
from october.installer.core.hashing import sha256_file
from october.installer.pipeline.engine import StepContext
from october.installer.core.schemas import write_receipt
from october.installer.core.resources import checkout_root
from october.installer.core.runner import Runner


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
    env = ctx.done["env"].outputs if "env" in ctx.done else {}
    if t.from_system:
        return dict(env.get("system_torch") or {"source": "system", "version": None})
    return {"source": "index", "version": t.version, "index": t.index_url}


def promised_level(ctx: StepContext) -> str:
    """The smoke level this stack promises: engine with the vLLM fork, kernel with FlashInfer alone."""
    modes = {f.mode for f in ctx.recipe.forks}
    if "vllm-precompiled" in modes or any(f.name == "vllm" for f in ctx.recipe.forks):
        return "engine"
    if "flashinfer" in modes:
        return "kernel"
    return "reference"


class ReceiptStep:
    name: ClassVar[str] = "receipt"

    def inputs(self, ctx: StepContext) -> Any:
        o = ctx.options
        return {"allow_dirty": o.allow_dirty, "skip": list(o.skip_preflight)}

    def build(self, ctx: StepContext) -> dict[str, Any]:
        o = ctx.options
        commit, dirty = tool_git_commit(ctx.runner)
        fetch = ctx.done["fetch"].outputs["forks"] if "fetch" in ctx.done else {}
        pre = ctx.done["preflight"].outputs if "preflight" in ctx.done else None
        wheel = ctx.done["wheel"].outputs if "wheel" in ctx.done else None
        install = ctx.done["install"].outputs if "install" in ctx.done else None
        jit = ctx.done["jit"].outputs.get("modules", []) if "jit" in ctx.done else []
        env_file = stackenv.env_file(ctx.paths.root)
        return {
            "format_version": 1, "kind": "october-setup-receipt",
            "tool": {"name": "october", "version": __version__, "git_commit": commit, "git_dirty": dirty},
            "recipe": {"name": ctx.recipe.name, "path": str(ctx.recipe.path), "sha256": ctx.recipe.sha256},
            "stack": str(ctx.paths.root),
            "lock": {"path": str(ctx.paths.pylock), "sha256": sha256_file(ctx.paths.pylock),
                     "locked_from": str(o.locked.path) if o.locked else None},
            "forks": [{k: v for k, v in {"name": n, "url": r["url"], "commit": r["commit"], "pin": r.get("pin", ""),
                                         "requested": r.get("requested"), "branch": r.get("branch"),
                                         "dirty_allowed": r.get("dirty_allowed", False),
                                         "dirty": r.get("dirty", False),
                                         "submodules": dict(r.get("submodules") or {}),
                                         "submodules_selected": r.get("submodule_paths")}.items()
                       if v is not None or k == "branch"}
                      for n, r in sorted(fetch.items())],
            "wheel": dict(wheel) if wheel is not None else None,
            "install": dict(install) if install is not None else None,
            "jit": [{"uri": m["uri"], "sha256": m["sha256"]} for m in jit],
            "stack_env": {"path": str(env_file), "sha256": sha256_file(env_file),
                          "activate": str(stackenv.activate_file(ctx.paths.root)),
                          "env": stackenv.load(ctx.paths.root)} if env_file.is_file() else None,
            "machine": (pre.get("machine") or pre.get("facts")) if pre else None,
            "preflight": {"checks": pre.get("checks"), "skipped": pre.get("skipped")} if pre else None,
            "steps": [{"name": r.name, "status": r.status, "seconds": r.seconds, "finished_at": r.finished_at}
                      for r in ctx.done.values()],
            "options": {"allow_dirty": o.allow_dirty, "skip_preflight": list(o.skip_preflight),
                        "locked": o.locked is not None},
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "torch": torch_record(ctx),
            "promises": promised_level(ctx),
        }

    def run(self, ctx: StepContext) -> Mapping[str, Any]:
        doc = self.build(ctx)
        write_receipt("setup", ctx.paths.setup_receipt, doc)
        return {"path": str(ctx.paths.setup_receipt), "sha256": sha256_file(ctx.paths.setup_receipt)}

    def verify(self, ctx: StepContext, outputs: Mapping[str, Any]) -> str | None:
        p = ctx.paths.setup_receipt
        if not p.exists():
            return "setup.json is missing"
        if sha256_file(p) != outputs.get("sha256"):
            return "setup.json was changed"
        return None
