"""What install left in the stack env, read from its metadata files alone (no process started: a no-op re-run
stays fast and writes nothing)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse
from ..core import jsonread


def installed_state_problem(env: Path, torch_version: str, forks: Mapping[str, Path], *,
                            system_torch: bool = False) -> str | None:
    """Why the env no longer matches what install left (torch build, editable forks), or None."""
    site = sorted(env.glob("lib/python*/site-packages"))
    if not site:
        return f"no site-packages under {env}"
    sp = site[0]
    if system_torch:
        if any(sp.glob("torch-*.dist-info")):
            return f"a torch was installed into {sp} over the system torch"
    elif not (sp / f"torch-{torch_version}.dist-info").is_dir():
        found = sorted(p.name for p in sp.glob("torch-*.dist-info")) or ["no torch"]
        return f"torch {torch_version} is no longer installed (found {', '.join(found)})"
    editable: dict[Path, str] = {}
    for direct in sp.glob("*.dist-info/direct_url.json"):
        try:
            info = jsonread.loads(direct.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        url = str(info.get("url", ""))
        if url.startswith("file://") and info.get("dir_info", {}).get("editable"):
            editable[Path(unquote(urlparse(url).path)).resolve()] = direct.parent.name
    for name, path in forks.items():
        if path.resolve() not in editable:
            return f"fork {name} is no longer installed editable from {path}"
    return None


def editable_version(info: Mapping[str, Any], path: Path) -> str | None:
    """The version of the distribution the guard's facts ``info`` show installed editable from ``path``."""
    for d in info.get("dists", []):
        du = d.get("direct_url") or {}
        if du.get("dir_info", {}).get("editable") and str(du.get("url", "")).rstrip("/").endswith(path.name):
            return str(d.get("version"))
    return None
