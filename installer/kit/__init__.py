"""Offline kits: everything one recipe needs, in one directory, for a machine without network.

``october_setup kit --recipe R DIR`` (:mod:`.make`) writes::

    DIR/kit.json                      manifest: recipe, repositories, wheels, sha256 of every file
    DIR/git/<host>/<path>.git         shallow bare repositories: each fork at its pin, and the
                                      recipe's selected submodules at their recorded commits
    DIR/wheels/*.whl                  the base wheel, every wheel of the stack env's lock, the
                                      build requirements (torch left out when the system gives it)

``october_setup STACK --recipe R --kit DIR`` (:mod:`.use`) verifies every file against the
manifest first, then fetches git objects only from the kit (each URL mapped to its copy; a URL
the kit lacks is an error naming it), installs wheels with ``--no-index --find-links DIR/wheels``,
and seeds the base wheel into the download cache so the wheel step finds it by its sha256.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ..core.redact import redact_url
from ..git.mirror import fetchable_url

KIT_FORMAT = 1
MANIFEST = "kit.json"
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
