"""Validate TOML tables key by key: every error names the file, the key, what was expected
and what was found (:class:`october.installer.core.errors.RecipeError`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ..core.errors import SHOWN_MAX, RecipeError, one_line
from ..core.tomlgate import RECIPE_MAX_BYTES, TomlRefused, read_toml_file

FORMAT_VERSION = 1
# Bounds every value read through a Table meets (a field may set a tighter one)
MAX_STR = 1024          # characters of a string value (descriptions, reasons, patterns, paths)
MAX_URL = 2048          # characters of a URL
MAX_KEY = 128           # characters of a key (names of forks, pins, files, variables)
MAX_KEYS = 256          # keys in one table
MAX_ITEMS = 256         # items in one array
MAX_INT = 2**63 - 1     # |integer|, the TOML range, whatever the parser gives


class Table:
    """A TOML table being validated: remembers the file and the dotted key path."""

    def __init__(self, file: Path, data: Any, key: str) -> None:
        if not isinstance(data, dict):
            raise RecipeError(file, key or "<top>", expected="a table", found=describe(data))
        self.file = file
        self.data: dict[str, Any] = data
        self.key = key
        self.seen: set[str] = set()
        if len(data) > MAX_KEYS:
            raise RecipeError(file, key or "<top>", expected=f"a table of at most {MAX_KEYS} keys",
                              found=f"{len(data)} keys")
        for name in data:
            if len(name) > MAX_KEY:
                raise RecipeError(file, self._k(name), expected=f"a key of at most {MAX_KEY} characters",
                                  found=f"a key of {len(name):,} characters")

    def _k(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def err(self, name: str, expected: str, found: Any) -> RecipeError:
        return RecipeError(self.file, self._k(name), expected=expected, found=describe(found))

    def get(self, name: str, typ: type | tuple[type, ...], *, required: bool = True, default: Any = None,
            what: str | None = None, max_len: int = MAX_STR, bounds: tuple[float, float] | None = None) -> Any:
        """``name``'s value, of type ``typ`` (a float key takes an integer too), within bounds: a string
        at most ``max_len`` characters, a list at most :data:`MAX_ITEMS` items (its strings at most
        ``max_len``), a number finite and within ``bounds`` (default: the TOML integer range)."""
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
        self._bounded(name, value, max_len, bounds)
        return value

    def _bounded(self, name: str, value: Any, max_len: int, bounds: tuple[float, float] | None) -> None:
        if isinstance(value, str) and len(value) > max_len:
            raise RecipeError(self.file, self._k(name), expected=f"at most {max_len} characters",
                              found=f"{len(value):,} characters ({describe(value)})")
        if isinstance(value, list):
            if len(value) > MAX_ITEMS:
                raise RecipeError(self.file, self._k(name), expected=f"at most {MAX_ITEMS} items",
                                  found=f"{len(value):,} items")
            for i, item in enumerate(value):
                self._bounded(f"{name}[{i}]", item, max_len, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            what = "an integer" if isinstance(value, int) else "a finite number"
            lo, hi = bounds or ((-MAX_INT, MAX_INT) if isinstance(value, int) else (-math.inf, math.inf))
            if not math.isfinite(value) or not lo <= value <= hi:
                shown = f"{what} from {_num(lo)} to {_num(hi)}" if bounds else \
                    ("an integer within the TOML range (64 bits)" if isinstance(value, int) else what)
                raise self.err(name, shown, value)

    def str_list(self, name: str, *, required: bool = True, max_len: int = MAX_STR) -> tuple[str, ...]:
        value = self.get(name, list, required=required, default=[], what="a list of strings", max_len=max_len)
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


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def typename(typ: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "a list", dict: "a table"}
    if isinstance(typ, tuple):
        return " or ".join(names.get(t, t.__name__) for t in typ)
    return names.get(typ, typ.__name__)


def describe(value: Any) -> str:
    """A value as an error shows it: one line, at most :data:`~october.installer.core.errors.SHOWN_MAX`
    characters (a string is cut before it is quoted, so a 200 KB value costs nothing)."""
    if isinstance(value, str):
        return one_line(repr(value[:SHOWN_MAX + 1]))
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return one_line(repr(value))
    if isinstance(value, list):
        return f"a list ({len(value)} items)"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def read_toml(path: Path) -> dict[str, Any]:
    """A recipe or forks.toml, through the one TOML read gate (size, UTF-8, syntax, depth)."""
    try:
        return read_toml_file(path, max_bytes=RECIPE_MAX_BYTES)
    except TomlRefused as exc:
        raise RecipeError(path, "<file>", expected=exc.expected, found=exc.found,
                          fix=_READ_FIX[exc.kind].format(path=path)) from None


_READ_FIX = {
    "missing": "check the path or the recipe name (see recipes/)",
    "directory": "pass a recipe name (see recipes/) or the path of a .toml file",
    "unreadable": "check the permissions of {path}",
    "size": "check that {path} is the recipe (or forks.toml) you meant",
    "encoding": "save {path} as UTF-8",
    "syntax": "fix the TOML syntax in {path}",
    "depth": "flatten the nested arrays or tables in {path}",
    "nul": "remove the NUL character (written \\u0000) from {path}",
}


def version_key(t: Table, name: str, *, required: bool = True) -> str | None:
    value = t.get(name, str, required=required, what="a version string such as '2.10.0'", max_len=64)
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
