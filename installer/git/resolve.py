"""A recipe pin -> one full 40-hex commit id.

A full id is used as is.  A prefix is resolved on the branch pinned with it: exactly one commit reachable
from the branch tip must start with it.  Under ``--locked`` the lock's full id is used (it must agree with
the pin), so the branch moving later changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import git

from ..core.errors import FetchError, LockError
from ..core.ids import FULL_SHA
from ..core.runner import Runner
from . import HEX
from .mirror import Mirror, fetch_branch
from ..recipe import Pin

MAX_LISTED = 10


@dataclass(frozen=True)
class Resolution:
    """What a pin turned into, and how."""

    requested: str          # the recipe's commit: full id or prefix
    commit: str             # full 40-hex id
    branch: str | None
    how: str                # "exact" | "prefix" | "locked"


def match_prefix(commits: Iterable[str], prefix: str) -> list[str]:
    """The distinct ids among ``commits`` that start with ``prefix``, in first-seen order."""
    return list(dict.fromkeys(c for c in commits if c.startswith(prefix)))


def resolve_prefix(runner: Runner, step: str, mirror: Mirror, prefix: str, branch: str) -> str:
    """Resolve ``prefix`` to the one commit on ``branch`` (fetched into ``mirror``) it names."""
    if not prefix or len(prefix) > 40 or not HEX.match(prefix):
        raise FetchError(f"fork '{mirror.fork}': the pinned commit prefix is malformed",
                         expected="1 to 40 lowercase hex characters", found=repr(prefix),
                         fix="fix the pin in forks.toml")
    tip = fetch_branch(runner, step, mirror, branch)
    with git.Repo(mirror.path) as repo:
        ids = repo.git.rev_list(tip).split()
    found = match_prefix(ids, prefix)
    where = f"branch '{branch}' of {mirror.shown_url}"
    if not found:
        raise FetchError(
            f"fork '{mirror.fork}': no commit on {where} starts with '{prefix}'",
            expected=f"exactly one commit starting with '{prefix}' among the {len(ids)} reachable "
                     f"from the tip {tip}",
            found="none (the branch was force-pushed or the prefix/branch is wrong)",
            fix="check the prefix and branch of the pin in forks.toml, or pin a full 40-hex id")
    if len(found) > 1:
        listed = ", ".join(found[:MAX_LISTED]) + (" ..." if len(found) > MAX_LISTED else "")
        raise FetchError(
            f"fork '{mirror.fork}': prefix '{prefix}' is ambiguous on {where}",
            expected=f"exactly one commit starting with '{prefix}'",
            found=f"{len(found)} candidates: {listed}",
            fix="pin a longer prefix, or the full 40-hex id of the intended commit")
    return found[0]


def resolve_pin(runner: Runner, step: str, mirror: Mirror, pin: Pin,
                locked: Mapping[str, str] | None) -> Resolution:
    """Turn ``pin`` into a full id; ``locked`` is the ``--locked`` lock's fork -> commit map."""
    fork = mirror.fork
    if locked is not None:
        commit = locked.get(fork)
        if commit is None or not FULL_SHA.match(commit):
            raise LockError(f"fork '{fork}' has no usable commit in the lock",
                            expected="a full 40-hex commit id recorded for this fork",
                            found=repr(commit) if commit is not None else "no entry",
                            fix="re-run without --locked to write a fresh lock, or restore the lock file")
        if not commit.startswith(pin.commit):
            raise LockError(f"fork '{fork}': the lock's commit does not match the recipe's pin '{pin.name}'",
                            expected=f"a commit starting with '{pin.commit}'", found=commit,
                            fix="the recipe changed since the lock was written: re-run without --locked "
                                "to refresh the lock, or use the recipe the lock was made from")
        return Resolution(requested=pin.commit, commit=commit, branch=pin.branch, how="locked")
    if not pin.is_prefix:
        if not FULL_SHA.match(pin.commit):
            raise FetchError(f"fork '{fork}': pin '{pin.name}' is not a commit id",
                             expected="40 lowercase hex characters", found=repr(pin.commit),
                             fix="fix the pin in forks.toml")
        return Resolution(requested=pin.commit, commit=pin.commit, branch=pin.branch, how="exact")
    if not pin.branch:
        raise FetchError(f"fork '{fork}': pin '{pin.name}' is a prefix without a branch",
                         expected="a prefix pinned together with the branch it is found on",
                         found=f"prefix '{pin.commit}' and no branch",
                         fix="write the pin as {prefix = \"...\", branch = \"...\"} in forks.toml")
    commit = resolve_prefix(runner, step, mirror, pin.commit, pin.branch)
    return Resolution(requested=pin.commit, commit=commit, branch=pin.branch, how="prefix")
