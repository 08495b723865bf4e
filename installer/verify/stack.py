"""``current verify --install STACK``: is the live stack still what its lock and receipts say?

Offline and read-only: no network, no install, no write into the stack.  Every difference is
collected first (pypa/installer's ``validate_record`` style), then reported together:

* the lock file is the one the setup receipt recorded (sha256);
* ``STACK/stack-env.json`` and ``STACK/activate`` are as the env step wrote them (sha256);
* each fork clone: HEAD at the locked ``commit-id``, no local changes (unless the receipt
  recorded the tree as dirty under ``--allow-dirty``), submodules at the commits fetch recorded;
* each fork's build outputs (the files git ignores that its install left in the checkout: vLLM's
  ``_C.abi3.so``, FlashInfer's ``data/`` links) with the digests the install step recorded, and no
  other such file (see :mod:`.outputs`);
* every distribution in the stack env against the lock: nothing extra, nothing missing, the
  locked version; forks installed editable from ``STACK/src/<fork>``;
* every file each distribution's RECORD lists with a hash still has that hash (and exists), each RECORD
  is the one its install wrote (the install step records their sha256), and every file in the env that
  no RECORD owns is named (``.pth`` first; see :mod:`october.installer.pyenv.unowned`);
* every ``__pycache__`` bytecode file in the env and the fork clones that Python would load instead of
  its source is its source's code, compared in the stack's Python (see :mod:`october.installer.pyenv.bytecode`);
* torch is the locked build (version with its local tag, e.g. ``2.10.0+cu128``): in the env, or, for
  a site-provided torch (``[tool.october.system]``), none in the env and the recorded one in place;
* the base wheel in ``STACK/wheels`` has the locked sha256;
* every JIT library FlashInfer can load (workspace and AOT copies) has the sha256 the lock
  recorded, and none other exists (see :mod:`.jit`).

Submodules the recipe did not select are gitlinks, not checkouts: they must stay uninitialized.
Each difference carries the command that puts it back (:mod:`.fix`).

Distributions are read from their ``.dist-info`` directories, so a stack whose Python no longer runs can
still be verified; the one process verify starts is the stack's Python, to read its bytecode (a stack
with none Python would load starts none).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from packaging.utils import canonicalize_name

from . import fix as fixes
from . import jit as verify_jit
from . import outputs as verify_outputs
from ..core import jsonread
from ..core.errors import LockError, StateError
from ..core.hashing import sha256_file
from ..core.paths import StackPaths
from ..core.stackmutex import StackLock
from ..core.redact import redact_url
from ..engine import read_marker, written_sha256
from ..lock.pylock import TOOL, read_lock
from ..pyenv import bytecode as verify_bytecode
from ..pyenv import scaffold, stackenv
from ..pyenv import unowned as verify_unowned
from ..pyenv.systorch import same_build
from ..pyenv.venv import earlier_uv_files, torch_cuda, uv_own, uv_venv_files
from ..pyenv.dists import Dist, dists_in, installed, record_hash, record_rows

MAX_FILES_LISTED = 20


def _listed(items: Sequence[Any], sep: str, show: Callable[[Any], str] = str) -> str:
    """The first MAX_FILES_LISTED of ``items``, each as ``show`` gives it, joined by ``sep``, then how many
    more (``show`` runs on the listed ones only)."""
    more = f"{sep}... {len(items) - MAX_FILES_LISTED} more" if len(items) > MAX_FILES_LISTED else ""
    return sep.join(show(item) for item in items[:MAX_FILES_LISTED]) + more


@dataclass(frozen=True)
class Difference:
    check: str          # steps | forks | distributions | files | torch | system | wheel | jit | lock | receipt | stack-env | env
    what: str
    expected: str
    found: str
    fix: str = ""       # the command that puts it back (verify/fix.py)

    def line(self) -> str:
        return f"[{self.check}] {self.what}: expected {self.expected}, found {self.found}"

    def as_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class VerifyReport:
    stack: Path
    lock_sha256: str
    checked: Mapping[str, int]                    # check -> how many items were looked at
    differences: tuple[Difference, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.differences

    def as_json(self) -> dict[str, Any]:
        return {"stack": str(self.stack), "ok": self.ok, "lock_sha256": self.lock_sha256,
                "checked": dict(self.checked), "differences": [d.as_json() for d in self.differences]}

    def error(self) -> LockError:
        lines = "\n".join(f"  - {d.line()}" for d in self.differences)
        todo = list(dict.fromkeys(d.fix for d in self.differences if d.fix))     # in order, each once
        fix = todo[0] if len(todo) == 1 else "\n     ".join(f"{i}. {t}" for i, t in enumerate(todo, 1))
        return LockError(f"the stack {self.stack} differs from its lock in {len(self.differences)} place(s):\n{lines}",
                         fix=(fix + "\n     then run `current verify` again") if fix else None)


def check_lock_file(paths: StackPaths, receipt: Mapping[str, Any]) -> list[Difference]:
    want = (receipt.get("lock") or {}).get("sha256")
    got = sha256_file(paths.pylock)
    if want and want != got:
        return [Difference("lock", str(paths.pylock), f"sha256 {want} (as the setup receipt recorded)",
                           f"sha256 {got}", fixes.rewrite_lock(paths, receipt))]
    return []


def check_receipt_file(paths: StackPaths, receipt: Mapping[str, Any], lock: Mapping[str, Any]) -> list[Difference]:
    """setup.json as the receipt step wrote it (its marker's sha256): the smoke reads the stack's promise
    and recipe from it, so an edited receipt is named, never believed."""
    want = written_sha256(paths.marker("receipt"))
    got = sha256_file(paths.setup_receipt)
    if want is not None and want != got:
        return [Difference("receipt", str(paths.setup_receipt), f"sha256 {want} (as the receipt step wrote it)",
                           f"sha256 {got}: it was changed since", fixes.rewrite_receipt(paths, lock))]
    return []


RECORDED_STEPS = ("fetch", "env", "install", "jit", "receipt")   # the steps whose record verify holds the stack to


def check_steps(paths: StackPaths, receipt: Mapping[str, Any], rerun: str) -> list[Difference]:
    """Each step whose record (``.state/<step>.json``, its marker) the checks here hold the stack to (the fork
    clones' submodules and cones, the env's scaffold and stack environment, the distributions' RECORDs and the
    forks' build outputs, the JIT libraries, setup.json itself), readable where the receipt names the step (the
    receipt step: where it names any).  Without one the step is not done for setup (its no-op runs it again: a
    later run began it and did not finish, or the record was removed), and those checks would compare with
    nothing: an env edited where only its record names it, a receipt edited after its step wrote it, passed."""
    steps = receipt.get("steps")
    names = [str(s["name"]) for s in steps if isinstance(s, dict) and isinstance(s.get("name"), str)] \
        if isinstance(steps, list) else []
    if not names:
        return []
    held = [name for name in RECORDED_STEPS if name in names or name == "receipt"]
    return [Difference("steps", str(paths.marker(name)), f"the {name} step's record, as the step wrote it when it "
                       "finished", "none (a later setup began the step again and did not finish it, or the record was "
                       "removed), or one that cannot be read or that another version of october wrote: setup takes "
                       "the step as not done", rerun)
            for name in held if read_marker(paths.marker(name)) is None]


# ------------------------------------------------------------------------- the stack's runtime environment


def check_stack_env(paths: StackPaths, receipt: Mapping[str, Any]) -> list[Difference]:
    """STACK/stack-env.json and STACK/activate as the env step wrote them (the sha256 of each its marker
    records; where the marker is gone, the setup receipt's record): jit, smoke and serving take the stack's
    environment from them, so an edited one is named, never believed.  Without a record, nothing to compare."""
    env_outputs = (read_marker(paths.marker("env")) or {}).get("outputs")
    rec = stackenv.recorded(env_outputs, receipt)
    if rec is None:
        return []
    changed = stackenv.changed_files(paths.root, rec)
    fix = fixes.rewrite_stack_env(paths, receipt) if changed else ""
    return [Difference("stack-env", str(c.path), c.expected_text(), c.found_text(), fix) for c in changed]


def _fork_entries(lock: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for p in lock.get("packages", []):
        tool = (p.get("tool") or {}).get(TOOL) or {}
        if tool.get("fork") and "vcs" in p:
            out[str(tool["fork"])] = {"name": str(canonicalize_name(p["name"])), "version": p.get("version"),
                                      "commit": p["vcs"]["commit-id"], "path": tool.get("path")}
    return out


def _fork_dir(paths: StackPaths, name: str, entry: Mapping[str, Any]) -> Path:
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
    for name, entry in sorted(_fork_entries(lock).items()):
        where = _fork_dir(paths, name, entry)
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
            shown = _listed([d.strip() for d in dirty] + [f for fs in changed_subs.values() for f in fs], "; ")
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
    forks = {name: _fork_dir(paths, name, e) for name, e in _fork_entries(lock).items()}
    looked, findings = verify_outputs.check(paths, forks, verify_jit.aot_dirs(paths, forks.values()))
    diffs = [Difference("forks", f"fork {f.fork} ({f.checkout}) build output {f.rel}".rstrip(" "),
                        f.expected, f.found, rerun) for f in findings if not f.unrecorded]
    for name in sorted({f.fork for f in findings if f.unrecorded}):
        extra = [f for f in findings if f.unrecorded and f.fork == name]
        diffs.append(Difference("forks", f"files in {extra[0].checkout} git does not track that no install recorded",
                                "only the build outputs the fork's install recorded",
                                f"{len(extra)} other file(s): {_listed([f.rel for f in extra], '; ')}",
                                fixes.remove_files([f.checkout / f.rel for f in extra])))
    return looked, diffs


def check_distributions(paths: StackPaths, lock: Mapping[str, Any], dists: Mapping[str, Dist],
                        rerun: str) -> list[Difference]:
    want = {str(canonicalize_name(p["name"])): str(p.get("version", "")) for p in lock.get("packages", [])}
    # a locked index file: installed from an index or find-links, which leaves no direct_url.json (PEP 610)
    from_index = {str(canonicalize_name(p["name"])) for p in lock.get("packages", []) if p.get("wheels")}
    forks = {e["name"]: (fork, e) for fork, e in _fork_entries(lock).items()}
    diffs: list[Difference] = []
    for name in sorted(set(want) | set(dists)):
        d = dists.get(name)
        if d is None:
            diffs.append(Difference("distributions", name, f"{name} {want[name]} installed (locked)", "not installed",
                                    rerun))
        elif name not in want:
            how = "editable" if d.editable_path else ("from " + redact_url(str((d.direct_url or {}).get("url")))
                                                     if d.direct_url else "from an index or a find-links folder")
            diffs.append(Difference("distributions", name, "only the locked distributions",
                                    f"{name} {d.version} installed ({how}), not in the lock", rerun))
        elif d.version != want[name]:
            diffs.append(Difference("distributions", name, f"version {want[name]}", f"version {d.version}", rerun))
        elif name in from_index and d.direct_url is not None and name not in forks:
            # the same version from another file (`uv pip install --reinstall x.whl`): its RECORD is its own
            diffs.append(Difference("distributions", name, f"{name} {d.version} from the locked index file",
                                    f"{name} {d.version} installed from "
                                    f"{redact_url(str(d.direct_url.get('url')))}", rerun))
        if d is not None and name in forks:
            fork, entry = forks[name]
            src = _fork_dir(paths, fork, entry).resolve()
            if d.editable_path != src:
                diffs.append(Difference("distributions", name, f"the fork {fork} installed editable from {src}",
                                        f"{d.editable_path or 'a non-editable copy'}", rerun))
    return diffs


def check_locked_files(paths: StackPaths, lock: Mapping[str, Any], dists: Mapping[str, Dist], rerun: str,
                       named: Sequence[Difference] = ()) -> list[Difference]:
    """Each index package installed from the file the lock names, where that wheel is a file here with the locked
    sha256 (a wheel republished under its file name: the lock hashed the new bytes, the env holds the old).  A
    distribution ``named`` already (its version, its source, its files or its RECORD) is not named twice."""
    from ..lock.installed import unlike_locked

    seen = {d.what.split(" ", 1)[0] for d in named if d.check in ("distributions", "files")}
    return [Difference("distributions", u.name, f"{u.name} {u.version} installed from the locked {u.wheel} "
                       f"(sha256 {u.sha256})", f"{len(u.files)} file(s) of its RECORD unlike that wheel's: "
                       + _listed(list(u.files), ", "), rerun)
            for u in unlike_locked(lock.get("packages", []), paths.env,
                                   {n: d for n, d in dists.items() if n not in seen})]


Bytes = Callable[[float, "float | None"], None]   # (done, total) bytes hashed, for a progress bar


def check_files(dists: Mapping[str, Dist], hashed: Bytes | None = None,
                fix: Callable[[list[str], list[Path]], str] = lambda _names, _files: ""
                ) -> tuple[int, list[Difference], set[str]]:
    """Every hashed RECORD entry of every distribution; -> (files checked, differences, every path
    a RECORD owns).  ``fix`` gets the distributions that differ and their changed files still there."""
    checked = 0
    diffs: list[Difference] = []
    records: dict[str, list[tuple[str, str, str]]] = {}
    for name, d in sorted(dists.items()):
        try:
            records[name] = list(record_rows(d))
        except OSError:
            diffs.append(Difference("files", f"{name} RECORD", f"{d.info / 'RECORD'}", "no RECORD file",
                                    fix([name], [])))
    owned = verify_unowned.owned_paths((dists[n].site, rel) for n, rows in records.items() for rel, _h, _s in rows)
    total = float(sum(int(size) for rows in records.values() for _p, h, size in rows if h and size.isdigit()))
    done = [0.0]

    def on_chunk(n: int) -> None:
        done[0] += n
        if hashed is not None:
            hashed(done[0], total or None)

    changed: list[tuple[str, Dist, list[str]]] = []
    differing: list[Path] = []
    for name, rows in records.items():
        d = dists[name]
        bad: list[str] = []
        for rel, recorded, _size in rows:
            if not recorded or "=" not in recorded:
                continue
            algo, _, value = recorded.partition("=")
            path = (d.site / rel).resolve()
            checked += 1
            try:
                if (d.site / rel).is_symlink():     # its bytes hash as recorded, but they are another file's
                    bad.append(f"{rel} (a link to {os.readlink(d.site / rel)})")
                    differing.append(d.site / rel)
                elif record_hash(path, algo, on_chunk) != value:
                    bad.append(f"{rel} (changed)")
                    differing.append(path)
            except FileNotFoundError:
                bad.append(f"{rel} (missing)")
            except (OSError, ValueError) as exc:
                bad.append(f"{rel} ({exc})")
        if bad:
            changed.append((name, d, bad))
    todo = fix([name for name, _d, _b in changed], differing)
    for name, d, bad in changed:
        diffs.append(Difference("files", f"{name} {d.version}", "every file as its RECORD hashes it",
                                f"{len(bad)} file(s) differ: {_listed(bad, ', ')}", todo))
    return checked, diffs, owned


def check_records(paths: StackPaths, dists: Mapping[str, Dist], rerun: str) -> list[Difference]:
    """Each distribution's RECORD as its install left it (the install step's record of their sha256): a RECORD
    rewritten since (the same version reinstalled from another index, or edited with the file it lists) hashes
    its own files.  A stack installed before the record: nothing."""
    recorded = _outputs(paths, "install").get("records")
    if not isinstance(recorded, dict):
        return []
    diffs: list[Difference] = []
    for name in sorted(set(recorded) & set(dists)):
        try:
            now = sha256_file(dists[name].info / "RECORD")
        except OSError:
            continue                    # a missing RECORD is check_files' finding
        if now != recorded[name]:
            diffs.append(Difference("files", f"{name} {dists[name].version} RECORD",
                                    f"the RECORD its install wrote (sha256 {str(recorded[name])[:12]})",
                                    f"another RECORD (sha256 {now[:12]}): reinstalled from elsewhere or edited since",
                                    rerun))
    return diffs


def _outputs(paths: StackPaths, step: str) -> dict[str, Any]:
    """The ``outputs`` of a step's marker ({} when there is none or it has none)."""
    outputs = (read_marker(paths.marker(step)) or {}).get("outputs")
    return outputs if isinstance(outputs, dict) else {}


def check_env_scaffold(paths: StackPaths, rerun: str) -> list[Difference]:
    """pyvenv.cfg and the bin/python* links as the env step left them (its marker's record): which interpreter
    runs the stack is decided there, and no RECORD owns them; the activation scripts and lib64 (its ``scripts``
    record).  Without a record (older stacks), nothing."""
    link = scaffold.linked(paths.env)
    if link is not None:        # what is in it is not this stack's: another's env, or a folder anyone may write
        return [Difference("env", str(paths.env), "the folder the env step made", link, rerun)]
    outputs = _outputs(paths, "env")
    rec, scripts = outputs.get("scaffold"), outputs.get("scripts")
    moved = [*(scaffold.changed(paths.env, rec) if isinstance(rec, dict) else []),
             *scaffold.scripts_changed(paths.env, scripts if isinstance(scripts, dict) else None)]
    return [Difference("env", str(path), f"{want} (as the env step left it)", found, rerun) for path, want, found in moved]


def check_unowned(paths: StackPaths, owned: set[str], named: Sequence[Difference] = ()) -> list[Difference]:
    """``named``: what another check already names (a planted bin/python: making the env again is its fix)."""
    system = _outputs(paths, "env").get("system_torch")
    skip = {d.what for d in named}
    extra = [p for p in verify_unowned.unowned(paths.env, owned, system if isinstance(system, dict) else None)
             if str(p) not in skip]
    if extra:       # what uv's own venv has (uv 0.12's _virtualenv.pth), held to the install step's record of it
        uvs = _outputs(paths, "install").get("venv_files")
        if not isinstance(uvs, dict):       # a stack set up before that record: what this tool's uv writes,
            uvs = {**earlier_uv_files(paths.env), **_uv_venv_files(paths)}     # or uv 0.12 did
        theirs = uv_own(paths.env, extra, uvs)
        extra = [p for p in extra if p.relative_to(paths.env).as_posix() not in theirs]
    if not extra:
        return []
    shown = _listed(extra, "; ", verify_unowned.describe)
    return [Difference("files", f"files in {paths.env} that no RECORD owns",
                       "every file owned by an installed distribution's RECORD (or the venv's own)",
                       f"{len(extra)} other file(s): {shown}", fixes.remove_files(extra))]


def _uv_venv_files(paths: StackPaths) -> dict[str, str]:
    """:func:`uv_venv_files` on the stack's interpreter; empty when uv cannot make one (nothing is excused)."""
    import subprocess

    from ..core.cachekey import without_key

    env = {k: v for k, v in without_key().items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    try:
        return uv_venv_files(lambda argv: subprocess.run(argv, env={**env, "UV_PYTHON_DOWNLOADS": "never"},
                                                         capture_output=True, check=True, timeout=120),
                             str(paths.python))
    except (OSError, subprocess.SubprocessError):
        return {}


def check_bytecode(paths: StackPaths, lock: Mapping[str, Any], rerun: str) -> tuple[int, list[Difference]]:
    """-> (bytecode files looked at, differences): bytecode Python would load that is not its source's code."""
    forks = [_fork_dir(paths, name, entry) for name, entry in sorted(_fork_entries(lock).items())]
    pairs = verify_bytecode.candidates([paths.env, *(f for f in forks if f.is_dir())])
    found = verify_bytecode.forged(paths.python, pairs)
    what = "bytecode in the env and the fork clones"
    expected = "each file Python loads instead of its source compiled from that source"
    if isinstance(found, str):
        return len(pairs), [Difference("files", what, expected, f"not checked: {found}", rerun)]
    if not found:
        return len(pairs), []
    shown = _listed(found, "; ", lambda f: f"{f[0]} ({f[1]})")
    # another release of the stack's Python (3.11.2 beside 3.11.7: one bytecode format) compiles some sources
    # otherwise, and this check cannot tell its bytecode from a forged one; removing either is safe
    return len(pairs), [Difference("files", what, expected, f"{len(found)} file(s) are other code than the stack's "
                                   f"Python compiles from their sources (forged, or written by another release of "
                                   f"that Python): {shown}",
                                   fixes.remove_files([p for p, _why in found], "Python runs them in place of their "
                                                      "sources") + " (Python compiles each from its source again)")]


def check_torch(lock: Mapping[str, Any], dists: Mapping[str, Dist], rerun: str) -> list[Difference]:
    tool = (lock.get("tool") or {}).get(TOOL) or {}
    want = (tool.get("toolchain") or {}).get("torch")
    system = (tool.get("system") or {}).get("torch") if isinstance(tool.get("system"), dict) else None
    if not want:
        return []
    d = dists.get("torch")
    got = d.version if d is not None else None
    if system is None:
        if got != want:
            return [Difference("torch", "torch build", f"torch {want} (the recipe's build)",
                               f"torch {got}" if got else "no torch", rerun)]
        return []
    # a site-provided torch: none in the env (it would shadow the system's), the recorded one in place
    if d is not None:
        return [Difference("torch", "torch build", f"no torch in the env (torch {want} from the system, "
                           f"{system.get('path')})", f"torch {got} installed in {d.site}", rerun)]
    where = Path(str(system.get("path") or ""))
    versions = [d.version for d in dists_in([where.parent], "torch-*.dist-info")] if system.get("path") else []
    if not (where / "__init__.py").is_file() or not set(versions) & set(same_build(str(want))):
        found = f"torch {', '.join(str(v) for v in versions)} there" if versions else f"no torch at {where}"
        return [Difference("torch", "system torch", f"torch {want} at {where} (recorded in [tool.october.system])",
                           found, rerun)]
    # the same version of another CUDA build (PyPI's 2.11.0 is cu128 and cu130 alike): its version.py says which
    if "cuda" in system:
        built = torch_cuda(where / "version.py")
        if built != system.get("cuda"):
            return [Difference("torch", "system torch", f"torch {want} built for CUDA {system.get('cuda')} at {where} "
                               "(recorded in [tool.october.system])",
                               f"a build for CUDA {built} ({where / 'version.py'})",
                               "put the recorded build back in that interpreter (this tool never changes it), or "
                               + rerun)]
    return []


def check_system(paths: StackPaths, lock: Mapping[str, Any], receipt: Mapping[str, Any]) -> list[Difference]:
    """A site-provided torch's interpreter: the distributions it gives the stack as the lock recorded them
    (``[tool.october.system.packages]``, in its ``sites``)."""
    from ..lock.drift import system_drift

    changed = system_drift(lock, paths.env)
    if not changed:
        return []
    return [Difference("system", "the distributions the stack takes from outside its env (the system "
                       "interpreter's site directories, [tool.october.system].sites of pylock.toml)",
                       "what [tool.october.system.packages] of pylock.toml records",
                       changed, "put them back in that interpreter (this tool never changes it), or "
                       + fixes.rewrite_lock(paths, receipt) + " as the stack now is")]


def check_wheel(paths: StackPaths, lock: Mapping[str, Any], rerun: str) -> list[Difference]:
    wheel = ((lock.get("tool") or {}).get(TOOL) or {}).get("wheel") or {}
    if not wheel.get("sha256") or not wheel.get("filename"):
        return []
    path = paths.wheels / str(wheel["filename"])
    if not path.is_file():
        return [Difference("wheel", str(path), f"the base wheel with sha256 {wheel['sha256']}", "no such file", rerun)]
    got = sha256_file(path)
    if got != wheel["sha256"]:
        return [Difference("wheel", str(path), f"sha256 {wheel['sha256']}", f"sha256 {got}", rerun)]
    return []


def check_jit(paths: StackPaths, lock: Mapping[str, Any], rerun: str) -> tuple[int, list[Difference]]:
    modules = ((lock.get("tool") or {}).get(TOOL) or {}).get("jit") or []
    # a hand-edited lock (its sha256 against the receipt is named by check_lock_file): only its tables count
    modules = [m for m in modules if isinstance(m, dict)] if isinstance(modules, list) else []
    forks = [_fork_dir(paths, n, e) for n, e in _fork_entries(lock).items()]
    looked, findings = verify_jit.check(paths, modules, forks)
    unrecorded = [f.path for f in findings if f.unrecorded]
    return max(looked, len(modules)), [
        Difference("jit", f"{f.uri} ({f.path})", f.expected, f.found,
                   fixes.remove_files(unrecorded) if f.unrecorded else rerun) for f in findings]


def read_stack_records(paths: StackPaths) -> tuple[dict[str, Any], dict[str, Any]]:
    """(setup receipt, lock) of a finished stack; a StateError naming what to run when absent."""
    if not paths.pylock.is_file() or not paths.setup_receipt.is_file():
        missing = [str(p) for p in (paths.pylock, paths.setup_receipt) if not p.is_file()]
        raise StateError(f"{paths.root} is not a finished october stack",
                         expected="STACK/pylock.toml and STACK/receipts/setup.json (written by the last steps)",
                         found=f"no {', '.join(missing)}", fix=fixes.not_a_stack(paths))
    try:
        receipt = jsonread.loads(paths.setup_receipt.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StateError("the stack's setup receipt is unreadable", expected=f"JSON in {paths.setup_receipt}",
                         found=str(exc), fix=fixes.rewrite_receipt(paths, _lock_if_readable(paths))) from None
    lock = receipt.get("lock") if isinstance(receipt, dict) else None
    if not isinstance(receipt, dict) or not isinstance(lock, (dict, type(None))) \
            or not isinstance((lock or {}).get("sha256"), (str, type(None))) \
            or not isinstance(receipt.get("forks"), (list, type(None))):
        raise StateError("the stack's setup receipt is malformed",
                         expected=f"a JSON object in {paths.setup_receipt} with lock.sha256 (a string) and forks (a list)",
                         found=json.dumps(receipt)[:200], fix=fixes.rewrite_receipt(paths, _lock_if_readable(paths)))
    try:
        return receipt, read_lock(paths.pylock)
    except LockError as exc:          # read_lock's fix is for a lock of a project (--locked): this one is the stack's
        raise LockError(exc.what, expected=exc.expected, found=exc.found,
                        fix=fixes.unreadable_lock(paths, receipt)) from None


def _lock_if_readable(paths: StackPaths) -> dict[str, Any]:
    """The stack's lock, or {} when it cannot be read (a fix line then asks for the recipe)."""
    try:
        return read_lock(paths.pylock)
    except LockError:
        return {}


def verify_stack(stack: Path, progress: Callable[[str], None] | None = None,
                 hashed: Bytes | None = None) -> VerifyReport:
    paths = StackPaths(stack.resolve())
    # a setup running on the stack changes what is read, and each fix would race it (exit 5, naming it)
    StackLock(paths.lockfile).require_free("then run current verify again")
    receipt, lock = read_stack_records(paths)
    rerun = fixes.rerun_locked(paths, receipt)
    dists = installed(paths.env)
    say = progress or (lambda _msg: None)
    diffs: list[Difference] = []
    say("lock file")
    diffs += check_steps(paths, receipt, rerun)
    diffs += check_lock_file(paths, receipt)
    diffs += check_receipt_file(paths, receipt, lock)
    diffs += check_stack_env(paths, receipt)
    scaffold_diffs = check_env_scaffold(paths, rerun)
    diffs += scaffold_diffs
    say("fork clones")
    diffs += check_forks(paths, lock, receipt, rerun)
    say("fork build outputs")
    outputs, output_diffs = check_build_outputs(paths, lock, rerun)
    diffs += output_diffs
    say("distributions")
    diffs += check_distributions(paths, lock, dists, rerun)
    files, file_diffs, owned = check_files(dists, hashed,
                                           lambda names, changed: fixes.changed_files(paths, receipt, names, changed))
    diffs += file_diffs
    diffs += check_records(paths, dists, rerun)
    diffs += check_locked_files(paths, lock, dists, rerun, diffs)
    say("files no RECORD owns")
    diffs += check_unowned(paths, owned, scaffold_diffs)
    say("bytecode")
    bytecode, bytecode_diffs = check_bytecode(paths, lock, rerun)
    diffs += bytecode_diffs
    diffs += check_torch(lock, dists, rerun)
    diffs += check_system(paths, lock, receipt)
    say("base wheel")
    diffs += check_wheel(paths, lock, rerun)
    say("JIT libraries")
    jit_count, jit_diffs = check_jit(paths, lock, rerun)
    diffs += jit_diffs
    checked = {"forks": len(_fork_entries(lock)), "build_outputs": outputs, "distributions": len(dists),
               "files": files, "bytecode": bytecode, "jit": jit_count, "wheel": int(bool(((lock.get("tool") or {}).get(TOOL) or {}).get("wheel")))}
    return VerifyReport(stack=paths.root, lock_sha256=sha256_file(paths.pylock), checked=checked,
                        differences=tuple(diffs))


def format_report(report: VerifyReport) -> Sequence[str]:
    c = report.checked
    lines = [f"checked {c['forks']} fork(s) ({c['build_outputs']} build output(s)), {c['distributions']} "
             f"distribution(s), {c['files']} file(s), "
             f"{c['jit']} JIT librar{'y' if c['jit'] == 1 else 'ies'}, {c['wheel']} base wheel"]
    if report.ok:
        lines.append(f"stack {report.stack} matches its lock (sha256 {report.lock_sha256[:12]})")
    return lines
