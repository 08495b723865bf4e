"""The upstream base commit of the vLLM fork: ``git merge-base HEAD <upstream main>``.

When the upstream cannot be reached: fail closed, unless the verified base wheel's source commit is in the
clone *and* an ancestor of HEAD (checked with git, recorded as from the wheel): a base commit is one git proved.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import CommandFailed, InstallError
from ..core.ids import FULL_SHA
from ..core.redact import redact_url
from ..core.runner import Runner
from ..git import git_env
from .plan import ForkSource, InstallPlan, make_plan

DEFAULT_UPSTREAM_REF = "main"


@dataclass(frozen=True)
class BaseCommit:
    commit: str
    source: str        # "merge-base" | "wheel-source-commit"
    detail: str


def _git(runner: Runner, step: str, repo: Path, *args: str, check: bool = True) -> tuple[int, str]:
    env = {**git_env(), "GIT_ASKPASS": "true"}       # git_env: no prompt, no stray GIT_DIR, no replace refs
    done = runner.run(["git", "-C", str(repo), *args], step=step, env=env, check=check)
    return done.returncode, done.output.strip()


def _from_wheel(runner: Runner, step: str, repo: Path, wheel_commit: str) -> str | None:
    """The wheel's source commit as a full id, when the clone has it and it is an ancestor of HEAD."""
    if not re.match(r"^[0-9a-f]{7,40}$", wheel_commit):
        return None
    rc, full = _git(runner, step, repo, "rev-parse", "--verify", "--quiet", f"{wheel_commit}^{{commit}}",
                    check=False)
    if rc != 0 or not FULL_SHA.match(full):
        return None
    rc, _ = _git(runner, step, repo, "merge-base", "--is-ancestor", full, "HEAD", check=False)
    return full if rc == 0 else None


def upstream_base(runner: Runner, step: str, repo: Path, upstream: str | None, *,
                  ref: str = DEFAULT_UPSTREAM_REF, wheel_commit: str | None = None) -> BaseCommit:
    """Fetch ``upstream``'s ``ref`` into the fork clone and return ``merge-base HEAD FETCH_HEAD``."""
    shown = redact_url(upstream) if upstream else "none"
    if upstream is None:
        problem = "forks.toml names no upstream URL for the fork"
    else:
        try:
            _git(runner, step, repo, "fetch", "--no-tags", "--quiet", "--", upstream, ref)
        except CommandFailed as exc:
            last = exc.tail.strip().splitlines()[-1:] or [f"exit code {exc.returncode}"]
            problem = f"`git fetch {shown} {ref}` failed ({last[0].strip()})"
        else:
            rc, out = _git(runner, step, repo, "merge-base", "HEAD", "FETCH_HEAD", check=False)
            if rc == 0 and FULL_SHA.match(out):
                return BaseCommit(out, "merge-base", f"git merge-base HEAD {shown}@{ref}")
            problem = f"the fork shares no history with {shown}@{ref}"
    if wheel_commit:
        full = _from_wheel(runner, step, repo, wheel_commit)
        if full is not None:
            return BaseCommit(full, "wheel-source-commit",
                              f"{problem}; used the base wheel's source commit, an ancestor of HEAD")
    raise InstallError(
        f"cannot compute the upstream base commit of the vLLM fork at {repo}",
        expected=f"the merge-base of HEAD with {shown}@{ref}, or a base wheel whose source commit is an "
                 "ancestor of the fork's HEAD",
        found=problem + (f"; the wheel's source commit {wheel_commit} is not an ancestor in the clone"
                         if wheel_commit else "; the base wheel names no source commit"),
        fix=f"make {shown} reachable (network, proxy, credentials) and re-run, or pin a base wheel "
            "built from an ancestor of the fork commit")


def plan_with_base(runner: Runner, step: str, forks: Sequence[ForkSource], wheel: Callable[[], tuple[Path, str | None]],
                   say: Callable[[str], None]) -> tuple[InstallPlan, BaseCommit | None]:
    """The install plan and, for a base-wheel fork, the upstream base commit (else None); ``wheel()`` -> (the
    verified base wheel, its source commit), asked only when a fork takes the wheel."""
    precompiled = [f for f in forks if f.use.traits.base_wheel]
    if not precompiled:
        return make_plan(forks), None
    wheel_path, wheel_commit = wheel()
    vllm = precompiled[0]
    if vllm.use.pin.sdist is not None:
        # made from the release's sdist: no history, no upstream commit to claim; setup.py needs none,
        # since the wheel location is set (VLLM_PRECOMPILED_WHEEL_COMMIT only picks a nightly)
        say(f"vLLM fork made from {vllm.use.pin.sdist.filename}: no upstream base commit")
        return make_plan(forks, wheel=wheel_path), None
    base = upstream_base(runner, step, vllm.path, vllm.use.upstream, wheel_commit=wheel_commit)
    say(f"vLLM upstream base commit {base.commit} ({base.detail})")
    return make_plan(forks, wheel=wheel_path, base_commit=base.commit), base
