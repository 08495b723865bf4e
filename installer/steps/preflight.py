"""The ``preflight`` setup step: probe the machine, judge it, stop with the whole punch list."""

from __future__ import annotations

from dataclasses import asdict
from typing import ClassVar, Mapping

from installer.errors import PreflightError
from installer.pipeline import JSON, StepContext
from installer.preflight import evaluate, facts_json, machine_facts_json, validate_skip
from installer.preflight.checks import punch_list
from installer.preflight.probes import gather_facts


class PreflightStep:
    """Outputs: ``{"facts": {...}, "machine": {...}, "checks": [{name, status, detail}], "skipped": [...]}``.

    Facts are gathered again only when the inputs change (recipe limits, skip
    list, stack path): ``verify`` never re-probes.
    """

    name: ClassVar[str] = "preflight"

    def inputs(self, ctx: StepContext) -> JSON:
        recipe = ctx.recipe
        return {
            "preflight": asdict(recipe.preflight),
            "cuda": asdict(recipe.cuda) if recipe.cuda is not None else None,
            "skip": sorted(set(ctx.options.skip_preflight)),
            "stack": str(ctx.paths.root.absolute()),
        }

    def run(self, ctx: StepContext) -> Mapping[str, JSON]:
        skip = validate_skip(ctx.options.skip_preflight)
        facts = gather_facts(ctx.paths.root, ctx.runner)
        results = evaluate(ctx.recipe, facts, skip)
        for r in results:
            line = f"{r.name:<9} {r.status:<7} {r.detail}"
            if r.status == "skipped":
                ctx.ui.warn(f"preflight check '{r.name}' skipped by --skip-preflight")
            ctx.ui.detail(line)
            ctx.runner.note(self.name, line)
        problems = punch_list(results)
        if problems:
            raise PreflightError(problems)
        return {
            "facts": facts_json(facts),
            "machine": machine_facts_json(facts),
            "checks": [r.as_json() for r in results],
            "skipped": list(skip),
        }

    def verify(self, ctx: StepContext, outputs: Mapping[str, JSON]) -> str | None:
        return None
