"""``kit.json``: what a kit holds and the sha256 of every file in it; written last, checked first."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from ..core import jsonread
from ..core.errors import KitError, ReceiptError
from ..core.hashing import sha256_file
from ..core.listing import first
from ..core.schemas import validate, write_receipt
from . import KIND, KIT_FORMAT, MANIFEST, UNFINISHED

MAX_LISTED = 8


def file_table(root: Path) -> dict[str, dict[str, Any]]:
    """relative path -> {sha256, size} of every regular file under ``root`` but the manifest (and the marker of
    a kit being written, :data:`UNFINISHED`)."""
    table: dict[str, dict[str, Any]] = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            raise KitError(f"the kit holds a symbolic link {p}", expected="regular files only",
                           found=f"a link to {p.readlink()}", fix="remove it and make the kit again")
        if p.is_file() and p.relative_to(root).as_posix() not in (MANIFEST, UNFINISHED):
            table[p.relative_to(root).as_posix()] = {"sha256": sha256_file(p), "size": p.stat().st_size}
    return table


def write_manifest(path: Path, doc: Mapping[str, Any]) -> None:
    write_receipt("kit", path, doc)


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.is_file():
        raise KitError(f"{root} is not a finished kit", expected=f"{path}", found="no manifest there",
                       fix="make the kit with `october_setup kit --recipe R DIR` on a machine with network "
                           "access (an interrupted kit has no manifest: make it again)")
    try:
        doc = jsonread.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise KitError(f"the kit manifest {path} cannot be read", expected="a JSON kit manifest",
                       found=str(exc), fix="make the kit again") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("format_version") != KIT_FORMAT:
        raise KitError(f"{path} is not a kit manifest this october reads",
                       expected=f"kind {KIND!r}, format_version {KIT_FORMAT}",
                       found=f"kind {doc.get('kind')!r}, format_version {doc.get('format_version')!r}"
                       if isinstance(doc, dict) else type(doc).__name__,
                       fix="make the kit with this version of october")
    try:
        validate("kit", doc, where=str(path))
    except ReceiptError as exc:
        raise KitError(f"the kit manifest {path} is malformed", expected=exc.expected, found=exc.found,
                       fix="make the kit again") from None
    return doc


def check_files(root: Path, doc: Mapping[str, Any]) -> list[str]:
    """Every difference between the kit on disk and its manifest (empty when it matches)."""
    problems: list[str] = []
    files: Mapping[str, Mapping[str, Any]] = doc["files"]
    for rel, want in sorted(files.items()):
        p = root / rel
        if p.is_symlink():
            problems.append(f"{rel}: a link (to {os.readlink(p)}), not the file the manifest lists")
            continue
        if not p.is_file():
            problems.append(f"{rel}: missing")
            continue
        if p.stat().st_size != want["size"]:
            problems.append(f"{rel}: {p.stat().st_size} bytes, manifest says {want['size']}")
            continue
        got = sha256_file(p)
        if got != want["sha256"]:
            problems.append(f"{rel}: sha256 {got}, manifest says {want['sha256']}")
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel in (MANIFEST, UNFINISHED) or rel in files:
            continue
        if p.is_file() or p.is_symlink():
            problems.append(f"{rel}: not in the manifest")
        elif not p.is_dir() or rel.startswith("wheels/"):     # a FIFO uv would block on, a folder named as a wheel
            problems.append(f"{rel}: not a regular file, not in the manifest")
    return problems


def listed(items: list[str]) -> str:
    return first(items, MAX_LISTED, "; ")
