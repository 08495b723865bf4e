"""The JSON Schema of a recipe file, generated from its models (:class:`.spec.RecipeFile`).

Committed as ``recipes/recipe.schema.json``; ``.taplo.toml`` at the root maps ``recipes/*.toml`` to it, so
an editor with taplo (Even Better TOML) checks a recipe as it is written.  Regenerate it after changing
:mod:`.spec` (``tests/test_recipe_schema.py`` fails on any drift)::

    uv run python -m october.installer.recipe.schema > recipes/recipe.schema.json

The schema states each key's type, bounds, allowed values and what it expects (``description``); rules
that need code (a PEP 440 version, a fork defined in forks.toml, the derived JIT modules) are checked when
the tool loads the recipe.
"""

from __future__ import annotations

import json
from typing import Any

REGENERATE = "uv run python -m october.installer.recipe.schema > recipes/recipe.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def recipe_schema() -> dict[str, Any]:
    from .spec import RecipeFile

    return {"$schema": DIALECT, "$comment": f"generated from installer/recipe/spec.py, do not edit: {REGENERATE}",
            **RecipeFile.model_json_schema()}


def schema_text() -> str:
    """The file's text, as committed."""
    return json.dumps(recipe_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
