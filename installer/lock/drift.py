"""The env against what was recorded of it (the lock written from it, the install step's listing): which
distributions were added, removed or changed since (``uv pip install``/``uninstall`` by hand).  Read from
``.dist-info`` names and the lock's TOML, no process: the no-op re-run asks it (the env and lock steps' verify)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Mapping

from packaging.utils import canonicalize_name

SHOWN = 5


def installed_versions(env: Path) -> dict[str, str]:
    """name -> version of every distribution in the env, from its .dist-info names."""
    out: dict[str, str] = {}
    for site in env.glob("lib/python*/site-packages"):
        for info in site.glob("*.dist-info"):
            name, _, version = info.name[: -len(".dist-info")].partition("-")
            out[str(canonicalize_name(name))] = version
    return out


def drift(env: Path, pylock: Path) -> str | None:
    """What differs between the env's distributions and the lock's packages (``name locked -> installed``),
    or None when they agree.  An unreadable lock is not drift: whoever reads it says what is wrong."""
    try:
        with open(pylock, "rb") as fh:
            packages = tomllib.load(fh).get("packages", [])
        locked = {str(canonicalize_name(p["name"])): str(p.get("version")) for p in packages}
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError):
        return None
    return differences(locked, installed_versions(env))


def differences(was: Mapping[str, str], now: Mapping[str, str]) -> str | None:
    """``name was -> now`` for each distribution added, removed or of another version (``-``: none), the
    first :data:`SHOWN` named; None when the two agree."""
    changed = sorted(n for n in set(was) | set(now) if was.get(n) != now.get(n))
    if not changed:
        return None
    return ", ".join(f"{n} {was.get(n, '-')} -> {now.get(n, '-')}" for n in changed[:SHOWN]) + (
        f" (and {len(changed) - SHOWN} more)" if len(changed) > SHOWN else "")
