"""Validate TOML tables key by key: every error names the file, the key, what was expected
and what was found (:class:`october.installer.core.errors.RecipeError`)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from october.installer.core.errors import RecipeError

FORMAT_VERSION = 1


class Table:
    """A TOML table being validated: remembers the file and the dotted key path."""

    def __init__(self, file: Path, data: Any, key: str) -> None:
        if not isinstance(data, dict):
            raise RecipeError(file, key or "<top>", expected="a table", found=describe(data))
        self.file = file
        self.data: dict[str, Any] = data
        self.key = key
        self.seen: set[str] = set()

    def _k(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def err(self, name: str, expected: str, found: Any) -> RecipeError:
        return RecipeError(self.file, self._k(name), expected=expected, found=describe(found))

    def get(self, name: str, typ: type | tuple[type, ...], *, required: bool = True,
            default: Any = None, what: str | None = None) -> Any:
        self.seen.add(name)
        if name not in self.data:
            if required:
                raise RecipeError(self.file, self._k(name), expected=what or typename(typ),
                                  found="the key is missing")
            return default
        value = self.data[name]
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and typ in (int, float):
            raise self.err(name, what or typename(typ), value)
        if not isinstance(value, typ):
            raise self.err(name, what or typename(typ), value)
        return value

    def str_list(self, name: str, *, required: bool = True) -> tuple[str, ...]:
        value = self.get(name, list, required=required, default=[], what="a list of strings")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise RecipeError(self.file, f"{self._k(name)}[{i}]", expected="a string",
                                  found=describe(item))
        return tuple(value)

    def table(self, name: str, *, required: bool = True) -> "Table | None":
        self.seen.add(name)
        if name not in self.data:
            if required:
                raise RecipeError(self.file, self._k(name), expected="a table",
                                  found="the key is missing")
            return None
        return Table(self.file, self.data[name], self._k(name))

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise RecipeError(self.file, self._k(unknown[0]),
                              expected=f"one of {sorted(self.seen)}",
                              found=f"unknown key '{unknown[0]}'",
                              fix=f"remove or rename '{self._k(unknown[0])}' in {self.file}")


def typename(typ: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "a list", dict: "a table"}
    if isinstance(typ, tuple):
        return " or ".join(names.get(t, t.__name__) for t in typ)
    return names.get(typ, typ.__name__)


def describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return f"a list ({len(value)} items)"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise RecipeError(path, "<file>", expected="an existing TOML file", found="no such file",
                          fix="check the path or the recipe name (see recipes/)") from None
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(path, "<file>", expected="valid TOML", found=f"a syntax error: {exc}",
                          fix=f"fix the TOML syntax in {path}") from None
    except UnicodeDecodeError as exc:
        raise RecipeError(path, "<file>", expected="a UTF-8 TOML file", found=f"undecodable bytes ({exc.reason})",
                          fix=f"save {path} as UTF-8") from None
    except IsADirectoryError:
        raise RecipeError(path, "<file>", expected="a TOML file", found="a directory",
                          fix="pass a recipe name (see recipes/) or the path of a .toml file") from None
    except OSError as exc:
        raise RecipeError(path, "<file>", expected="a readable TOML file", found=exc.strerror or str(exc),
                          fix=f"check the permissions of {path}") from None


def version_key(t: Table, name: str, *, required: bool = True) -> str | None:
    value = t.get(name, str, required=required, what="a version string such as '2.10.0'")
    if value is None:
        return None
    try:
        Version(value)
    except InvalidVersion:
        raise t.err(name, "a PEP 440 version such as '2.10.0'", value) from None
    return value


def check_format(t: Table) -> None:
    fv = t.get("format_version", int, what=f"format_version = {FORMAT_VERSION}")
    if fv != FORMAT_VERSION:
        raise t.err("format_version", f"{FORMAT_VERSION} (this tool's recipe format)", fv)
