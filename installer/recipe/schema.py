"""The JSON Schema of a recipe file, generated from :class:`.spec.RecipeFile` and committed as
``recipes/recipe.schema.json`` (``.taplo.toml`` maps ``recipes/*.toml`` to it for editors); regenerate it
after changing :mod:`.spec` (``tests/test_recipe_schema.py`` fails on drift)::

    uv run python -m october.installer.recipe.schema > recipes/recipe.schema.json

Patterns are written for ECMA-262 and taplo's Rust regex (no look-around; ``$``, ``\\d`` and ``\\s`` differ
from Python's), so where the dialects differ the schema refuses a little more than the tool.  What the
schema says only in part (the tool checks the rest when it loads the recipe):

- a name's "no '..'" (``name``, fork names): the published pattern drops :data:`.spec.SAFE_NAME`'s look-ahead;
- a PEP 440 version: the schema checks that it starts like one; ``cuda.arch_list``: that it holds a digit;
  ``wheel.filename``: a plain name ending in ``.whl``;
- relative paths (``submodules``, ``sparse``, ``wheel.compiled_sources``): the schema refuses a leading ``/``
  (and a ``\\``); a ``..`` or empty part, and the same path twice in another spelling, are the tool's;

and what only the tool checks: ``preflight.uv`` and ``install.supply`` parse (specifier, requirements);
``sparse`` keys are listed submodules; each fork, and each ``[[install.exceptions]]`` pair, at most once;
with ``[jit]``, every ``[models.*]`` names ``compute_dtype`` and ``config``; numbers are finite; what needs
forks.toml, and the derived JIT modules.  ``$comment`` records the pydantic version that generated the file:
its generator decides the layout, so an upgrade may change the file with no change to the models.
"""

from __future__ import annotations

import json

REGENERATE = "uv run python -m october.installer.recipe.schema > recipes/recipe.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def generator() -> str:
    """The installed pydantic's version (the generator of the schema's layout)."""
    from pydantic import VERSION

    return str(VERSION)


def schema_text() -> str:
    """The file's text, as committed."""
    from .spec import RecipeFile

    schema = {"$schema": DIALECT, "$comment": f"generated from installer/recipe/spec.py by pydantic {generator()}, "
                                              f"do not edit: {REGENERATE}",
              **RecipeFile.model_json_schema()}
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
