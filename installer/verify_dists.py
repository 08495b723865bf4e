"""Reading a stack env's distributions from disk (``.dist-info`` METADATA, direct_url.json, RECORD)
without starting its Python: the one reader for ``current verify``, ``current env``, the install step's
RECORD check and consistency, and the system interpreter's site (:mod:`october.installer.pyenv.systorch`).

Not :mod:`importlib.metadata` (issue 21, measured): ``Distribution.files`` raises on a blank RECORD line,
a row of four fields or a size that is not a number, and reads ``sha256`` (no ``=``) as a hash to check,
where :func:`record_rows` reads a row as far as it goes (tests/test_mutation_kills_verify.py holds it);
``Distribution.metadata`` parses the whole file, long description included (the stack-side probes
avoid it for that), and drops a METADATA that is not UTF-8, which is read here with replacement
characters; ``read_text`` alone is no shorter than :mod:`pathlib`.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import re
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name

from .core.hashing import CHUNK


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
        return json.loads((info / "direct_url.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):                       # unreadable, not UTF-8, not JSON
        return {"url": "unreadable"}


_HEADER_END = re.compile(r"\r?\n\r?\n")


def dists_in(sites: Iterable[Path | str], pattern: str = "*.dist-info", *, strict: bool = False) -> Iterator[Dist]:
    """Every ``.dist-info`` (``pattern``) of the site directories, in order, whose METADATA names it and
    its version (the header block only, decoded leniently).  A dist-info without METADATA is skipped; one
    whose METADATA cannot be read is skipped too, unless ``strict`` (the install step's consistency check:
    its requirements would go unchecked), which raises the error."""
    for site in sites:
        for info in sorted(Path(site).glob(pattern)):
            try:
                text = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
                # the headers end at the first blank line: the long description after it (torch's is 50 KB)
                # is not fed to the parser, which would read it as a body (400 system dists: 0.1 s, issue 20)
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
    """(path, hash, size) rows of the distribution's RECORD, each read as far as it goes (the module
    docstring says why not :mod:`importlib.metadata`)."""
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
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")
