"""A fork install must leave the fork's tracked files as committed.

vLLM 0.18.0's precompiled ``setup.py`` copies the wheel's ``vllm/vllm_flash_attn/__init__.py`` and
``flash_attn_interface.py`` over the files the fork tracks, silently dropping the fork's own version.  So after
each fork install its tracked files' ``git status`` is read and any change fails, naming the files (those dirty
before, under ``--allow-dirty``, count when their content changes).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from ..core.errors import InstallError
from ..core.hashing import sha256_file
from ..core.runner import Runner
from ..git import git_env

MAX_LISTED = 12


def changed_tracked(runner: Runner, step: str, repo: Path) -> list[str]:
    """Tracked files that differ from HEAD (``git status --porcelain --untracked-files=no``).  A look only: it
    leaves the index as it is (``--no-optional-locks``), so the index stays as old as the checkout's last write
    and is settled once, by the run's settler (:func:`october.installer.git.settle.settle_index`), not rewritten
    here each time and then waited for again at the end of the run."""
    done = runner.run(["git", "--no-optional-locks", "-C", str(repo), "status", "--porcelain", "--untracked-files=no",
                       "--ignore-submodules=all"], step=step, env=git_env())
    return [ln[3:] if len(ln) > 3 else ln for ln in done.output.splitlines() if ln.strip()]


def snapshot(runner: Runner, step: str, repo: Path) -> dict[str, str | None]:
    """The tracked files already changed before an install (``--allow-dirty``), with their content hash."""
    return {rel: sha256_file(repo / rel) if (repo / rel).is_file() else None
            for rel in changed_tracked(runner, step, repo)}


def check(runner: Runner, step: str, fork: str, repo: Path, before: Mapping[str, str | None]) -> None:
    """Raise :class:`InstallError` naming every tracked file the install changed since :func:`snapshot` ``before``."""
    changed = [rel for rel, digest in snapshot(runner, step, repo).items()
               if rel not in before or before[rel] != digest]
    if not changed:
        return
    shown = changed[:MAX_LISTED] + ([f"... and {len(changed) - MAX_LISTED} more"] if len(changed) > MAX_LISTED else [])
    raise InstallError(
        f"installing fork '{fork}' overwrote {len(changed)} of its tracked file(s): {', '.join(shown)}",
        expected=f"the fork's tracked files in {repo} unchanged by the install (the pinned commit is what runs)",
        found=f"`git -C {shlex.quote(str(repo))} status` shows them changed (vLLM's precompiled setup.py copies files out of the "
              "base wheel over the checkout)",
        fix=f"see `git -C {shlex.quote(str(repo))} diff`: the fork's version of those files differs from the base wheel's; pick the "
            "base wheel of the release the fork carries, or a fork that does not change them")


def untracked(runner: Runner, step: str, repo: Path) -> list[Path]:
    """The files of ``repo`` git does not track (``git ls-files --others``): what a build made there."""
    listed = runner.run(["git", "-C", str(repo), "ls-files", "-z", "--others"], step=step, env=git_env()).output
    return [Path(p) for p in listed.split("\0") if p]
