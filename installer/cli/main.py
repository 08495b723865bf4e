"""The command line's entry points, ``october_setup`` (``setup_main``) and ``current`` (``current_main``), and
the ``october_setup`` apps: provision a stack, write an offline kit (``kit``), provision a Ray cluster
(``fleet``).  ``current``'s commands are in :mod:`.cli_current`, what they share in :mod:`.cli_common`.
Thin on purpose: parse options, call one function, let :func:`~.cli_common.guarded` turn an error into a
message and its exit code.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from .common import (
    RECIPE_HELP,
    cache_dir_argument,
    cache_dir_option,
    command,
    file_option,
    guarded,
    json_option,
    kit_argument,
    new_app,
    print_json,
    quiet_option,
    recipe_option,
    reporter,
    run_app,
    verbose_option,
    version_option,
)
from .current import current_app
from ..core import jsonread
from ..core.cliargs import require_cache_writable
from ..core.paths import default_cache_dir
from .provision import SetupArgs, provision

__all__ = ["current_app", "current_main", "fleet_app", "guarded", "kit_app", "setup_app", "setup_main", "setup_route"]

setup_app = new_app("Provision a pinned K16/V8 vLLM + FlashInfer stack from a recipe.")
kit_app = new_app("Write an offline kit for one recipe (forks, submodules, wheels, manifest).")
fleet_app = new_app("Provision and prove one stack on every node of a Ray cluster, from one kit.")

# ``kit`` / ``fleet`` are routed here: typer (0.29.2, click 8.5.1) cannot have a group whose own positional
# STACK sits beside subcommands (``october_setup kit DIR`` took ``kit`` as STACK: "No such command 'DIR'").
SUBAPPS = {"kit": kit_app, "fleet": fleet_app}


def setup_route(args: list[str]) -> tuple[typer.Typer, str, list[str]]:
    """The app, its program name and its arguments for ``october_setup ARGS``."""
    if args[:1] and args[0] in SUBAPPS:
        return SUBAPPS[args[0]], f"october_setup {args[0]}", args[1:]
    return setup_app, "october_setup", args


def setup_main(argv: list[str] | None = None) -> int:
    """``october_setup`` with the full command line (what the fast path does not answer)."""
    return run_app(*setup_route(list(sys.argv[1:] if argv is None else argv)))


def current_main(argv: list[str] | None = None) -> int:
    """Console script ``current`` (and ``python -m october``)."""
    return run_app(current_app, "current", argv)


@command(setup_app)
def october_setup(
    stack: str = typer.Argument(..., metavar="STACK", help="Directory to provision (created if missing)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", "-r", metavar="NAME",
                                         help=RECIPE_HELP[:-1] + " (default: current for a new stack; an existing "
                                              "stack of another recipe needs its own named)."),
    cache_dir: Optional[Path] = cache_dir_option("Shared cache: git mirrors, wheels, models and uv's cache "
                                                        "(default $OCTOBER_CACHE_DIR or ~/.cache/october)."),
    allow_dirty: bool = typer.Option(False, "--allow-dirty", help="Accept modified fork trees (recorded)."),
    skip_preflight: list[str] = typer.Option([], "--skip-preflight", metavar="CHECK",
                                             help="Skip one preflight check by name (repeatable)."),
    locked: bool = typer.Option(False, "--locked", help="Install exactly what a lock says; fail on any difference."),
    lock_file: Optional[Path] = typer.Option(None, "--lock-file", metavar="FILE",
                                             help="Lock for --locked (default: locks/<recipe>.pylock.toml, "
                                                  "else STACK/pylock.toml)."),
    kit: Optional[Path] = typer.Option(None, "--kit", metavar="DIR",
                                       help="Install offline from a kit made by `october_setup kit` "
                                            "(no other network access)."),
    quiet: bool = quiet_option(),
    verbose: bool = verbose_option("Echo every command's output (not with -q)."),
    as_json: bool = json_option("where the stack, lock and receipt are"),
    system_python: Optional[Path] = typer.Option(None, "--system-python", metavar="PYTHON",
                                                 help="Take torch from this interpreter (its site packages stay visible; the recipe must allow it)."),
    version: bool = version_option("october_setup"),
) -> None:
    """Provision STACK from a recipe. Safe to interrupt and re-run: finished steps are skipped.
    (`october_setup kit --recipe R DIR` writes an offline kit instead; see `october_setup kit --help`;
    `october_setup fleet` provisions every node of a Ray cluster; see `october_setup fleet --help`.)"""
    ui = reporter(quiet, verbose)
    args = SetupArgs(stack=stack, recipe=recipe, cache_dir=cache_dir, allow_dirty=allow_dirty,
                     skip_preflight=tuple(skip_preflight), locked=locked, lock_file=lock_file, kit=kit, quiet=quiet,
                     verbose=verbose, as_json=as_json, system_python=system_python)
    guarded(lambda: provision(args, ui), ui, json_command="october_setup" if as_json else None)


@command(kit_app)
def make_kit_cmd(
    out: Path = typer.Argument(..., metavar="DIR", help="Directory for the kit (new, empty, or an earlier kit to refresh)."),
    recipe: str = recipe_option(),
    cache_dir: Optional[Path] = cache_dir_option(),
    lock_file: Optional[Path] = typer.Option(None, "--lock-file", metavar="FILE",
                                             help="Lock whose wheels go into the kit (default: "
                                                  "locks/<recipe>.pylock.toml, else uv pip compile)."),
    quiet: bool = quiet_option(),
    verbose: bool = verbose_option("Echo every command's output (not with -q)."),
    as_json: bool = json_option("where the kit is and what it holds"),
    system_torch: bool = typer.Option(False, "--system-torch", help="Leave torch out: the stack takes it from --system-python on the target (the recipe must allow it)."),
    have: Optional[Path] = typer.Option(None, "--have", metavar="FILE", help="With --system-torch: leave out the wheels the target's interpreter already has at the same version (FILE: its `pip list` or `pip freeze` output)."),
) -> None:
    """Write DIR: each fork at its pin with the recipe's submodules, the base wheel, the env's wheels, kit.json."""
    ui = reporter(quiet, verbose)

    def go() -> None:
        from ..core.errors import UsageError
        from ..kit.have import read_have
        from ..kit.make import KitOptions, make_kit
        from ..pyenv.systorch import mark_system
        from ..recipe import load_recipe

        kit_out = kit_argument("DIR", out)
        cache = cache_dir_argument(cache_dir or default_cache_dir())
        require_cache_writable(cache)
        lock = file_option("--lock-file", lock_file) if lock_file is not None else None
        have_file = file_option("--have", have) if have is not None else None
        if have_file is not None and not system_torch:
            raise UsageError("--have needs --system-torch", expected="--have together with --system-torch (the stack "
                             "uses the target interpreter's packages only when it takes torch from it)",
                             found="--have alone", fix="add --system-torch, or drop --have")
        rec = load_recipe(recipe)
        opts = KitOptions(recipe=mark_system(rec) if system_torch else rec, out=kit_out, cache_dir=cache, lock=lock,
                          have=read_have(have_file) if have_file is not None else None)
        manifest = make_kit(opts, say=ui.detail, ui=ui)
        if quiet and not as_json:
            return                  # errors only: nothing to print, so nothing to read back
        doc = jsonread.loads(manifest.read_text(encoding="utf-8"))
        if as_json:
            print_json("result", {"command": "october_setup kit", "ok": True, "exit_code": 0, "result": {
                "kit": str(opts.out), "manifest": str(manifest), "repositories": len(doc["repos"]),
                "wheels": len(doc["wheels"]), "base_wheel": bool(doc["base_wheel"]), "size_bytes": doc["size_bytes"]}})
        else:
            print(f"kit ready: {opts.out} ({len(doc['repos'])} repositories, {len(doc['wheels'])} wheels"
                  f"{' + base wheel' if doc['base_wheel'] else ''}, {doc['size_bytes'] / 1e6:.1f} MB)")
            print(f"  install offline: october_setup STACK --recipe {shlex.quote(recipe)} --kit {shlex.quote(str(opts.out))}")

    guarded(go, ui, json_command="october_setup kit" if as_json else None)


@command(fleet_app)
def fleet_cmd(
    stack: str = typer.Argument(..., metavar="STACK", help="Stack path on each node; may hold {name}, {host}, {node_id}."),
    address: str = typer.Option(..., "--address", metavar="ADDR", help="Ray cluster address (host:port, or auto)."),
    kit: Path = typer.Option(..., "--kit", metavar="DIR", help="The kit (made by `october_setup kit`); a path every node sees, unless --ship-kit."),
    recipe: str = recipe_option("Recipe name in recipes/ or a path every node sees."),
    receipt: Path = typer.Option(Path("fleet-receipt.json"), "--receipt", metavar="FILE", help="Fleet receipt; an earlier one here is resumed from."),
    lock_file: Optional[Path] = typer.Option(None, "--lock-file", metavar="FILE", help="The lock every node installs with --locked (sent with the task)."),
    cache_dir: Optional[str] = cache_dir_option("Cache dir on each node (same placeholders as STACK)."),
    select: str = typer.Option("all", "--select", metavar="all|gpu", help="all: every alive node; gpu: the nodes with GPUs."),
    node: list[str] = typer.Option([], "--node", metavar="NODE", help="Only this node: id (or 8+ char prefix), hostname or october-node label (repeatable)."),
    ship_kit: bool = typer.Option(False, "--ship-kit", help="The nodes share no path: send the kit through Ray, verified on arrival."),
    ship_dir: Optional[str] = typer.Option(None, "--ship-dir", metavar="DIR", help="Where a shipped kit lands on each node (default /tmp/october-fleet-kit-<sha>)."),
    max_parallel: int = typer.Option(8, "--max-parallel", metavar="N", help="Nodes installing at once."),
    timeout: float = typer.Option(3600.0, "--timeout", metavar="SECONDS", help="Seconds per node for setup and smoke together."),
    smoke: bool = typer.Option(True, "--smoke/--no-smoke", help="Run `current smoke` on each node (without it the fleet cannot pass)."),
    smoke_format: Optional[str] = typer.Option(None, "--smoke-format", metavar="awq|fp16",
                                               help="awq or fp16, for current smoke (default: the stack's, as current smoke chooses)."),
    smoke_level: Optional[str] = typer.Option(None, "--smoke-level", metavar="LEVEL", help="Default: the level the stack promises."),
    smoke_arg: list[str] = typer.Option([], "--smoke-arg", metavar="ARG", help="Passed on to current smoke (repeatable, e.g. --smoke-arg=--fixtures=/d)."),
    system_python: Optional[str] = typer.Option(None, "--system-python", metavar="PYTHON", help="Take torch from this interpreter on every node (october_setup --system-python; a path each node sees)."),
    setup_arg: list[str] = typer.Option([], "--setup-arg", metavar="ARG", help="Passed on to october_setup (repeatable, e.g. --setup-arg=--skip-preflight=gpu)."),
    quiet: bool = quiet_option(),
    verbose: bool = verbose_option(),
    as_json: bool = json_option("the fleet verdict and where its receipt is"),
) -> None:
    """One task per node, pinned to it: `october_setup STACK --recipe R --kit KIT --locked`, then `current smoke`.
    Writes a fleet receipt; re-running resumes only the nodes that did not finish.  Needs Ray (`uv sync --extra fleet`)."""
    ui = reporter(quiet, verbose)

    def go() -> int:
        from ..fleet.plan import FleetOptions
        from ..fleet.run import run_fleet

        passed_on("--setup-arg", setup_arg, setup_app, None, ["/stack"], FLEET_SETS_SETUP)
        passed_on("--smoke-arg", smoke_arg, current_app, "smoke", ["--install", "/stack", "--output", "/out"],
                  FLEET_SETS_SMOKE)

        opts = FleetOptions(address=address, recipe=recipe, kit=kit.resolve(), stack=stack, receipt=receipt.resolve(),
                            cache_dir=cache_dir, lock_file=lock_file.resolve() if lock_file else None, select=select,
                            nodes=tuple(node), ship_kit=ship_kit, ship_dir=ship_dir, max_parallel=max_parallel,
                            timeout_s=timeout, smoke=smoke, smoke_format=smoke_format, smoke_level=smoke_level,
                            smoke_args=tuple(smoke_arg), system_python=system_python, setup_args=tuple(setup_arg))
        code = run_fleet(opts, ui, say=(lambda _line: None) if quiet or as_json else print)
        if as_json:
            print_json("result", {"command": "october_setup fleet", "ok": code == 0, "exit_code": code,
                                  "result": {"receipt": str(opts.receipt)}})
        return code

    code = guarded(go, ui, json_command="october_setup fleet" if as_json else None)
    if code == 130:
        # Ctrl-C: the receipt and the summary are out.  Ray's teardown at interpreter exit can then abort the
        # process on a force-cancelled task's late reply (a CHECK in its core worker, "Tried to complete task
        # that was not pending"), turning 130 into SIGABRT: leave without it (the cluster sees the driver go)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    raise typer.Exit(code)


# What fleet gives each node's commands itself (plan.node_job); a --setup-arg / --smoke-arg naming one would
# silently replace it there.
FLEET_SETS_SETUP = ("--recipe", "-r", "--kit", "--locked", "--lock-file", "--cache-dir", "--system-python")
FLEET_SETS_SMOKE = ("--install", "--format", "-f", "--output", "-o", "--recipe", "-r", "--level")
_NO_RUN = ("--help", "-h", "--version")      # the node's command would print and end, set up nothing


def passed_on(flag: str, args: list[str], app: typer.Typer, sub: str | None, head: list[str],
              fleet_sets: tuple[str, ...]) -> None:
    """``fleet``'s ``--setup-arg`` / ``--smoke-arg``, parsed here as each node's ``october_setup`` / ``current
    smoke`` will parse them, before any node is contacted: an option it refuses, one fleet sets itself, or
    one that makes it set up nothing is a usage error (exit 2) now, not on every node after the kit shipped."""
    from typer.main import get_command

    from .common import click_exc
    from ..core.errors import UsageError

    prog = "october_setup" if sub is None else f"current {sub}"
    for arg in args:
        name = arg.split("=", 1)[0]
        clash = next((o for o in fleet_sets if name == o or (len(o) == 2 and arg.startswith(o))), None)
        if clash is not None or name in _NO_RUN:
            why = (f"fleet sets {clash} on each node itself" if clash is not None
                   else f"{name} makes {prog} print and end without doing its work")
            raise UsageError(f"{flag}={arg} cannot be passed on to {prog}: {why}",
                             expected=f"{prog} options other than {', '.join(fleet_sets + _NO_RUN)}",
                             found=f"{flag}={arg}",
                             fix="drop it, or use fleet's own option for it (`october_setup fleet --help`)")
    command = get_command(app)
    if sub is not None:
        command = command.commands[sub]         # type: ignore[attr-defined]
    given = " ".join(f"{flag}={a}" for a in args)
    try:
        with contextlib.redirect_stdout(io.StringIO()):      # an eager --help or --version prints, then ends
            ctx = command.make_context(prog, [*head, *args])
            base = command.make_context(prog, list(head))
    except typer.Exit:
        raise UsageError(f"{given} cannot be passed on to {prog}: it makes {prog} print and end without doing its "
                         "work (a bundled -h?)", expected=f"{prog} options other than {', '.join(_NO_RUN)}",
                         found=given, fix="drop it") from None
    except click_exc.UsageError as exc:
        raise UsageError(f"{prog} on each node would refuse {given}",
                         expected=f"options {prog} accepts (`{prog} --help`)",
                         found=f"{prog}: {exc.format_message().rstrip('.')}",
                         fix=f"correct the {flag} values; each is one argument, e.g. {flag}=--option=value") from None
    for param in command.params:    # what the parse set, however spelled (-qrNAME bundles -r): fleet's own?
        name = param.name or ""
        set_here = getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"
        in_head = getattr(base.get_parameter_source(name), "name", None) == "COMMANDLINE"
        if set_here and set(param.opts) & set(fleet_sets) and (not in_head or ctx.params[name] != base.params[name]):
            raise UsageError(f"{given} cannot be passed on to {prog}: it sets {param.opts[0]}, which fleet sets on "
                             "each node itself", expected=f"{prog} options other than {', '.join(fleet_sets)}",
                             found=given, fix="drop it, or use fleet's own option for it (`october_setup fleet --help`)")

