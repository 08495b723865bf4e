"""Is the precompiled base wheel right for the fork?  Its compiled sources must equal the fork's.

The wheel fits exactly when the compiled-source paths (recipe data) have the same git tree or blob ids at
the wheel's source commit and the fork commit; ancestry is neither needed nor enough (vLLM cuts release
wheels on branches off main).  A wheel commit the clone lacks is fetched from the fork's *upstream* into
its shared mirror (``refs/october/upstream/*``) and pinned.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from ..core.errors import CommandFailed, FetchError, WheelError
from ..core.ids import FULL_SHA
from ..core.redact import redact_url
from ..core.runner import Runner
from . import git_env, indented, parse_ls_tree
from .mirror import PIN_REFS, Mirror, ensure_commit, open_mirror

COMMIT_ID = re.compile(r"^[0-9a-f]{7,40}$")
UPSTREAM_REFS = "refs/october/upstream"


@dataclass(frozen=True)
class ComparedPath:
    path: str
    kind: str | None            # "tree" | "blob" | "commit" (a submodule); None: absent at both commits
    id: str | None              # the git object id, equal at both commits

    def as_json(self) -> dict[str, str | None]:
        return {"path": self.path, "type": self.kind, "id": self.id}


@dataclass(frozen=True)
class SourceEquivalence:
    source_commit: str          # full id of the wheel's source commit
    fork_commit: str
    compared_in: str            # "fork-clone" | "fork-mirror"
    fetched_upstream: bool
    paths: tuple[ComparedPath, ...]

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "paths": [p.as_json() for p in self.paths]}


def _git(runner: Runner, repo: Path, args: Sequence[str], *, step: str) -> tuple[int, str]:
    done = runner.run(["git", "-C", str(repo), *args], step=step, env=git_env(), check=False)
    return done.returncode, done.output


def resolve_commit(runner: Runner, repo: Path, commit: str, *, step: str) -> str | None:
    """Full id of a (possibly abbreviated) commit, or None when ``repo`` cannot name exactly one."""
    rc, out = _git(runner, repo, ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{commit}^{{commit}}"],
                   step=step)
    lines = out.strip().splitlines()
    return lines[-1].strip() if rc == 0 and lines and FULL_SHA.match(lines[-1].strip()) else None


def _entries(runner: Runner, repo: Path, commit: str, paths: Sequence[str], *, recursive: bool,
             step: str) -> dict[str, tuple[str, str]]:
    """``git ls-tree [-r] -z <commit> -- paths``: path -> (type, id)."""
    args = ["ls-tree", "-z", *(["-r"] if recursive else []), "--full-tree", commit, "--", *paths]
    rc, out = _git(runner, repo, args, step=step)
    if rc != 0:
        raise WheelError(f"git could not list the compiled sources at {commit[:12]} in {repo}",
                         expected="`git ls-tree` to succeed", found=f"exit code {rc}: {out.strip()[-300:]}",
                         fix=f"inspect {repo} and the log {runner.log_path(step)}")
    return parse_ls_tree(out)


def _tops(runner: Runner, repo: Path, commit: str, paths: Sequence[str], *, step: str) -> dict[str, tuple[str, str]]:
    """Each path's own entry at ``commit`` (one ``ls-tree`` per path: with a deeper path in the same call
    git would list that instead of its parent tree)."""
    return {path: entry for path in paths
            if (entry := _entries(runner, repo, commit, [path], recursive=False, step=step).get(path)) is not None}


def fetch_from_upstream(runner: Runner, mirror: Mirror, upstream: str, commit: str, version: str | None, *,
                        step: str) -> tuple[str | None, CommandFailed | None]:
    """Bring ``commit`` from ``upstream`` into ``mirror`` (caller holds its lock): (its full id or None,
    the last fetch's failure: None when it worked, so the commit is really missing upstream)."""
    attempts: list[list[str]] = []
    if FULL_SHA.match(commit):
        attempts.append([f"+{commit}:{UPSTREAM_REFS}/wheel-source/{commit}"])
    if version:
        tag = f"v{version}"
        attempts.append([f"+refs/tags/{tag}:{UPSTREAM_REFS}/tags/{tag}"])
    attempts.append([f"+refs/heads/*:{UPSTREAM_REFS}/heads/*", f"+refs/tags/*:{UPSTREAM_REFS}/tags/*"])
    failed: CommandFailed | None = None
    for refspecs in attempts:
        try:
            runner.run(["git", "-C", str(mirror.path), "fetch", "--no-tags", "--quiet", "--", upstream, *refspecs],
                       step=step, env=git_env())
            failed = None
        except CommandFailed as exc:
            failed = exc
        full = resolve_commit(runner, mirror.path, commit, step=step)
        if full is not None:
            runner.run(["git", "-C", str(mirror.path), "update-ref", f"{PIN_REFS}/{full}", full],
                       step=step, env=git_env())
            return full, None
    return None, failed


def _differences(runner: Runner, repo: Path, source: str, fork: str, paths: Sequence[str], *,
                 step: str) -> list[str]:
    old = _entries(runner, repo, source, paths, recursive=True, step=step)
    new = _entries(runner, repo, fork, paths, recursive=True, step=step)
    out: list[str] = []
    for path in sorted(set(old) | set(new)):
        if path not in new:
            out.append(f"{path} (only in the wheel's source)")
        elif path not in old:
            out.append(f"{path} (only in the fork)")
        elif old[path] != new[path]:
            out.append(f"{path} (changed)")
    return out


def check_source_equivalence(runner: Runner, clone: Path, source_commit: str, fork_commit: str, *,
                             paths: Sequence[str], upstream: str | None, cache_dir: Path,
                             fork_url: str | None = None, wheel_version: str | None = None,
                             fork_name: str = "vllm", step: str = "wheel") -> SourceEquivalence:
    """Raise :class:`WheelError` unless ``paths`` have equal trees at both commits."""
    for label, value in (("wheel source commit", source_commit), (f"{fork_name} fork commit", fork_commit)):
        if not COMMIT_ID.match(value):
            raise WheelError(f"the {label} is not a commit id", expected="7 to 40 lowercase hex characters",
                             found=repr(value), fix="re-run october_setup; report this if it persists")
    if not paths:
        raise WheelError("no compiled-source paths to compare", expected="[wheel].compiled_sources with at "
                         "least one path (default: csrc, CMakeLists.txt, cmake)", found="an empty list",
                         fix="remove compiled_sources from [wheel] in the recipe or list the paths")
    fork_full = resolve_commit(runner, clone, fork_commit, step=step)
    if fork_full is None:
        raise WheelError(f"the {fork_name} fork clone {clone} does not contain its own pinned commit",
                         expected=f"commit {fork_commit} in {clone}", found="no such commit",
                         fix="re-run october_setup so the fetch step re-creates the clone")
    source_full = resolve_commit(runner, clone, source_commit, step=step)
    if source_full is not None:
        return _compare(runner, clone, source_full, fork_full, paths, "fork-clone", False, fork_name, step)
    if not upstream:
        raise WheelError(
            f"the base wheel's source commit {source_commit} (from vllm/_version.py) is not in the "
            f"{fork_name} fork clone, and the fork has no upstream URL to fetch it from",
            expected=f"commit {source_commit} in {clone} or an upstream URL in forks.toml",
            found="neither", fix=f"set [forks.{fork_name}].upstream in forks.toml (vLLM: "
                                 "https://github.com/vllm-project/vllm.git)")
    mirror = open_mirror(cache_dir, fork_url or upstream, fork_name)
    with mirror.locked():
        source_full = _into_mirror(runner, mirror, upstream, source_commit, fork_full, wheel_version, fork_name,
                                   step)
        return _compare(runner, mirror.path, source_full, fork_full, paths, "fork-mirror", True, fork_name, step)


def _into_mirror(runner: Runner, mirror: Mirror, upstream: str, source_commit: str, fork_full: str,
                 wheel_version: str | None, fork_name: str, step: str) -> str:
    """Both commits in the fork's mirror (caller holds its lock): the full id of the wheel's commit."""
    try:
        ensure_commit(runner, step, mirror, fork_full)      # the mirror holds the fork's history
    except FetchError:
        pass                                                 # checked below, after the upstream fetch
    source_full, failed = fetch_from_upstream(runner, mirror, upstream, source_commit, wheel_version, step=step)
    if source_full is None and failed is not None:
        last = (failed.tail.strip().splitlines() or [f"exit code {failed.returncode}"])[-1].strip()
        raise WheelError(
            f"the base wheel's source commit {source_commit} (from vllm/_version.py) is not in the "
            f"{fork_name} fork clone, and its upstream {redact_url(upstream)} could not be fetched",
            expected=f"a reachable upstream serving commit {source_commit}",
            found=f"git fetch failed (exit {failed.returncode}): {last}",
            fix=f"check the upstream URL in forks.toml and your network; full log: {failed.log_path}")
    if source_full is None:
        raise WheelError(
            f"the base wheel's source commit {source_commit} (from vllm/_version.py) is not in the "
            f"{fork_name} fork clone nor at its upstream {redact_url(upstream)}",
            expected=f"commit {source_commit} reachable from upstream"
                     + (f" (tag v{wheel_version}, a branch or a tag)" if wheel_version else ""),
            found="no such commit (or no unique one) after fetching every upstream branch and tag",
            fix="the wheel is not an upstream vLLM build: use an upstream release wheel in [wheel], or set "
                "the fork's upstream in forks.toml to the repository the wheel was built from")
    if resolve_commit(runner, mirror.path, fork_full, step=step) is None:
        raise WheelError(f"the {fork_name} fork commit {fork_full[:12]} is not in the mirror {mirror.path}",
                         expected="the fork's history in its shared mirror (made by the fetch step)",
                         found="no such commit there", fix="re-run october_setup (the fetch step fills it)")
    return source_full


def _compare(runner: Runner, repo: Path, source: str, fork: str, paths: Sequence[str], where: str,
             fetched: bool, fork_name: str, step: str) -> SourceEquivalence:
    at_source = _tops(runner, repo, source, paths, step=step)
    at_fork = _tops(runner, repo, fork, paths, step=step)
    if not at_fork:
        raise WheelError(
            f"none of the compiled-source paths exist at the {fork_name} fork commit {fork[:12]}",
            expected=f"{', '.join(paths)} (what vLLM's build compiles into the wheel's .so files)",
            found="none of them", fix="check [wheel].compiled_sources in the recipe against the fork's tree")
    differing = [p for p in paths if at_source.get(p) != at_fork.get(p)]
    if differing:
        changed = _differences(runner, repo, source, fork, differing, step=step)
        raise WheelError(
            f"the precompiled path is wrong for the {fork_name} fork: its compiled sources differ from those "
            f"the base wheel was built from ({source[:12]}) in {len(changed)} file(s):\n"
            + indented(changed),
            expected=f"{', '.join(differing)} identical at the wheel's source commit {source} and the fork "
                     f"commit {fork}",
            found="the changes listed above",
            fix=f"the fork changes compiled code, so no release wheel has its kernels: build the {fork_name} fork "
                "from source (a mode other than vllm-precompiled), or pick the base wheel of the upstream "
                "release whose kernels the fork carries unchanged ([wheel] in the recipe)")
    compared = tuple(ComparedPath(p, *at_fork.get(p, (None, None))) for p in paths)
    return SourceEquivalence(source, fork, where, fetched, compared)
