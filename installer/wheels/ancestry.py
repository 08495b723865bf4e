"""Is the base wheel's source commit an ancestor of the fork commit?

The fork's changes sit on top of an upstream vLLM commit; the precompiled
extensions of a release wheel only fit when that wheel was built from an
ancestor of the fork commit.  All git calls go through a :class:`Runner`.

When the fork clone lacks the wheel's commit (a release tag cut on an upstream
release branch, or a fork mirror without upstream tags), upstream heads and tags
are fetched into ``refs/october/upstream/*`` of the clone (never into its
branches or HEAD) and the lookup is retried once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from installer.errors import WheelError
from installer.redact import redact_url
from installer.runner import Runner

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
COMMIT_ID = re.compile(r"^[0-9a-f]{7,40}$")
UPSTREAM_REFSPECS = ("+refs/heads/*:refs/october/upstream/heads/*",
                     "+refs/tags/*:refs/october/upstream/tags/*")


@dataclass(frozen=True)
class Ancestry:
    source_commit: str          # full 40-hex id of the wheel's source commit
    fork_commit: str
    fetched_upstream: bool


def _git(runner: Runner, clone: Path, args: list[str], *, step: str, check: bool = False):
    return runner.run(["git", "-C", str(clone), *args], step=step, check=check)


def resolve_commit(runner: Runner, clone: Path, commit: str, *, step: str) -> str | None:
    """Full id for a (possibly abbreviated) commit, or None if the clone cannot name exactly one."""
    done = _git(runner, clone, ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{commit}^{{commit}}"],
                step=step)
    out = done.output.strip().splitlines()
    if done.returncode == 0 and out and FULL_SHA.match(out[-1].strip()):
        return out[-1].strip()
    return None


def fetch_upstream(runner: Runner, clone: Path, upstream: str, commit: str, *, step: str) -> None:
    """Bring upstream's objects for ``commit`` into the clone (by id when full, else heads and tags)."""
    if FULL_SHA.match(commit):
        by_id = _git(runner, clone, ["fetch", "--no-tags", "--quiet", upstream,
                                     f"+{commit}:refs/october/upstream/wheel-source"], step=step)
        if by_id.returncode == 0:
            return
    _git(runner, clone, ["fetch", "--no-tags", "--quiet", upstream, *UPSTREAM_REFSPECS], step=step)


def check_ancestry(runner: Runner, clone: Path, source_commit: str, fork_commit: str, *,
                   upstream: str | None, fork_name: str = "vllm", step: str = "wheel") -> Ancestry:
    """Raise :class:`WheelError` unless ``source_commit`` is an ancestor of ``fork_commit`` in ``clone``."""
    for label, value in (("wheel source commit", source_commit), (f"{fork_name} fork commit", fork_commit)):
        if not COMMIT_ID.match(value):
            raise WheelError(f"the {label} is not a commit id", expected="7 to 40 lowercase hex characters",
                             found=repr(value), fix="re-run october_setup; report this if it persists")
    fork_full = resolve_commit(runner, clone, fork_commit, step=step)
    if fork_full is None:
        raise WheelError(f"the {fork_name} fork clone {clone} does not contain its own pinned commit",
                         expected=f"commit {fork_commit} in {clone}", found="no such commit",
                         fix="re-run october_setup so the fetch step re-creates the clone")
    fetched = False
    full = resolve_commit(runner, clone, source_commit, step=step)
    if full is None and upstream:
        fetch_upstream(runner, clone, upstream, source_commit, step=step)
        fetched = True
        full = resolve_commit(runner, clone, source_commit, step=step)
    if full is None:
        where = f"the clone {clone}" + (f" or upstream {redact_url(upstream)}" if upstream else "")
        raise WheelError(
            f"the base wheel's source commit {source_commit} (from vllm/_version.py) is not in {where}",
            expected=f"commit {source_commit}, an ancestor of {fork_name} fork commit {fork_full}",
            found="no commit by that id" + ("" if upstream else " (the fork has no upstream URL to fetch from)"),
            fix=f"pick the base wheel of the upstream vLLM release the {fork_name} fork is based on "
                "([wheel] in the recipe), or set the fork's upstream URL in forks.toml")
    done = _git(runner, clone, ["merge-base", "--is-ancestor", full, fork_full], step=step)
    if done.returncode == 0:
        return Ancestry(full, fork_full, fetched)
    if done.returncode == 1:
        shallow = _git(runner, clone, ["rev-parse", "--is-shallow-repository"], step=step).output.strip()
        hint = " (the clone is shallow, so git cannot see the whole history: re-clone it in full)" \
            if shallow.endswith("true") else ""
        raise WheelError(
            f"the base wheel was built from {full[:12]}, which is not an ancestor of the "
            f"{fork_name} fork commit {fork_full[:12]}{hint}",
            expected=f"the wheel's source commit {full} to be an ancestor of {fork_full}",
            found="a commit outside the fork's history",
            fix=f"use the release wheel of the upstream vLLM version the {fork_name} fork was branched from "
                "(see `git -C <clone> describe --tags` on the fork commit), and update [wheel] in the recipe")
    raise WheelError(f"git could not compare the wheel's source commit with the {fork_name} fork commit",
                     expected="`git merge-base --is-ancestor` to exit 0 or 1",
                     found=f"exit code {done.returncode}: {done.output.strip()[-300:]}",
                     fix=f"inspect {clone} and the log {runner.log_path(step)}")
