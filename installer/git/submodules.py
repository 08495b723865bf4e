"""A clone's submodules checked out at the commits its tree pins, each from a mirror of its own URL: whole
(shallow) or sparse (:mod:`.sparse`), nested ones too, what a killed run left reset first, and nothing of the
user's removed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Mapping, Sequence

import git

from ..core.errors import FetchError
from ..core.redact import redact_url
from .clonecheck import git_text, head_commit, listed
from .exclude import git_dir
from .gitcmd import ForkGit, Refused, Say, bring_commit, is_shallow, set_origin
from .hidden import hidden_entries
from .mirror import ensure_commit, mirror_path, open_mirror
from .recover import module_dir, reset_broken_submodule, unsafe_submodule
from .sparse import partial_or_sparse

MAX_DEPTH = 8


Rewrite = Callable[[str], "str | None"]


def clear_submodule(repo_dir: Path, name: str, rel: str, who: str, why: str) -> None:
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


def _sparse_submodule(g: ForkGit, repo_dir: Path, cache_dir: Path, say: Say, *, name: str, rel: str, commit: str,
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
        set_origin(g, sub_dir, url)
        held = mirror_path(cache_dir, url, partial=True)     # a run killed before the clone's .gitignore fetch
        if held.is_dir():
            bring_ignores(g.runner, g.step, sub_dir, held.as_uri(), commit, local=True)
        return
    mirror = open_mirror(cache_dir, url, f"{g.fork}/{rel}", source=rewrite(url), partial=True)
    with mirror.locked():
        if bring(g.runner, g.step, mirror.path, mirror.fetch_url, mirror.shown_url, commit, dirs, who=who):
            say(f"{g.fork}: fetched submodule {rel} @ {commit} (sparse: {', '.join(dirs)}) from "
                f"{redact_url(mirror.fetch_url)}")
        clear_submodule(repo_dir, name, rel, who, f"to commit {commit}, sparse: {', '.join(dirs)}")
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
    set_origin(g, sub_dir, url)


def _declared(g: ForkGit, repo_dir: Path, selection: Sequence[str] | None) -> dict[str, str]:
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


def update_submodules(g: ForkGit, repo_dir: Path, cache_dir: Path, say: Say, depth: int = 0, *,
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
        update_submodules(g, repo_dir / rel, cache_dir, say, depth + 1, rewrite=rewrite, recovering=recovering,
                           fresh=fresh and not cloned)


def _whole_submodule(g: ForkGit, repo_dir: Path, cache_dir: Path, say: Say, *, name: str, rel: str, commit: str,
                     url: str, rewrite: Rewrite, recovering: bool) -> bool:
    """Submodule ``rel`` checked out whole at ``commit`` from its mirror (fetched into it, shallow, where missing),
    its origin the URL .gitmodules gives.  -> whether it was cloned before this."""
    sub_dir = repo_dir / rel
    if partial_or_sparse(sub_dir):      # a recipe that kept it sparse before: whole now
        clear_submodule(repo_dir, name, rel, f"fork '{g.fork}': submodule {rel}", "whole now, sparse before")
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
            bring_commit(g, sub_dir, mirror, commit)
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
    set_origin(g, sub_dir, url)
    return cloned
