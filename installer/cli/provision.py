"""``october_setup STACK ...``: the options of one run checked before anything is written, then the pipeline.
Both command lines call :func:`provision` (the typer one and the plain fast path, :mod:`october.installer.cli.noop`),
so their errors, progress and output are the same."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..core.cliargs import (
    cache_apart,
    cache_dir_argument,
    file_option,
    kit_argument,
    print_json,
    require_cache_writable,
    split_skips,
    stack_argument,
)
from ..core.paths import default_cache_dir

if TYPE_CHECKING:
    from ..core.ui import ConsoleReporter


@dataclass(frozen=True)
class SetupArgs:
    """The options of ``october_setup STACK`` as given (typer's and argparse's spellings are the same)."""

    stack: str
    recipe: str | None = None       # None: not given (a new stack: DEFAULT_RECIPE; else the stack's own, see recipe_for)
    cache_dir: Path | None = None
    allow_dirty: bool = False
    skip_preflight: Sequence[str] = ()
    locked: bool = False
    lock_file: Path | None = None
    kit: Path | None = None
    quiet: bool = False
    verbose: bool = False
    as_json: bool = False
    system_python: Path | None = None


DEFAULT_RECIPE = "current"


Record = tuple[str, "str | None", str, "str | None"]      # (name, path, where recorded, sha256 of the file)


def recorded_recipes(root: Path) -> list[Record]:
    """(name, path, where) of each record of the recipe a stack was set up with: its setup receipt's (the last
    finished run), then the one every run writes under the stack lock before its first step
    (``.state/recipe-used.json``: the last run begun, finished or not); none for a new stack.  Each with the
    recipe file's sha256 where recorded."""
    from ..core import jsonread

    from ..core.paths import StackPaths

    paths = StackPaths(root)
    out = []
    for source, where in ((paths.setup_receipt, "receipts/setup.json"), (paths.recipe_record, ".state/recipe-used.json")):
        try:
            doc = jsonread.loads(source.read_text(encoding="utf-8"))
            recipe = doc["recipe"] if source == paths.setup_receipt else doc
            name, path, sha = recipe["name"], recipe.get("path"), recipe.get("sha256")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if isinstance(name, str) and name:
            out.append((name, path if isinstance(path, str) else None, where, sha if isinstance(sha, str) else None))
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def recipe_for(root: Path, given: str | None) -> str:
    """The recipe of this run: ``--recipe`` as given; without it, :data:`DEFAULT_RECIPE`, unless the stack
    records another recipe (by its file: a user's copy of ``current.toml`` keeps the name ``current``), or its
    two records disagree (a run of another recipe stopped before its receipt): then a usage error (exit 2)
    naming what it records, never a silent switch.  Both command lines ask this (the fast path too)."""
    if given is not None:
        return given
    from ..recipe import resolve_recipe_path

    default = resolve_recipe_path(DEFAULT_RECIPE)
    records = recorded_recipes(root)

    def is_default(rec: Record) -> bool:
        """The shipped default: by name, and by file (this install's) or content (another install's copy of
        it: a checkout, pipx); a recorded file that is gone and has no recorded content counts by its name."""
        name, path, _, sha = rec
        if name != DEFAULT_RECIPE or path is None or _same_file(Path(path), default):
            return name == DEFAULT_RECIPE
        if sha is not None:
            from ..core.hashing import sha256_file

            try:
                return sha256_file(default) == sha
            except OSError:
                return False
        return not Path(path).exists()

    if all(is_default(r) for r in records):
        return DEFAULT_RECIPE
    import shlex

    from ..core.errors import UsageError

    def shown(rec: Record) -> str:
        """How to name it again: a shipped recipe (or one whose recorded file is gone) by its name, any other by
        its path."""
        name, path, _, _ = rec
        if path is None or _same_file(resolve_recipe_path(name), Path(path)) or not Path(path).is_file():
            return name
        return path

    # the receipt's (what the stack was made with), then the last run begun (what it is being made into)
    named = list(dict.fromkeys(shown(r) for r in records))
    stack = shlex.quote(str(root))

    def cmd(recipe: str) -> str:
        return f"`october_setup {stack} --recipe {shlex.quote(recipe)}`"

    found = "; ".join(f"recipe {n}" + (f" ({p})" if p else "") + f" in its {w}" for n, p, w, _ in records)
    if len(named) == 1:
        fix = f"re-run with its recipe: {cmd(named[0])}"
    else:                                 # a run of another recipe stopped before its receipt (a failed preflight)
        fix = (f"re-run with the recipe its receipt names: {cmd(named[0])}; or go on with the run begun later: "
               f"{cmd(named[1])}")
    if DEFAULT_RECIPE not in named:
        fix += f"; or switch it on purpose: {cmd(DEFAULT_RECIPE)}"
    raise UsageError(f"no --recipe given, and the stack {root} was set up with recipe "
                     f"{' and then '.join(dict.fromkeys(n for n, _, _, _ in records))}",
                     expected=" or ".join(f"--recipe {shlex.quote(n)}" for n in named) + " for this stack (without "
                              f"--recipe a run means --recipe {DEFAULT_RECIPE}, the shipped one, which would rebuild "
                              "it under another recipe)",
                     found=found, fix=fix)


