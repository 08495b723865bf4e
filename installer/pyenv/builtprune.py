"""Entries of the built-stack cache (:mod:`.builtstack`) no stack is likely to take again, removed once the install
step stored a new one: one made by other tool code after a week untaken, any after 30 days, each renamed out of use
before it is deleted."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from ..core import cachekey
from . import builtkey
from .builtstack import BY_RECIPE, GONE, KEY, MANIFEST, USED, built_dir, discard, key_for_recipe, read_entry, retire

OTHER_CODE_IDLE_S = 7 * 24 * 3600       # an entry other tool code made (an upgrade's leftover), not taken for a week


IDLE_S = 30 * 24 * 3600                 # any entry not taken for 30 days


def prune(cache_dir: Path, keep: Path, now: float | None = None) -> list[tuple[Path, str]]:
    """Remove the entries no stack is likely to take again, once a new one (``keep``) was stored: one made by
    other tool code (an entry is only taken by the code that made it: each upgrade left an env-sized entry
    behind) not taken for :data:`OTHER_CODE_IDLE_S`, and any not taken for :data:`IDLE_S`.  Only a folder
    named by a key whose manifest is an entry's of that key counts; each is renamed out of use first (a
    ``.gone-*`` folder, deleted then, or by the next prune when that fails).  -> (entry, why) for each removed.
    A stack copying from one as it goes finds its files gone and is built as if there were none."""
    now = time.time() if now is None else now
    base = built_dir(cache_dir)
    for left in base.glob(f"{GONE}*"):
        discard(left)
    code = builtkey.tool_code()
    signing = cachekey.load_key(cache=cache_dir)
    gone: list[tuple[Path, str]] = []
    for path in sorted(base.iterdir()):
        if path == keep or not KEY.fullmatch(path.name) or path.is_symlink() or not path.is_dir():
            continue
        entry = read_entry(path)
        if entry is None:
            continue            # not an entry this code can read: left as it is
        try:
            stamps = [os.lstat(p).st_mtime for p in (path / MANIFEST, path / USED) if os.path.lexists(p)]
        except OSError:
            continue
        last, taken = max(stamps), os.path.lexists(path / USED)
        # another key's (another user's, or a lost key's): its own takers stamp it too; 30 days untaken, as any
        foreign = "mac" in entry.manifest and not cachekey.signed(entry.manifest, signing)
        other = not foreign and entry.manifest.get("code") != code
        if now - last <= (OTHER_CODE_IDLE_S if other else IDLE_S):
            continue
        days = f"{(now - last) / 86400:.0f} day(s)"
        why = ("signed with another key, " if foreign else "made by other tool code, " if other else "") + (
            f"not taken for {days}" if taken else f"stored {days} ago, no use recorded since")
        try:
            retire(path)
        except OSError:
            continue
        gone.append((path, why))
    _forget_recipes(cache_dir)
    return gone


def _forget_recipes(cache_dir: Path) -> None:
    """Remove each remembered recipe key (:func:`note_recipe_key`) that names no entry any more."""
    index = built_dir(cache_dir) / BY_RECIPE
    with contextlib.suppress(OSError):
        for named in list(index.iterdir()):
            key = key_for_recipe(cache_dir, named.name)
            if key is None or not (built_dir(cache_dir) / key / MANIFEST).is_file():
                with contextlib.suppress(OSError):
                    named.unlink()


