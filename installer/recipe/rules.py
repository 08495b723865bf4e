"""The rules the recipe's typed models (:mod:`.spec`) are made of: a :class:`Rule` is a check on a typed value
with the text a refusal says it expected, and what of it the JSON Schema can say; pydantic runs it after the
type check and reports its :class:`Refused`, which :func:`.explain.recipe_error` turns into the project's error."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
)
from pydantic_core import core_schema

from .tomlcheck import describe


class Refused(ValueError):
    """A rule's failure (pydantic reports it as a ``value_error`` holding it): ``expected``, ``found``
    (None: the value), ``at`` the dotted key below the failing one that it is about."""

    def __init__(self, expected: str, found: str | None = None, at: str = "") -> None:
        super().__init__(f"expected {expected}")
        self.expected, self.found, self.at = expected, found, at


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra``'s keywords over ``into``; a keyword both hold as a table (``items``) is merged, not replaced."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


@dataclass(frozen=True, eq=False)          # hashed by identity: typing hashes Annotated metadata
class Rule:
    """A check on a typed value, refused with ``expected`` (an after-validator); ``schema`` is what of it the
    JSON Schema can say (``enum``, ``pattern``, ``minimum``...; nothing: the rule is code-only)."""

    check: Callable[[Any], Any]
    expected: str
    schema: dict[str, Any] = field(default_factory=dict)

    def run(self, value: Any) -> Any:
        if not self.check(value):
            raise Refused(self.expected)
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.run, handler(source))

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return _merge(handler(schema), self.schema)


def rule(check: Callable[[Any], Any], expected: str, **schema: Any) -> Rule:
    return Rule(check, expected, schema)


def keyed(pattern: str) -> dict[str, Any]:
    """A table key's pattern, inside ``allOf`` so it stays in ``propertyNames`` (pydantic moves a top-level
    ``pattern`` to ``patternProperties``, which leaves a key that does not match it unchecked)."""
    return {"allOf": [{"pattern": pattern}]}


def matches(pattern: re.Pattern[str], expected: str, published: str | None = None, *, key: bool = False) -> Rule:
    """The value matches ``pattern``; the schema publishes ``published`` (default: the same pattern), for a
    pattern that JSON Schema's regex dialect cannot state (look-around); ``key``: the value is a table key."""
    text = published or pattern.pattern
    return rule(lambda v: pattern.match(v) is not None, expected, **(keyed(text) if key else {"pattern": text}))


def parses(parse: Callable[[str], Any], expected: str, **schema: Any) -> Rule:
    def ok(value: str) -> bool:
        try:
            parse(value)
        except ValueError:
            return False
        return True
    return rule(ok, expected, **schema)


def one_of(values: Any, expected: str | None = None) -> Rule:
    return rule(lambda v: v in values, expected or f"one of {', '.join(map(str, values))}", enum=list(values))


def int_range(lo: int, hi: int, expected: str | None = None) -> Rule:
    return rule(lambda v: lo <= v <= hi, expected or f"an integer from {lo} to {hi}", minimum=lo, maximum=hi)


def finite_range(lo: float, hi: float) -> Rule:
    def ok(value: float) -> bool:
        if not (math.isfinite(value) and lo <= value <= hi):
            raise Refused(f"a finite number from {lo:g} to {hi:g}", describe(value))
        return True
    return rule(ok, f"a finite number from {lo:g} to {hi:g}", minimum=lo, maximum=hi)


def once(expected: str) -> Rule:
    """Each item at most once, compared as a path (``include`` and ``include/`` are one)."""
    def ok(items: list[str]) -> bool:
        norm = [p.strip().strip("/") for p in items]
        twice = sorted({p for p in norm if norm.count(p) > 1})
        if twice:
            raise Refused(expected, ", ".join(f"'{p}' twice" for p in twice))
        return True
    return rule(ok, expected, uniqueItems=True)
