"""Reading a stack env's distributions from disk (``.dist-info`` METADATA, direct_url.json, RECORD) without
starting its Python: for ``current verify``, ``current env``, the install step and the system site.

Not :mod:`importlib.metadata`: ``Distribution.files`` raises on a blank RECORD line, a row of four fields or
a non-numeric size, and reads ``sha256`` (no ``=``) as a hash, where :func:`record_rows` reads a row as far
as it goes; ``Distribution.metadata`` parses the long description too and drops a non-UTF-8 METADATA.
"""

from __future__ import annotations

import csv
import hashlib
import re
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name

from ..core import jsonread
from ..core.hashing import CHUNK, record_digest


@dataclass(frozen=True)
class Dist:
    name: str                        # canonical
    version: str
    info: Path                       # the .dist-info directory
    direct_url: Mapping[str, Any] | None
    requires: tuple[str, ...] = ()   # Requires-Dist lines as written

    @property
    def site(self) -> Path:
        return self.info.parent

    @property
    def editable_path(self) -> Path | None:
        d = self.direct_url or {}
        url = str(d.get("url", ""))
        if d.get("dir_info", {}).get("editable") and url.startswith("file://"):
            return Path(unquote(urlparse(url).path)).resolve()
        return None


def site_packages(env: Path) -> list[Path]:
    return sorted(p for p in env.glob("lib/python*/site-packages") if p.is_dir())


def _direct_url(info: Path) -> Mapping[str, Any] | None:
    if not (info / "direct_url.json").is_file():
        return None
    try:
        return jsonread.loads((info / "direct_url.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):                       # unreadable, not UTF-8, not JSON
        return {"url": "unreadable"}


_HEADER_END = re.compile(r"\r?\n\r?\n")


def dists_in(sites: Iterable[Path | str], pattern: str = "*.dist-info", *, strict: bool = False) -> Iterator[Dist]:
    """Every ``.dist-info`` (``pattern``) of the sites, in order, whose METADATA names it and its version.
    One without METADATA is skipped; an unreadable one too, unless ``strict`` (the install step's consistency
    check: its requirements would go unchecked), which raises."""
    for site in sites:
        for info in sorted(Path(site).glob(pattern)):
            try:
                text = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
                # only the headers, up to the first blank line: not the long description (torch's is 50 KB)
                meta = HeaderParser().parsestr(_HEADER_END.split(text, maxsplit=1)[0])
            except FileNotFoundError:
                continue
            except OSError:
                if strict:
                    raise
                continue
            name, version = meta.get("Name"), meta.get("Version")
            if not name or not (version or "").strip():
                continue
            yield Dist(str(canonicalize_name(name)), version.strip(), info, _direct_url(info),
                       tuple(meta.get_all("Requires-Dist") or ()))


def installed(env: Path) -> dict[str, Dist]:
    """Every distribution in the env, by canonical name."""
    return {d.name: d for d in dists_in(site_packages(env))}


def record_rows(dist: Dist) -> Iterator[tuple[str, str, str]]:
    """(path, hash, size) rows of the distribution's RECORD, each read as far as it goes."""
    with open(dist.info / "RECORD", encoding="utf-8", newline="") as fh:
        for row in csv.reader(fh):
            if row:
                yield row[0], (row[1] if len(row) > 1 else ""), (row[2] if len(row) > 2 else "")


def record_hash(path: Path, algo: str, on_chunk: Callable[[int], None] | None = None) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
    return record_digest(h.digest())
