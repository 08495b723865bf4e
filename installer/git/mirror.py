"""One shared bare mirror per git URL, so a second stack never downloads again.

Each mirror has its own file lock (``<mirror>.lock``).  A missing commit is fetched by id (GitHub serves
any reachable commit by id), else with all branches and tags, and pinned by ``refs/october/pins/<id>``
so no ``gc`` drops it.  The URL (and so any token) is never written into the mirror's config.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import git
from filelock import FileLock, Timeout

from .. import git as fetch_pkg
from ..core.errors import CommandFailed, FetchError, FileSystemError
from ..core.ids import FULL_SHA
from ..core.redact import redact_url
from ..core.runner import Runner
from . import git_env
from .diagnose import diagnose, remove_partial_objects

PIN_REFS = "refs/october/pins"
LOCK_TIMEOUT_S = 3600.0
_CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                 "# This file marks a cache directory made by october (git mirrors).\n")
_LOCKS: dict[Path, FileLock] = {}
_GITHUB_SSH = re.compile(r"^(?:git@github\.com:|ssh://git@github\.com/)(?P<path>[^/\s]+/[^/\s]+?)/?$")


def fetchable_url(url: str) -> str:
    """The URL the mirror fetches from: GitHub SSH forms (FlashInfer's spdlog submodule) become anonymous
    HTTPS, which needs no SSH key; other URLs are used as given."""
    m = _GITHUB_SSH.match(url)
    return f"https://github.com/{m.group('path')}" if m else url


def mirror_path(cache_dir: Path, url: str, *, partial: bool = False) -> Path:
    """``<cache_dir>/git/<sha256(url)[:16]>-<basename>.git`` (credentials masked before hashing, so a
    changed token reuses the mirror); ``partial``: ``...-<basename>.partial.git``, sparse submodules'
    mirror, kept apart so a full mirror never holds a partial commit."""
    shown = redact_url(fetchable_url(url))
    digest = hashlib.sha256(shown.encode("utf-8")).hexdigest()[:16]
    tail = shown.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
    base = re.sub(r"[^A-Za-z0-9._-]", "_", tail).strip(".") or "repo"
    return cache_dir / "git" / f"{digest}-{base}{'.partial' if partial else ''}.git"


@dataclass(frozen=True)
class Mirror:
    """A bare mirror of ``url`` at ``path``; ``fork`` names it in messages."""

    path: Path
    url: str
    fork: str
    source: str | None = None   # fetch from here instead of ``url`` (a kit's copy); the mirror stays keyed by ``url``

    @property
    def shown_url(self) -> str:
        return redact_url(self.source or self.url)

    @property
    def fetch_url(self) -> str:
        return self.source or fetchable_url(self.url)

    @contextmanager
    def locked(self) -> Iterator["Mirror"]:
        """Hold this mirror's file lock (re-entrant within one process)."""
        lock = _LOCKS.get(self.path) or _LOCKS.setdefault(self.path, FileLock(str(self.path) + ".lock"))
        try:
            lock.acquire(timeout=LOCK_TIMEOUT_S)
        except Timeout:
            raise FetchError(f"fork '{self.fork}': the git mirror {self.path} stayed locked",
                             expected=f"the lock {lock.lock_file} free within {LOCK_TIMEOUT_S:.0f}s",
                             found="another process still holds it",
                             fix="wait for the other october_setup to finish, then re-run") from None
        try:
            yield self
        finally:
            lock.release()


def open_mirror(cache_dir: Path, url: str, fork: str, source: str | None = None, *,
                partial: bool = False) -> Mirror:
    """Create (once) the bare mirror for ``url`` in ``cache_dir`` (``source``: fetch from there instead)."""
    path = mirror_path(cache_dir, url, partial=partial)
    tag = path.parent / "CACHEDIR.TAG"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not tag.exists():
            tag.write_text(_CACHEDIR_TAG, encoding="utf-8")
    except OSError as exc:      # a read-only or foreign cache: a path that cannot be written (19), not git's
        raise FileSystemError(f"fork '{fork}': cannot use the cache directory {cache_dir}",
                              expected="a writable directory for the git mirrors", found=str(exc),
                              fix="pass --cache-dir pointing at a writable directory") from None
    mirror = Mirror(path=path, url=url, fork=fork, source=source)
    with mirror.locked():
        for stale in path.parent.glob(f".{path.name}.new-*"):     # left by a run killed in _create
            shutil.rmtree(stale, ignore_errors=True)
        if path.exists() and not _is_bare(path) and _half_made(path):
            shutil.rmtree(path)     # an older version's killed in-place `git init`: nothing fetched yet
        if not path.exists():
            _create(path, fork, partial=partial)
        elif not _is_bare(path):
            raise FetchError(f"fork '{fork}': the cache path {path} is not a bare git mirror",
                             expected="a bare repository made by october", found="something else",
                             fix=f"remove {path} and re-run (it is only a cache)")
        elif (path / "objects" / "info" / "alternates").exists():
            # october never writes one: a clone copies it and would read (unchecked) objects from elsewhere
            raise FetchError(f"fork '{fork}': the cache mirror {path} borrows objects from another repository",
                             expected="a mirror that holds its own objects (october never writes "
                                      "objects/info/alternates)",
                             found=f"{path / 'objects' / 'info' / 'alternates'}",
                             fix=f"remove {path} and re-run (it is only a cache; the next run fetches it again)")
    return mirror


def _create(path: Path, fork: str, *, partial: bool = False) -> None:
    """A new empty bare mirror at ``path``, made beside it and renamed into place.  A partial one lets
    its clones ask for filters and objects by id (their checkout's lazy fetch)."""
    from .sparse import SERVE_CONFIG

    new = path.parent / f".{path.name}.new-{os.getpid()}"
    # git itself, with git_env(): GitPython's Repo.init ran git with the caller's environment, and an exported
    # GIT_DIR made it re-initialise *that* repository as bare (a user's own project, far from the cache)
    commands = [["init", "--bare", "--quiet", str(new)],
                *(["-C", str(new), "config", key, value] for key, value in (SERVE_CONFIG if partial else ()))]
    try:
        shutil.rmtree(new, ignore_errors=True)
        for argv in commands:
            done = subprocess.run(["git", *argv], env=git_env(), capture_output=True, text=True, errors="replace",
                                  stdin=subprocess.DEVNULL, timeout=60)
            if done.returncode != 0:
                raise OSError(f"git {argv[0] if argv[0] != '-C' else argv[2]} exited {done.returncode}: "
                              f"{(done.stderr or done.stdout).strip()[-300:]}")
        new.rename(path)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(new, ignore_errors=True)
        raise FetchError(f"fork '{fork}': cannot create the git mirror {path}",
                         expected="a writable cache directory", found=str(exc),
                         fix="pass --cache-dir pointing at a writable directory") from None


def _is_bare(path: Path) -> bool:
    try:
        with git.Repo(path) as repo:
            return bool(repo.bare)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError, OSError, ValueError):
        return False


