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
from typing import Callable, Mapping, Sequence

import git

from ..core.errors import CommandFailed, FetchError
from ..core.redact import redact_url
from ..core.runner import Runner
from . import git_env, look, strip_credentials
from .hidden import Hidden, hidden_entries
from .repocode import RepoCode
from .clonecheck import GitInspectError, dirty_entries, git_text, head_commit, listed, submodule_heads
from .clonecheck import check_clone, selected, submodule_states  # noqa: F401  (re-exported: verify, tests)
from .diagnose import ownership_fix
from .exclude import exclude_build_outputs, git_dir
from .mirror import PIN_REFS, Mirror, ensure_commit, has_complete, mirror_path, open_mirror
from .recover import (is_incomplete, mark_complete, mark_incomplete, module_dir, remove_stale_locks,
                      reset_broken_submodule, unsafe_submodule)
from .sparse import partial_or_sparse

MAX_DEPTH = 8
Say = Callable[[str], None]


@dataclass(frozen=True)
class Checkout:
    path: Path
    commit: str
    submodules: Mapping[str, str]      # path (relative to the clone, recursive) -> checked-out commit
    dirty: tuple[str, ...]             # `git status --porcelain` lines; empty when clean
    kept: str | None = None            # the branch that now holds a commit of the user's HEAD was at (unheld)


@dataclass(frozen=True)
class _Git:
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


def _bring_commit(g: _Git, repo_dir: Path, mirror: Mirror, commit: str) -> None:
    """Copy ``commit`` from the local mirror into the clone at ``repo_dir`` (no network).  From a shallow
    mirror its shallow roots come too: git refuses them in a complete clone without ``--update-shallow``."""
    # The commit object alone does not prove the rest is there: a small fetch is unpacked loose, commit
    # first, so a fetch killed part-way leaves the commit without its tree.  The walk is quick.
    if has_complete(repo_dir, commit):
        return
    ref = f"{PIN_REFS}/{commit}"
    shallow = ["--update-shallow"] if is_shallow(mirror.path) else []
    g(["-C", str(repo_dir), "fetch", "--no-tags", *shallow, "--", _source(mirror), f"+{ref}:{ref}"],
      doing=f"copying commit {commit} from the mirror {mirror.path}",
      fix=f"remove {mirror.path} (a cache) and re-run")


class Refused(FetchError):
    """A refusal made before the run changed the submodule it names (files of the user's in it, a name the tool
    will not place, a selection the fork lacks): what the run changed before it is whole."""


def _source(mirror: Mirror) -> str:
    """How a clone reads the local mirror: a path (object files copied unhashed; :func:`_require_objects`
    hashes what the checkout reads, not the whole history), or a file:// URL for a shallow mirror (git
    ignores --depth for plain paths)."""
    return mirror.path.as_uri() if is_shallow(mirror.path) else str(mirror.path)


def _set_origin(g: _Git, repo_dir: Path, url: str) -> None:
    url = strip_credentials(url)          # never leave a token in the clone's .git/config
    with git.Repo(repo_dir) as repo:
        current = repo.remotes.origin.url if "origin" in [r.name for r in repo.remotes] else None
    if current == url:
        return
    verb = "set-url" if current is not None else "add"
    g(["-C", str(repo_dir), "remote", verb, "origin", url],
      doing=f"pointing origin at {redact_url(url)}", fix=f"check {repo_dir}/.git/config")


