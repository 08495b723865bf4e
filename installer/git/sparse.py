"""Sparse submodules: a partial clone holding a commit, its trees and only the blobs under the directories
a recipe keeps, checked out in cone mode (the one reachable copy of the CUTLASS commit FlashInfer records
lacks a file, so a full fetch cannot succeed; its JIT reads two directories).  The commit is fetched with
``--filter=blob:none``, then the cone's blobs by id (:func:`cone_blobs`: what cone mode writes, including
the files directly in the root and in each parent of a kept directory).  Servers must allow filters and
wants by id: GitHub does; a local repository is asked via ``--upload-pack``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Sequence

from .. import git as fetch_pkg
from ..core.errors import CommandFailed, FetchError
from ..core.runner import Runner
from ..core.version import common_dir
from . import git_env, parse_ls_tree
from .config import config_items, truth, value_in
from .diagnose import diagnose
from .exclude import git_dir

PARTIAL_REFS = "refs/october/partial"
TREES_REFS = "refs/october/partial-trees"      # the commit and trees of an unfinished bring (PARTIAL_REFS comes last)
SERVE_CONFIG = (("uploadpack.allowFilter", "true"), ("uploadpack.allowAnySHA1InWant", "true"))
UPLOAD_PACK = "git " + " ".join(f"-c {k}={v}" for k, v in SERVE_CONFIG) + " upload-pack"
BLOBS_PER_FETCH = 2000          # ids per `git fetch` command line (a cone of CUTLASS headers: 891)


def _repo(path: Path) -> "git.Repo":
    """A read-only look: a missing object is never fetched from the promisor (:data:`.NO_FETCH`)."""
    import git  # GitPython only where git is read (the no-op's cone check reads files)

    r = git.Repo(path)
    r.git.update_environment(**fetch_pkg.NO_FETCH)
    return r


_SSH = re.compile(r"^(ssh://|git\+ssh://|ssh\+git://|[A-Za-z0-9._-]+@[^/:]+:)")


def upload_pack(source: str) -> list[str]:
    """``--upload-pack`` asking a local repository to allow filters and ids (git strips client config
    before starting a local upload-pack; https ignores the option, but ``insteadOf`` may make it a local
    copy); never for ssh, whose host may refuse the command."""
    return [] if _SSH.match(source) else [f"--upload-pack={UPLOAD_PACK}"]


def parents(dirs: Sequence[str]) -> list[str]:
    """The root ("") and every parent directory of each kept directory, in order, once each."""
    above = ("/".join(d.split("/")[:i]) for d in dirs for i in range(1, d.count("/") + 1))
    return list(dict.fromkeys(["", *above]))


def cone_blobs(repo: Path, commit: str, dirs: Sequence[str], *, who: str) -> dict[str, str]:
    """path -> blob id of every file a cone checkout of ``dirs`` writes (trees must be present)."""
    import git

    found: dict[str, str] = {}
    with _repo(repo) as r:
        for parent in parents(dirs):
            try:
                text = r.git.ls_tree("-z", f"{commit}:{parent}" if parent else commit)
            except git.GitCommandError:
                continue                   # a parent that is not a directory: the kept one fails below
            found.update({(f"{parent}/{p}" if parent else p): oid
                          for p, (typ, oid) in parse_ls_tree(text).items() if typ == "blob"})
        for d in dirs:
            try:
                kind = str(r.git.cat_file("-t", f"{commit}:{d}")).strip()
            except git.GitCommandError:
                kind = "nothing"
            if kind != "tree":
                raise FetchError(f"{who}: the recipe keeps directory '{d}', which commit {commit} does not have",
                                 expected=f"a directory {d}/ in the submodule at {commit}",
                                 found=kind if kind != "nothing" else "no such path",
                                 fix="fix the fork entry's sparse = { ... } in the recipe")
            listing = parse_ls_tree(r.git.ls_tree("-r", "-z", commit, "--", f"{d}/"))
            found.update({p: oid for p, (typ, oid) in listing.items() if typ == "blob"})
    return found


def missing_objects(repo: Path, commit: str) -> set[str]:
    """Ids reachable from ``commit`` that the repository does not hold (no lazy fetch is made): a walk of every
    tree of the commit (CCCL's: ~9,500 objects, 0.15 s), for the question which ids it lacks at all."""
    with _repo(repo) as r:
        out = str(r.git.rev_list("--objects", "--missing=print", commit))
    return {ln[1:].strip() for ln in out.splitlines() if ln.startswith("?")}


def held_objects(repo: Path) -> set[str]:
    """Every object id the repository holds (its packs, loose objects and alternates; no lazy fetch is made):
    read from the pack indexes and object folders, never a walk (CCCL's sparse clone: 3,400 ids in 0.01 s).
    An id asked of it that is not here is one :func:`missing_objects` names (tests/test_fetch_sparse.py)."""
    with _repo(repo) as r:
        out = str(r.git.cat_file("--batch-all-objects", "--batch-check=%(objectname)", "--unordered"))
    return set(out.split())


def cut_packs(repo: Path) -> list[Path]:
    """The packs of the repository that do not end with the checksum their index names (or are gone from beside
    it).  A pack cut short (an interrupted copy of a shared cache) keeps an index that still lists its objects, which
    git then cannot read: their ids are in :func:`held_objects`, a walk finds them missing, and a fetch asks for none
    of them again (git takes them for present).  An index (v1 and v2) ends with a copy of its pack's trailing
    checksum, then its own (gitformat-pack): 20 bytes each for SHA-1, 32 for SHA-256.  ``repo``: a bare repository
    (its own git directory) or a work tree (``.git`` a folder, or a file naming it: a submodule's), read from files."""
    packs = common_dir(git_dir(repo) or repo) / "objects" / "pack"
    cut = []
    for index in sorted(packs.glob("*.idx")):
        pack = index.with_suffix(".pack")
        try:
            tail, end = _last_bytes(index, 64), _last_bytes(pack, 32)
            whole = any(len(tail) >= 2 * n and len(end) >= n and end[-n:] == tail[-2 * n:-n] for n in (20, 32))
        except OSError:                 # no pack beside its index
            whole = False
        if not whole:
            cut.append(pack)
    return cut


def _last_bytes(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - n))
        return f.read()


