"""The git half of a kit: each fork at its pin, and its selected submodules at their recorded
commits, as shallow bare repositories under ``DIR/git/``.

Everything comes through the shared mirrors, resolved as an online install resolves it; a prefix pin's
branch is written into the kit's copy at the resolved commit, so the offline install resolves it the same.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import git

from ..core.errors import CommandFailed, FetchError, KitError
from ..core.paths import remove
from ..core.redact import redact_url
from ..core.runner import Runner
from ..git import git_env
from ..git.mirror import PIN_REFS, Mirror, ensure_commit, fetch_branch, open_mirror
from ..git.resolve import resolve_pin
from ..git.sdist import materialise
from ..git.sparse import bring, serve_config
from ..install.upstream import DEFAULT_UPSTREAM_REF as UPSTREAM_REF
from . import repo_relpath, url_key
from ..recipe import ForkUse

MAX_DEPTH = 8
Say = Callable[[str], None]


@dataclass
class RepoCopy:
    """One repository in the kit (mutable while the kit is assembled)."""

    url: str                      # as the installer sees it (credentials masked)
    path: str                     # relative to the kit
    role: str                     # "fork" | "submodule"
    owner: str                    # fork name, or "<fork>/<submodule path>"
    commits: list[str] = field(default_factory=list)
    branches: dict[str, str] = field(default_factory=dict)
    sparse: dict[str, list[str]] = field(default_factory=dict)     # commit -> directories held (a partial copy)

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"url": self.url, "key": url_key(self.url), "path": self.path, "role": self.role,
                                  "owner": self.owner, "commits": sorted(self.commits),
                                  "branches": dict(sorted(self.branches.items()))}
        if self.sparse:
            out["sparse"] = dict(sorted(self.sparse.items()))
        return out


def resolve_submodule_url(base: str, url: str) -> str:
    """A ``.gitmodules`` URL made absolute the way git does: ``./x`` and ``../x`` are taken
    relative to the superproject's remote URL (each ``../`` drops one path component)."""
    if not url.startswith(("./", "../")):
        return url
    root, rest = base.rstrip("/"), url
    while rest.startswith(("./", "../")):
        if rest.startswith("./"):
            rest = rest[2:]
            continue
        rest = rest[3:]
        cut = max(root.rfind("/"), root.rfind(":"))
        if cut <= 0:
            raise KitError(f"cannot resolve the relative submodule URL {url!r} against {redact_url(base)}",
                           expected="a remote URL with enough path components", found=redact_url(base),
                           fix="give the submodule an absolute URL in the fork's .gitmodules")
        root = root[:cut]
    return f"{root}/{rest}"


def _whole_and_sparse(url: str, found: str) -> KitError:
    return KitError(f"the kit needs {url} both whole and sparse",
                    expected="each repository either whole or sparse in one kit", found=found,
                    fix="select the submodule the same way in every fork entry of the recipe")