def provision(args: SetupArgs, ui: "ConsoleReporter") -> None:
    """Check every option (no lock, no .state, no "preflight: starting" before), open a ``--kit``
    against its manifest, the recipe and the lock, run the pipeline, print the summary or the JSON."""
    from ..core.envoverlay import environ_overlay
    from ..engine import SetupOptions
    from ..pipeline.plan import resolve_locked, run_setup, summary
    from ..core.paths import StackPaths
    from ..recipe import SharedMark, load_recipe, remember_checked
    from ..pyenv.systorch import with_system_torch
    from ..machine import validate_skip

    root = stack_argument(args.stack).resolve()
    skips = split_skips(args.skip_preflight)
    validate_skip(skips)
    cache = cache_dir_argument(args.cache_dir or default_cache_dir())
    cache_apart(cache, root)
    require_cache_writable(cache)          # exit 19 before the stack is written
    # a --kit that is a file is exit 19 (said so); one that names nothing is the kit's own "no kit at" (20)
    kit_dir = kit_argument("--kit", args.kit) if args.kit is not None else None
    lock = file_option("--lock-file", args.lock_file) if args.lock_file is not None else None
    checked, shared = StackPaths(root).recipe_checked, SharedMark.in_cache(cache)
    rec = with_system_torch(load_recipe(recipe_for(root, args.recipe), checked=checked, shared=shared),
                            args.system_python)
    locked_state = resolve_locked(rec, root, args.locked, lock)
    used_kit = None
    if kit_dir is not None:
        from ..kit.use import kit_recipe, open_kit, own_word, seed_cache

        # verified against its manifest, the recipe and the lock before anything runs
        used_kit = open_kit(kit_dir, rec, lock=locked_state.path if locked_state else None)
        for said in own_word(used_kit, rec, locked=locked_state is not None):
            ui.warn(said)
        seed_cache(used_kit, rec, cache)
        ui.info(f"offline: installing from the kit {used_kit.root}")
    opts = SetupOptions(stack=root, recipe=kit_recipe(rec, used_kit) if used_kit else rec,
                        cache_dir=cache, allow_dirty=args.allow_dirty, skip_preflight=skips,
                        locked=locked_state, quiet=args.quiet, verbose=args.verbose, kit=used_kit)
    # a kit install: every child git reads the kit's URLs from the kit and only local files; uv runs offline
    offline = environ_overlay({**used_kit.git_config(), "UV_OFFLINE": "1"}) if used_kit else nullcontext()
    with offline:
        result = run_setup(opts, ui, echo_commands=args.verbose)
    remember_checked(rec, checked, shared)    # its no-op re-runs (and the next stack's run) skip the models
    ran = sum(1 for r in result.records if r.status == "ran")
    if args.as_json:
        print_json("result", {"command": "october_setup", "ok": True, "exit_code": 0, "result": {
            "stack": str(result.paths.root), "lock": str(result.paths.pylock),
            "receipt": str(result.paths.setup_receipt), "steps_ran": ran,
            "steps_done_before": len(result.records) - ran}})
    elif not args.quiet:
        print(summary(result))

