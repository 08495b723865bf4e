"""Issue 21: the recipe's JSON Schema is generated from its models (installer/recipe/spec.py) and committed
as recipes/recipe.schema.json, which .taplo.toml maps recipes/*.toml to (editors validate recipes with it).
The committed file is the generated one; every shipped recipe meets it; a planted fault does not."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest

from october.installer.recipe.schema import REGENERATE, schema_text
from tests.fixtures.root import PROJECT_ROOT

SCHEMA = PROJECT_ROOT / "recipes" / "recipe.schema.json"
RECIPES = sorted((PROJECT_ROOT / "recipes").glob("*.toml"))


def committed() -> dict[str, object]:
    return json.loads(SCHEMA.read_text(encoding="utf-8"))


def test_the_committed_schema_is_the_generated_one() -> None:
    assert SCHEMA.read_text(encoding="utf-8") == schema_text(), \
        f"recipes/recipe.schema.json is out of date with installer/recipe/spec.py: run `{REGENERATE}`"


def test_taplo_maps_the_recipes_to_the_schema() -> None:
    taplo = tomllib.loads((PROJECT_ROOT / ".taplo.toml").read_text(encoding="utf-8"))
    [rule] = [r for r in taplo["rule"] if "recipes/*.toml" in r["include"]]
    assert (PROJECT_ROOT / rule["schema"]["path"]).resolve() == SCHEMA.resolve()


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_every_shipped_recipe_meets_the_committed_schema(recipe: Path) -> None:
    schema = committed()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(tomllib.loads(recipe.read_text(encoding="utf-8")))


@pytest.mark.parametrize("plant, where", [
    (lambda r: r.update(colour="red"), "colour"),                                   # an unknown key
    (lambda r: r["torch"].update(indexx="https://x"), "indexx"),                    # a misspelt key in a table
    (lambda r: r["forks"][0].update(mode="magic"), "magic"),                        # a value not allowed
    (lambda r: r["python"].pop("version"), "version"),                              # a required key missing
    (lambda r: r["forks"][0].update(pin="p" * 200), "too long"),                    # a bound
])
def test_a_planted_fault_fails_the_schema_too(plant, where: str) -> None:
    recipe = tomllib.loads((PROJECT_ROOT / "recipes" / "current.toml").read_text(encoding="utf-8"))
    plant(recipe)
    with pytest.raises(jsonschema.ValidationError) as info:
        jsonschema.Draft202012Validator(committed()).validate(recipe)
    assert where in info.value.message
