"""pydantic's first error on a recipe or forks.toml as the project's :class:`~october.installer.core.errors.RecipeError`
(file, dotted key, expected, found): the expected text a rule carries (:mod:`.rules`), else what the model's JSON
Schema says of the key."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from ..core.errors import RecipeError
from .tomlcheck import describe
from .rules import Refused


TAG = "="                   # a tagged union's branch in an error's location (not a key)
BRANCHES = {"=id": 0, "=commit": 1, "=prefix": 2, "=sdist": 3,    # PinValue's, in order
            "=all": 0, "=paths": 1}                                # ForkUseSpec.submodules


_TYPE_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "array": "a list", "object": "a table"}
_TYPE_ERRORS = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
                "bool_type": "true or false", "list_type": "a list", "dict_type": "a table", "model_type": "a table",
                "int_from_float": "an integer"}


@cache
def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


def _schema_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> dict[str, Any]:
    """The JSON Schema node of the key at ``loc``; a tagged union's branch (``=name``) is the one its tag names."""
    schema = json_schema(model)
    defs = schema.get("$defs", {})

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while True:
            if "$ref" in node or ("allOf" in node and len(node["allOf"]) == 1):
                inner = defs[node["$ref"].rsplit("/", 1)[-1]] if "$ref" in node else node["allOf"][0]
                node = {**inner, **{k: v for k, v in node.items() if k not in ("$ref", "allOf")}}
                continue
            some = [b for b in node.get("anyOf", []) if b.get("type") != "null"]
            if len(some) == 1:          # Optional[X]: X, with the outer description
                node = {**some[0], **{k: v for k, v in node.items() if k != "anyOf"}}
                continue
            return node

    def step(node: dict[str, Any], part: str | int) -> dict[str, Any] | None:
        node = resolve(node)
        if isinstance(part, str) and part.startswith(TAG):
            branches = node.get("oneOf", [])
            index = BRANCHES.get(part, len(branches))
            return branches[index] if index < len(branches) else None
        if isinstance(part, int):
            return node.get("items")
        if part == "[key]":
            return node.get("propertyNames", {})
        if part in node.get("properties", {}):
            return node["properties"][part]
        if isinstance(node.get("additionalProperties"), dict):
            return node["additionalProperties"]
        return None

    node: dict[str, Any] | None = schema
    for part in loc:
        node = step(node, part) if node is not None else None
    return resolve(node or {})


def _type_name(node: dict[str, Any]) -> str:
    kinds = [node.get("type")] + [b.get("type") for b in node.get("anyOf", []) + node.get("oneOf", [])]
    names = [_TYPE_NAMES[k] for k in kinds if k in _TYPE_NAMES]
    if names == ["a list"] and isinstance(node.get("items"), dict) and node["items"].get("type") == "string":
        return "a list of strings"
    return " or ".join(dict.fromkeys(names)) or "a value"


def _dotted(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "<top>"


def recipe_error(file: Path, model: type[BaseModel], exc: ValidationError) -> RecipeError:
    """The first of pydantic's errors as the project's :class:`RecipeError`: the key, expected, found.  An
    unknown key is said first: a typo (``uri`` for ``url``) also makes the key it meant "missing", which alone
    would not name what to rename."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    where = tuple(err["loc"])                # with the tagged unions' branches, for the schema
    loc = tuple(p for p in where if not (isinstance(p, str) and p.startswith(TAG)))
    is_key = bool(loc) and loc[-1] == "[key]"
    loc = loc[:-1] if is_key else loc
    refused = ctx.get("error") if kind == "value_error" else None
    if isinstance(refused, Refused):
        at = tuple(refused.at.split(".")) if refused.at else ()
        return RecipeError(file, _dotted(loc + at), expected=refused.expected,
                           found=describe(value) if refused.found is None else refused.found)
    if kind == "extra_forbidden":
        known = sorted(_schema_at(model, where[:-1]).get("properties", {}))
        key = _dotted(loc)
        missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and tuple(e["loc"][:-1]) == where[:-1]]
        also = f" (the key{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)} beside it "\
               f"{'are' if len(missing) > 1 else 'is'} missing: a typo?)" if missing else ""
        return RecipeError(file, key, expected=f"one of {known}", found=f"unknown key '{loc[-1]}'" + also,
                           fix=f"remove or rename '{key}' in {file}")
    node = _schema_at(model, where)
    if kind == "string_too_long" and is_key:
        expected, found = f"a key of at most {ctx['max_length']} characters", f"a key of {len(value):,} characters"
    elif kind == "string_too_long":
        expected, found = f"at most {ctx['max_length']} characters", f"{len(value):,} characters ({describe(value)})"
    elif kind == "too_long" and isinstance(value, dict):
        expected, found = f"a table of at most {ctx['max_length']} keys", f"{len(value):,} keys"
    elif kind == "too_long":
        expected, found = f"at most {ctx['max_length']} items", f"{len(value):,} items"
    elif kind == "missing":
        expected, found = node.get("description") or _type_name(node), "the key is missing"
    else:       # a wrong type, a value not among the allowed ones, too few items
        expected = node.get("description") or (_type_name(node) if "type" in node else None) \
            or _TYPE_ERRORS.get(kind) or _type_name(node)
        found = describe(value)
    return RecipeError(file, _dotted(loc), expected=expected, found=found)


def validate(file: Path, data: dict[str, Any], model: type[BaseModel]) -> None:
    """``data`` (a recipe or forks.toml as read) against ``model``; the first problem as a RecipeError."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        raise recipe_error(file, model, exc) from None
