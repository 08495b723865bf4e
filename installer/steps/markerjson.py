"""Strict readers for the JSON in a done-marker: each returns the value of one key with the type a
step result expects, or raises :class:`MalformedResult` (the engine then treats the step as not
done).  Used by :mod:`october.installer.steps.results`."""

from __future__ import annotations

from typing import Any, Mapping

JSON = Any


class MalformedResult(ValueError):
    """A done-marker whose outputs are not this step's result (the step counts as not done)."""


def get(d: Mapping[str, JSON], key: str) -> JSON:
    if not isinstance(d, Mapping) or key not in d:
        raise MalformedResult(f"no '{key}'")
    return d[key]


def text(d: Mapping[str, JSON], key: str) -> str:
    v = get(d, key)
    if not isinstance(v, str):
        raise MalformedResult(f"'{key}' is not a string")
    return v


def opt_text(d: Mapping[str, JSON], key: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise MalformedResult(f"'{key}' is not a string")
    return v


def integer(d: Mapping[str, JSON], key: str) -> int:
    v = get(d, key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise MalformedResult(f"'{key}' is not an integer")
    return v


def flag(d: Mapping[str, JSON], key: str, default: bool = False) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise MalformedResult(f"'{key}' is not true/false")
    return v


def obj(d: Mapping[str, JSON], key: str, *, required: bool = True) -> Mapping[str, JSON]:
    v = get(d, key) if required else d.get(key) or {}
    if not isinstance(v, Mapping):
        raise MalformedResult(f"'{key}' is not an object")
    return dict(v)


def opt_obj(d: Mapping[str, JSON], key: str) -> Mapping[str, JSON] | None:
    v = d.get(key)
    if v is not None and not isinstance(v, Mapping):
        raise MalformedResult(f"'{key}' is not an object")
    return dict(v) if v is not None else None


def items(d: Mapping[str, JSON], key: str, *, required: bool = True) -> list[JSON]:
    v = get(d, key) if required else d.get(key) or []
    if not isinstance(v, list):
        raise MalformedResult(f"'{key}' is not a list")
    return v


def texts(d: Mapping[str, JSON], key: str, *, required: bool = True) -> tuple[str, ...]:
    values = items(d, key, required=required)
    if not all(isinstance(x, str) for x in values):
        raise MalformedResult(f"'{key}' is not a list of strings")
    return tuple(values)


def objs(d: Mapping[str, JSON], key: str, *, required: bool = True) -> tuple[Mapping[str, JSON], ...]:
    values = items(d, key, required=required)
    if not all(isinstance(x, Mapping) for x in values):
        raise MalformedResult(f"'{key}' is not a list of objects")
    return tuple(dict(x) for x in values)


def text_map(d: Mapping[str, JSON], key: str, *, required: bool = True) -> Mapping[str, str]:
    m = obj(d, key, required=required)
    if not all(isinstance(v, str) for v in m.values()):
        raise MalformedResult(f"'{key}' is not an object of strings")
    return {k: str(v) for k, v in m.items()}
