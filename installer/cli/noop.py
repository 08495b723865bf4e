"""The plain fast path of ``october_setup STACK ...``: a finished stack that still verifies is
answered without the command-line framework (typer and rich cost more than the whole check) and
without running anything or writing in the stack more than the file-trust store (see
:func:`~october.installer.engine.verify_pipeline`); its recipe is read without pydantic when the stack's
``.state/recipe-checked`` says this content passed the models there, or a mark signed with the user's key in
the cache does (the first no-op after an upgrade that changed the recipe code validates and marks the cache,
never the stack).  Any other run with plain options
(a new stack, a resumed one, a step that would run) goes straight to
:func:`october.installer.cli.provision.provision`, the function the typer command calls, still without typer
or click (0.4 s, issue 20); it validates the recipe with the models (pydantic, ~0.1-0.2 s).

It reads the same options as the full command line (argparse, the same spellings), builds the same
:class:`~october.installer.engine.SetupOptions`, and asks the same pipeline whether every
step is done, unchanged and still verifies (:func:`~october.installer.pipeline.plan.finished_setup`:
each step's ``inputs`` and ``verify``, nothing else).  Anything else -- a step that would run, an
option it does not take (``--verbose``, ``--json``, ``--help``, ``--version``, ``kit``, ``fleet``), a
usage or recipe error -- is not a no-op.  Options the plain parser does not take go to the typer
command line (its help, usage errors and --json); plain ones run :func:`provision` here, whose
errors, progress and output are the typer command's own.

What a no-op trusts instead of re-reading (each step's ``verify``): the done-markers' fingerprints
of the inputs; the stat signatures of the preflight's tools, the base wheel, and every file hashed
before (:mod:`october.installer.core.filetrust`: every env file against its RECORD, the JIT
libraries); git's own index for the fork clones (``git status``, which re-reads only files whose
stat data changed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

NOT_FAST = {"kit", "fleet"}
PATH_OPTIONS = ("--cache-dir", "--lock-file", "--system-python", "--kit")     # read as text: "" is not Path(".")


class _Parsed(Exception):
    """argparse said no (it reports through ``error``, which must not exit here)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Parsed(message)


def parse(args: Sequence[str]) -> argparse.Namespace | None:
    """The options of a plain ``october_setup STACK ...``, or None for anything else."""
    if not args or args[0] in NOT_FAST or any(a in ("--help", "-h", "--version") for a in args):
        return None
    p = _Parser(add_help=False, allow_abbrev=False, exit_on_error=False)
    p.add_argument("stack")
    p.add_argument("--recipe", "-r")           # None: the stack's own record decides (provision.recipe_for)
    for option in PATH_OPTIONS:
        p.add_argument(option)
    p.add_argument("--allow-dirty", action="store_true")
    p.add_argument("--skip-preflight", action="append", default=[])
    p.add_argument("--locked", action="store_true")
    p.add_argument("--quiet", "-q", action="store_true")
    try:
        ns = p.parse_args(list(args))
    except (_Parsed, argparse.ArgumentError):
        return None
    dests = ["stack", *(o[2:].replace("-", "_") for o in PATH_OPTIONS)]
    if any(getattr(ns, d) is not None and not getattr(ns, d).strip() for d in (*dests, "recipe")):
        return None                 # an empty path ("" would be the current directory): the full command line's usage error
    for d in dests:
        if getattr(ns, d) is not None:
            setattr(ns, d, Path(getattr(ns, d)))
    return ns


def fast_setup(args: Sequence[str]) -> int | None:
    """The exit code of a plain ``october_setup STACK ...`` (a no-op, or the run itself); None when the
    options need the typer command line."""
    ns = parse(args)
    if ns is None:
        return None
    done = try_noop(ns)
    return done if done is not None else run_plain(ns)


def run_plain(ns: argparse.Namespace) -> int:
    """Provision with plain options: the typer command's own function and error handling."""
    from ..core.cliargs import CommandExit, run_guarded
    from ..core.ui import ConsoleReporter
    from .provision import SetupArgs, provision

    ui = ConsoleReporter(quiet=ns.quiet, verbose=False)
    args = SetupArgs(stack=str(ns.stack), recipe=ns.recipe, cache_dir=ns.cache_dir, allow_dirty=ns.allow_dirty,
                     skip_preflight=tuple(ns.skip_preflight), locked=ns.locked, lock_file=ns.lock_file, kit=ns.kit,
                     quiet=ns.quiet, system_python=ns.system_python)
    try:
        run_guarded(lambda: provision(args, ui), ui)
    except CommandExit as exc:
        return exc.code
    return 0


def try_noop(ns: argparse.Namespace) -> int | None:
    """0 when the stack is finished and nothing would run (the summary printed as the full command prints
    it); None when it must be provisioned."""
    from ..core.errors import OctoberError
    from ..core.paths import StackPaths, default_cache_dir

    from ..core.cliargs import cache_dir_argument, kit_argument, stack_argument

    try:                            # the options' own checks, the typer command's (provision's): it says what is wrong
        stack = stack_argument(str(ns.stack)).resolve()
        cache = cache_dir_argument(ns.cache_dir or default_cache_dir())
        if ns.kit is not None:
            kit_argument("--kit", ns.kit)
    except (OctoberError, OSError):
        return None
    if not StackPaths(stack).state.is_dir():
        return None                 # a new stack: nothing to verify
    try:
        from ..core.cliargs import split_skips
        from ..core.reportlines import skip_line
        from ..engine import SetupOptions, SilentReporter
        from ..pipeline.plan import finished_setup, resolve_locked, summary
        from ..pyenv.systorch import with_system_torch
        from ..recipe import SharedMark, load_recipe, with_kit

        from .provision import recipe_for

        recipe = recipe_for(stack, ns.recipe)        # no --recipe on a stack of another recipe: provision refuses
        # the stack's marker, else a signed mark in the cache (its key loaded only then): a stack whose marker an
        # earlier version wrote (another digest) does not import pydantic on every no-op after an upgrade
        marks: list[SharedMark | None] = []

        def shared() -> SharedMark | None:
            marks.append(SharedMark.in_cache(cache))
            return marks[-1]

        rec = with_system_torch(load_recipe(recipe, checked=StackPaths(stack).recipe_checked, shared=shared),
                                ns.system_python)
        if ns.kit is not None:
            # a finished stack reads nothing from its kit, which only shapes the recipe's sources (so the
            # fingerprints); were anything to run, provision verifies the kit first
            if not ns.kit.is_dir():
                return None
            rec = with_kit(rec, ns.kit.resolve())
        opts = SetupOptions(stack=stack, recipe=rec, cache_dir=cache,
                            allow_dirty=ns.allow_dirty, skip_preflight=split_skips(ns.skip_preflight),
                            locked=resolve_locked(rec, stack, ns.locked, ns.lock_file), quiet=ns.quiet)
        result = finished_setup(opts, SilentReporter())
    except (OctoberError, OSError, ValueError):
        return None                 # the full command line says what is wrong
    if result is None:
        return None
    # the models ran: the cache remembers it, unless the cache lies in the stack (a no-op writes nothing there)
    if rec.validated_here and rec.validated_digest is not None and marks and marks[-1] is not None \
            and not (cache.resolve() == stack or cache.resolve().is_relative_to(stack)):
        marks[-1].add(rec.validated_digest)
    if not ns.quiet:
        print("\n".join(skip_line(r.name) for r in result.records), file=sys.stderr)
        print(summary(result))
    return 0
