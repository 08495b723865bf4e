"""``current verify`` of the fork clones: each at its locked commit, clean (or dirty as the receipt recorded under
``--allow-dirty``), submodules at the commits fetch recorded and none the recipe did not select checked out; and
each fork's build outputs as the install step recorded them (:mod:`.outputs`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name

from . import fix as fixes
from . import jit as verify_jit
from . import outputs as verify_outputs
from ..core.paths import StackPaths
from ..engine import read_marker
from ..lock.pylock import TOOL
from .report import Difference, listed

def fork_entries(lock: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for p in lock.get("packages", []):
        tool = (p.get("tool") or {}).get(TOOL) or {}
        if tool.get("fork") and "vcs" in p:
            out[str(tool["fork"])] = {"name": str(canonicalize_name(p["name"])), "version": p.get("version"),
                                      "commit": p["vcs"]["commit-id"], "path": tool.get("path")}
    return out


def fork_dir(paths: StackPaths, name: str, entry: Mapping[str, Any]) -> Path:
    return paths.root / str(entry.get("path") or f"src/{name}")


def _selection(fetched: Mapping[str, Any], receipt_fork: Mapping[str, Any]) -> list[str] | None:
    """The recipe's submodule selection as fetch recorded it (None: all of them)."""
    for where, key in ((fetched, "submodule_paths"), (receipt_fork, "submodules_selected")):
        if isinstance(where.get(key), list):
            return [str(p) for p in where[key]]
    return None


def check_forks(paths: StackPaths, lock: Mapping[str, Any], receipt: Mapping[str, Any], rerun: str) -> list[Difference]:
    from ..git.clonecheck import GitInspectError
    from ..git.hidden import Hidden
    from ..git.sparse import cone_problem, partial_or_sparse
    from ..git.worktree import dirty_entries, head_commit, kept_branch, selected, submodule_states, unheld

    fetch = read_marker(paths.marker("fetch")) or {}
    recorded = (fetch.get("outputs") or {}).get("forks") or {}
    receipt_forks = {f.get("name"): f for f in receipt.get("forks") or [] if isinstance(f, dict)}
    diffs: list[Difference] = []
    for name, entry in sorted(fork_entries(lock).items()):
        where = fork_dir(paths, name, entry)
        what = f"fork {name} ({where})"
        head = head_commit(where)
        if head is None:
            diffs.append(Difference("forks", what, f"a git clone at {entry['commit']}", "no clone", rerun))
            continue
        if head != entry["commit"]:
            keep = (f" (HEAD's commit, which no branch holds, is kept first as the branch {kept_branch(head)})"
                    if unheld(where, head, entry["commit"]) else "")
            diffs.append(Difference("forks", what, f"HEAD at {entry['commit']}", f"HEAD at {head}", rerun + keep))
        if partial_or_sparse(where):    # its skip-worktree files missing from disk are no local change to hidden.py
            diffs.append(Difference("forks", what, "a whole checkout (as set up)",
                                    "a sparse or partial checkout (core.sparseCheckout or a promisor remote)", rerun))
        try:
            states = submodule_states(where)
            dirty = dirty_entries(where, [s.path for s in states if s.flag != "-"], exact=True)
        except GitInspectError as exc:      # e.g. a submodule's git directory (.git/modules/...) removed
            # git's last line names the folder it will not read (the clone, a submodule or its git directory)
            owned = re.search(r"safe\.directory '?([^']+?)'?$", str(exc))
            diffs.append(Difference("forks", what, "a clone git can read (`git status`, `git submodule status`)",
                                    "owned by another user: git will not read it as this one" if owned else
                                    f"git cannot read it: {exc}",
                                    fixes.unreadable_clone(paths, receipt, where, Path(owned[1]) if owned else None)))
            continue
        if dirty and not (receipt_forks.get(name) or {}).get("dirty"):
            changed_subs = _changed_submodules(where, dirty, [s.path for s in states if s.flag != "-"])
            shown = listed([d.strip() for d in dirty] + [f for fs in changed_subs.values() for f in fs], "; ")
            diffs.append(Difference("forks", what, "a clean tree (as set up)", f"local changes: {shown}",
                                    fixes.dirty_fork(paths, receipt, where, sorted(changed_subs),
                                                     hidden=any(isinstance(d, Hidden) for d in dirty))))
        fetched = recorded.get(name) or {}
        subs = fetched.get("submodules")
        if not isinstance(subs, dict):
            continue
        chosen = _selection(fetched, receipt_forks.get(name) or {}) if subs else []
        for s in states:
            if s.path not in subs and not selected(s.path, chosen):
                if s.flag == "-":
                    continue              # not selected: a gitlink, left uninitialized, as set up
                diffs.append(Difference("forks", f"{what} submodule {s.path}",
                                        "not checked out (the recipe does not select it)",
                                        f"checked out at commit {s.commit}", fixes.unselected_submodule(where, s.path)))
            elif subs.get(s.path) != s.commit or s.flag != " ":
                now = "not checked out" if s.flag == "-" else f"commit {s.commit}"
                diffs.append(Difference("forks", f"{what} submodule {s.path}",
                                        f"commit {subs.get(s.path) or '(none)'}", now,
                                        fixes.moved_submodule(where, s.path)))
        sparse = fetched.get("sparse") if isinstance(fetched.get("sparse"), dict) else {}
        for sub, dirs in sorted(sparse.items()):
            kept = [str(d) for d in dirs] if isinstance(dirs, list) else []
            bad = cone_problem(where / sub, kept) if kept else "the fetch record's sparse directories are unreadable"
            if bad is not None:
                diffs.append(Difference("forks", f"{what} submodule {sub}",
                                        f"a sparse checkout of {', '.join(kept) or '(unknown)'} (as set up)", bad, rerun))
        gone = sorted(set(subs) - {s.path for s in states})
        diffs += [Difference("forks", f"{what} submodule {p}", f"commit {subs[p]}", "no such submodule", rerun)
                  for p in gone]
    return diffs


