"""Read-only looks at a working clone: HEAD, local changes, submodule states, and the fetch step's
verdict "still what fetch left".

They run on every re-run (a no-op included), so they start few processes and import no Python git
library: HEAD is read from the clone's files, local changes are one ``git status`` (with
``GIT_OPTIONAL_LOCKS=0``: a look must not rewrite the index).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..core.listing import first
from ..core.version import git_dir, head_commit
from . import look
from .hidden import hidden_entries
from .repocode import filters_off, includes, repo_code

__all__ = ["GitInspectError", "SubmoduleState", "check_clone", "dirty_entries", "git_text", "head_commit",
           "ignored_files", "selected", "submodule_heads", "submodule_states"]

MAX_LISTED = 10


class GitInspectError(Exception):
    """A read-only git command failed; ``str()`` is its last line of stderr."""


@dataclass(frozen=True)
class SubmoduleState:
    flag: str        # " " at the recorded commit, "+" another commit, "-" not initialized, "U" conflict
    commit: str
    path: str


def git_text(path: Path, *args: str, ceiling: Path | None = None, config: tuple[tuple[str, str], ...] = (),
             refresh: bool = False, index: Path | None = None) -> str:
    """The output of a read-only git command (:func:`look`), or GitInspectError with its last line of stderr.
    ``ceiling``: git does not look for the repository in it or above (a submodule whose own git directory
    is broken fails, rather than reading the superproject's); ``refresh``: git may rewrite the index;
    ``index``: the index file git reads instead of the repository's."""
    try:
        out, error = look(path, *args, ceiling=ceiling, config=config, refresh=refresh, index=index)
    except OSError as exc:
        raise GitInspectError(f"cannot run git ({exc.strerror or exc})") from None
    if error is not None:
        raise GitInspectError(error)
    return out.decode(errors="replace")


def exact_text(path: Path, *args: str, config: tuple[tuple[str, str], ...] = ()) -> str:
    """:func:`git_text` of a command that compares the work tree with the index (``git status``), every tracked
    file's bytes compared, not its stat data: git reads a copy of the repository's index whose own mtime is 1 s
    after the epoch, so every entry is as new as the index ("racily clean") and git hashes its file.  A plain
    status passes a file edited in its index entry's own second that kept its size and mtime (``touch -r``): git
    built without nanosecond stat data (Debian's 2.39) compares ctime by the whole second (a review's plant)."""
    import shutil
    import tempfile

    gd = git_dir(path)
    index = gd / "index" if gd is not None else None
    if index is None or not index.is_file():
        return git_text(path, *args, config=config)     # no index: nothing is racily clean either
    with tempfile.TemporaryDirectory(prefix="october-index-") as tmp:
        aged = Path(tmp) / "index"
        shutil.copyfile(index, aged)
        os.utime(aged, (1, 1))
        return git_text(path, *args, config=config, index=aged)


def dirty_entries(path: Path, submodules: Iterable[str] = (), *, refresh: bool = False,
                  exact: bool = False) -> list[str]:
    """Every change, untracked file and submodule difference (`git status --porcelain`), and every tracked
    file of the clone and of its checked-out ``submodules`` that git status is told not to look at
    (skip-worktree, assume-unchanged: :mod:`.hidden`), and what the clone's own git files make git run or
    read (:mod:`.repocode`: a filter, whose program status then does not run).  ``refresh``: git status may
    rewrite the indexes (a clone this run has just checked out: the files it hashes because they are as new
    as their index, "racily clean", are then recorded, and the install step's and the settling's statuses
    do not hash them again); never for a look at a clone the user may be working in.  ``exact``: every tracked
    file's bytes compared with the index, the clone's and each of ``submodules``' (:func:`exact_text`), not
    their stat data: ``current verify``."""
    subs = list(submodules)
    code, filters = repo_code(path, subs)
    if includes(code):          # an included file's filters are unknown: no git status, which could run one
        return code + hidden_entries(path, subs)
    hidden = hidden_entries(path, subs)     # read before a status that may write the index
    # git >= 2.36's status drops skip-worktree from a file present outside a sparse cone: a writing one would
    # hide such a file from this check and every later look (a scenario hunt)
    keep = (("sparse.expectFilesOutsideOfPatterns", "true"),) if refresh else ()
    status = ("status", "--porcelain", "--ignore-submodules=none", "--untracked-files=all")
    if not exact:
        out = git_text(path, *status, config=filters_off(filters) + keep, refresh=refresh)
        return [ln for ln in out.splitlines() if ln.strip()] + hidden + code
    lines = [ln for ln in exact_text(path, *status, config=filters_off(filters)).splitlines() if ln.strip()]
    named = {ln[3:] for ln in lines}
    for sub in subs:            # a submodule's own status reads its own index: each is compared exactly too
        if sub not in named and exact_text(path / sub, *status, config=filters_off(filters)).strip():
            lines.append(f" M {sub}")
    return lines + hidden + code


def ignored_files(path: Path) -> list[str]:
    """Every file git does not track and ignores (``git ls-files --others --ignored --exclude-standard``), in the
    clone and in each of its checked-out submodules (paths relative to the clone; git lists none inside a
    submodule from the clone, so a folder that ignores itself there passed unseen): what builds leave (the
    clone's exclude lists them, :mod:`.exclude`); an untracked file git does not ignore is a local change
    (:func:`dirty_entries`)."""
    found = _ignored_here(path)
    for sub in _submodule_paths(path):
        if (path / sub / ".git").exists():          # checked out (active or not), nested ones through its own
            found += [f"{sub}/{p}" for p in ignored_files(path / sub)]
    return found


def _submodule_paths(path: Path) -> list[str]:
    """The clone's gitlinks (index entries of mode 160000, ``git ls-files -z -s``: a submodule whether or not
    ``.gitmodules`` maps it or its name has a space), those strictly inside the clone only."""
    out = git_text(path, "ls-files", "-z", "-s", ceiling=path.resolve().parent)
    top = path.resolve()
    subs = []
    for entry in filter(None, out.split("\0")):
        meta, _, rel = entry.partition("\t")
        where = (path / rel).resolve() if meta.startswith("160000 ") and rel else top
        if where != top and where.is_relative_to(top):
            subs.append(rel)
    return subs


def _ignored_here(path: Path) -> list[str]:
    out = git_text(path, "ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                   ceiling=path.resolve().parent)
    return [p for p in out.split("\0") if p]


def submodule_states(path: Path) -> list[SubmoduleState]:
    """``git submodule status --recursive``, parsed."""
    states: list[SubmoduleState] = []
    for line in filter(str.strip, git_text(path, "submodule", "status", "--recursive").splitlines()):
        commit, _, where = line[1:].partition(" ")
        if where.endswith(")") and " (" in where:
            where = where.rsplit(" (", 1)[0]
        states.append(SubmoduleState(flag=line[0], commit=commit, path=where))
    return states


def submodule_heads(path: Path, selection: Sequence[str] | None = None) -> list[SubmoduleState]:
    """What ``git submodule status --recursive`` says of the (``selection``'s) submodules, read from each
    repository's index (one ``git ls-files --stage``) and each submodule's HEAD: before git 2.45 that
    command is a shell script starting about 15 processes per repository.  A repository whose gitlinks
    its ``.gitmodules`` does not all name is left to git's command, whose error says so.  One difference:
    a checked-out submodule made inactive by git configuration reads by its HEAD here, "-" in git."""
    states: list[SubmoduleState] = []

    def walk(repo: Path, prefix: str, ceiling: Path | None) -> None:   # depth first, in index order: git's
        seen: set[str] = set()
        names: set[str] | None = None                 # its .gitmodules' paths, read at the first gitlink
        for entry in git_text(repo, "ls-files", "--stage", "-z", ceiling=ceiling).split("\0"):
            meta, _, rel = entry.partition("\t")
            mode, _, rest = meta.partition(" ")
            recorded, _, stage = rest.partition(" ")
            where = prefix + rel
            if mode != "160000" or where in seen:
                continue
            seen.add(where)
            shown = selected(where, selection)
            if not shown and not any(p.startswith(where + "/") for p in selection or ()):
                continue                              # neither selected nor above a selected one
            if names is None:
                names = _gitmodules_paths(repo)
            if rel not in names:
                raise _Unmapped
            if stage != "0":                          # one line for an unmerged path's stages
                if shown:
                    states.append(SubmoduleState(flag="U", commit="0" * len(recorded), path=where))
                continue
            head = head_commit(repo / rel)
            if shown:
                flag = "-" if head is None else " " if head == recorded else "+"
                states.append(SubmoduleState(flag=flag, commit=recorded if head is None else head, path=where))
            if head is not None:
                walk(repo / rel, where + "/", repo)

    try:
        walk(path, "", None)
    except _Unmapped:
        return [s for s in submodule_states(path) if selected(s.path, selection)]
    return states


class _Unmapped(Exception):
    """A gitlink its repository's ``.gitmodules`` does not name."""


def _gitmodules_paths(repo: Path) -> set[str]:
    """The ``path`` of every submodule the checked-out ``.gitmodules`` of ``repo`` names (none without one)."""
    import configparser

    from git.config import GitConfigParser       # GitPython: only where the fetch step runs, not on a no-op

    if not (repo / ".gitmodules").is_file():
        return set()
    try:
        with GitConfigParser(str(repo / ".gitmodules"), read_only=True) as parser:
            return {parser.get(section, "path") for section in parser.sections()
                    if section.startswith("submodule ") and parser.has_option(section, "path")}
    except (UnicodeDecodeError, configparser.Error, OSError):
        raise _Unmapped from None              # git reads it its own way: its command answers


def selected(path: str, selection: Sequence[str] | None) -> bool:
    """Whether a (recursive) submodule path is one the recipe selected (None: all)."""
    return selection is None or any(path == p or path.startswith(p + "/") for p in selection)


def listed(items: Sequence[str]) -> str:
    return first([i.strip() for i in items], MAX_LISTED, "; ")


def check_clone(path: Path, commit: str, *, allow_dirty: bool,
                submodules: Mapping[str, str] | None = None,
                submodule_paths: Sequence[str] | None = None,
                sparse: Mapping[str, Sequence[str]] | None = None) -> str | None:
    """None when the clone at ``path`` is at ``commit``, clean, and its (selected) submodules at their
    recorded commits (sparse ones keeping exactly their directories); otherwise the reason it is not."""
    head = head_commit(path)
    if head is None:
        return f"{path} is not a git clone"
    if head != commit:
        return f"{path} is at {head}, not {commit}"
    from .sparse import cone_problem, partial_or_sparse

    if partial_or_sparse(path):     # hidden.py passes a skip-worktree file missing from a sparse checkout
        return f"{path} is a sparse or partial checkout; the recipe wants it whole"
    if sparse or submodules:
        for sub, dirs in sorted((sparse or {}).items()):
            bad = cone_problem(path / sub, dirs)
            if bad is not None:
                return f"submodule {sub}: {bad}"
        for sub in sorted(set(submodules or {}) - set(sparse or {})):
            if partial_or_sparse(path / sub):
                return f"submodule {sub} is a sparse or partial checkout; the recipe wants it whole"
    try:
        if not allow_dirty:
            dirty = dirty_entries(path, submodules or ())
            if dirty:
                return f"{path} has local changes ({listed(dirty)})"
            if submodules:
                # A clean status already says every checked-out submodule is at its recorded commit;
                # what it misses is one not checked out: each HEAD is read from its files.
                off = [sub for sub, want in sorted(submodules.items()) if head_commit(path / sub) != want]
                if off:
                    return f"{path} submodules not at their recorded commits: {', '.join(off)}"
                return None
        if submodules is not None:
            states = [s for s in submodule_states(path) if selected(s.path, submodule_paths)]
            off = [s.path for s in states if s.flag != " "]
            if off:
                return f"{path} submodules not at their recorded commits: {', '.join(off)}"
            now = {s.path: s.commit for s in states}
            if now != dict(submodules):
                return f"{path} submodules are {now}, not {dict(submodules)}"
    except GitInspectError as exc:
        return f"git cannot inspect {path} ({exc})"
    return None
