"""git run for one fork through the runner (failures as FetchError), and what every clone of it shares:
a commit copied from the mirror, the clone's origin, the refusal made before a submodule is changed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import git

from ..core.errors import CommandFailed, FetchError
from ..core.redact import redact_url
from ..core.runner import Runner
from . import git_env, strip_credentials
from .diagnose import ownership_fix
from .mirror import PIN_REFS, Mirror, has_complete

Say = Callable[[str], None]


@dataclass(frozen=True)
class ForkGit:
    """git commands for one fork, through the runner, with failures mapped to FetchError."""

    runner: Runner
    step: str
    fork: str
    sub_hint: str = ""          # said when a submodule cannot be fetched (credentials of the fork's URL)

    def __call__(self, args: Sequence[str], *, doing: str, fix: str) -> None:
        try:
            self.runner.run(["git", *args], step=self.step, env=git_env())
        except CommandFailed as exc:
            last = [ln.strip() for ln in exc.tail.strip().splitlines() if ln.strip()][-4:]
            raise FetchError(f"fork '{self.fork}': {doing} failed",
                             expected="git to succeed",
                             found=f"exit {exc.returncode}: {' | '.join(last) or 'no output'}",
                             fix=f"{ownership_fix(exc.tail) or fix}; full log: {exc.log_path}") from None


def is_shallow(repo: Path) -> bool:
    """Whether a repository (bare or the ``.git`` of a clone) has shallow roots."""
    return (repo / "shallow").exists() or (repo / ".git" / "shallow").exists()


def bring_commit(g: ForkGit, repo_dir: Path, mirror: Mirror, commit: str) -> None:
    """Copy ``commit`` from the local mirror into the clone at ``repo_dir`` (no network).  From a shallow
    mirror its shallow roots come too: git refuses them in a complete clone without ``--update-shallow``."""
    # The commit object alone does not prove the rest is there: a small fetch is unpacked loose, commit
    # first, so a fetch killed part-way leaves the commit without its tree.  The walk is quick.
    if has_complete(repo_dir, commit):
        return
    ref = f"{PIN_REFS}/{commit}"
    shallow = ["--update-shallow"] if is_shallow(mirror.path) else []
    g(["-C", str(repo_dir), "fetch", "--no-tags", *shallow, "--", clone_source(mirror), f"+{ref}:{ref}"],
      doing=f"copying commit {commit} from the mirror {mirror.path}",
      fix=f"remove {mirror.path} (a cache) and re-run")


class Refused(FetchError):
    """A refusal made before the run changed the submodule it names (files of the user's in it, a name the tool
    will not place, a selection the fork lacks): what the run changed before it is whole."""


def clone_source(mirror: Mirror) -> str:
    """How a clone reads the local mirror: a path (object files copied unhashed; :func:`.worktree._require_objects`
    hashes what the checkout reads, not the whole history), or a file:// URL for a shallow mirror (git
    ignores --depth for plain paths)."""
    return mirror.path.as_uri() if is_shallow(mirror.path) else str(mirror.path)


def set_origin(g: ForkGit, repo_dir: Path, url: str) -> None:
    url = strip_credentials(url)          # never leave a token in the clone's .git/config
    with git.Repo(repo_dir) as repo:
        current = repo.remotes.origin.url if "origin" in [r.name for r in repo.remotes] else None
    if current == url:
        return
    verb = "set-url" if current is not None else "add"
    g(["-C", str(repo_dir), "remote", verb, "origin", url],
      doing=f"pointing origin at {redact_url(url)}", fix=f"check {repo_dir}/.git/config")
