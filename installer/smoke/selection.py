"""What `current smoke` tells the stack env about the selection it runs (``stack-info.json``'s ``selection``):
from the stack's recipe, its compute and K/V cache dtypes, the JIT modules derived for it, the workspace
they were built into and the model shape.  ``None`` when the stack's recipe is unknown (the engine level
then reports those checks ``unsupported`` instead of guessing)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ..core.errors import RecipeError
from ..recipe import load_recipe, resolve_recipe_path
from ..recipe.jitmodules import selection_facts
from .choices import receipt_recipe


def _recipe_arg(install: Path, recipe_name: str) -> str:
    """What ``october_setup --recipe`` was given: the shipped name, or the receipt's recipe file if not shipped."""
    name, path = receipt_recipe(install)
    if name == recipe_name and path is not None and Path(path).resolve() != resolve_recipe_path(recipe_name):
        return path
    return recipe_name


def selection_info(install: Path, recipe_name: str | None, fmt: str) -> dict[str, Any] | None:
    if not recipe_name:
        return None
    arg = _recipe_arg(install, recipe_name)
    try:
        recipe = load_recipe(arg)
    except RecipeError:
        return None
    sel = recipe.models.get(fmt)
    if sel is None or sel.compute_dtype is None:
        return None
    by_uri = {m.uri: m for m in recipe.jit}
    modules = [by_uri[u] for u in sel.jit_modules if u in by_uri]
    shape = sel.shape
    return selection_facts(sel.compute_dtype, sel.v_format, modules, {
        "recipe": recipe.name, "format": fmt, "repo": sel.repo, "revision": sel.revision,
        "jit_workspace": str(install / "jit"),
        "setup_command": f"october_setup {shlex.quote(str(install))} --recipe {shlex.quote(arg)}",
        "shape": None if shape is None else {
            "num_attention_heads": shape.num_attention_heads, "num_key_value_heads": shape.num_key_value_heads,
            "head_dim": shape.head_dim, "num_hidden_layers": shape.num_hidden_layers}})
