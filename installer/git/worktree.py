"""The working clone in ``STACK/src/<fork>``: from the mirror, detached, with submodules, checked.

A ``git clone --no-hardlinks`` of the bare mirror (its own object files, hashed before checkout, and
usable after the cache is deleted), built in ``src/.<fork>.partial`` and renamed into place; ``origin``
is the real URL.  Submodules go through mirrors of their own URLs the same way.  A clone at another
commit is moved if clean, refused if dirty (unless ``allow_dirty``); while the step changes it, it is
marked incomplete (:mod:`.recover`) so a killed run's changes are reset by the next.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import git

from ..core.errors import FetchError
from ..core.redact import redact_url
from ..core.runner import Runner
from . import look, strip_credentials
from .hidden import Hidden
from .repocode import RepoCode
from .clonecheck import GitInspectError, dirty_entries, head_commit, listed, submodule_heads
from .clonecheck import check_clone, selected, submodule_states  # noqa: F401  (re-exported: verify, tests)
from .exclude import exclude_build_outputs
from .gitcmd import ForkGit, Refused, Say, bring_commit, clone_source, is_shallow, set_origin
from .mirror import Mirror
from .recover import is_incomplete, mark_complete, mark_incomplete, remove_stale_locks
from .settle import age_checkout
from .sparse import partial_or_sparse
from .submodules import Rewrite, update_submodules


@dataclass(frozen=True)
class Checkout:
    path: Path
    commit: str
    submodules: Mapping[str, str]      # path (relative to the clone, recursive) -> checked-out commit
    dirty: tuple[str, ...]             # `git status --porcelain` lines; empty when clean
    kept: str | None = None            # the branch that now holds a commit of the user's HEAD was at (unheld)


def _checkout(g: ForkGit, repo_dir: Path, commit: str) -> None:
    g(["-C", str(repo_dir), "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit],
      doing=f"checking out {commit} in {repo_dir}",
      fix=f"look at {repo_dir} (local changes in the way?), or remove it and re-run")


def _partial(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.partial"


def _clone_new(g: ForkGit, dest: Path, mirror: Mirror, commit: str, say: Say) -> None:
    partial = _partial(dest)
    say(f"{g.fork}: cloning from the mirror {mirror.path}")
    with mirror.locked():
        # --no-hardlinks: the clone's object files are its own, never the cache mirror's inodes
        g(["-c", "protocol.file.allow=always", "clone", "--quiet", "--no-hardlinks", "--no-checkout",
           "--", clone_source(mirror), str(partial)],
          doing=f"cloning the mirror into {partial}", fix=f"check free disk space at {dest.parent}")
        bring_commit(g, partial, mirror, commit)
    if not is_shallow(mirror.path):      # copied as files (see clone_source): hash what the checkout will read
        _require_objects(g, partial, mirror, commit)
    mark_incomplete(partial, commit)      # until every check passed, what is in the clone is ours
    set_origin(g, partial, mirror.url)
    _checkout(g, partial, commit)
    if dest.exists():
        dest.rmdir()          # only an empty directory gets here
    partial.rename(dest)


def _require_objects(g: ForkGit, repo_dir: Path, mirror: Mirror, commit: str) -> None:
    """Every object the checkout of ``commit`` reads hashes to its name (:mod:`.objcheck`)."""
    from .objcheck import mismatched

    bad, count = mismatched(repo_dir, commit)
    if bad:
        raise FetchError(f"fork '{g.fork}': the cache's mirror {mirror.path} holds objects whose bytes are not "
                         f"the ones their ids name", expected=f"each of the {count} objects of commit {commit} "
                         "hashing to its id", found=f"{len(bad)} differ or are missing: {listed(bad)}",
                         fix=f"remove {mirror.path} (a cache; the next run fetches it again) and re-run; "
                             f"nothing was checked out")


def _update_existing(g: ForkGit, dest: Path, mirror: Mirror, commit: str, *, allow_dirty: bool,
                     incomplete: bool, say: Say) -> str | None:
    """Bring an existing clone to ``commit`` -> the branch that now holds a commit of the user's it was at."""
    try:
        with git.Repo(dest) as repo:
            top = Path(repo.working_tree_dir or "")
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        top = None
    if top is None or top.resolve() != dest.resolve():
        raise FetchError(f"fork '{g.fork}': {dest} exists but is not a git clone",
                         expected=f"a clone of {mirror.shown_url} (or no directory)",
                         found="a directory that is not the top of a git repository",
                         fix=f"move {dest} away (or delete it) and re-run")
    if incomplete:
        _finish_interrupted(g, dest, mirror, commit, say)
        return None
    dirty = dirty_entries(dest, [s.path for s in submodule_heads(dest) if s.flag != "-"])
    head = head_commit(dest)
    if dirty and not allow_dirty:
        raise FetchError(f"fork '{g.fork}': the clone {dest} has local changes",
                         expected=f"a clean tree at {commit}",
                         found=f"{len(dirty)} change(s) at {head or 'no commit'}: {listed(dirty)}",
                         fix=_dirty_fix(dest) + _hidden_hint(dest, dirty))
    if partial_or_sparse(dest):
        raise FetchError(f"fork '{g.fork}': the clone {dest} is a sparse checkout or a partial clone",
                         expected="a whole checkout, every object in the clone",
                         found="core.sparseCheckout on (files outside its patterns are not on disk) or a promisor remote",
                         fix=f"run `git -C {shlex.quote(str(dest))} sparse-checkout disable` (a sparse checkout), "
                             f"or move the clone aside (`mv {shlex.quote(str(dest))} {shlex.quote(str(dest))}.partial-clone`); "
                             "then re-run")
    set_origin(g, dest, mirror.url)
    kept = None
    if head != commit:
        say(f"{g.fork}: moving {dest} from {head} to {commit}")
        with mirror.locked():
            bring_commit(g, dest, mirror, commit)
        if head is not None and unheld(dest, head, commit):   # before the clone is marked: a failure keeps it as is
            kept = kept_branch(head)
            g(["-C", str(dest), "branch", "--force", kept, head], doing=f"keeping {head} as the branch {kept}",
              fix=f"keep the commit yourself (`git -C {shlex.quote(str(dest))} branch mine {head}`) and re-run")
    if not dirty:
        mark_incomplete(dest, commit)     # from here on, a killed run's changes are known to be ours
    if head != commit:
        _checkout(g, dest, commit)
    return kept


