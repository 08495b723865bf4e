"""Offline kits: everything one recipe needs, in one directory, for a machine without network.

``october_setup kit --recipe R DIR`` (:mod:`.make`) writes ``DIR/kit.json`` (the manifest, with the
sha256 of every file), ``DIR/git/<host>/<path>.git`` (shallow bare repositories) and ``DIR/wheels/``
(while it is written, ``DIR/kit-unfinished.json`` records what it wrote: :mod:`.owned`);
``october_setup STACK --recipe R --kit DIR`` (:mod:`.use`) verifies every file first, then fetches and
installs from the kit only.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ..core.redact import redact_url
from ..git.mirror import fetchable_url

KIT_FORMAT = 1
MANIFEST = "kit.json"
UNFINISHED = "kit-unfinished.json"     # a kit being written (kit/owned.py); gone once kit.json is
KIND = "october-kit"


def url_key(url: str) -> str:
    """The form a URL is matched in: GitHub SSH as HTTPS, credentials masked, no trailing ``/`` or ``.git``."""
    return redact_url(fetchable_url(url)).rstrip("/").removesuffix(".git")


def repo_relpath(url: str) -> str:
    """Where a repository of ``url`` lives in a kit: ``git/<host>/<path>.git`` (``file`` for local URLs)."""
    key = url_key(url)
    parts = urlsplit(key)
    host = parts.hostname or (parts.scheme or "local")
    path = parts.path if parts.scheme else key
    segs = [re.sub(r"[^A-Za-z0-9._-]", "_", s) for s in path.split("/") if s and s not in (".", "..")]
    return "/".join(["git", re.sub(r"[^A-Za-z0-9._-]", "_", host), *(segs or ["repo"])]) + ".git"
