"""The JSON Schema of a recipe file, generated from its models (:class:`.spec.RecipeFile`).

Committed as ``recipes/recipe.schema.json``; ``.taplo.toml`` at the root maps ``recipes/*.toml`` to it, so
an editor with taplo (Even Better TOML) checks a recipe as it is written.  Regenerate it after changing
:mod:`.spec` (``tests/test_recipe_schema.py`` fails on any drift)::

    uv run python -m october.installer.recipe.schema > recipes/recipe.schema.json

The schema states each key's type, bounds (``maxLength``, ``minimum``/``maximum``), allowed values
(``enum``, ``propertyNames`` for tables whose keys are constrained: model formats, fork names, distribution
and environment variable names), patterns (hex ids, names, URLs, CUDA versions, ...), ``uniqueItems`` and
what a key expects (``description``): each rule of :mod:`.spec` (:class:`.spec.Rule`) publishes what JSON
Schema can say of it.  Patterns are written for JSON Schema's ECMA-262 dialect and taplo's Rust regex (no
look-around); there ``$`` does not match before a final newline, ``\\d`` a non-ASCII digit, nor ``\\s``
the ASCII separators ``\\x1c``-``\\x1f`` (Python's ``str.strip`` and packaging treat them as white space;
ECMA-262 treats ``\\ufeff`` as white space, Python does not), so where the dialects differ the schema
refuses a little more than the tool (a value no recipe should hold).  Module names are ASCII in both
(:data:`.spec.MODULE_NAME` spells its letters out).  Where a rule cannot be said in full, the
schema states the closest necessary part and the tool checks the rest when it loads the recipe:

- a name's "no '..'" (``name``, fork names): the published pattern drops :data:`.spec.SAFE_NAME`'s look-ahead;
- a PEP 440 version (``python.version``, ``torch.version``, ``wheel.version``, ``wheel.requires_torch``):
  the schema checks that it starts like one (an optional ``v``, an epoch, a digit);
- ``cuda.arch_list`` parses as compute capabilities (the schema: it holds a digit);
- ``wheel.filename`` parses as a wheel filename (the schema: a plain name ending in ``.whl``);
- relative paths (``submodules``, ``sparse``, ``wheel.compiled_sources``): the schema refuses a leading
  ``/`` (and a ``\\``, a trailing ``/`` in ``compiled_sources``); a ``..`` or empty part is the tool's;
- each submodule / sparse directory at most once compared as paths (the schema: ``uniqueItems``);

and these are code-only:

- ``preflight.uv`` parses as a version specifier, ``install.supply`` items as requirements;
- ``sparse`` keys are submodules the entry lists; each fork at most once in ``[[forks]]``; each
  (package, requires) pair of ``[[install.exceptions]]`` at most once (names canonicalized);
- with ``[jit]``, every ``[models.*]`` names ``compute_dtype`` and ``config``;
- numbers are finite (TOML's ``nan``/``inf`` have no JSON counterpart);
- what needs forks.toml (the fork and pin a ``[[forks]]`` entry names) and the derived JIT modules.

``$comment`` records the pydantic version that generated the file: pydantic's generator decides the
layout, so an upgrade may change the file with no change to the models (the drift test says so).
"""

from __future__ import annotations

import json
from typing import Any

REGENERATE = "uv run python -m october.installer.recipe.schema > recipes/recipe.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def generator() -> str:
    """The installed pydantic's version (the generator of the schema's layout)."""
    from pydantic import VERSION

    return str(VERSION)


def recipe_schema() -> dict[str, Any]:
    from .spec import RecipeFile

    return {"$schema": DIALECT, "$comment": f"generated from installer/recipe/spec.py by pydantic {generator()}, "
                                            f"do not edit: {REGENERATE}",
            **RecipeFile.model_json_schema()}


def schema_text() -> str:
    """The file's text, as committed."""
    return json.dumps(recipe_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