def absent(repo: Path, commit: str, ids: Iterable[str], *, cut: Sequence[Path] | None = None) -> set[str]:
    """Of ``ids`` (objects ``commit`` reaches), those the repository cannot read: those it does not hold
    (:func:`held_objects`, no walk), or, where a pack is cut short (:func:`cut_packs`), those a walk of the commit
    finds missing (:func:`missing_objects`: git reads each object, and a cut pack's are missing).  ``cut``: the
    caller's :func:`cut_packs` of ``repo``, when it has just read them."""
    wanted = set(ids)
    if not (cut_packs(repo) if cut is None else cut):
        return wanted - held_objects(repo)
    return wanted & missing_objects(repo, commit)


def _has_ref(repo: Path, commit: str, refs: str = PARTIAL_REFS) -> bool:
    """Whether our partial ref for ``commit`` is there: :func:`bring` writes it last, after the commit, trees,
    the cone's blobs and the .gitignore fetch."""
    import git

    with _repo(repo) as r:
        try:
            return str(r.git.rev_parse("--verify", "--quiet", f"{refs}/{commit}")).strip() == commit
        except git.GitCommandError:
            return False


def lacking(repo: Path, commit: str, dirs: Sequence[str], *, who: str,
            cut: Sequence[Path] | None = None) -> list[str] | None:
    """None when the repository lacks the commit (or its trees); else the cone's paths it lacks (``cut``: as
    :func:`absent` takes it)."""
    if not _has_ref(repo, commit):
        return None
    blobs = cone_blobs(repo, commit, dirs, who=who)
    gone = absent(repo, commit, blobs.values(), cut=cut)
    return sorted(p for p, oid in blobs.items() if oid in gone)


def _cone_missing(repo: Path, commit: str, dirs: Sequence[str], gone: set[str], *, who: str) -> list[str]:
    """The cone's paths whose blobs are among ``gone`` (:func:`missing_objects`)."""
    return sorted(p for p, oid in cone_blobs(repo, commit, dirs, who=who).items() if oid in gone)


