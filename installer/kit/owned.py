"""Which directory is a kit, and which of its files the tool wrote: ``october_setup kit`` refreshes or resumes
only a directory it made, and removes only what a kit run recorded.

Proof that the tool made ``DIR`` is ``DIR/kit.json`` (a finished kit) or ``DIR/kit-unfinished.json``
(:data:`MARKER`), which a run writes before anything else and removes once ``kit.json`` is written, so a kit
interrupted at any point is resumed.  Both record the kit's *entries*: each wheel (``wheels/<file>``) and each
repository (``git/<host>/<path>.git``, a directory git fills), and a run adds an entry to the marker before it
writes it.  Any other non-empty directory is refused before anything is written or deleted; in a kit, a file no
entry covers (one someone put there) is refused by name, never deleted and never recorded in ``kit.json``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..core import jsonread
from ..core.atomic import write_json_atomic
from ..core.errors import KitBusyError, KitError
from ..core.paths import remove
from . import KIND, MANIFEST, UNFINISHED
from .manifest import listed

MARKER = UNFINISHED
MARKER_KIND = "october-kit-unfinished"
MARKER_FORMAT = 1
_NAME = r"[A-Za-z0-9._-]+"
_ENTRY = re.compile(rf"^(wheels/[^/.][^/]*|git(/{_NAME})+\.git)$")     # kit/wheels.py, kit.repo_relpath
# what our own atomic writes leave when killed (core/atomic: ``.<name>.<random>.tmp`` beside the file)
_OWN_TEMP = re.compile(rf"^\.({re.escape(MANIFEST)}|{re.escape(MARKER)})\.[^/]+\.tmp$")
_PARTIAL = re.compile(r"^wheels/\.[^/]+\.partial$")      # kit/wheels.place: ``.<wheel>.partial`` beside it


def valid_entry(rel: str) -> bool:
    """A wheel file or a repository directory path as the tool makes them, nothing that leads elsewhere."""
    return bool(_ENTRY.match(rel)) and not any(seg in (".", "..") for seg in rel.split("/"))


def walk(root: Path) -> Iterator[str]:
    """The relative path of everything under ``root`` that is not a directory (links included, never followed)."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for name in [d for d in dirnames if (here / d).is_symlink()] + filenames:
            yield (here / name).relative_to(root).as_posix()


def _read(path: Path) -> Any:
    try:
        return jsonread.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _from_manifest(doc: Any) -> set[str] | None:
    """The entries a ``kit.json`` records (its wheel files and repositories), or None when it is no kit's."""
    if not isinstance(doc, dict) or doc.get("kind") != KIND or not isinstance(doc.get("files"), dict) \
            or not isinstance(doc.get("repos"), list):
        return None
    repos = {r["path"] for r in doc["repos"] if isinstance(r, dict) and isinstance(r.get("path"), str)}
    wheels = {rel for rel in doc["files"] if isinstance(rel, str) and rel.startswith("wheels/")}
    return {rel for rel in repos | wheels if valid_entry(rel)}


def _recipe_of(doc: Any) -> str | None:
    recipe = doc.get("recipe") if isinstance(doc, dict) else None
    name = recipe.get("name") if isinstance(recipe, dict) else None
    return name if isinstance(name, str) else None


def _from_marker(doc: Any) -> set[str] | None:
    if not isinstance(doc, dict) or doc.get("kind") != MARKER_KIND or not isinstance(doc.get("entries"), list):
        return None
    return {rel for rel in doc["entries"] if isinstance(rel, str) and valid_entry(rel)}


class KitDir:
    """A kit directory being written: the entries the tool wrote there (earlier runs' and this one's)."""

    def __init__(self, root: Path, entries: Iterable[str] = (), recipe: str | None = None) -> None:
        self.root = root
        self.entries = set(entries)
        self.recipe = recipe            # the recipe it is made for, in the marker too (an interrupted kit's)

    def owns(self, rel: str, entries: set[str] | None = None) -> bool:
        """Whether a kit run wrote ``rel`` (``entries``: those to count, default all recorded)."""
        entries = self.entries if entries is None else entries
        if rel in (MANIFEST, MARKER) or _OWN_TEMP.match(rel) or rel in entries:
            return True
        if _PARTIAL.match(rel):                  # kit/wheels.place's temporary name, beside the wheel
            return f"wheels/{rel[len('wheels/.'):-len('.partial')]}" in entries
        return any(rel.startswith(e + "/") for e in entries if e.startswith("git/"))

    def foreign(self) -> list[str]:
        """Every file in the directory no kit run wrote."""
        return sorted(rel for rel in walk(self.root) if not self.owns(rel))

    def claim(self, *rels: str) -> None:
        """Record ``rels`` in the marker before they are written (a resumed run may then remove them)."""
        new = set(rels) - self.entries
        if not new:
            return
        bad = sorted(r for r in new if not valid_entry(r))
        if bad:
            raise KitError(f"the kit cannot hold {listed(bad)}", expected="wheels/<file> or git/<host>/<path>.git",
                           found=listed(bad), fix="report this: the kit's own names are made that way")
        self.entries |= new
        self.write_marker()

    def write_marker(self) -> None:
        write_json_atomic(self.root / MARKER, {"kind": MARKER_KIND, "format_version": MARKER_FORMAT,
                                               "entries": sorted(self.entries),
                                               **({"recipe": {"name": self.recipe}} if self.recipe else {})})

    def finished(self) -> None:
        """``kit.json`` is written: the marker goes."""
        (self.root / MARKER).unlink(missing_ok=True)

    def prune(self, keep: set[str]) -> None:
        """Remove what an earlier run recorded that this kit no longer holds (uv's --find-links would offer an
        old wheel), and what a killed run left of its own writes; a file no run wrote is refused by name."""
        foreign = self.foreign()
        if foreign:
            raise _foreign_error(self.root, foreign)
        for rel in sorted(self.entries - keep):
            remove(self.root / rel, missing_ok=True)
        for rel in sorted(walk(self.root)):          # a temporary file of ours, left by a killed run
            if _OWN_TEMP.match(rel) or _PARTIAL.match(rel):
                remove(self.root / rel, missing_ok=True)
        self.entries &= keep
        self.write_marker()