def kept_branch(head: str) -> str:
    return f"october-kept-{head[:12]}"


def unheld(dest: Path, head: str, commit: str) -> bool:
    """Whether a checkout of ``commit`` would leave ``head`` to git's reflog: neither ``commit`` (its history)
    nor any ref holds it (work committed in the clone), so the re-run keeps it as :func:`kept_branch` first.
    A look that fails says yes: a branch too many is harmless."""
    if look(dest, "merge-base", "--is-ancestor", head, commit)[1] is None:
        return False
    return not look(dest, "for-each-ref", "--contains", head, "--count=1", "--format=%(refname)")[0].strip()


def _hidden_hint(dest: Path, dirty: Sequence[str]) -> str:
    """For entries git status does not show (the user's own `git status` says clean): how to see and undo them."""
    code = "; the ones naming a git config or attributes file are the clone's own git settings, not files" \
        if any(isinstance(d, RepoCode) for d in dirty) else ""
    if not any(isinstance(d, Hidden) and not isinstance(d, RepoCode) for d in dirty):
        return code
    return code + (f"; the ones marked (skip-worktree) or (assume-unchanged) are tracked files `git status` is told not to "
            f"look at (`git -C {shlex.quote(str(dest))} ls-files -v | grep -v '^H'` lists them; `git update-index "
            "--no-skip-worktree --no-assume-unchanged PATH` in their repository shows their changes again)")


def _dirty_fix(dest: Path) -> str:
    """The exact commands that get past a dirty clone, keeping the changes either way."""
    keep = Path(f"{dest}.local-changes")
    n = 1
    while keep.exists() or keep.is_symlink():       # `mv` into an existing directory would nest it
        n += 1
        keep = Path(f"{dest}.local-changes-{n}")
    return (f"run `mv {shlex.quote(str(dest))} {shlex.quote(str(keep))}` to keep your changes there, then "
            "re-run the same october_setup command (it clones the fork again from the cache); or re-run "
            "it with --allow-dirty to build with them in place (recorded in the receipt)")


def _finish_interrupted(g: ForkGit, dest: Path, mirror: Mirror, commit: str, say: Say) -> None:
    """A clone a killed run was changing: its differences are that run's own, so they are reset."""
    if removed := remove_stale_locks(dest):
        g.runner.note(g.step, "# removed what a killed git left: " + ", ".join(removed))
    say(f"{g.fork}: finishing what a killed run left in {dest} (its half-done checkout is reset)")
    set_origin(g, dest, mirror.url)
    with mirror.locked():
        bring_commit(g, dest, mirror, commit)
    g(["-C", str(dest), "-c", "advice.detachedHead=false", "checkout", "--quiet", "--force", "--detach", commit],
      doing=f"checking out {commit} in {dest}", fix=f"delete {dest} and re-run")
    # files a cut checkout wrote that the commit does not track; ignored build outputs stay
    g(["-C", str(dest), "clean", "-d", "--force", "--quiet"],
      doing=f"removing what a killed checkout left in {dest}", fix=f"delete {dest} and re-run")


