"""Run *inside the stack env* (stdlib only): print every installed distribution as JSON.

Invoked as ``STACK/env/bin/python -I checks/probes/distributions.py``; never imported by the tool.
"""

from __future__ import annotations

import email
import json
import sys
from importlib import metadata


def headers(dist):
    """Name and Version from the metadata's header block only: ``dist.metadata`` parses the whole file
    (long descriptions included) on every access, twice per distribution for name and version."""
    # "": a legacy .egg-info that is a single file (Debian's dist-packages), as importlib.metadata reads it
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("") or ""
    head = email.message_from_string(text.replace("\r\n", "\n").split("\n\n", 1)[0])
    return str(head["Name"] or ""), str(head["Version"] or "")


def _json(text: str) -> object:
    """A dist's direct_url.json, or what it holds when it is not JSON (nested too deeply included)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return {"unreadable": text[:200]}


def main() -> int:
    dists = []
    for dist in metadata.distributions():
        name, version = headers(dist)
        if not name:
            continue
        direct = dist.read_text("direct_url.json")
        dists.append({"name": name, "version": version,
                      "direct_url": _json(direct) if direct else None,
                      "installer": (dist.read_text("INSTALLER") or "").strip() or None,
                      "site": str(dist.locate_file(""))})
    dists.sort(key=lambda d: str(d["name"]).lower())      # stable: one name in two sites keeps sys.path's order
    json.dump({"python": sys.version.split()[0], "prefix": sys.prefix, "path": sys.path, "distributions": dists},
              sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
