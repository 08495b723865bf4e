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
from pathlib import Path
from typing import Any, Callable, Mapping

from . import fix as fixes
from . import jit as verify_jit
from ..core import jsonread
from ..core.errors import LockError, StateError
from ..core.hashing import sha256_file
from ..core.paths import StackPaths
from ..core.stackmutex import StackLock
from ..engine import read_marker, written_sha256
from ..lock.pylock import TOOL, read_lock
from ..pyenv import stackenv
from ..pyenv.dists import installed
from .env import (Bytes, check_bytecode, check_distributions, check_env_scaffold, check_files, check_locked_files,
                  check_records, check_system, check_torch, check_unowned)
from .forks import check_build_outputs, check_forks, fork_dir, fork_entries
from .report import Difference, VerifyReport


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
    forks = [fork_dir(paths, n, e) for n, e in fork_entries(lock).items()]
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
    checked = {"forks": len(fork_entries(lock)), "build_outputs": outputs, "distributions": len(dists),
               "files": files, "bytecode": bytecode, "jit": jit_count, "wheel": int(bool(((lock.get("tool") or {}).get(TOOL) or {}).get("wheel")))}
    return VerifyReport(stack=paths.root, lock_sha256=sha256_file(paths.pylock), checked=checked,
                        differences=tuple(diffs))
