"""The built-stack cache, step side: a finished stack's env and fork build outputs reused for a second
stack with the same key (storing, checking and copying: :mod:`october.installer.pyenv.builtstack`).
The env step copies the env; the install step copies the forks' build outputs from the same entry, or,
having built the stack itself, stores it."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import cachekey
from ..core.hashing import fingerprint
from ..core.errors import DISK_FULL_ERRNOS, EnvError, InstallError
from ..engine import StepContext
from ..git.hidden import hidden_entries
from ..install import overwritten
from ..install.plan import ForkSource
from ..pyenv import scaffold, venv
from ..pyenv.venv import python_matches
from .env import EnvStep, system_torch_env_problem, write_stack_env
from .results import EnvResult, FetchResult, PreflightResult, WheelResult

if TYPE_CHECKING:
    from ..pyenv import builtstack

# builtstack is imported where it is used, not on a no-op re-run


def stack_key(ctx: StepContext, step: str) -> str | None:
    """This stack's built-stack cache key, or None when it may not take or give an entry (a dirty fork, a
    base wheel trusted on first use, a stack path a URL would quote, a system torch not located)."""
    fetch = ctx.result(FetchResult)
    if fetch is None or any(rec.dirty or rec.dirty_allowed for rec in fetch.forks.values()):
        return None
    return _key(ctx, step, {name: {"commit": rec.commit, "submodules": rec.submodules, "sparse": rec.sparse}
                            for name, rec in fetch.forks.items()}, [Path(rec.path) for rec in fetch.forks.values()])


def recipe_key(ctx: StepContext, step: str) -> str | None:
    """What names this stack's entry before its forks are fetched: the key without the forks' commits, with the
    fetch step's inputs (each fork's URL, pin and submodule and sparse settings) in their place.  Only for the
    guess of :mod:`october.installer.steps.envearly`: the entry it names is taken only under :func:`stack_key`."""
    from .fetch import FetchStep

    key = _key(ctx, step, {})
    return fingerprint({"key": key, "fetch": FetchStep().inputs(ctx)}) if key is not None else None


def _key(ctx: StepContext, step: str, forks: Mapping[str, Mapping[str, Any]], checkouts: Sequence[Path] = ()) -> str | None:
    """The key; ``checkouts``: the forks' (the local files their ``[tool.uv.sources]`` and static dependencies name
    are named by their bytes too)."""
    from ..core.pyproject import dependencies
    from ..lock.asked import asked_files, uv_sources
    from ..pyenv import builtkey
    from .indexcheck import recipe_lines
    from .install import InstallStep
    from .preflight import uv_line

    root, r, o = ctx.paths.root, ctx.recipe, ctx.options
    if o.allow_dirty or not builtkey.path_ok(root) or (r.wheel is not None and r.wheel.sha256 is None):
        return None
    signing = cachekey.load_key(cache=o.cache_dir)
    if signing is None:             # nothing can be signed or taken (store_built_stack says why)
        return None
    facts = None
    if r.torch.from_system:
        pre = ctx.result(PreflightResult)
        facts = pre.facts.get("system_torch") if pre is not None else None
        if not isinstance(facts, Mapping) or not facts.get("file"):
            return None
    return builtkey.key_for(
        root, env_inputs=EnvStep().inputs(ctx), install_inputs=InstallStep().inputs(ctx),
        wheel_sha256=r.wheel.sha256 if r.wheel is not None else None, forks=forks,
        uv_line=uv_line(ctx, step), system_torch=facts, signer=cachekey.key_id(signing),
        files=asked_files([*recipe_lines(ctx), *(f"{name} @ {url}" for name, url, _ in uv_sources(checkouts)),
                           *(line for checkout in checkouts for line in dependencies(checkout))], outside=root))


def note_recipe_key(ctx: StepContext, step: str, key: str) -> None:
    """Remember that this recipe's stacks take the entry of ``key`` (for the next one to copy its env ahead)."""
    from ..pyenv import builtstack

    named = recipe_key(ctx, step)
    if named is not None:
        builtstack.note_recipe_key(ctx.options.cache_dir, named, key)


def env_from_built_stack(ctx: StepContext, step: str) -> EnvResult | None:
    """The env copied from the built-stack cache entry of this stack's key, checked as the env step checks
    a new one; None when there is no usable entry (a refused one is removed: this stack is then built)."""
    try:
        return _env_from_entry(ctx, step)
    finally:
        take_ahead(ctx, None)       # a copy made ahead and not taken (not this stack's entry's) is removed


