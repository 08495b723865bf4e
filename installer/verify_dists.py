"""Reading a stack env's distributions from disk (``.dist-info`` METADATA, direct_url.json, RECORD)
without starting its Python, for ``current verify`` and ``current env``."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name

from .core.hashing import CHUNK


@dataclass(frozen=True)
class Dist:
    name: str                        # canonical
    version: str
    info: Path                       # the .dist-info directory
    direct_url: Mapping[str, Any] | None

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


def installed(env: Path) -> dict[str, Dist]:
    """Every distribution in the env, from its .dist-info METADATA and direct_url.json."""
    out: dict[str, Dist] = {}
    for site in site_packages(env):
        for info in sorted(site.glob("*.dist-info")):
            try:
                meta = HeaderParser().parsestr((info / "METADATA").read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
            name, version = meta.get("Name"), meta.get("Version")
            if not name or not version:
                continue
            direct = None
            if (info / "direct_url.json").is_file():
                try:
                    direct = json.loads((info / "direct_url.json").read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError):
                    direct = {"url": "unreadable"}
            out[str(canonicalize_name(name))] = Dist(str(canonicalize_name(name)), version, info, direct)
    return out


def record_rows(dist: Dist) -> Iterator[tuple[str, str, str]]:
    """(path, hash, size) rows of the distribution's RECORD."""
    record = dist.info / "RECORD"
    with open(record, encoding="utf-8", newline="") as fh:
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


