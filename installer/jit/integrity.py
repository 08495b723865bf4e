"""Which JIT libraries in ``STACK/jit`` may be trusted: exactly the bytes the jit step recorded in
:data:`MANIFEST` (uri -> path relative to the workspace, sha256).  Standard library only (the smoke side
may call it inside the stack env).  A library no record names, or whose bytes differ, has its whole
module build directory removed (:func:`discard`), so ninja builds it again rather than link stale objects.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...checks.contract import sha256_file, write_text_atomic
from ..core import jsonread

MANIFEST = ".october-jit.json"
MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class Untrusted:
    path: Path
    reason: str            # "bytes differ from the recorded sha256 ..." | "not recorded by the jit step"


def read_manifest(workspace: Path) -> dict[str, dict[str, str]]:
    """uri -> {"path", "sha256"}; an unreadable or foreign manifest trusts nothing (empty)."""
    try:
        data = jsonread.loads((workspace / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(data.get("modules"), dict):
        return {}
    return {str(uri): {"path": rec["path"], "sha256": rec["sha256"],
                       **({"key": rec["key"]} if isinstance(rec.get("key"), str) else {})}
            for uri, rec in data["modules"].items()
            if isinstance(rec, dict) and isinstance(rec.get("path"), str) and isinstance(rec.get("sha256"), str)}


def manifest_aot_dir(workspace: Path) -> Path | None:
    """The FlashInfer AOT directory the jit step placed the verified libraries in, if any."""
    try:
        data = jsonread.loads((workspace / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("aot_dir") if isinstance(data, dict) else None
    return Path(value) if isinstance(value, str) and value else None


def aot_path(aot_dir: Path, uri: str) -> Path:
    """Where FlashInfer loads a prebuilt module from (``JitSpecNvcc.aot_path``), without running ninja."""
    return aot_dir / uri / f"{uri}.so"


def aot_libraries(aot_dir: Path | None) -> list[Path]:
    if aot_dir is None or not aot_dir.is_dir():
        return []
    return sorted(p for p in aot_dir.glob("*/*.so") if p.is_file() and p.parent.name == p.stem)


def write_manifest(workspace: Path, modules: Mapping[str, Mapping[str, str]], aot_dir: Path | None = None) -> None:
    """Atomically record uri -> {path (relative to ``workspace``), sha256[, key]} and the AOT directory
    holding verified copies (FlashInfer loads those without building)."""
    body = {"format": MANIFEST_FORMAT, "aot_dir": str(aot_dir) if aot_dir is not None else None,
            "modules": {u: {k: str(v) for k, v in m.items() if k in ("path", "sha256", "key")}
                        for u, m in sorted(modules.items())}}
    write_text_atomic(workspace / MANIFEST, json.dumps(body, indent=1, sort_keys=True))


def libraries(workspace: Path) -> list[Path]:
    """Every shared library FlashInfer could load from the workspace (its ``cached_ops`` trees)."""
    root = workspace / ".cache"
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.so") if p.is_file() and "cached_ops" in p.parts)


def untrusted_libraries(workspace: Path, manifest: Mapping[str, Mapping[str, str]] | None = None,
                        aot_dirs: tuple[Path | None, ...] = ()) -> list[Untrusted]:
    """Libraries under ``workspace`` (and in the AOT directories: the recorded one and ``aot_dirs``) that
    are not byte-for-byte what the jit step recorded."""
    records = read_manifest(workspace) if manifest is None else manifest
    by_path = {(workspace / rec["path"]).resolve(): rec["sha256"] for rec in records.values()}
    # each AOT directory once, by the path the stack names it (a linked one is not followed to what it points
    # at: discard removes the link, never the user's files there)
    dirs: dict[Path, Path] = {}
    for d in (manifest_aot_dir(workspace), *aot_dirs):
        if d is not None:
            dirs.setdefault(d.resolve(), d)
    for d in dirs.values():
        by_path.update({aot_path(d, uri).resolve(): rec["sha256"] for uri, rec in records.items()})
    found: list[Untrusted] = []
    for lib in libraries(workspace) + [p for d in sorted(dirs.values()) for p in aot_libraries(d)]:
        want = by_path.get(lib.resolve())
        if want is None:
            found.append(Untrusted(lib, "not recorded by the jit step"))
            continue
        got = sha256_file(lib)
        if got != want:
            found.append(Untrusted(lib, f"bytes differ from the recorded sha256 {want[:12]}... "
                                        f"(now {got[:12]}..., {lib.stat().st_size} bytes)"))
    return found


def missing_libraries(workspace: Path, manifest: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """URIs the manifest records whose library file is gone."""
    records = read_manifest(workspace) if manifest is None else manifest
    aot = manifest_aot_dir(workspace)
    return sorted(u for u, rec in records.items() if not (workspace / rec["path"]).is_file()
                  or (aot is not None and not aot_path(aot, u).is_file()))


def module_dir(lib: Path) -> Path | None:
    """FlashInfer builds ``cached_ops/<uri>/<uri>.so``: that directory holds the objects and ninja state."""
    parent = lib.parent
    return parent if parent.name == lib.stem and parent.parent.name == "cached_ops" else None


def discard(items: list[Untrusted]) -> list[str]:
    """Remove each untrusted library with its module's own directory (``cached_ops/<uri>/`` or an AOT
    ``<uri>/``), else the file alone; returns what was removed."""
    removed: list[str] = []
    for item in items:
        own = item.path.parent if item.path.parent.name == item.path.stem else None
        # reached through a link (the module's folder, the AOT or cached_ops folder linked elsewhere): the link
        # goes, what it points at is the user's and stays
        link = next((p for p in (item.path, *item.path.parents[:3]) if p.is_symlink()), None)
        if link is not None:
            link.unlink()
            removed.append(f"{link} (a link; what it points at is left)")
            continue
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
        else:
            item.path.unlink(missing_ok=True)
        removed.append(str(own or item.path))
    return removed


def report(workspace: Path) -> dict[str, Any]:
    """JSON-able integrity summary: {"ok", "untrusted": [{path, reason}], "missing": [uri]}."""
    bad = untrusted_libraries(workspace)
    gone = missing_libraries(workspace)
    return {"ok": not bad and not gone, "untrusted": [{"path": str(b.path), "reason": b.reason} for b in bad],
            "missing": gone}