def _foreign_error(root: Path, files: list[str]) -> KitError:
    return KitError(f"the kit directory {root} holds files no `october_setup kit` run wrote",
                    expected=f"only what an earlier kit run recorded in {root} ({MANIFEST} or {MARKER})",
                    found=f"{len(files)} other file(s): {listed(files)}",
                    fix=f"move them out of {root} (nothing was changed there), or choose an empty or new DIR")


@contextmanager
def held(out: Path) -> Iterator[None]:
    """An exclusive, non-blocking ``flock`` on the kit directory itself (made when new; no file of its own in the
    kit): a second kit run into ``out`` is refused at once, never interleaved with this one (two runs at once
    blamed a healthy cache, or both said "kit ready" for a directory holding only the second's kit)."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise KitBusyError(f"another `october_setup kit` is writing {out}",
                               expected=f"{out} free for this kit run", found="a kit run holding it now",
                               fix="wait for it to finish (or choose another DIR), then run this again") from None
        except OSError:
            pass                    # no flock here (NFS without lockd, some FUSE mounts): unguarded, as before
        yield
    finally:
        os.close(fd)


def open_kit_dir(out: Path, recipe: str | None = None) -> KitDir:
    """``out`` ready for a kit run, with the marker written first: a new or empty directory, or a kit this tool
    made (finished or interrupted) holding nothing else.  Anything else is refused before a byte is written, and
    so is a finished kit of another recipe than ``recipe`` (remaking it would prune the other recipe's forks and
    wheels: a mistyped DIR lost a whole kit)."""
    if out.exists() and not out.is_dir():
        raise KitError(f"{out} is a file", expected="a directory for the kit (new, empty, or an earlier kit)",
                       found="a file", fix="choose another DIR")
    if not out.is_dir() or not any(out.iterdir()):
        kit = KitDir(out, recipe=recipe)
        out.mkdir(parents=True, exist_ok=True)
        kit.write_marker()
        return kit
    manifest = _from_manifest(_read(out / MANIFEST)) if (out / MANIFEST).is_file() else None
    marker = _from_marker(_read(out / MARKER)) if (out / MARKER).is_file() else None
    if manifest is None and marker is None:
        found = sorted(walk(out)) or sorted(p.name + "/" for p in out.iterdir())
        raise KitError(f"{out} holds other files: it is not empty and not a kit october made",
                       expected=f"a new or empty directory, or an earlier kit ({MANIFEST}, or {MARKER} of an "
                                "interrupted one)",
                       found=f"{len(found)} entr{'y' if len(found) == 1 else 'ies'} in {out}: {listed(found)}",
                       fix=f"choose an empty or new DIR (nothing in {out} was changed or deleted)")
    # a finished kit's recipe, else an interrupted one's (its marker; one of an earlier version names none)
    made_for = _recipe_of(_read(out / MANIFEST)) if manifest is not None else None
    made_for = made_for or (_recipe_of(_read(out / MARKER)) if marker is not None else None)
    if recipe is not None and made_for is not None and made_for != recipe:
        raise KitError(f"{out} is a kit of recipe {made_for!r}, not {recipe!r}",
                       expected=f"a new or empty directory, or an earlier kit of {recipe!r}",
                       found=f"{out / (MANIFEST if manifest is not None else MARKER)} made for recipe {made_for!r}",
                       fix=f"choose another DIR for {recipe!r}, or remove {out} first to replace that kit "
                           "(nothing was changed)")
    kit = KitDir(out, (manifest or set()) | (marker or set()), recipe=recipe)
    foreign = kit.foreign()
    if foreign:
        raise _foreign_error(out, foreign)
    kit.write_marker()                           # first: the kit stays recognisable once kit.json goes
    (out / MANIFEST).unlink(missing_ok=True)     # unfinished until the manifest is written again
    return kit