def sync_clone(runner: Runner, step: str, dest: Path, mirror: Mirror, commit: str, *, cache_dir: Path,
               submodules: bool, allow_dirty: bool, say: Say = lambda _: None,
               submodule_paths: Sequence[str] | None = None, rewrite: Rewrite = lambda _: None,
               sparse: Mapping[str, Sequence[str]] | None = None) -> Checkout:
    """Make ``dest`` a clone of ``mirror.url`` detached at ``commit``, with submodules (all, or the
    ``submodule_paths`` and what nests in them) at their recorded commits; verify HEAD and cleanliness.
    ``rewrite`` maps a submodule URL to the place to fetch it from instead (a kit), or None."""
    try:
        return _sync_clone(runner, step, dest, mirror, commit, cache_dir=cache_dir, submodules=submodules,
                           allow_dirty=allow_dirty, say=say, selection=submodule_paths, rewrite=rewrite,
                           sparse=sparse)
    except (git.GitCommandError, GitInspectError) as exc:   # a read through GitPython / clonecheck failed
        if isinstance(exc, git.GitCommandError):
            cmd = exc.command
            shown = " ".join(str(a) for a in cmd) if isinstance(cmd, (list, tuple)) else str(cmd)
            lines = [ln.strip() for ln in str(exc.stderr or "").strip().strip("'").splitlines() if ln.strip()]
            expected, found = f"`{redact_url(shown)}` to succeed", lines[-1] if lines else f"exit {exc.status}"
        else:
            expected, found = "`git status` / `git submodule status` to succeed", str(exc)
        raise FetchError(f"fork '{mirror.fork}': git cannot read the clone {dest}", expected=expected, found=found,
                         fix=f"repair the fork at commit {commit} (e.g. its .gitmodules), or move the clone aside "
                             f"(`mv {shlex.quote(str(dest))} {shlex.quote(str(dest))}.broken`, keeping any files of "
                             "yours in it) and re-run") from None


def _sync_clone(runner: Runner, step: str, dest: Path, mirror: Mirror, commit: str, *, cache_dir: Path,
                submodules: bool, allow_dirty: bool, say: Say, selection: Sequence[str] | None,
                rewrite: Rewrite, sparse: Mapping[str, Sequence[str]] | None = None) -> Checkout:
    # a token in the fork's URL is not written into the clone (origin is kept without it), so a submodule
    # whose URL is relative to origin is fetched without it: said when such a fetch fails
    hint = ("; the credentials in the fork's URL are not passed on to its submodules (the clone keeps origin "
            "without them): give git a credential helper or a ~/.netrc entry for that host"
            if strip_credentials(mirror.fetch_url) != mirror.fetch_url else "")
    g = ForkGit(runner, step, mirror.fork, hint)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if _partial(dest).exists():           # left by a killed run
        shutil.rmtree(_partial(dest))
    recovering = fresh = False
    kept = started_at = None
    if not dest.exists() or (dest.is_dir() and not any(dest.iterdir())):
        _clone_new(g, dest, mirror, commit, say)
        fresh = True
    else:
        recovering = is_incomplete(dest)  # a killed run was changing it
        started_at = head_commit(dest)
        exclude_build_outputs(dest)       # a clone made before this rule existed gets it too
        kept = _update_existing(g, dest, mirror, commit, allow_dirty=allow_dirty, incomplete=recovering, say=say)
    exclude_build_outputs(dest)           # the stack's own build outputs are not local changes
    if submodules:
        try:
            update_submodules(g, dest, cache_dir, say, selection=selection, rewrite=rewrite,
                               recovering=recovering, sparse=sparse, fresh=fresh)
        except Refused:
            if not recovering and started_at == commit:
                # this run moved nothing of the fork and half-wrote no submodule: what the user changes there
                # after this refusal is theirs, never a killed run's for the next run to reset
                mark_complete(dest)
            raise
    head = head_commit(dest)
    if head != commit:
        raise FetchError(f"fork '{mirror.fork}': the clone {dest} is not at the pinned commit",
                         expected=f"HEAD = {commit}", found=f"HEAD = {head}",
                         fix=f"delete {dest} and re-run")
    states = submodule_heads(dest, selection) if submodules else []
    off = [s for s in states if s.flag != " "]
    if off:
        raise FetchError(f"fork '{mirror.fork}': submodules of {dest} are not at their recorded commits",
                         expected="every submodule initialized at the commit the fork records",
                         found="; ".join(f"{s.path} ({'not initialized' if s.flag == '-' else 'at ' + s.commit})"
                                         for s in off),
                         fix=f"delete {dest} and re-run")
    if fresh:       # no file of it racily clean: the check below records them, later looks hash none again
        age_checkout(dest)
    dirty = dirty_entries(dest, [s.path for s in states], refresh=fresh)
    if dirty and not allow_dirty:
        raise FetchError(f"fork '{mirror.fork}': the clone {dest} is not clean after checkout",
                         expected=f"a clean tree at {commit}", found=listed(dirty),
                         fix=f"delete {dest} and re-run, or re-run with --allow-dirty (recorded)")
    mark_complete(dest)                   # checked: from now on its changes are the user's
    return Checkout(path=dest, commit=commit, submodules={s.path: s.commit for s in states},
                    dirty=tuple(dirty), kept=kept)