def _changed_submodules(fork: Path, dirty: Sequence[str], checked_out: Sequence[str]) -> dict[str, list[str]]:
    """Each checked-out submodule ``git status`` shows as changed (`` M sub``), with the changes inside it
    (``sub/file``): what changed there, which the fork's own status does not name."""
    from ..git.clonecheck import GitInspectError, exact_text

    out: dict[str, list[str]] = {}
    for line in dirty:
        sub = line[3:] if len(line) > 3 and line[2] == " " else ""
        if sub in checked_out:
            try:
                inner = exact_text(fork / sub, "status", "--porcelain", "--untracked-files=all")
            except GitInspectError:
                inner = ""
            out[sub] = [f"{ln[:2].strip()} {sub}/{ln[3:]}" for ln in inner.splitlines() if ln.strip()]
    return out


def check_build_outputs(paths: StackPaths, lock: Mapping[str, Any], rerun: str) -> tuple[int, list[Difference]]:
    """Each fork's build outputs as its install recorded them, and none other (see :mod:`.outputs`)."""
    forks = {name: fork_dir(paths, name, e) for name, e in fork_entries(lock).items()}
    looked, findings = verify_outputs.check(paths, forks, verify_jit.aot_dirs(paths, forks.values()))
    diffs = [Difference("forks", f"fork {f.fork} ({f.checkout}) build output {f.rel}".rstrip(" "),
                        f.expected, f.found, rerun) for f in findings if not f.unrecorded]
    for name in sorted({f.fork for f in findings if f.unrecorded}):
        extra = [f for f in findings if f.unrecorded and f.fork == name]
        diffs.append(Difference("forks", f"files in {extra[0].checkout} git does not track that no install recorded",
                                "only the build outputs the fork's install recorded",
                                f"{len(extra)} other file(s): {listed([f.rel for f in extra], '; ')}",
                                fixes.remove_files([f.checkout / f.rel for f in extra])))
    return looked, diffs
