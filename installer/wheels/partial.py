"""An unfinished download: the ``.part`` file, the sha256 of what it holds (hashed once on resume, then as the
bytes stream in) and the host's validator (ETag / Last-Modified) for ``If-Range``, stored without credentials."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

from ..core import jsonread
from ..core.atomic import write_json_atomic
from ..core.hashing import CHUNK
from ..core.redact import redact_url


class PartialFile:
    """The ``.part`` file, its running sha256 and its HTTP validator."""

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        self.meta_path = path.with_suffix(".json")
        self.url = url
        self.hasher = hashlib.sha256()
        self.size = 0
        self.validator: str | None = None
        self.total: int | None = None              # the size the host announced, once known
        if path.exists():
            with open(path, "rb") as fh:               # hash what we already hold, once
                while chunk := fh.read(CHUNK):
                    self.hasher.update(chunk)
                    self.size += len(chunk)
            self.validator = self._load_validator()
        self.resumed_from = self.size
        self.fh = open(path, "ab")

    def _load_validator(self) -> str | None:
        try:
            meta = jsonread.loads(self.meta_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        if isinstance(meta, dict) and meta.get("url") == redact_url(self.url) \
                and isinstance(meta.get("validator"), str):
            return meta["validator"]
        return None

    def remember(self, headers: httpx.Headers) -> None:
        etag = headers.get("etag")
        validator = etag if etag and not etag.startswith("W/") else headers.get("last-modified")
        if validator and validator != self.validator:
            self.validator = validator
            # the file is keyed by a hash of the full URL; the URL itself is stored without credentials
            write_json_atomic(self.meta_path, {"url": redact_url(self.url), "validator": validator})

    def write(self, chunk: bytes) -> None:
        self.fh.write(chunk)
        self.hasher.update(chunk)
        self.size += len(chunk)

    def restart(self) -> None:
        self.fh.seek(0)
        self.fh.truncate()
        self.hasher = hashlib.sha256()
        self.size = 0
        self.resumed_from = 0
        self.validator = None
        self.meta_path.unlink(missing_ok=True)

    def close(self) -> None:
        if not self.fh.closed:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.meta_path.unlink(missing_ok=True)
