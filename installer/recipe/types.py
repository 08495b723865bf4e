"""The bounded scalars every recipe key is made of (lengths, ranges, patterns the JSON Schema publishes) and the
strict, frozen :class:`Section` every table of :mod:`.spec` is."""

from __future__ import annotations

import re
from typing import Annotated, Any

from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field

from ..core.ids import FULL_SHA, SHA256
from .rules import int_range, matches, parses
from .tomlcheck import MAX_INT, MAX_ITEMS, MAX_KEY, MAX_KEYS, MAX_STR, MAX_URL


SAFE_NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# SAFE_NAME as the schema publishes it: JSON Schema patterns are ECMA-262 and taplo uses Rust's regex, which
# has no look-around, so the "no '..'" part stays in the tool (the name is checked in full when loaded)
SAFE_NAME_PUBLISHED = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# how a PEP 440 version starts (an optional 'v', an optional epoch 'N!', a digit): the tool parses the rest
VERSION_START = r"^\s*[vV]?([0-9]+!)?[0-9]"
NOT_BLANK = r"\S"           # str.strip(value) is truthy: some character that is not white space
SHA_PREFIX = re.compile(r"^[0-9a-f]{7,39}$")
DIST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")   # ASCII: the schema's \\w is ASCII only
SDIST_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!-]{0,63}$")
GB_BOUNDS = (0.0, 1e6)      # GB: nothing below zero, nothing past a petabyte (NaN and inf are refused)
SHAPE_MAX = 1 << 16         # heads, head dim, layers: far above any model, far below an overflow
MAX_TOKENS = 1 << 20        # a smoke prompt or generation longer than this is a typo, not a test


def relpath(p: str) -> bool:
    norm = p.strip().strip("/")
    return bool(norm) and not p.startswith("/") and "\\" not in norm \
        and not any(part in ("", ".", "..") for part in norm.split("/"))


def desc(text: str) -> Any:
    return Field(description=text)


# the bounded scalars every key is made of
Str = Annotated[str, Field(max_length=MAX_STR)]
Url = Annotated[str, Field(max_length=MAX_URL)]
Key = Annotated[str, Field(max_length=MAX_KEY)]
Int = Annotated[int, int_range(-MAX_INT, MAX_INT, "an integer within the TOML range (64 bits)")]
StrList = Annotated[list[Str], Field(max_length=MAX_ITEMS)]
# git reads an argument that begins with '-' as an option (`--upload-pack=<command>` runs that command)
GitUrl = Annotated[Url, matches(re.compile(r"^(?!-)[^\s\x00-\x1f\x7f]+$"),
                                "a git URL (not beginning with '-', no spaces or control characters)")]
IndexUrl = Annotated[Url, matches(re.compile(r"^(https?|file)://"), "an https:// (or file://) package index URL")]
Version440 = Annotated[str, Field(max_length=64, description="a version string such as '2.10.0'"),
                       parses(Version, "a PEP 440 version such as '2.10.0'", pattern=VERSION_START)]
FullSha = Annotated[Str, matches(FULL_SHA, "a 40-character lowercase hex commit id")]
HEX64 = "64 lowercase hex characters"
Sha256 = Annotated[Str, Field(description=HEX64), matches(SHA256, HEX64)]
ForkName = Annotated[Key, matches(SAFE_NAME, "a plain fork name: letters, digits, '.', '_' or '-' (it names the "
                                  "clone directory STACK/src/<name>)", SAFE_NAME_PUBLISHED, key=True)]


def Table(value: Any, what: str = "a table", key: Any = None) -> Any:
    """A TOML table of at most :data:`MAX_KEYS` keys, its keys (``key``) at most :data:`MAX_KEY` characters."""
    return Annotated[dict[key or Key, value], Field(max_length=MAX_KEYS, description=what)]


class Section(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=True)