_INIT_NAMES = {"HEAD", "config", "description", "hooks", "info", "objects", "refs", "branches"}


def _half_made(path: Path) -> bool:
    """Whether ``path`` is what a killed ``git init --bare`` leaves: only git's skeleton files
    (HEAD, if there, a symbolic ref), no object and no ref -- nothing anyone fetched."""
    if not path.is_dir() or path.is_symlink():
        return False
    names = {p.name for p in path.iterdir()}
    if not names <= _INIT_NAMES:
        return False
    head = path / "HEAD"
    if head.exists() and not head.read_text(encoding="utf-8", errors="replace").startswith("ref: "):
        return False
    return not any(p.is_file() for sub in ("objects", "refs") for p in (path / sub).rglob("*"))


def has_commit(path: Path, commit: str, *, walk: bool = False) -> bool:
    """Whether the repository at ``path`` holds ``commit`` as a commit object (never fetched lazily:
    :data:`october.installer.git.NO_FETCH`); ``walk``: and every object down to the shallow roots."""
    with git.Repo(path) as repo:
        repo.git.update_environment(**fetch_pkg.NO_FETCH)
        try:
            repo.git.cat_file("-e", f"{commit}^{{commit}}")
            if walk:
                repo.git.rev_list("--objects", "--quiet", commit, "--not", "--all")
        except git.GitCommandError:
            return False
    return True


def pinned(path: Path, commit: str) -> bool:
    """Whether the mirror's pin ref for ``commit`` names it (read from the ref files, starting no git)."""
    try:
        with git.Repo(path) as repo:
            return git.SymbolicReference.dereference_recursive(repo, f"{PIN_REFS}/{commit}") == commit
    except (ValueError, OSError, AssertionError, IndexError, git.GitError):
        # an empty ref file left by a crash trips an assert in GitPython's reader (IndexError under -O)
        return False


def has_complete(path: Path, commit: str) -> bool:
    """Whether ``commit`` is in the repository with its tree and history down to the shallow roots.
    The object alone is not enough: a fetch killed before recording shallow roots and refs leaves it
    without its parents.  Our fetches write the pin ref last, so a pinned commit is complete."""
    return pinned(path, commit) or has_commit(path, commit, walk=True)


def _fetch(runner: Runner, step: str, mirror: Mirror, refspecs: list[str], *, tags: bool,
           depth: int | None = None) -> CommandFailed | None:
    """One ``git fetch`` into the mirror (lock held by the caller); what a failed fetch left is removed around it."""
    _clean(runner, step, mirror)
    argv = ["git", "-C", str(mirror.path), "fetch", "--progress",   # progress lines feed the UI's bar
            "--tags" if tags else "--no-tags",
            # --update-shallow: a shallow remote (a kit, a depth-1 copy) may add shallow roots
            *([f"--depth={depth}"] if depth else ["--update-shallow"]), "--", mirror.fetch_url, *refspecs]
    try:
        runner.run(argv, step=step, env=git_env())
    except CommandFailed as exc:
        _clean(runner, step, mirror)
        return exc
    return None


