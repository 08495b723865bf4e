"""What a model directory holds beyond its verified files, and the whole copy checked again before use.

vLLM loads every ``*.safetensors`` of a directory that has no index file, and its tokenizer reads the files
beside them, so a file the pinned revision does not list (a shard of another revision, a tokenizer file the
patterns leave out, a copy planted there) is refused like a changed one: by ``current download`` (online and
``--offline``: the folder it downloads into holds nothing else) and by ``current smoke`` before the engine
loads the folder its manifest names (a ``--model-dir`` copy of the user's: nothing else the patterns select).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

from ..core.errors import DownloadError
from ..core.listing import first
from .verify import CORRUPT_INFIX, Expected, verify_files

OWN_DIR = ".october"            # in a folder the tool downloads into: its lock and its record of verified hashes


def local_files(root: Path) -> list[str]:
    """Every regular file under ``root`` as a '/'-separated relative path; hidden folders are bookkeeping."""
    files = (f.relative_to(root) for f in root.rglob("*") if f.is_file())
    return sorted(rel.as_posix() for rel in files if not any(part.startswith(".") for part in rel.parts[:-1]))


def named(items: Sequence[str], most: int = 5) -> str:
    """The first ``most`` of ``items``, then how many more: what the messages here show of a file list."""
    return first(items, most)


def moved_aside(path: str) -> bool:
    """A bad file :func:`~.verify.verify_files` renamed (``<name>.corrupt-<8 hex>``), no other name."""
    return re.search(re.escape(CORRUPT_INFIX) + r"[0-9a-f]{8}$", path) is not None


def extras(root: Path, patterns: Sequence[str] | None, listed: Collection[str],
           manifest: Path | None = None) -> list[str]:
    """The files of ``root`` that are not ``listed`` (nor a bad file moved aside, nor the download's own
    ``manifest`` written there with ``--output``): every one in a folder the tool downloads into (``patterns``
    None), else those the patterns select (a copy of the user's)."""
    from .hub import select

    present = local_files(root)
    chosen = [p for p in present if not p.rpartition("/")[2].startswith(".")] if patterns is None \
        else select(present, patterns)
    own = manifest.resolve().relative_to(root.resolve()).as_posix() \
        if manifest is not None and manifest.resolve().is_relative_to(root.resolve()) else None
    return [p for p in chosen if p not in listed and not moved_aside(p) and p != own]


def set_aside(root: Path, found: Sequence[str]) -> Path:
    """In a folder of the tool's own (the cache's), move ``found`` under ``.october/set-aside/`` (their paths
    kept): another recipe's download of the same revision with wider patterns left them.  -> where."""
    import os

    aside = root / OWN_DIR / "set-aside"
    for rel in found:
        dest = aside / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(root / rel, dest)
    return aside


def refuse_extras(root: Path, patterns: Sequence[str] | None, listed: Collection[str], *, where: str,
                  then: str = "or download into a new --local-dir", manifest: Path | None = None) -> None:
    """:class:`DownloadError` naming the files of ``root`` beyond ``listed`` (see :func:`extras`)."""
    found = extras(root, patterns, listed, manifest)
    if found:
        among = "in the folder" if patterns is None else f"among the files the patterns {list(patterns)} select"
        raise DownloadError(f"{root} holds {len(found)} file(s) that {where} does not list",
                            expected=f"only the {len(listed)} file(s) of the pinned revision {among} (vLLM loads "
                                     "every *.safetensors of a folder without an index, and its tokenizer reads "
                                     "the JSON files beside them)",
                            found=named(found),
                            fix=f"move them out of {root} (nothing was changed), {then}")


def check_copy(manifest: Mapping[str, Any], *, redo: str, path: Path | None = None,
               hashed: Callable[[float, float | None], None] | None = None) -> None:
    """Every file the manifest lists, in its ``local_path``, hashed again (sha256 and size) and nothing more
    selected there: what ``current smoke`` loads is what the download verified (``redo``: the command that
    fetches it again).  Nothing is moved: the copy may not be the tool's own (``--model-dir``)."""
    root = Path(str(manifest["local_path"]))
    listed = [f for f in manifest["files"] if isinstance(f, Mapping)]
    if not root.is_dir():
        raise DownloadError(f"the model directory {root} the download manifest names is gone",
                            expected="the directory `current download` verified", found="no such directory",
                            fix=redo)
    where = f"the model {manifest.get('repo')}@{manifest.get('revision')} in {root}"
    verify_files(root, [Expected(str(f["path"]), int(f["size"]), str(f["sha256"]), None, source="manifest")
                        for f in listed], where=where, move_bad=False, hashed=hashed,
                 fix=f"the copy changed after its download was verified (nothing was moved): {redo}")
    # a folder the tool downloaded into holds nothing else; a copy of the user's (--model-dir), nothing else
    # the selection's patterns match
    patterns = None if (root / OWN_DIR).is_dir() else list(manifest.get("patterns") or ["*"])
    refuse_extras(root, patterns, {str(f["path"]) for f in listed}, where="its download manifest",
                  then=f"then run the smoke again (or {redo.removeprefix('run ')}: in the cache's own folder "
                       "the download sets them aside)", manifest=path)
