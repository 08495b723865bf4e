"""The one read gate for the TOML files the tool is given (recipes, ``forks.toml``, pylock files):
bounded in size, decoded strictly, parsed and bounded in depth, so no input reaches a parser's
recursion limit, a quadratic path or a traceback.  A refusal is a :class:`TomlRefused`, which each
reader turns into its own error class and fix."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from .errors import one_line

MAX_DEPTH = 24                   # tables and arrays inside each other; the shipped files reach 5
RECIPE_MAX_BYTES = 256 << 10     # a recipe or forks.toml: the shipped ones are under 8 KB
LOCK_MAX_BYTES = 2 << 20         # a pylock: the committed ones are under 150 KB (tomllib: ~1 s per MB)

_SPECIAL = re.compile(r"[\"'#\[\]{}.=,\n]")   # what the nesting pre-scan looks at; the rest is skipped
_BASIC_REST = re.compile(r'(?:[^"\\\n]|\\.)*"')   # the rest of a one-line basic string, closing quote included


class TomlRefused(Exception):
    """Why a TOML file was not read.  ``kind``: missing, directory, unreadable, size, encoding,
    syntax, depth or nul."""

    def __init__(self, kind: str, expected: str, found: str) -> None:
        self.kind = kind
        self.expected = expected
        self.found = one_line(found, 200)
        super().__init__(f"expected {expected}, found {self.found}")


def read_toml_file(path: Path, *, max_bytes: int) -> dict[str, Any]:
    """The document in ``path``, or :class:`TomlRefused`; at most ``max_bytes`` are read."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise TomlRefused("missing", "an existing TOML file", "no such file") from None
    except IsADirectoryError:
        raise TomlRefused("directory", "a TOML file", "a directory") from None
    except OSError as exc:
        raise TomlRefused("unreadable", "a readable TOML file", exc.strerror or type(exc).__name__) from None
    except ValueError:                       # a path with a NUL character: no file has one
        raise TomlRefused("unreadable", "a file path", "a NUL character in the path") from None
    if len(raw) > max_bytes:
        raise TomlRefused("size", f"a TOML file of at most {max_bytes:,} bytes", f"more than {max_bytes:,} bytes")
    return parse_toml_bytes(raw)


def parse_toml_bytes(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TomlRefused("encoding", "a UTF-8 TOML file",
                          f"bytes that are not UTF-8 at offset {exc.start} ({exc.reason})") from None
    if text.startswith("\ufeff"):          # an editor's byte-order mark: TOML has none, tomllib says "line 1"
        raise TomlRefused("syntax", "valid TOML (UTF-8 without a byte-order mark)",
                          "a UTF-8 byte-order mark (U+FEFF) at the start of the file: save it without one "
                          "(\"UTF-8\", not \"UTF-8 with BOM\")")
    if deep := _nesting_before_parse(text, MAX_DEPTH):
        raise TomlRefused("depth", f"arrays, tables and dotted keys nested at most {MAX_DEPTH} deep", deep)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlRefused("syntax", "valid TOML", f"a syntax error: {exc}") from None
    except RecursionError:       # tomllib recurses once per level of arrays / inline tables
        raise TomlRefused("depth", f"arrays and tables nested at most {MAX_DEPTH} deep",
                          "nesting too deep to parse") from None
    depth, nul_at = walk(data, MAX_DEPTH)
    if depth > MAX_DEPTH:
        raise TomlRefused("depth", f"arrays and tables nested at most {MAX_DEPTH} deep",
                          f"more than {MAX_DEPTH} levels")
    if nul_at is not None:        # no name, path or URL holds one; the file system refuses it with a ValueError
        raise TomlRefused("nul", "keys and strings without NUL characters", f"a NUL character at '{nul_at}'")
    return data


def _nesting_before_parse(text: str, limit: int) -> str | None:
    """Why ``text`` nests deeper than ``limit`` (None: it does not), in one linear pass outside strings
    and comments: tomllib recurses once per bracket level and is quadratic in a dotted key's parts.
    The pass stops at an unterminated string, as tomllib does (a syntax error)."""
    depth = dots = 0
    at = _SPECIAL.search(text)
    while at is not None:
        tok, i = at.group(), at.start()
        nxt = i + 1
        if tok in "\"'":
            end = _string_end(text, i)
            if end < 0:
                return None
            nxt = end
        elif tok == "#":
            end = text.find("\n", i)
            nxt = len(text) if end < 0 else end
        elif tok in "[{":
            depth, dots = depth + 1, 0
            if depth > limit:
                return f"brackets nested more than {limit} deep"
        elif tok in "]}":
            depth, dots = max(depth - 1, 0), 0
        elif tok == ".":
            dots += 1
            if dots > limit:
                return f"a dotted key of more than {limit} parts"
        else:                      # "=", ",", a newline: a dotted key ends
            dots = 0
        at = _SPECIAL.search(text, nxt)
    return None


def _string_end(text: str, i: int) -> int:
    """Where the string opening at ``i`` ends (just past its closing quotes), or -1 when it does not."""
    q = text[i]
    if text.startswith(q * 3, i):                     # multi-line: up to two more quotes belong to it
        j = i + 3
        while True:
            k = text.find(q * 3, j)
            if k < 0:
                return -1
            run = k
            while q == '"' and run > j and text[run - 1] == "\\":
                run -= 1
            if (k - run) % 2 == 0:                    # not escaped
                end = k + 3
                while end < len(text) and end < k + 5 and text[end] == q:
                    end += 1
                return end
            j = k + 1
    if q == "'":
        k = text.find("'", i + 1)
        nl = text.find("\n", i + 1)
        return -1 if k < 0 or (0 <= nl < k) else k + 1
    m = _BASIC_REST.match(text, i + 1)
    return m.end() if m else -1


def walk(data: Any, limit: int) -> tuple[int, str | None]:
    """-> (how deep tables and arrays nest in ``data``, counted without recursion and only up to
    ``limit + 1``; the dotted key of the first key or string holding a NUL character, or None)."""
    deepest, nul_at = 0, None
    stack: list[tuple[Any, int, str]] = [(data, 1, "")] if isinstance(data, (dict, list)) else []
    while stack:
        node, depth, where = stack.pop()
        deepest = max(deepest, depth)
        if depth > limit:
            return depth, nul_at
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            at = f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]"
            if nul_at is None and any(isinstance(x, str) and "\x00" in x for x in (key, child)):
                nul_at = at.lstrip(".")
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1, at))
    return deepest, nul_at
