"""An env this run copied from the built-stack cache that failed install's RECORD check: whose fault it is.  Files
changed in the stack after the copy are a writer's there (the entry kept, the env removed); anything else is the
entry's (refused and removed with the env).  Either way the error raised says which."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import InstallError
from ..core.listing import first
from ..engine import StepContext
from .reuse import refuse_entry, remove_copied_env

if TYPE_CHECKING:
    from ..pyenv import builtstack


def changed_since_copy(ctx: StepContext, entry: "builtstack.Entry", flagged: Sequence[Path]) -> list[str]:
    """The files install's RECORD check ``flagged`` in the env this run copied from ``entry`` when every one of them
    was changed in the stack after the copy: one the copy wrote and hashed (vouched for) with another signature now,
    or gone; one the entry does not hold (added).  Else (any flagged file as the copy wrote it, or one it wrote
    unhashed: templated, a link, a whole-second file system) [] -- the entry's fault, whatever else changed.
    Relative to the env."""
    env = ctx.paths.env
    held = entry.manifest["files"]["env"]
    changed: list[str] = []
    for path in flagged:
        try:
            rel = Path(os.path.normpath(path)).relative_to(env).as_posix()     # a RECORD row may climb: ../../bin
        except ValueError:
            return []               # not the env's (a site torch's): not this copy's to judge
        as_copied = ctx.trust.as_vouched(env / rel)
        if as_copied is None:
            if rel in held:
                return []           # the copy wrote it without a hash to hold it to: cannot tell
            changed.append(f"{rel} (added)")
        elif as_copied:
            return []               # as the copy wrote it: the entry's bytes disagree with their RECORD
        else:
            changed.append(rel if os.path.lexists(env / rel) else f"{rel} (removed)")
    return changed


def changed_copy(ctx: StepContext, step: str, entry: "builtstack.Entry", exc: InstallError,
                 changed: list[str]) -> InstallError:
    """The env copied this run from ``entry`` failed install's RECORD check after files of it were changed in the
    stack (``changed``): the entry is kept, the env removed (the re-run copies it again), and the error to raise."""
    shown = first(changed, 3)
    ctx.runner.note(step, f"# the env copied from the built-stack cache entry {entry.path} was changed in the stack "
                          f"after the copy ({shown}): the entry is kept, the env removed")
    remove_copied_env(ctx)
    return InstallError(f"{exc.what} (files of the env changed in the stack after it was copied from the "
                        f"built-stack cache entry {entry.path}: {shown}; the entry is kept, the env removed)",
                        expected=exc.expected, found=exc.found,
                        fix="find what writes into the stack while october_setup runs, then re-run october_setup "
                            "(the env is copied again)")


def refused_copy(ctx: StepContext, step: str, entry: "builtstack.Entry", exc: InstallError) -> InstallError:
    """The entry an env was copied from this run, refused after install's RECORD check: removed with the env,
    and the error to raise (a re-run builds the stack)."""
    refuse_entry(ctx, step, entry, exc.what)
    return InstallError(f"{exc.what} (in the env copied from the built-stack cache entry {entry.path}, "
                        "now removed with the env)", expected=exc.expected, found=exc.found,
                        fix="re-run october_setup: the env is made again, without the cache entry")