def _git(runner: Runner, step: str, argv: list[str], *, who: str, doing: str, source: str) -> None:
    try:
        runner.run(["git", *argv], step=step, env=git_env())
    except CommandFailed as exc:
        d = diagnose(exc.tail, what=f"'{who}'", url=source)
        raise FetchError(f"{who}: {doing} failed", expected="git to succeed",
                         found=f"exit {exc.returncode}: {d.found}", fix=f"{d.fix}; full log: {exc.log_path}") from None


def bring(runner: Runner, step: str, repo: Path, source: str, shown: str, commit: str, dirs: Sequence[str], *,
          who: str) -> bool:
    """Make ``repo`` (locked by the caller) hold ``commit``, its trees and the cone's blobs; True if any fetched."""
    from .diagnose import remove_partial_objects

    if removed := remove_partial_objects(repo):      # a killed fetch's shallow.lock fails every later one
        runner.note(step, f"# removed what a killed fetch left in {repo}: " + ", ".join(removed))
    if cut := cut_packs(repo):
        raise FetchError(f"{who}: the partial copy {repo} has {len(cut)} pack(s) cut short",
                         expected="each pack as long as its index says (ending in the checksum the index names)",
                         found=", ".join(f"{p.name}: {p.stat().st_size if p.exists() else 'no'} bytes" for p in cut),
                         fix=f"remove {repo} and re-run: it is fetched again from {shown} (an interrupted copy of a "
                             "cache leaves a pack like this; git would take its objects for present and fetch none)")
    need = lacking(repo, commit, dirs, who=who, cut=cut)        # none cut: refused above
    if need == []:
        return False            # nothing asked of the source, .gitignore blobs or not: a mirror an earlier
                                # version made stays offline-usable (its clones lack them, as before)
    if need is None and not _has_ref(repo, commit, TREES_REFS):
        _git(runner, step, ["-C", str(repo), "fetch", "--quiet", "--no-tags", "--filter=blob:none", "--depth=1",
                            *upload_pack(source), source, f"+{commit}:{TREES_REFS}/{commit}"],
             who=who, doing=f"fetching commit {commit} (trees only) from {shown}", source=shown)
    gone = missing_objects(repo, commit)
    ids = sorted({oid for p, oid in cone_blobs(repo, commit, dirs, who=who).items() if oid in gone})
    for i in range(0, len(ids), BLOBS_PER_FETCH):
        _git(runner, step, ["-C", str(repo), "-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet",
                            "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no", "--filter=blob:none",
                            *upload_pack(source), source, *ids[i:i + BLOBS_PER_FETCH]],
             who=who, doing=f"fetching {len(ids)} file(s) under {', '.join(dirs)} of {commit} from {shown}",
             source=shown)
    gone = missing_objects(repo, commit)
    still = _cone_missing(repo, commit, dirs, gone, who=who)
    if still:
        raise FetchError(f"{who}: {shown} did not send every file under {', '.join(dirs)} of {commit}",
                         expected="every blob of the sparse directories", found=f"{len(still)} missing: "
                         + ", ".join(still[:5]) + (" ..." if len(still) > 5 else ""),
                         fix=f"fetch from a complete copy of the submodule ({shown} may be damaged), "
                             "or remove the cache's partial mirror and re-run")
    bring_ignores(runner, step, repo, source, commit, gone=gone)
    # last: a mirror with this ref holds the cone and had its .gitignore fetch (a killed run's re-run redoes it)
    _git(runner, step, ["-C", str(repo), "update-ref", f"{PARTIAL_REFS}/{commit}", commit], who=who,
         doing="recording the sparse commit", source=shown)
    _git(runner, step, ["-C", str(repo), "update-ref", "-d", f"{TREES_REFS}/{commit}"], who=who,
         doing="recording the sparse commit", source=shown)
    return True


