"""The ``preflight`` setup step: probe the machine, judge it, stop with the whole punch list."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import ClassVar, Mapping

from ..core.errors import PreflightError
from ..core.idle import while_futures
from ..engine import JSON, StepContext
from ..machine import evaluate, facts_json, machine_facts_json, system_torch_facts, validate_skip
from ..machine.probes import first_line, gather_facts
from ..machine.rules import UV_FLOOR, punch_list
from ..pyenv.uvcmd import uv_exe
from .results import PreflightResult


class PreflightStep:
    """Facts are gathered again when the inputs change or when a tool they came from changed: ``verify``
    compares each probed program's recorded size and mtime without starting it (a no-op stays fast)."""

    name: ClassVar[str] = "preflight"

    load = staticmethod(PreflightResult.from_json)

    def inputs(self, ctx: StepContext) -> JSON:
        recipe = ctx.recipe
        return {
            "preflight": asdict(recipe.preflight),
            "cuda": recipe.cuda.as_recipe() if recipe.cuda is not None else None,
            "skip": sorted(set(ctx.options.skip_preflight)),
            "stack": str(ctx.paths.root.absolute()),
            # the uv this run uses and the tool's floor for it: a stack re-run by another install is judged again
            "uv": uv_exe(), "uv_floor": UV_FLOOR,
            **({"torch": {"version": recipe.torch.version, "system_python": recipe.torch.system_python}}
               if recipe.torch.from_system else {}),
        }

    def run(self, ctx: StepContext) -> PreflightResult:
        skip = validate_skip(ctx.options.skip_preflight)
        with ThreadPoolExecutor(max_workers=1) as pool:      # the system torch's import beside the probes
            torch_job = pool.submit(system_torch_facts, ctx.recipe, ctx.runner, self.name)
            facts = gather_facts(ctx.paths.root, ctx.runner)
            # the system torch's import outlasts the probes: the fetch's imports meanwhile (core.idle)
            while_futures([torch_job])
            torch_facts = torch_job.result()
        results = evaluate(ctx.recipe, facts, skip, torch_facts)
        problems = punch_list(results)
        for r in results:
            line = f"{r.name:<9} {r.status:<7} {r.detail}"
            if r.name in skip:
                ctx.ui.warn(f"preflight check '{r.name}' skipped by --skip-preflight")
            elif r.status == "skipped" and not problems:    # not checked (cuda_arch without a GPU), the run goes on
                ctx.ui.warn(f"preflight check '{r.name}' {r.detail}")
            ctx.ui.detail(line)
            ctx.runner.note(self.name, line)
        if problems:
            raise PreflightError(problems)
        fj = facts_json(facts)
        if torch_facts is not None:
            fj["system_torch"] = {**torch_facts, "path": torch_facts.get("file")}
        return PreflightResult(facts=fj, machine=machine_facts_json(facts), checks=tuple(r.as_json() for r in results),
                               skipped=tuple(skip), tools=tool_stats(fj))

    def verify(self, ctx: StepContext, result: PreflightResult) -> str | None:
        now = tool_stats(result.facts)
        changed = next((f"{path} changed since it was checked" for path, stat in result.tools.items()
                        if now.get(path) != stat), None)
        if changed is not None:
            return changed
        # every step runs the git PATH finds: none there any more is the preflight's to say (its punch list);
        # another git first on PATH is not (it would re-run every step chained on the preflight's result)
        git = result.facts.get("git")
        was = git.get("path") if isinstance(git, dict) else None
        if was and shutil.which("git") is None:
            return f"git is no longer on PATH (it was {was})"
        return None


TOOL_FACTS = ("nvcc", "nvidia_smi", "git", "cc", "cxx", "uv", "system_torch")


def tool_stats(facts: Mapping[str, JSON]) -> dict[str, list[int] | None]:
    """path -> :func:`tool_stat` for every program a fact was read from."""
    paths = [fact.get("path") if isinstance(fact := facts.get(key), dict) else None for key in TOOL_FACTS]
    return {str(path): tool_stat(str(path)) for path in paths if path}


def tool_stat(path: str) -> list[int] | None:
    """[size, mtime_ns] of the program (links followed), as the preflight records it; None when gone."""
    try:
        st = Path(path).resolve().stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


_ASKED: dict[tuple[str, tuple[int, ...] | None], str] = {}


def uv_line(ctx: StepContext, step: str) -> str:
    """uv's ``--version`` line: the preflight's reading when it read this same uv, unchanged since (size
    and mtime), else asked once per process for this uv as it is now (the command in ``step``'s log)."""
    exe, pre = uv_exe(), ctx.result(PreflightResult)
    stat = tool_stat(exe)
    if pre is not None:
        fact = pre.tool("uv")
        if fact.get("path") == exe and fact.get("line") and stat is not None and pre.tools.get(exe) == stat:
            return str(fact["line"])
    key = (exe, tuple(stat) if stat is not None else None)
    if key not in _ASKED or stat is None:
        _ASKED[key] = first_line(ctx.runner.run([exe, "--version"], step=step).output)
    return _ASKED[key]
