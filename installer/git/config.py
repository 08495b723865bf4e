"""A repository's own git config, read from its files the way git's config parser reads them (the no-op path
starts no git for it; ``tests/test_git_config.py`` holds it against ``git config``).

What git does and this does too: a byte-order mark at the start; ``[section]``, ``[section "subsection"]``
(case kept, ``\\`` escapes), the old ``[section.subsection]``, an entry on the header's line; keys are
case-insensitive; a bare key is true; a value's quotes, escapes, backslash-newline continuations, comments
outside quotes and its whitespace; CRLF as LF; the last value wins; a file git would refuse is read up to
where git stops.  The repository's ``config`` (the common one, for a linked worktree), then
``config.worktree`` when ``extensions.worktreeConfig`` is on.  Not read: the user's and the system's config
and ``[include]`` files; the keys asked here (sparse checkout, object format, worktree config) live in the
repository's own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from ..core.version import common_dir

_SPACE = " \t\r"                    # git's isspace, the newline apart
_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "\\": "\\", '"': '"'}
_INT = re.compile(r"[ \t\r\n]*[+-]?(?:0[xX](?P<hex>[0-9a-fA-F]+)|(?P<dec>[0-9]+))[kKmMgG]?")


def config_items(gd: Path) -> list[tuple[str, str]]:
    """Every entry of the repository whose git directory is ``gd``, in the order git reads them, as
    (``section[.subsection].key`` with the section and key lower-cased, the value; ``"true"`` for a bare key)."""
    items = list(_entries(_read(common_dir(gd) / "config")))
    if truth(value_in(items, "extensions.worktreeconfig")):
        items += _entries(_read(gd / "config.worktree"))
    return items


def value_in(items: list[tuple[str, str]], name: str) -> str | None:
    """The value of ``section.key`` or ``section.subsection.key`` among :func:`config_items` (the last one
    wins), None when unset: read the files once, ask for several keys."""
    head, _, key = name.rpartition(".")
    section, dot, sub = head.partition(".")
    want = section.lower() + dot + sub + "." + key.lower()
    return next((v for k, v in reversed(items) if k == want), None)


def truth(value: str | None) -> bool:
    """git's boolean: a bare key, true/yes/on, a number other than 0 (``1``, ``-1``, ``2k``)."""
    if value is None:
        return False
    if value.lower() in ("true", "yes", "on"):
        return True
    m = _INT.fullmatch(value)
    return bool(m) and (m["hex"] or m["dec"]).strip("0") != ""


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")       # no newline translation: a lone CR
    except (OSError, ValueError):
        return ""


def _entries(text: str) -> Iterator[tuple[str, str]]:
    """(``section[.subsection].key`` as git names it, the value) in file order."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    n, i, section = len(text), 0, None
    while i < n:
        c = text[i]
        if c == "\n" or c in _SPACE:
            i += 1
        elif c in "#;":
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif c == "[":
            section, i = _header(text, i + 1)
            if section is None:
                return
        elif c.isascii() and c.isalpha() and section is not None:
            j = i
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "-"):
                j += 1
            key = f"{section}.{text[i:j].lower()}"
            while j < n and text[j] in " \t":
                j += 1
            if j >= n or text[j] == "\n":
                yield key, "true"
                i = j
                continue
            if text[j] != "=":
                return
            value, i = _value(text, j + 1)
            if value is None:
                return
            yield key, value
        else:
            return                  # git refuses the file here


def _header(text: str, i: int) -> tuple[str | None, int]:
    """A section header after its ``[``: (its name, where parsing goes on), or (None, _) where git refuses."""
    n, start = len(text), i
    while i < n and text[i] != "]":
        c = text[i]
        if c in _SPACE or c == "\n":
            return _subsection(text, text[start:i].lower(), i)
        if not (c.isascii() and (c.isalnum() or c in "-.")):
            return None, i
        i += 1
    return (text[start:i].lower(), i + 1) if i < n else (None, i)


def _subsection(text: str, section: str, i: int) -> tuple[str | None, int]:
    n = len(text)
    while i < n and text[i] in _SPACE:
        i += 1
    if i >= n or text[i] != '"':
        return None, i
    out, i = [], i + 1
    while i < n and text[i] not in '"\n':
        if text[i] == "\\":
            i += 1
            if i >= n or text[i] == "\n":
                return None, i
        out.append(text[i])
        i += 1
    if i + 1 >= n or text[i] != '"' or text[i + 1] != "]":
        return None, i
    return f"{section}.{''.join(out)}", i + 2


def _value(text: str, i: int) -> tuple[str | None, int]:
    """A value after its ``=``, to the end of its (continued) line: (the value, where parsing goes on), or
    (None, _) where git refuses it (an open quote, a bad escape)."""
    out: list[str] = []
    quoted = comment = False
    spaces, n = 0, len(text)
    while True:
        c = text[i] if i < n else "\n"
        i += 1
        if c == "\n":
            return (None if quoted else "".join(out)), i
        if comment:
            continue
        if c in _SPACE and not quoted:
            spaces += bool(out)
            continue
        if c in "#;" and not quoted:
            comment = True
            continue
        if spaces:
            out.append(" " * spaces)
            spaces = 0
        if c == "\\":
            c = text[i] if i < n else "\n"
            i += 1
            if c == "\n":
                continue
            if c not in _ESCAPES:
                return None, i
            out.append(_ESCAPES[c])
        elif c == '"':
            quoted = not quoted
        else:
            out.append(c)