def _checkout(g: _Git, repo_dir: Path, commit: str) -> None:
    g(["-C", str(repo_dir), "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit],
      doing=f"checking out {commit} in {repo_dir}",
      fix=f"look at {repo_dir} (local changes in the way?), or remove it and re-run")


def _partial(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.partial"


def _clone_new(g: _Git, dest: Path, mirror: Mirror, commit: str, say: Say) -> None:
    partial = _partial(dest)
    say(f"{g.fork}: cloning from the mirror {mirror.path}")
    with mirror.locked():
        # --no-hardlinks: the clone's object files are its own, never the cache mirror's inodes
        g(["-c", "protocol.file.allow=always", "clone", "--quiet", "--no-hardlinks", "--no-checkout",
           "--", _source(mirror), str(partial)],
          doing=f"cloning the mirror into {partial}", fix=f"check free disk space at {dest.parent}")
        _bring_commit(g, partial, mirror, commit)
    if not is_shallow(mirror.path):      # copied as files (see _source): hash what the checkout will read
        _require_objects(g, partial, mirror, commit)
    mark_incomplete(partial, commit)      # until every check passed, what is in the clone is ours
    _set_origin(g, partial, mirror.url)
    _checkout(g, partial, commit)
    if dest.exists():
        dest.rmdir()          # only an empty directory gets here
    partial.rename(dest)


def _require_objects(g: _Git, repo_dir: Path, mirror: Mirror, commit: str) -> None:
    """Every object the checkout of ``commit`` reads hashes to its name (:mod:`.objcheck`)."""
    from .objcheck import mismatched

    bad, count = mismatched(repo_dir, commit)
    if bad:
        raise FetchError(f"fork '{g.fork}': the cache's mirror {mirror.path} holds objects whose bytes are not "
                         f"the ones their ids name", expected=f"each of the {count} objects of commit {commit} "
                         "hashing to its id", found=f"{len(bad)} differ or are missing: {listed(bad)}",
                         fix=f"remove {mirror.path} (a cache; the next run fetches it again) and re-run; "
                             f"nothing was checked out")


def _update_existing(g: _Git, dest: Path, mirror: Mirror, commit: str, *, allow_dirty: bool,
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
    _set_origin(g, dest, mirror.url)
    kept = None
    if head != commit:
        say(f"{g.fork}: moving {dest} from {head} to {commit}")
        with mirror.locked():
            _bring_commit(g, dest, mirror, commit)
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


def _finish_interrupted(g: _Git, dest: Path, mirror: Mirror, commit: str, say: Say) -> None:
    """A clone a killed run was changing: its differences are that run's own, so they are reset."""
    if removed := remove_stale_locks(dest):
        g.runner.note(g.step, "# removed what a killed git left: " + ", ".join(removed))
    say(f"{g.fork}: finishing what a killed run left in {dest} (its half-done checkout is reset)")
    _set_origin(g, dest, mirror.url)
    with mirror.locked():
        _bring_commit(g, dest, mirror, commit)
    g(["-C", str(dest), "-c", "advice.detachedHead=false", "checkout", "--quiet", "--force", "--detach", commit],
      doing=f"checking out {commit} in {dest}", fix=f"delete {dest} and re-run")
    # files a cut checkout wrote that the commit does not track; ignored build outputs stay
    g(["-C", str(dest), "clean", "-d", "--force", "--quiet"],
      doing=f"removing what a killed checkout left in {dest}", fix=f"delete {dest} and re-run")


Rewrite = Callable[[str], "str | None"]


def _clear_submodule(repo_dir: Path, name: str, rel: str, who: str, why: str) -> None:
    """Remove a submodule's work tree and git dir to check it out again, unless it holds anything of the user's."""
    sub_dir = repo_dir / rel
    if head_commit(sub_dir) is not None:
        theirs = [ln for ln in git_text(sub_dir, "status", "--porcelain", "--untracked-files=all",
                                    "--ignored=matching").splitlines() if ln.strip()] + hidden_entries(sub_dir)
        if theirs:
            raise Refused(f"{who} must be checked out again ({why}) but holds files of yours",
                           expected="a submodule with no local change, untracked or ignored file",
                           found=listed(theirs),
                           fix=f"save what you need from {sub_dir} elsewhere, delete {sub_dir}, and re-run")
    elif sub_dir.is_dir() and any(p.name != ".git" for p in sub_dir.iterdir()):
        raise Refused(f"{who} must be checked out again ({why}) but {sub_dir} holds files and no readable "
                       "git repository", expected="a submodule git can read, or an empty directory",
                       found=f"files in {sub_dir}", fix=f"save what you need from {sub_dir}, delete it, and re-run")
    for stale in {p for p in (git_dir(sub_dir), module_dir(repo_dir / ".git", name)) if p is not None}:
        shutil.rmtree(stale, ignore_errors=True)
    shutil.rmtree(sub_dir, ignore_errors=True)


def _sparse_submodule(g: _Git, repo_dir: Path, cache_dir: Path, say: Say, *, name: str, rel: str, commit: str,
                      url: str, dirs: Sequence[str], rewrite: Rewrite) -> None:
    """A submodule checked out sparse (:mod:`.sparse`): a partial clone of the cache's partial mirror (its
    promisor) in cone mode, its git directory absorbed into ``.git/modules`` as ``submodule update`` does."""
    from .sparse import PARTIAL_REFS, bring, bring_ignores, cone_problem, upload_pack

    who = f"fork '{g.fork}': submodule {rel}"
    sub_dir = repo_dir / rel
    if head_commit(sub_dir) == commit and cone_problem(sub_dir, dirs) is None:
        # as a run left it; a run killed before the absorb or the origin left them undone
        if (sub_dir / ".git").is_dir():
            g(["-C", str(repo_dir), "submodule", "absorbgitdirs", "--", rel],
              doing=f"moving submodule {rel}'s git directory under .git/modules", fix=f"delete {sub_dir} and re-run")
        _set_origin(g, sub_dir, url)
        held = mirror_path(cache_dir, url, partial=True)     # a run killed before the clone's .gitignore fetch
        if held.is_dir():
            bring_ignores(g.runner, g.step, sub_dir, held.as_uri(), commit, local=True)
        return
    mirror = open_mirror(cache_dir, url, f"{g.fork}/{rel}", source=rewrite(url), partial=True)
    with mirror.locked():
        if bring(g.runner, g.step, mirror.path, mirror.fetch_url, mirror.shown_url, commit, dirs, who=who):
            say(f"{g.fork}: fetched submodule {rel} @ {commit} (sparse: {', '.join(dirs)}) from "
                f"{redact_url(mirror.fetch_url)}")
        _clear_submodule(repo_dir, name, rel, who, f"to commit {commit}, sparse: {', '.join(dirs)}")
        sub_dir.mkdir(parents=True, exist_ok=True)
        doing = f"checking out submodule {rel} at {commit} (sparse: {', '.join(dirs)})"
        fix = f"delete {sub_dir} and {repo_dir / '.git' / 'modules' / name}, then re-run"
        source = mirror.path.as_uri()
        g(["init", "--quiet", str(sub_dir)], doing=doing, fix=fix)
        g(["-C", str(sub_dir), "fetch", "--quiet", "--no-tags", "--filter=blob:none", "--depth=1",
           *upload_pack(source), "--", source, f"+{PARTIAL_REFS}/{commit}:{PARTIAL_REFS}/{commit}"],
          doing=doing, fix=fix)
        g(["-C", str(sub_dir), "sparse-checkout", "set", "--cone", *dirs], doing=doing, fix=fix)
        # the cone's blobs come from the mirror in one lazy fetch (it holds them: bring checked)
        g(["-C", str(sub_dir), "-c", "protocol.file.allow=always", "checkout", "--quiet", "--detach", commit],
          doing=doing, fix=fix)
        bring_ignores(g.runner, g.step, sub_dir, source, commit, local=True)   # the cone's checkout reads none
        g(["-C", str(repo_dir), "submodule", "absorbgitdirs", "--", rel], doing=doing, fix=fix)
    _set_origin(g, sub_dir, url)


def _declared(g: _Git, repo_dir: Path, selection: Sequence[str] | None) -> dict[str, str]:
    """The submodules ``repo_dir``'s .gitmodules declares (path -> name); refused before anything is removed or made
    for them when one would lie outside the clone or the recipe selects one it does not declare."""
    with git.Repo(repo_dir) as repo:
        declared = {str(sm.path): str(sm.name) for sm in repo.submodules}
    unsafe = [bad for rel, name in declared.items() if (bad := unsafe_submodule(name, rel)) is not None]
    if unsafe:          # before anything is removed or made for it: its git directory would lie elsewhere
        raise Refused(f"fork '{g.fork}': its .gitmodules names a submodule this tool will not place",
                       expected="submodule names and paths inside the clone (relative, no '..')",
                       found="; ".join(unsafe) + f" in {repo_dir}/.gitmodules",
                       fix="use a fork commit whose .gitmodules names its submodules plainly; nothing was "
                           "removed or written for them")
    if selection is not None:
        unknown = [p for p in selection if p not in declared]
        if unknown:
            raise Refused(f"fork '{g.fork}': the recipe selects submodule(s) the fork does not have",
                           expected=f"paths among {', '.join(sorted(declared)) or 'none'}",
                           found=", ".join(unknown),
                           fix="fix the fork entry's submodules = [...] in the recipe")
    return declared


def _update_submodules(g: _Git, repo_dir: Path, cache_dir: Path, say: Say, depth: int = 0, *,
                       selection: Sequence[str] | None = None, rewrite: Rewrite,
                       recovering: bool = False, sparse: Mapping[str, Sequence[str]] | None = None,
                       fresh: bool = False) -> None:
    """``fresh``: ``repo_dir`` was cloned by this run, so the submodule URLs need no sync."""
    sparse = sparse or {}
    if not (repo_dir / ".gitmodules").exists():
        if selection:
            raise FetchError(f"fork '{g.fork}': the recipe selects submodules but the fork has none",
                             expected=f"submodules {', '.join(selection)} in {repo_dir}/.gitmodules",
                             found="no .gitmodules", fix="fix the fork entry's submodules = [...] in the recipe")
        return
    if depth > MAX_DEPTH:
        raise FetchError(f"fork '{g.fork}': submodules nest too deep at {repo_dir}",
                         expected=f"at most {MAX_DEPTH} levels", found="more",
                         fix="check the fork's .gitmodules for a cycle")
    for rel, name in _declared(g, repo_dir, selection).items():
        # before init/sync, which read a submodule's own config and stop at an unusable one
        if selection is None or rel in selection:
            reset = reset_broken_submodule(repo_dir, name, repo_dir / rel, incomplete=recovering)
            if reset is not None:
                g.runner.note(g.step, f"# removed what a killed run left: {reset}")
                say(f"{g.fork}: cloning submodule {rel} again (a killed run left it unusable)")
    only = ["--", *selection] if selection is not None else []
    # init registers new submodules; sync re-reads every URL from .gitmodules (relative ones
    # against origin), undoing a mirror path left in .git/config by a killed run.
    for verb in ("init",) if fresh else ("init", "sync"):
        g(["-C", str(repo_dir), "submodule", "--quiet", verb, *only], doing=f"submodule {verb} in {repo_dir}",
          fix=f"check {repo_dir}/.gitmodules")
    with git.Repo(repo_dir) as repo:
        subs = [(str(sm.name), str(sm.path), str(sm.hexsha)) for sm in repo.submodules
                if selection is None or str(sm.path) in selection]
        urls = {name: str(repo.git.config("--get", f"submodule.{name}.url")) for name, _, _ in subs}
    for name, rel, commit in subs:
        if rel in sparse:
            _sparse_submodule(g, repo_dir, cache_dir, say, name=name, rel=rel, commit=commit, url=urls[name],
                              dirs=sparse[rel], rewrite=rewrite)
            continue                   # a sparse submodule's own submodules are not fetched
        cloned = _whole_submodule(g, repo_dir, cache_dir, say, name=name, rel=rel, commit=commit, url=urls[name],
                                  rewrite=rewrite, recovering=recovering)
        _update_submodules(g, repo_dir / rel, cache_dir, say, depth + 1, rewrite=rewrite, recovering=recovering,
                           fresh=fresh and not cloned)


def _whole_submodule(g: _Git, repo_dir: Path, cache_dir: Path, say: Say, *, name: str, rel: str, commit: str,
                     url: str, rewrite: Rewrite, recovering: bool) -> bool:
    """Submodule ``rel`` checked out whole at ``commit`` from its mirror (fetched into it, shallow, where missing),
    its origin the URL .gitmodules gives.  -> whether it was cloned before this."""
    sub_dir = repo_dir / rel
    if partial_or_sparse(sub_dir):      # a recipe that kept it sparse before: whole now
        _clear_submodule(repo_dir, name, rel, f"fork '{g.fork}': submodule {rel}", "whole now, sparse before")
    mirror = open_mirror(cache_dir, url, f"{g.fork}/{rel}", source=rewrite(url))
    try:
        fetched = ensure_commit(g.runner, g.step, mirror, commit, shallow=True)
    except FetchError as exc:
        raise FetchError(f"fork '{g.fork}': submodule {rel} @ {commit} cannot be fetched",
                         expected=exc.expected or "", found=exc.found or "",
                         fix=(exc.fix or "") + g.sub_hint + f"; if the build does not need {rel}, leave it "
                             "out of the fork entry's submodules = [...] in the recipe") from None
    if fetched:
        say(f"{g.fork}: fetched submodule {rel} @ {commit} (shallow) from {redact_url(mirror.fetch_url)}")
    with mirror.locked():
        cloned = (sub_dir / ".git").exists()
        if cloned:
            _bring_commit(g, sub_dir, mirror, commit)
        else:
            # a file:// URL whatever the mirror: from a path the object files would be copied unhashed
            g(["-C", str(repo_dir), "config", f"submodule.{name}.url", mirror.path.as_uri()],
              doing=f"pointing submodule {rel} at its mirror", fix=f"check {repo_dir}/.git/config")
        try:
            # No --no-fetch: a clone of a shallow mirror copies branches only, so the pinned
            # commit is then fetched by id (depth 1) from the mirror, the URL in use here.
            shallow = ["--depth", "1"] if is_shallow(mirror.path) else []
            # recovering: the submodule's differences are a killed run's (--force resets them)
            force = ["--force"] if recovering and cloned else []
            g(["-C", str(repo_dir), "-c", "protocol.file.allow=always", "submodule", "update",
               "--init", "--checkout", *force, *shallow, "--", rel],
              doing=f"checking out submodule {rel} at {commit}",
              fix=f"look at {sub_dir}, or delete {repo_dir} and re-run")
            if force:
                g(["-C", str(sub_dir), "clean", "-d", "--force", "--quiet"],
                  doing=f"removing what a killed checkout left in {sub_dir}",
                  fix=f"delete {repo_dir} and re-run")
        finally:
            if not cloned:
                g(["-C", str(repo_dir), "config", f"submodule.{name}.url", url],
                  doing=f"restoring submodule {rel}'s URL", fix=f"check {repo_dir}/.git/config")
    _set_origin(g, sub_dir, url)
    return cloned


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
    g = _Git(runner, step, mirror.fork, hint)
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
            _update_submodules(g, dest, cache_dir, say, selection=selection, rewrite=rewrite,
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
    dirty = dirty_entries(dest, [s.path for s in states], refresh=fresh)
    if dirty and not allow_dirty:
        raise FetchError(f"fork '{mirror.fork}': the clone {dest} is not clean after checkout",
                         expected=f"a clean tree at {commit}", found=listed(dirty),
                         fix=f"delete {dest} and re-run, or re-run with --allow-dirty (recorded)")
    mark_complete(dest)                   # checked: from now on its changes are the user's
    return Checkout(path=dest, commit=commit, submodules={s.path: s.commit for s in states},
                    dirty=tuple(dirty), kept=kept)


COARSE_MARGIN_S = 1.0      # whole-second timestamps (ext3, some network filesystems)
FINE_MARGIN_S = 0.25       # sub-second ones; the H200's clock ticks every 100 ms


def index_files(path: Path) -> list[Path]:
    """The clone's index and that of every (nested) submodule git directory under ``.git/modules``."""
    dot_git = path / ".git"
    if not dot_git.is_dir():
        return []
    found = [dot_git / "index"]
    todo = [dot_git / "modules"]
    while todo:
        here = todo.pop()
        try:
            children = sorted(c for c in here.iterdir() if c.is_dir())
        except OSError:
            continue
        for child in children:
            if (child / "HEAD").is_file():
                found.append(child / "index")
                todo.append(child / "modules")
            else:
                todo.append(child)
    return found


def settle_wait(path: Path) -> float | None:
    """Seconds until every index of the clone is one timestamp tick old, so a rewrite leaves no racily
    clean entry; 0.0 when it is now; None without an index."""
    import time

    waits = []
    for index in index_files(path):
        try:
            st = index.stat()
        except OSError:
            continue
        margin = COARSE_MARGIN_S if st.st_mtime_ns % 1_000_000_000 == 0 else FINE_MARGIN_S   # whole seconds?
        # clamped: an index from the future (a server clock ahead, a clock set back) waits no longer
        waits.append(min(margin, max(0.0, margin - (time.time() - st.st_mtime_ns / 1e9))))
    return max(waits) if waits else None


def settle_index(runner: Runner, step: str, path: Path, *, wait: bool = False) -> bool:
    """Rewrite the clone's (and submodules') indexes with one ``git status`` so entries written in the
    index's own timestamp tick ("racily clean", hashed again by every later no-op check) are recorded
    clean.  False (nothing run) while an index is too new, unless ``wait``: then sleep the rest first."""
    import time

    left = settle_wait(path)
    if left is None:
        return False
    if left > 0:
        if not wait:
            return False
        time.sleep(left)
    # -uno: the rewrite needs the tracked files only; no walk for untracked ones
    runner.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no", "--ignore-submodules=none"],
               step=step, env=git_env(), check=False)
    return True
