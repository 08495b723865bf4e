"""From a recipe and the command's options to a frozen plan; nothing is run here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..core.errors import FileSystemError, RecipeError, UsageError
from ..core.paths import default_cache_dir
from ..recipe import MODEL_FORMATS, Recipe

FIXTURES_ENV = "KNLP_KV_FIXTURES"   # the same variable october.checks.scales reads


@dataclass(frozen=True)
class DownloadOptions:
    recipe: Recipe
    format: str                      # "awq" | "fp16"
    output: Path                     # the manifest to write
    local_dir: Path | None = None    # default: <cache_dir>/models/<org>__<name>/<revision>
    cache_dir: Path | None = None    # default: october.installer.core.paths.default_cache_dir()
    offline: bool = False            # re-verify an existing copy, no network
    fixtures: Path | None = None     # calibrated scales dir; default $KNLP_KV_FIXTURES
    quiet: bool = False              # no progress bars or progress lines (warnings still shown)
    model_dir: Path | None = None    # a local copy (shared storage): hashed in place against the recipe's pins


@dataclass(frozen=True)
class DownloadPlan:
    recipe_name: str
    recipe_path: Path
    recipe_sha256: str
    selection: str
    repo: str
    revision: str
    patterns: tuple[str, ...]
    pinned_sha256: Mapping[str, str]   # file path -> sha256 from the recipe (wins over the hub)
    cache_dir: Path
    local_dir: Path
    default_local_dir: bool
    output: Path
    offline: bool
    fixtures: Path | None
    quiet: bool
    local_source: bool = False         # --model-dir: no hub; every file checked against the recipe's sha256 pins

    @property
    def where(self) -> str:
        return f"{self.repo}@{self.revision}"


def default_manifest_name(fmt: str) -> str:
    """``awq-download.json``: the name ``current smoke`` looks for in its working directory."""
    return f"{fmt}-download.json"


def manifest_path(output: Path, fmt: str) -> Path:
    """``--output`` names a directory (like ``current smoke --output DIR``; the manifest is
    ``DIR/<format>-download.json``), or the manifest file itself when it ends in ``.json``."""
    if output.suffix == ".json" and not output.is_dir():
        return output
    return output / default_manifest_name(fmt)


def fixtures_dir(given: Path | None, environ: Mapping[str, str]) -> Path | None:
    """The calibrated scales directory: ``--fixtures``, else ``$KNLP_KV_FIXTURES``, else None.
    One that is named but does not exist is a usage error (never silently ignored)."""
    if given is not None:
        where, path = "--fixtures", given
    elif environ.get(FIXTURES_ENV):
        where, path = f"${FIXTURES_ENV}", Path(environ[FIXTURES_ENV])
    else:
        return None
    path = path.expanduser().absolute()
    if not path.is_dir():
        raise FileSystemError(f"{where} points at {path}, which is not a directory",
                              expected="a directory of <org>__<name>.kv_scales.json files",
                              found="a file" if path.exists() else "nothing there",
                              fix=f"point {where} at the directory holding the calibrated <org>__<name>.kv_scales.json "
                                  "(a run without calibrated scales cannot pass `current smoke`: its calibrated-scales "
                                  "check fails)")
    return path


def _no_model(recipe: Recipe, fmt: str) -> UsageError:
    """A valid recipe without a model for ``--format`` (a FlashInfer-only one has none): a usage error naming
    the formats it has and the shipped recipes that have this one.  Editing the recipe is offered only for a
    recipe of the user's own, never for a shipped one."""
    from ..core.errors import OctoberError
    from ..core.resources import shipped_recipes
    from ..recipe import load_recipe

    shipped = shipped_recipes()
    with_it = []
    for path in shipped:
        try:
            other = load_recipe(str(path))
        except OctoberError:
            continue
        if fmt in other.models and other.name != recipe.name:
            with_it.append(other.name)
    have = sorted(recipe.models)
    ways = [f"pass --format {' or --format '.join(have)}"] if have else []
    if with_it:
        ways.append(f"pass --recipe {' or --recipe '.join(with_it)} (shipped recipes with a {fmt} model)")
    if recipe.path.resolve() not in {p.resolve() for p in shipped}:
        ways.append(f"add [models.{fmt}] to {recipe.path}")
    found = f"models: {', '.join(have)}" if have else "no [models] table (a FlashInfer-only recipe has none)"
    return UsageError(f"recipe '{recipe.name}' has no {fmt} model to download",
                      expected=f"a recipe with a [models.{fmt}] selection for --format {fmt}",
                      found=f"{found} in {recipe.path}",
                      fix="; or ".join(ways) + "; `current recipes --json` lists each recipe's models")


def make_plan(opts: DownloadOptions, environ: Mapping[str, str] | None = None) -> DownloadPlan:
    env = os.environ if environ is None else environ
    if opts.format not in MODEL_FORMATS:
        raise UsageError(f"unknown model format '{opts.format}'",
                         expected=f"one of {', '.join(MODEL_FORMATS)}", found=repr(opts.format),
                         fix="pass --format awq or --format fp16")
    recipe = opts.recipe
    sel = recipe.models.get(opts.format)
    if sel is None:
        raise _no_model(recipe, opts.format)
    if not sel.patterns:
        raise RecipeError(recipe.path, f"models.{opts.format}.patterns",
                          expected="at least one file pattern (config, tokenizer, *.safetensors, ...)",
                          found="an empty list")
    output = manifest_path(opts.output.expanduser().absolute(), opts.format)
    if output.is_dir():
        raise FileSystemError(f"--output {output} is a directory", expected="a path for the manifest JSON file",
                              found="a directory", fix=f"pass a directory (the manifest becomes "
                              f"DIR/{default_manifest_name(opts.format)}) or a file path ending in .json")
    parent = next((p for p in output.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise FileSystemError(f"--output {output} cannot be written", expected="a path whose parent is a directory",
                              found=f"{parent} is a file", fix="pass a path inside a directory")
    cache_dir = (opts.cache_dir or default_cache_dir(env)).expanduser().absolute()
    if opts.model_dir is not None:
        if opts.local_dir is not None or opts.offline:
            raise UsageError("--model-dir names the copy to check in place",
                             expected="--model-dir alone", found="--local-dir or --offline beside it",
                             fix="drop --local-dir/--offline: a --model-dir copy is never downloaded into")
        model_dir = opts.model_dir.expanduser().absolute()
        if not model_dir.is_dir():
            raise FileSystemError(f"--model-dir {model_dir} is not a directory",
                                  expected="the directory holding the model's files (config.json, *.safetensors, ...)",
                                  found="a file" if model_dir.exists() else "nothing there",
                                  fix="pass the model's directory")
        local_dir, default_dir = model_dir, False
    elif opts.local_dir is not None:
        local_dir, default_dir = opts.local_dir.expanduser().absolute(), False
    else:
        # Qwen/Qwen3-8B -> Qwen__Qwen3-8B, the same mangling as october.checks.scales.scales_path
        local_dir, default_dir = cache_dir / "models" / sel.repo.replace("/", "__") / sel.revision, True
    return DownloadPlan(recipe_name=recipe.name, recipe_path=recipe.path, recipe_sha256=recipe.sha256,
                        selection=opts.format, repo=sel.repo, revision=sel.revision,
                        patterns=tuple(sel.patterns), pinned_sha256=dict(sel.sha256),
                        cache_dir=cache_dir, local_dir=local_dir, default_local_dir=default_dir,
                        output=output, offline=opts.offline, fixtures=fixtures_dir(opts.fixtures, env),
                        quiet=opts.quiet, local_source=opts.model_dir is not None)
