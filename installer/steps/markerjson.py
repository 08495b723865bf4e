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


def _is(value: JSON, ok: bool, key: str, what: str) -> JSON:
    """``value`` when ``ok``, else :class:`MalformedResult` ("'key' is not what")."""
    if not ok:
        raise MalformedResult(f"'{key}' is not {what}")
    return value


def text(d: Mapping[str, JSON], key: str) -> str:
    v = get(d, key)
    return _is(v, isinstance(v, str), key, "a string")


def opt_text(d: Mapping[str, JSON], key: str) -> str | None:
    v = d.get(key)
    return _is(v, v is None or isinstance(v, str), key, "a string")


def integer(d: Mapping[str, JSON], key: str) -> int:
    v = get(d, key)
    return _is(v, isinstance(v, int) and not isinstance(v, bool), key, "an integer")


def flag(d: Mapping[str, JSON], key: str, default: bool = False) -> bool:
    v = d.get(key, default)
    return _is(v, isinstance(v, bool), key, "true/false")


def obj(d: Mapping[str, JSON], key: str, *, required: bool = True) -> Mapping[str, JSON]:
    v = get(d, key) if required else d.get(key) or {}
    return dict(_is(v, isinstance(v, Mapping), key, "an object"))


def opt_obj(d: Mapping[str, JSON], key: str) -> Mapping[str, JSON] | None:
    v = d.get(key)
    _is(v, v is None or isinstance(v, Mapping), key, "an object")
    return dict(v) if v is not None else None


def items(d: Mapping[str, JSON], key: str, *, required: bool = True) -> list[JSON]:
    v = get(d, key) if required else d.get(key) or []
    return _is(v, isinstance(v, list), key, "a list")


def texts(d: Mapping[str, JSON], key: str, *, required: bool = True) -> tuple[str, ...]:
    values = items(d, key, required=required)
    return tuple(_is(values, all(isinstance(x, str) for x in values), key, "a list of strings"))


def objs(d: Mapping[str, JSON], key: str, *, required: bool = True) -> tuple[Mapping[str, JSON], ...]:
    values = items(d, key, required=required)
    _is(values, all(isinstance(x, Mapping) for x in values), key, "a list of objects")
    return tuple(dict(x) for x in values)


def text_map(d: Mapping[str, JSON], key: str, *, required: bool = True) -> Mapping[str, str]:
    m = obj(d, key, required=required)
    _is(m, all(isinstance(v, str) for v in m.values()), key, "an object of strings")
    return {k: str(v) for k, v in m.items()}