def _env_from_entry(ctx: StepContext, step: str) -> EnvResult | None:
    from ..pyenv import builtkey, builtrestore, builtstack

    if os.path.lexists(ctx.paths.env):
        return None         # a stack's own env made again (an input of env changed, or it no longer verifies)
    key = stack_key(ctx, step)
    entry = builtstack.find(ctx.options.cache_dir, key) if key is not None else None
    if key is None or entry is None:
        return None
    root = ctx.paths.root
    facts = builtkey.placed(entry.facts, root)
    moved = builtrestore.interpreter_moved(facts)
    if moved is not None:
        ctx.ui.detail(f"built-stack cache entry {entry.path}: its interpreter {moved} changed; building")
        return None
    ctx.ui.info(f"copying the env of an identical stack from the cache ({entry.path})")
    builtstack.mark_used(entry)     # before the copy: a prune beside it sees the entry in use
    ahead = take_ahead(ctx, entry)      # copied during the fetch from the entry the recipe named (envearly)
    wrote: dict[str, str] = {}
    try:
        if ahead is not None:
            hashed, wrote = ahead
        else:
            hashed = builtrestore.restore_env(entry, ctx.paths.env, root, wrote=wrote)
        builtrestore.vouch_copied(ctx.trust, hashed)
    except (builtstack.EntryRefused, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            raise                   # this stack's disk, not the entry: kept for the next stack (exit 19, disk full)
        refuse_entry(ctx, step, entry, str(exc))
        return None
    env = facts.get("env") or {}
    result = EnvResult(path=str(ctx.paths.env), python=str(ctx.paths.python), python_version=venv.pyvenv_version(ctx.paths.env),
                       torch=env.get("torch"), torch_cuda=env.get("torch_cuda"), torch_source=env.get("torch_source"),
                       system_torch=env.get("system_torch"), site_packages=tuple(venv.site_packages(ctx.paths.env)),
                       stack_env=write_stack_env(ctx), built_from=key)
    problem = (system_torch_env_problem(ctx, result) if ctx.recipe.torch.from_system
               else None if venv.dist_info_present(ctx.paths.env, "torch", ctx.recipe.torch.version)
               else f"torch {ctx.recipe.torch.version} is not in it")
    if problem is None and not python_matches(ctx.recipe.python, result.python_version):
        problem = f"Python {result.python_version}, not {ctx.recipe.python}"
    if problem is not None:
        refuse_entry(ctx, step, entry, problem)
        return None
    result = dataclasses.replace(result, scaffold=scaffold.record(ctx.paths.env), scripts=scaffold.scripts(ctx.paths.env))
    require_restored_scaffold(entry, wrote, {**result.scaffold, **result.scripts}, ctx.paths.env)
    ctx.runner.note(step, f"# env copied from the built-stack cache entry {entry.path}"
                    + (" (during the fetch)" if ahead is not None else ""))
    if ahead is None:
        note_recipe_key(ctx, step, key)
    return result


def require_restored_scaffold(entry: "builtstack.Entry", wrote: Mapping[str, str], found: Mapping[str, str],
                              env: Path) -> None:
    """The venv's own files (``pyvenv.cfg``, ``bin/python*``, the activation scripts: no RECORD holds them), as the
    env step records them (``found``), are what the copy from ``entry`` wrote (``wrote``: :func:`~october.installer.
    pyenv.builtrestore.restore_env`'s, not the entry read again, which may be gone by now): one changed, removed or
    added since (a writer in the stack while it was copied, or waited for the fetch) would be recorded as the env's
    own, and the no-op and ``current verify`` would hold the stack to it."""
    rows = entry.manifest["files"]["env"]
    want = {rel: scaffold.described(wrote.get(rel)) if row.get("kind") != "dir" else "not a file"
            for rel, row in rows.items() if scaffold.owns(rel)}
    for rel in sorted(set(want) | set(found)):
        if want.get(rel) != found.get(rel):
            raise EnvError(f"the env's {rel} changed after it was copied from the built-stack cache entry "
                           f"{entry.path}", expected=f"what the copy wrote there ({want.get(rel) or 'no such file'})",
                           found=f"{found.get(rel) or 'no such file'} in {env}",
                           fix="find what writes into the stack while october_setup runs, then re-run october_setup "
                               "(the env is made again)")


def take_ahead(ctx: StepContext, entry: "builtstack.Entry | None"
               ) -> "tuple[dict[Path, builtstack.Hashed], dict[str, str]] | None":
    """The env copied during the fetch (:class:`~october.installer.steps.envearly.EarlyEnv`) when it was copied
    from ``entry`` (this stack's own key's), put in place -> what the copy hashed and wrote; else None, and a copy
    from another is removed."""
    from .envearly import EarlyEnv, ahead_dir

    early = ctx.early.pop(EnvStep.name, None)
    if isinstance(early, EarlyEnv):
        return early.take(ctx, entry)
    shutil.rmtree(ahead_dir(ctx), ignore_errors=True)       # a killed run's copy: never taken
    return None


def env_copied_now(ctx: StepContext) -> "builtstack.Entry | None":
    """The built-stack cache entry this run's env step copied the env from (its bytes are the entry's, so a
    file that does not match its RECORD is the entry's fault), or None: an env made here, or copied by an
    earlier run (a file edited since is this stack's, put back like any other)."""
    from ..pyenv import builtstack

    key = env_copied_this_run(ctx)
    return builtstack.find(ctx.options.cache_dir, key) if key is not None else None


def env_copied_this_run(ctx: StepContext) -> str | None:
    """The key of the built-stack cache entry this run's env step copied the env from, or None."""
    rec = ctx.done.get(EnvResult.step)
    env = rec.result if rec is not None and rec.status == "ran" else None
    return env.built_from if isinstance(env, EnvResult) else None


def refuse_entry(ctx: StepContext, step: str, entry: "builtstack.Entry", why: str, *, drop_env: bool = True) -> None:
    """Say why a built-stack cache entry is not used and remove it (``drop_env``: and its copy in the env)."""
    from ..pyenv import builtstack

    done = builtstack.discard_entry(entry)
    ctx.ui.warn(f"the built-stack cache entry {entry.path} was refused ({why}); " + {
        "removed": "removed it", "gone": "it was removed meanwhile (pruned, or refused by another run)",
        "replaced": "another run has stored it again since: kept"}[done] + ", building this stack")
    ctx.runner.note(step, f"# built-stack cache entry {entry.path} refused: {why}")
    if drop_env:
        remove_copied_env(ctx)


def remove_copied_env(ctx: StepContext) -> None:
    """Remove the env copied this run, and what was vouched for in it (gone with it)."""
    shutil.rmtree(ctx.paths.env, ignore_errors=True)
    ctx.trust.unvouch(ctx.paths.env)


def forks_from_built_stack(ctx: StepContext, step: str, forks: list[ForkSource]
                           ) -> tuple["builtstack.Entry | None", dict[str, Any] | None]:
    """Each fork's build outputs copied into its checkout from the entry this run copied the env from, when it
    still holds (same key and base wheel); -> (the entry, its build's nested-install verdicts), or (None, None).
    Not from an env an earlier run copied (a re-run after a failed install): the forks' editable installs in it
    may have been changed since, with their RECORD rows (the tamper hunt), so the forks are installed again."""
    from ..pyenv import builtrestore, builtstack

    key = env_copied_this_run(ctx)
    if key is None or stack_key(ctx, step) != key:
        return None, None
    entry = builtstack.find(ctx.options.cache_dir, key)
    wheel = ctx.result(WheelResult)
    if entry is None or entry.facts.get("wheel_sha256") != (wheel.wheel_sha256 if wheel else None):
        return None, None

    def announce(name: str, _checkout: Path) -> None:
        ctx.ui.info(f"fork {name}: its build outputs from the cache ({entry.path})")

    hashed: dict[Path, builtstack.Hashed] = {}
    try:
        nested_out = builtrestore.restore_forks(
            entry, [(f.use.name, f.path) for f in forks], ctx.paths.root, announce=announce,
            changed_tracked=lambda checkout: overwritten.changed_tracked(ctx.runner, step, checkout), hashed=hashed)
    except builtstack.InTheWay as exc:
        ctx.ui.warn(f"the fork build outputs are not copied from the cache ({exc}); building them (the entry "
                    f"{entry.path} is kept)")
        ctx.runner.note(step, f"# built-stack cache entry {entry.path} not used for the forks: {exc}")
        return None, None
    except (builtstack.EntryRefused, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            raise
        refuse_entry(ctx, step, entry, str(exc), drop_env=False)
        return None, None
    builtrestore.vouch_copied(ctx.trust, hashed, as_record=False)     # their record reads none of them again
    ctx.runner.note(step, f"# fork build outputs copied from the built-stack cache entry {entry.path}")
    return entry, nested_out


def restored_outputs(entry: "builtstack.Entry | None", fork: str) -> frozenset[str]:
    """The build outputs of ``fork`` the entry put in place (each one hashed against its manifest), or none."""
    if entry is None:
        return frozenset()
    return frozenset(entry.manifest["files"]["forks"].get(fork) or {})


def require_restored_outputs(entry: "builtstack.Entry | None", recorded: Mapping[str, Mapping[str, str]],
                             root: Path) -> None:
    """Each fork build output put in place from ``entry`` (a file, the stack's path placed in it or not, or a link)
    recorded as the entry made it at ``root``: one changed between its copy and its record (the tamper hunt: a
    same-size edit with its mtime put back, a link pointed elsewhere, was recorded as the build's output, and the
    no-op and ``current verify`` then held the stack to it) fails the install step, and so does one removed since
    (it was recorded as never made, and the three passed a checkout without it: vLLM's ``_C.abi3.so`` is one)."""
    from ..pyenv import builtrestore, builtstack

    if entry is None:
        return
    for fork, rows in sorted(entry.manifest["files"]["forks"].items()):
        for rel in sorted(rows):
            got = (recorded.get(fork) or {}).get(rel)
            try:
                want = builtrestore.restored_digest(entry, fork, rel, root)
            except builtstack.EntryRefused as exc:
                want = f"the entry's file, which no longer verifies ({exc})"
            if want is not None and got != want:
                how = "changed" if got is not None else "was removed"
                raise InstallError(f"fork {fork}'s build output {rel} {how} after it was copied from the "
                                   f"built-stack cache entry {entry.path}",
                                   expected=f"what the entry put there ({want})",
                                   found=got if got is not None else "no such file when the install step recorded "
                                                                     "the build outputs",
                                   fix="find what writes into the stack while october_setup runs, then re-run "
                                       "october_setup (the forks are installed again)")


def unstorable(ctx: StepContext, step: str, forks: list[ForkSource]) -> str | None:
    """Why this run may not store its stack in the built-stack cache (None: it may), asked before the forks
    are installed.  Only what this run made itself is stored: an env the env step made in this run (not one
    an earlier run left, where a file may have been planted since), and checkouts holding no file git does
    not track (an ignored ``*.so`` planted there is not the build's output)."""
    made = ctx.done.get("env")       # ran: made by uv venv --clear, or copied from an entry and checked
    if made is None or made.status != "ran":
        return "its env was made by an earlier run (only a run that makes the env itself stores it)"
    fetch = ctx.result(FetchResult)
    for f in forks:
        fetched = fetch.forks.get(f.use.name) if fetch is not None else None
        hidden = hidden_entries(f.path, fetched.submodules if fetched is not None else ())
        if hidden:
            return (f"the checkout of {f.use.name} has {len(hidden)} tracked file(s) git status does not look at "
                    f"(skip-worktree or assume-unchanged: {', '.join(hidden[:3])}{', ...' if len(hidden) > 3 else ''})")
        found = overwritten.untracked(ctx.runner, step, f.path)
        if found:
            return (f"the checkout of {f.use.name} held {len(found)} file(s) git does not track before the "
                    f"install ({', '.join(map(str, found[:3]))}{', ...' if len(found) > 3 else ''})")
    return None


def store_built_stack(ctx: StepContext, step: str, forks: list[ForkSource], nested_out: Mapping[str, Any],
                      imported: Mapping[str, str], unstorable: str | None) -> None:
    """Store this finished env and the forks' build outputs for the next stack with the same key; a stack
    that cannot be stored (``unstorable``: why) is said so, not failed."""
    from ..pyenv import builtprune, builtrestore, builtstack

    env = ctx.result(EnvResult)
    if env is None:       # an env no env step of this stack recorded is nobody's to copy
        return
    if unstorable is not None:
        ctx.ui.detail(f"this stack is not kept in the built-stack cache: {unstorable}")
        ctx.runner.note(step, f"# not stored in the built-stack cache: {unstorable}")
        return
    unsigned = cachekey.key_problem(cache=ctx.options.cache_dir)
    if unsigned is not None:            # said on the console: every later stack is built in full until it is fixed
        ctx.ui.warn(f"this stack is not kept in the built-stack cache: {unsigned}")
        ctx.runner.note(step, f"# not stored in the built-stack cache: {unsigned}")
        return
    key = stack_key(ctx, step)
    if key is None:
        return
    wheel = ctx.result(WheelResult)
    outputs = {f.use.name: (f.path, overwritten.untracked(ctx.runner, step, f.path)) for f in forks}
    facts = builtrestore.entry_facts(
        ctx.paths.env, imports=imported, wheel_sha256=wheel.wheel_sha256 if wheel else None,
        nested_installs=nested_out,
        env_record={"torch": env.torch, "torch_cuda": env.torch_cuda, "torch_source": env.torch_source,
                    "system_torch": dict(env.system_torch) if env.system_torch is not None else None})
    try:
        entry = builtstack.store(ctx.options.cache_dir, key, ctx.paths.root, ctx.paths.env, outputs, facts)
    except (builtstack.EntryRefused, OSError) as exc:
        ctx.ui.detail(f"this stack is not kept in the built-stack cache: {exc}")
        ctx.runner.note(step, f"# not stored in the built-stack cache: {exc}")
        return
    if entry is not None:
        ctx.runner.note(step, f"# stored in the built-stack cache: {entry.path}")
        note_recipe_key(ctx, step, key)
        for gone, why in builtprune.prune(ctx.options.cache_dir, entry.path):
            ctx.ui.detail(f"removed the built-stack cache entry {gone} ({why})")
            ctx.runner.note(step, f"# removed the built-stack cache entry {gone}: {why}")