class KitRepos:
    """Assembles ``DIR/git``: one shallow bare repository per URL, commits added as needed."""

    def __init__(self, runner: Runner, step: str, cache_dir: Path, kit_dir: Path, say: Say,
                 claim: Callable[[str], None] = lambda _rel: None) -> None:
        self.runner = runner
        self.claim = claim            # records a repository as the kit's before it is made (kit/owned.py)
        self.step = step
        self.cache_dir = cache_dir
        self.kit_dir = kit_dir
        self.say = say
        self.repos: dict[str, RepoCopy] = {}
        self._made: set[str] = set()    # repositories this run made (an earlier run's copy is made again)

    def _git(self, args: Sequence[str], *, doing: str, fix: str) -> None:
        try:
            self.runner.run(["git", *args], step=self.step, env=git_env())
        except CommandFailed as exc:
            last = [ln.strip() for ln in exc.tail.strip().splitlines() if ln.strip()][-3:]
            raise KitError(f"{doing} failed", expected="git to succeed",
                           found=f"exit {exc.returncode}: {' | '.join(last) or 'no output'}",
                           fix=f"{fix}; full log: {exc.log_path}") from None

    def add(self, mirror: Mirror, commit: str, *, role: str, owner: str, branch: str | None = None,
            depth: int = 1) -> RepoCopy:
        """Copy ``commit`` (present in ``mirror`` under its pin ref) into the kit, ``depth`` commits deep."""
        rel = repo_relpath(mirror.url)
        copy = self.repos.setdefault(rel, RepoCopy(url=redact_url(mirror.url), path=rel, role=role, owner=owner))
        dest = self.kit_dir / rel
        self._init(dest)
        if copy.sparse:
            held = ", ".join(sorted({d for ds in copy.sparse.values() for d in ds}))
            raise _whole_and_sparse(copy.url, f"{copy.owner} sparse ({held}), {owner} whole")
        ref = f"{PIN_REFS}/{commit}"
        with mirror.locked():
            self._git(["-C", str(dest), "fetch", "--quiet", "--no-tags", f"--depth={depth}", "--", mirror.path.as_uri(),
                       f"+{ref}:{ref}"], doing=f"copying {commit} of {mirror.shown_url} into the kit",
                      fix=f"remove {mirror.path} (a cache) and make the kit again")
        if branch:
            self._git(["-C", str(dest), "update-ref", f"refs/heads/{branch}", commit],
                      doing=f"recording branch {branch} in {dest}", fix=f"check {dest}")
            copy.branches[branch] = commit
        if commit not in copy.commits:
            copy.commits.append(commit)
        return copy

    def _init(self, dest: Path) -> bool:
        """An empty bare repository at ``dest`` unless one is there; True when it was made."""
        rel = dest.relative_to(self.kit_dir).as_posix()
        self.claim(rel)
        if rel in self._made:
            return False
        remove(dest, missing_ok=True)      # an earlier run's copy may have been changed since: never kept
        self._made.add(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        self._git(["init", "--quiet", "--bare", str(dest)], doing=f"creating {dest}",
                  fix=f"check that {self.kit_dir} is writable")
        shutil.rmtree(dest / "hooks", ignore_errors=True)   # a kit carries no executable hooks
        return True

    def add_fork(self, fork: ForkUse, *, wheel_source: str | None = None) -> str:
        """The fork at its pin, and its selected submodules; returns the resolved commit.  ``wheel_source``
        (the base wheel's source commit) is kept too, so the wheel step can compare both offline."""
        source = None
        if fork.pin.sdist is not None:   # an sdist-made fork: its repository is made from the verified sdist
            source = str(materialise(self.runner, self.step, self.cache_dir, fork.pin.sdist, fork.name,
                                     fork.pin.commit).path)
            wheel_source = None          # no history: the wheel step compares files, not commits
        mirror = open_mirror(self.cache_dir, fork.fetch_url, fork.name, source=source)
        res = resolve_pin(self.runner, self.step, mirror, fork.pin, None)
        ensure_commit(self.runner, self.step, mirror, res.commit)
        self.say(f"{fork.name}: {res.commit}" + (f" ('{res.requested}' on {res.branch})" if res.how == "prefix" else ""))
        depth, beside = self._wheel_source(fork, mirror, res.commit, wheel_source) if wheel_source else (1, None)
        if fork.traits.base_wheel and fork.upstream and fork.pin.sdist is None:
            depth = max(depth, self._upstream_base(fork, mirror, res.commit))
        self.add(mirror, res.commit, role="fork", owner=fork.name,
                 branch=res.branch if res.how == "prefix" else None, depth=depth)
        if beside is not None and beside != res.commit:
            self.add(mirror, beside, role="fork", owner=fork.name)
        if fork.submodules:
            self._submodules(mirror, res.commit, fork.fetch_url, fork.name, fork.submodule_paths, 0,
                             sparse=fork.sparse)
        return res.commit

    def _wheel_source(self, fork: ForkUse, mirror: Mirror, commit: str, source: str) -> tuple[int, str | None]:
        """-> (how deep the fork's copy must be, a commit to copy beside the pin): down to the base wheel's
        source commit when the fork's history holds it, else that commit (from the mirror or the upstream)
        beside the pin."""
        full = _ask(mirror.path, "rev_parse", "--verify", "--quiet", f"{source}^{{commit}}")
        if full is not None and _is_ancestor(mirror.path, full, commit):
            depth = _count(mirror.path, full, commit) + 1
            self.say(f"{fork.name}: keeping {depth} commit(s), down to the base wheel's source {full[:12]}")
            return depth, None
        if full is None and fork.upstream:
            up = open_mirror(self.cache_dir, fork.upstream, f"{fork.name} upstream")
            if len(source) == 40:
                ensure_commit(self.runner, self.step, up, source, shallow=True)
                full = source
            else:
                with up.locked():
                    self._git(["-C", str(up.path), "fetch", "--quiet", "--no-tags", "--", up.fetch_url,
                               "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                              doing=f"fetching {up.shown_url} to find the base wheel's source commit {source}",
                              fix="check the fork's upstream URL and your network")
                full = _ask(up.path, "rev_parse", "--verify", "--quiet", f"{source}^{{commit}}")
                if full is None:
                    return 1, None            # the wheel step names the missing commit, online or not
                ensure_commit(self.runner, self.step, up, full)
            ref = f"{PIN_REFS}/{full}"
            with mirror.locked():
                self._git(["-C", str(mirror.path), "fetch", "--quiet", "--no-tags", "--update-shallow",
                           "--", up.path.as_uri(), f"+{ref}:{ref}"], fix=f"remove {mirror.path}",
                          doing=f"copying the base wheel's source {full[:12]} next to the fork")
            self.say(f"{fork.name}: base wheel's source {full[:12]} from upstream {up.shown_url}")
        if full is None:
            return 1, None
        ensure_commit(self.runner, self.step, mirror, full)      # pins it in the fork's mirror
        return 1, full

    def _upstream_base(self, fork: ForkUse, mirror: Mirror, commit: str) -> int:
        """The install step's ``git merge-base HEAD <upstream> main``, answered offline: the fork's copy
        reaches down to that merge-base M and the upstream copy's ``main`` is M.  Returns the fork's depth."""
        assert fork.upstream is not None
        up = open_mirror(self.cache_dir, fork.upstream, f"{fork.name} upstream")
        try:
            tip = fetch_branch(self.runner, self.step, up, UPSTREAM_REF)
        except FetchError as exc:
            self.say(f"{fork.name}: upstream {up.shown_url} {UPSTREAM_REF} not readable now ({exc.found}); the "
                     "offline install falls back to the base wheel's source commit")
            return 1
        ref = "refs/october/upstream-main"
        with mirror.locked():
            self._git(["-C", str(mirror.path), "fetch", "--quiet", "--no-tags", "--update-shallow",
                       "--", str(up.path), f"+refs/heads/{UPSTREAM_REF}:{ref}"], fix=f"remove {mirror.path} (a cache)",
                      doing=f"reading {up.shown_url} {UPSTREAM_REF} next to the fork")
        base = _ask(mirror.path, "merge_base", commit, tip)
        if base is None:
            return 1
        ensure_commit(self.runner, self.step, up, base)
        self.say(f"{fork.name}: upstream base {base[:12]} (merge-base with {up.shown_url} {UPSTREAM_REF})")
        self.add(up, base, role="upstream-base", owner=f"{fork.name} upstream", branch=UPSTREAM_REF)
        return _count(mirror.path, base, commit) + 1

    def _sparse_submodule(self, url: str, who: str, commit: str, dirs: Sequence[str]) -> None:
        """A sparse submodule: the commit, its trees and the cone's blobs, through the cache's partial mirror."""
        sub_mirror = open_mirror(self.cache_dir, url, who, partial=True)
        what = f"fork '{who.split('/')[0]}': submodule {who.split('/', 1)[1]}"
        with sub_mirror.locked():
            bring(self.runner, self.step, sub_mirror.path, sub_mirror.fetch_url, sub_mirror.shown_url, commit, dirs,
                  who=what)
            rel = repo_relpath(sub_mirror.url)
            if rel in self.repos and not self.repos[rel].sparse:
                raise _whole_and_sparse(redact_url(url), f"{self.repos[rel].owner} whole, {who} sparse")
            copy = self.repos.setdefault(rel, RepoCopy(url=redact_url(url), path=rel, role="submodule", owner=who))
            dest = self.kit_dir / rel
            if self._init(dest):
                serve_config(self.runner, self.step, dest)   # the target's partial fetches ask it by id
            kept = sorted(set(copy.sparse.get(commit, [])) | set(dirs))     # two entries' cones: their union
            bring(self.runner, self.step, dest, sub_mirror.path.as_uri(), sub_mirror.shown_url, commit, kept, who=what)
            # git named the promisor after the cache it fetched from (a path of this machine): the kit's copy
            # names the upstream instead, and nothing it lacks is ever fetched (GIT_NO_LAZY_FETCH on reads)
            self.runner.run(["git", "-C", str(dest), "config", "--remove-section",
                             f"remote.{sub_mirror.path.as_uri()}"], step=self.step, env=git_env(), check=False)
            for key, value in (("url", redact_url(url)), ("promisor", "true"), ("partialclonefilter", "blob:none")):
                self._git(["-C", str(dest), "config", f"remote.origin.{key}", value],
                          doing=f"recording {dest}'s upstream", fix=f"check {dest}")
        self.say(f"{who}: {commit} (sparse: {', '.join(kept)})")
        if commit not in copy.commits:
            copy.commits.append(commit)
        copy.sparse[commit] = kept

    def _submodules(self, mirror: Mirror, commit: str, base_url: str, owner: str,
                    selection: Sequence[str] | None, depth: int,
                    sparse: Mapping[str, Sequence[str]] | None = None) -> None:
        if depth > MAX_DEPTH:
            raise FetchError(f"fork '{owner}': submodules nest too deep", expected=f"at most {MAX_DEPTH} levels",
                             found="more", fix="check the fork's .gitmodules for a cycle")
        subs = gitmodules_at(mirror.path, commit)
        if selection is not None:
            unknown = [p for p in selection if p not in {path for path, _ in subs.values()}]
            if unknown:
                raise FetchError(f"fork '{owner}': the recipe selects submodule(s) the fork does not have",
                                 expected="paths among " + (", ".join(sorted(p for p, _ in subs.values())) or "none"),
                                 found=", ".join(unknown), fix="fix the fork entry's submodules = [...] in the recipe")
        for _name, (path, raw_url) in sorted(subs.items()):
            if selection is not None and path not in selection:
                continue
            sub_commit = gitlink_at(mirror.path, commit, path)
            if sub_commit is None:
                continue               # declared but not recorded: git skips it too
            url = resolve_submodule_url(base_url, raw_url)
            who = f"{owner}/{path}"
            if sparse and path in sparse:
                self._sparse_submodule(url, who, sub_commit, sparse[path])
                continue                   # a sparse submodule's own submodules are not fetched
            sub_mirror = open_mirror(self.cache_dir, url, who)
            try:
                ensure_commit(self.runner, self.step, sub_mirror, sub_commit, shallow=True)
            except FetchError as exc:
                raise FetchError(f"fork '{owner.split('/')[0]}': submodule {path} @ {sub_commit} cannot be fetched "
                                 "for the kit", expected=exc.expected or "", found=exc.found or "",
                                 fix=(exc.fix or "") + f"; if the build does not need {path}, leave it out of "
                                     "the fork entry's submodules = [...] in the recipe") from None
            self.say(f"{who}: {sub_commit}")
            self.add(sub_mirror, sub_commit, role="submodule", owner=who)
            self._submodules(sub_mirror, sub_commit, url, who, None, depth + 1)


def _ask(repo: Path, command: str, *args: str) -> str | None:
    """What a read-only git ``command`` (GitPython's name) prints, stripped; None on failure or no output."""
    with git.Repo(repo) as r:
        try:
            return str(getattr(r.git, command)(*args)).strip() or None
        except git.GitCommandError:
            return None


def _is_ancestor(repo: Path, older: str, newer: str) -> bool:
    with git.Repo(repo) as r:
        try:
            r.git.merge_base("--is-ancestor", older, newer)
        except git.GitCommandError:
            return False
    return True


def _count(repo: Path, older: str, newer: str) -> int:
    with git.Repo(repo) as r:
        return int(str(r.git.rev_list("--count", f"{older}..{newer}")).strip())


def gitmodules_at(repo: Path, commit: str) -> dict[str, tuple[str, str]]:
    """name -> (path, url) from ``.gitmodules`` at ``commit`` (read-only; empty when there is none)."""
    with git.Repo(repo) as r:
        try:
            r.git.cat_file("-e", f"{commit}:.gitmodules")
            out = r.git.config("--blob", f"{commit}:.gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$")
        except git.GitCommandError:
            return {}
    found: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        name, _, attr = key[len("submodule."):].rpartition(".")
        found.setdefault(name, {})[attr] = value
    return {n: (v["path"], v["url"]) for n, v in found.items() if "path" in v and "url" in v}


def gitlink_at(repo: Path, commit: str, path: str) -> str | None:
    """The commit a gitlink at ``path`` records in ``commit``, or None when there is none."""
    with git.Repo(repo) as r:
        try:
            out = r.git.ls_tree(commit, "--", path)
        except git.GitCommandError:
            return None
    for line in out.splitlines():
        meta, _, where = line.partition("\t")
        mode, kind, sha = meta.split()
        if kind == "commit" and where == path:
            return sha
    return None