def _clean(runner: Runner, step: str, mirror: Mirror) -> None:
    if removed := remove_partial_objects(mirror.path):
        runner.note(step, f"# removed what a failed fetch left in {mirror.path}: " + ", ".join(removed))


def _failed(mirror: Mirror, exc: CommandFailed, *, title: str, expected: str) -> FetchError:
    """A fetch failure with its cause told apart: damaged remote, network, no such repository."""
    d = diagnose(exc.tail, what=f"'{mirror.fork}'", url=mirror.shown_url)
    cause = {"remote-damaged": "the remote is damaged or incomplete",
             "network": "the remote could not be reached",
             "not-found": "there is no repository at that URL"}.get(d.cause, "git fetch failed")
    return FetchError(f"fork '{mirror.fork}': {title}", expected=expected,
                      found=f"{cause} (exit {exc.returncode}): {d.found}",
                      fix=f"{d.fix}; full log: {exc.log_path}")


def _pin_ref(runner: Runner, step: str, mirror: Mirror, commit: str) -> None:
    """Pin ``commit`` (lock held by the caller).  A killed ``update-ref`` leaves the ref's ``.lock``, and
    git then refuses the ref ("cannot lock ref"): stale locks are removed first."""
    _clean(runner, step, mirror)
    runner.run(["git", "-C", str(mirror.path), "update-ref", f"{PIN_REFS}/{commit}", commit],
               step=step, env=git_env())


def ensure_commit(runner: Runner, step: str, mirror: Mirror, commit: str, *, shallow: bool = False) -> bool:
    """Make ``commit`` (40-hex) present in the mirror; return True when it had to be fetched.
    ``shallow``: only that commit and its tree (``--depth 1``), with no fallback to every branch."""
    if not FULL_SHA.match(commit):
        raise FetchError(f"fork '{mirror.fork}': not a full commit id",
                         expected="40 lowercase hex characters", found=repr(commit),
                         fix="pin a full commit id, or a prefix with its branch")
    with mirror.locked():
        if pinned(mirror.path, commit):     # our fetch (or an earlier run) pinned it: nothing to write
            return False
        # a loose pin that is no pin (empty after a crash) is dropped: git refuses `--all` while it is there
        (mirror.path / PIN_REFS / commit).unlink(missing_ok=True)
        if has_complete(mirror.path, commit):
            _pin_ref(runner, step, mirror, commit)
            return False
        exact = _fetch(runner, step, mirror, [f"+{commit}:{PIN_REFS}/{commit}"], tags=False,
                       depth=1 if shallow else None)
        if exact is None and has_complete(mirror.path, commit):
            return True
        if exact is not None and (shallow or diagnose(exact.tail, what="", url="").cause in ("network", "not-found")):
            # a shallow fetch has no fallback; an unreachable remote will not serve branches either
            raise _failed(mirror, exact, title=f"cannot fetch commit {commit} from {mirror.shown_url}",
                          expected=f"a reachable git remote serving commit {commit} with all its objects")
        # Some servers refuse unadvertised ids: take every branch and tag instead.
        broad = _fetch(runner, step, mirror, ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                       tags=True)
        if broad is not None:
            raise _failed(mirror, broad, title=f"cannot fetch from {mirror.shown_url}",
                          expected=f"a reachable git remote serving commit {commit}")
        if not has_complete(mirror.path, commit):
            raise FetchError(
                f"fork '{mirror.fork}': commit {commit} is missing upstream at {mirror.shown_url}",
                expected=f"commit {commit} reachable from a branch or tag of {mirror.shown_url}",
                found="no such commit after fetching every branch and tag (force-pushed or never pushed?)",
                fix="pin a commit that exists upstream (update the pin in forks.toml), "
                    "or ask the fork owner to push it")
        _pin_ref(runner, step, mirror, commit)
        return True


def fetch_branch(runner: Runner, step: str, mirror: Mirror, branch: str) -> str:
    """Fetch ``refs/heads/<branch>`` into the mirror (same name); return its tip commit."""
    ref = f"refs/heads/{branch}"
    with mirror.locked():
        failed = _fetch(runner, step, mirror, [f"+{ref}:{ref}"], tags=False)
        if failed is not None:
            title = f"cannot fetch branch '{branch}' from {mirror.shown_url}"
            expected = f"branch '{branch}' on {mirror.shown_url}"
            if diagnose(failed.tail, what="", url="").cause == "remote-damaged" and "remote ref" in failed.tail:
                raise FetchError(f"fork '{mirror.fork}': {title}", expected=expected,
                                 found=f"git fetch failed (exit {failed.returncode}): {_last_line(failed.tail)}",
                                 fix=f"check the branch name in the pin in forks.toml; full log: {failed.log_path}")
            raise _failed(mirror, failed, title=title, expected=expected)
        with git.Repo(mirror.path) as repo:
            return str(repo.git.rev_parse("--verify", f"{ref}^{{commit}}")).strip()


def _last_line(tail: str) -> str:
    lines = [ln.strip() for ln in tail.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
