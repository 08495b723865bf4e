"""What a model directory holds beyond its verified files, and the whole copy checked again before use.

vLLM loads every ``*.safetensors`` of a directory that has no index file, so a file the selection's patterns
match but the pinned revision does not list (a shard of another revision, a copy planted there) is refused
like a changed one: by ``current download`` (online and ``--offline``) and by ``current smoke`` before the
engine loads the directory its manifest names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

from ..core.errors import DownloadError
from .verify import CORRUPT_INFIX, Expected, verify_files


def local_files(root: Path) -> list[str]:
    """Every regular file under ``root`` as a '/'-separated relative path; hidden folders are bookkeeping."""
    files = (f.relative_to(root) for f in root.rglob("*") if f.is_file())
    return sorted(rel.as_posix() for rel in files if not any(part.startswith(".") for part in rel.parts[:-1]))


def extras(root: Path, patterns: Sequence[str], listed: Collection[str]) -> list[str]:
    """The files of ``root`` the patterns select that are not ``listed`` (nor a bad file moved aside)."""
    from .hub import select

    return [p for p in select(local_files(root), patterns) if p not in listed and CORRUPT_INFIX not in p]


def refuse_extras(root: Path, patterns: Sequence[str], listed: Collection[str], *, where: str,
                  then: str = "or download into a new --local-dir") -> None:
    """:class:`DownloadError` naming the files of ``root`` the patterns select beyond ``listed``."""
    found = extras(root, patterns, listed)
    if found:
        shown = ", ".join(found[:5]) + (f", ... {len(found) - 5} more" if len(found) > 5 else "")
        raise DownloadError(f"{root} holds {len(found)} file(s) that {where} does not list",
                            expected=f"only the {len(listed)} file(s) of the pinned revision among the files the "
                                     f"patterns {list(patterns)} select (vLLM loads every *.safetensors of a "
                                     "directory without an index)",
                            found=shown,
                            fix=f"move them out of {root} (nothing was changed), {then}")


def check_copy(manifest: Mapping[str, Any], *, redo: str,
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
    refuse_extras(root, list(manifest.get("patterns") or ["*"]), {str(f["path"]) for f in listed},
                  where="its download manifest", then="then run the smoke again")