def ignore_blobs(repo: Path, commit: str) -> set[str]:
    """Ids of every ``.gitignore`` of ``commit`` (its trees present).  Once a folder outside the cone exists (a file
    of the user's put there), ``git status`` reads that folder's ``.gitignore`` from the object store: a partial
    clone without it fails every look (ours never fetch lazily) where it should name the user's file."""
    with _repo(repo) as r:
        listing = parse_ls_tree(r.git.ls_tree("-r", "-z", commit))
    return {oid for p, (typ, oid) in listing.items() if typ == "blob" and p.rpartition("/")[2] == ".gitignore"}


def bring_ignores(runner: Runner, step: str, repo: Path, source: str, commit: str, *, local: bool = False,
                  gone: set[str] | None = None) -> None:
    """``repo`` (locked by the caller, holding ``commit``'s trees) gets the :func:`ignore_blobs` it lacks from
    ``source``, as far as ``source`` has them: a copy without them (a kit made by an earlier version) leaves them
    out, as before, and ``git status`` then fails only where a folder outside the cone is made.  ``local``: from
    the cache's mirror, never further (its upload-pack may not fetch lazily from the mirror's own source).
    ``gone``: the caller's :func:`missing_objects` of ``repo``, when it has just read them (else :func:`absent`)."""
    blobs = ignore_blobs(repo, commit)
    ids = sorted(absent(repo, commit, blobs) if gone is None else blobs & gone)
    if ids:
        env = dict(git_env(), GIT_NO_LAZY_FETCH="1", GIT_ALLOW_PROTOCOL="file") if local else git_env()
        runner.run(["git", "-C", str(repo), "-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "--no-tags",
                    "--no-write-fetch-head", "--recurse-submodules=no", "--filter=blob:none", *upload_pack(source),
                    source, *ids], step=step, env=env, check=False)


def serve_config(runner: Runner, step: str, repo: Path) -> None:
    """Let clones of ``repo`` ask it for filters and objects by id (a lazy fetch from a checkout)."""
    for key, value in SERVE_CONFIG:
        runner.run(["git", "-C", str(repo), "config", key, value], step=step, env=git_env())


def partial_or_sparse(work: Path) -> bool:
    """Whether a (submodule) work tree is a partial clone or a sparse checkout (read from its files)."""
    gd = git_dir(work)
    if gd is None:
        return False
    config = config_items(gd)
    promisor = any(k.startswith("remote.") and k.endswith(".promisor") and truth(v) for k, v in config)
    return promisor or truth(value_in(config, "core.sparsecheckout"))


def cone_problem(work: Path, dirs: Sequence[str]) -> str | None:
    """None when the work tree is a cone-mode sparse checkout of exactly ``dirs`` (read from files); else why not."""
    gd = git_dir(work)
    if gd is None:
        return f"{work} is not a git work tree"
    config = config_items(gd)
    if not truth(value_in(config, "core.sparsecheckout")):
        return f"{work} is not a sparse checkout (core.sparseCheckout is not true)"
    if not truth(value_in(config, "core.sparsecheckoutcone")):
        return f"{work} is a sparse checkout, not in cone mode (core.sparseCheckoutCone is not true)"
    try:
        lines = (gd / "info" / "sparse-checkout").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return f"{work} has no sparse-checkout file"
    listed = {ln.strip().strip("/") for ln in lines if ln.strip() and not ln.startswith("!") and ln.strip() != "/*"}
    want = {p for p in parents(dirs) if p} | set(dirs)       # the kept directories and their parents
    # the negative lines too: "!/cub/cub/*/" makes a kept directory a parent (its subfolders leave on the next
    # checkout or `git sparse-checkout reapply`), and hidden.py's cone is read from this same file
    listed |= {ln.strip() for ln in lines if ln.strip().startswith("!") or ln.strip() == "/*"}
    want |= {"/*", "!/*/"} | {f"!/{p}/*/" for p in parents(dirs)
                              if p and not any(p == d or p.startswith(d + "/") for d in dirs)}
    if listed != want:
        return (f"{work} keeps {', '.join(sorted(listed)) or 'nothing'}, not {', '.join(sorted(want))} "
                "(its sparse-checkout cone was changed)")
    return None
