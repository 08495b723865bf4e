"""Every JIT library FlashInfer can load from a stack, against the sha256 the lock recorded.

FlashInfer loads a module from its AOT directory first (``<fork>/flashinfer/data/aot/<uri>/<uri>.so``, ignored
by the fork's git) and else from the JIT workspace (``STACK/jit/.../cached_ops/<uri>/<uri>.so``): every copy
must have the recorded bytes, every placed copy must exist, and a library no record names is a difference.
Folders are walked through their links (a module folder linked elsewhere is where FlashInfer loads from), and a
placed copy reached through a link is a difference of its own: the jit step placed a file in the stack.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.hashing import sha256_file
from ..core.paths import StackPaths
from ..engine import read_marker
from ..jit.integrity import manifest_aot_dir


@dataclass(frozen=True)
class JitFinding:
    uri: str
    path: Path
    expected: str
    found: str
    unrecorded: bool = False


def _marker_modules(paths: StackPaths) -> list[dict[str, Any]]:
    marker = read_marker(paths.marker("jit")) or {}
    return [m for m in (marker.get("outputs") or {}).get("modules", []) if isinstance(m, dict) and m.get("uri")]


def aot_dirs(paths: StackPaths, fork_dirs: Iterable[Path]) -> list[Path]:
    """FlashInfer's AOT directories of this stack: each fork checkout's ``flashinfer/data/aot``, the one
    the jit step recorded, and those of the AOT copies it placed."""
    dirs = {(f / "flashinfer" / "data" / "aot") for f in fork_dirs}
    recorded = manifest_aot_dir(paths.jit)
    if recorded is not None:
        dirs.add(recorded)
    dirs |= {Path(str(m["aot_path"])).parent.parent for m in _marker_modules(paths) if m.get("aot_path")}
    return sorted({d.resolve() for d in dirs if d.is_dir()})


def _libraries(root: Path) -> Iterable[tuple[Path, Path | None]]:
    """Every ``*.so`` file under ``root``, through linked folders too (each real folder once), with the first
    linked folder on its way (None: none)."""
    seen: set[Path] = set()
    for top, dirs, files in os.walk(root, followlinks=True):
        here = Path(top)
        real = here.resolve()
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        link = None
        at = root
        for part in here.relative_to(root).parts:
            at = at / part
            if at.is_symlink():
                link = at
                break
        yield from ((here / f, link) for f in files if f.endswith(".so") and (here / f).is_file())


def _linked(aot: Path) -> Path | None:
    """The first of FlashInfer's ``data`` folder, the AOT folder, the module's folder and the copy itself
    that is a link (None: none is)."""
    return next((p for p in (aot.parent.parent.parent, aot.parent.parent, aot.parent, aot) if p.is_symlink()), None)


def check(paths: StackPaths, lock_modules: Iterable[Mapping[str, Any]], fork_dirs: Iterable[Path]
          ) -> tuple[int, list[JitFinding]]:
    """-> (libraries looked at, findings)."""
    want = {str(m.get("uri")): str(m.get("sha256")) for m in lock_modules}
    placed = {str(m["uri"]): m for m in _marker_modules(paths)}
    found: list[JitFinding] = []
    seen_workspace: set[str] = set()
    via: dict[Path, Path | None] = {}
    for r in [paths.jit, *aot_dirs(paths, fork_dirs)]:
        if r.is_dir():
            for p, link in _libraries(r):
                via.setdefault(p.resolve(), link)
    libs = sorted(via)
    named_links: set[Path] = set()
    for lib in libs:
        uri = lib.stem if lib.parent.name == lib.stem else ""
        if uri not in want:
            link = via[lib]
            if link is None:
                found.append(JitFinding(uri or lib.name, lib, "only the JIT libraries the lock records",
                                        f"a library no record names ({lib.stat().st_size} bytes)", unrecorded=True))
            elif link not in named_links:   # the link is named (removing it leaves what it points at alone)
                named_links.add(link)
                found.append(JitFinding(uri or lib.name, link, "only the JIT libraries the lock records",
                                        f"a link to {os.readlink(link)}, which holds a library no record names "
                                        f"({lib.name})", unrecorded=True))
            continue
        if lib.is_relative_to(paths.jit.resolve()):
            seen_workspace.add(uri)
        got = sha256_file(lib)
        if got != want[uri]:
            found.append(JitFinding(uri, lib, f"sha256 {want[uri]}", f"sha256 {got} ({lib.stat().st_size} bytes)"))
    for uri in sorted(want):
        rec = placed.get(uri) or {}
        if uri not in seen_workspace:
            where = Path(str(rec["path"])) if rec.get("path") else paths.jit
            found.append(JitFinding(uri, where, f"the built library {uri}.so under {paths.jit}", "no such file"))
        aot = Path(str(rec["aot_path"])) if rec.get("aot_path") else None
        link = _linked(aot) if aot is not None else None
        if aot is not None and link is not None:
            found.append(JitFinding(uri, link, "the verified AOT copy the jit step placed, no link on the way",
                                    f"a link to {os.readlink(link)}"))
        elif aot is not None and not aot.is_file():
            found.append(JitFinding(uri, aot, f"the verified AOT copy with sha256 {want[uri]}", "no such file"))
    return len(libs), found
