"""Command line: ``october_setup`` (and ``october_setup kit``) and ``current`` (doctor, verify, env,
recipes, download, smoke).

Thin on purpose: parse options into a frozen options object, call one function,
turn an :class:`OctoberError` into a message and its exit code.

One vocabulary: the stack is ``STACK`` (positional) for ``october_setup`` and ``--install STACK``
for every ``current`` command that looks at one; ``--format`` and ``--level`` are choices;
``--output`` names a directory (``download`` also takes a ``FILE.json``); ``--json`` prints the
machine-readable form of a report.
"""

from __future__ import annotations

import enum
import importlib
import json
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TypeVar

import typer

from october.installer.core.envoverlay import environ_overlay
from october.installer.core.errors import FileSystemError, OctoberError, as_disk_full
from october.installer.core.paths import default_cache_dir
from october.installer.core.ui import ConsoleReporter

# the click exceptions module typer parses with (recent typers carry their own copy of click)
click_exc: Any = importlib.import_module(typer.BadParameter.__module__)

T = TypeVar("T")



def _app(help_text: str) -> typer.Typer:
    """Every command group is built alike: plain help (rich_markup_mode=None: flags show no "<bool>",
    choices show as <awq|fp16>), help when called bare, no shell completion, our own error messages."""
    return typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                       pretty_exceptions_enable=False, help=help_text)


setup_app = _app("Provision a pinned K16/V8 vLLM + FlashInfer stack from a recipe.")
current_app = _app("Check the machine, download pinned models, and prove a stack does K16/V8.")
kit_app = _app("Write an offline kit for one recipe (forks, submodules, wheels, manifest).")
fleet_app = _app("Provision and prove one stack on every node of a Ray cluster, from one kit.")


class ModelFormat(str, enum.Enum):
    awq = "awq"
    fp16 = "fp16"


class SmokeLevel(str, enum.Enum):
    reference = "reference"
    kernel = "kernel"
    engine = "engine"


RECIPE_HELP = "Recipe name (see `current recipes`) or a path to a .toml."
CACHE_HELP = "Shared cache (default $OCTOBER_CACHE_DIR or ~/.cache/october)."


# the options several commands share, spelled once
def recipe_option(help_text: str = RECIPE_HELP) -> Any:
    return typer.Option("current", "--recipe", "-r", metavar="NAME", help=help_text)


def cache_dir_option(help_text: str = CACHE_HELP) -> Any:
    return typer.Option(None, "--cache-dir", metavar="DIR", help=help_text)


def quiet_option() -> Any:
    return typer.Option(False, "--quiet", "-q", help="Print errors only.")


def _version_callback(prog: str) -> Callable[[bool], None]:
    def show(value: bool) -> None:
        if value:
            from october.installer.core.version import version_line
            print(version_line(prog))
            raise typer.Exit(0)
    return show


@current_app.callback()
def _current_options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_version_callback("current"),
                                 help="Show the tool's version (and git commit in a checkout) and exit."),
) -> None:
    """Check the machine, download pinned models, and prove a stack does K16/V8."""


def guarded(fn: Callable[[], T], ui: ConsoleReporter) -> T:
    """Run ``fn``; an OctoberError becomes a printed message and its exit code."""
    try:
        return fn()
    except (OctoberError, OSError) as exc:
        full = as_disk_full(exc)          # ENOSPC anywhere (our writes, git, uv, a compiler): exit 19
        err = full if full is not None else exc if isinstance(exc, OctoberError) else FileSystemError.from_os_error(exc)
        ui.error(err.title, err.message)
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt:
        ui.error("interrupted", "stopped by the user; re-run the same command to resume")
        raise typer.Exit(130) from None


def _skips(values: list[str]) -> tuple[str, ...]:
    return tuple(s for item in values for s in item.split(",") if s)


@setup_app.command()
def october_setup(
    stack: Path = typer.Argument(..., metavar="STACK", help="Directory to provision (created if missing)."),
    recipe: str = recipe_option(),
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
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Echo every command's output."),
    system_python: Optional[Path] = typer.Option(None, "--system-python", metavar="PYTHON",
                                                 help="Take torch from this interpreter (its site packages stay visible; the recipe must allow it)."),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_version_callback("october_setup"),
                                 help="Show the tool's version (and git commit in a checkout) and exit."),
) -> None:
    """Provision STACK from a recipe. Safe to interrupt and re-run: finished steps are skipped.
    (`october_setup kit --recipe R DIR` writes an offline kit instead; see `october_setup kit --help`;
    `october_setup fleet` provisions every node of a Ray cluster; see `october_setup fleet --help`.)"""
    ui = ConsoleReporter(quiet=quiet, verbose=verbose)

    def go() -> None:
        from october.installer.pipeline.engine import SetupOptions
        from october.installer.pipeline.plan import resolve_locked, run_setup
        from october.installer.recipe import load_recipe
        from october.installer.steps.env.systorch import with_system_torch

        rec = with_system_torch(load_recipe(recipe), system_python)
        cache = (cache_dir or default_cache_dir()).resolve()
        used_kit = None
        if kit is not None:
            from october.installer.kit.use import kit_recipe, open_kit, seed_cache

            used_kit = open_kit(kit, rec)          # verified against its manifest before anything runs
            seed_cache(used_kit, rec, cache)
            ui.info(f"offline: installing from the kit {used_kit.root}")
        opts = SetupOptions(stack=stack.resolve(), recipe=kit_recipe(rec, used_kit) if used_kit else rec,
                            cache_dir=cache, allow_dirty=allow_dirty, skip_preflight=_skips(skip_preflight),
                            locked=resolve_locked(rec, stack.resolve(), locked, lock_file), quiet=quiet,
                            verbose=verbose, kit=used_kit)
        with offline_env(used_kit.git_config() if used_kit else None):
            result = run_setup(opts, ui, echo_commands=verbose)
        ran = sum(1 for r in result.records if r.status == "ran")
        if not quiet:
            print(f"stack ready: {result.paths.root} ({ran} step(s) ran, {len(result.records) - ran} "
                  "already done)")
            print(f"  lock:    {result.paths.pylock}")
            print(f"  receipt: {result.paths.setup_receipt}")

    guarded(go, ui)


@contextmanager
def offline_env(git_config: dict[str, str] | None) -> Iterator[None]:
    """For a kit install: every child git reads the kit's URLs from the kit and may use only local
    files; uv runs offline.  Restored afterwards (the CLI may run in-process in tests)."""
    if git_config is None:
        yield
        return
    with environ_overlay({**git_config, "UV_OFFLINE": "1"}):
        yield


@kit_app.command()
def make_kit_cmd(
    out: Path = typer.Argument(..., metavar="DIR", help="Directory for the kit (new, empty, or an earlier kit to refresh)."),
    recipe: str = recipe_option(),
    cache_dir: Optional[Path] = cache_dir_option(),
    lock_file: Optional[Path] = typer.Option(None, "--lock-file", metavar="FILE",
                                             help="Lock whose wheels go into the kit (default: "
                                                  "locks/<recipe>.pylock.toml, else uv pip compile)."),
    quiet: bool = quiet_option(),
    system_torch: bool = typer.Option(False, "--system-torch", help="Leave torch out: the stack takes it from --system-python on the target (the recipe must allow it)."),
) -> None:
    """Write DIR: each fork at its pin with the recipe's submodules, the base wheel, the env's wheels, kit.json."""
    ui = ConsoleReporter(quiet=quiet)

    def go() -> None:
        from october.installer.kit.make import KitOptions, make_kit
        from october.installer.recipe import load_recipe
        from october.installer.steps.env.systorch import mark_system

        rec = load_recipe(recipe)
        opts = KitOptions(recipe=mark_system(rec) if system_torch else rec, out=out.resolve(),
                          cache_dir=(cache_dir or default_cache_dir()).resolve(),
                          lock=lock_file.resolve() if lock_file else None)
        manifest = make_kit(opts, say=ui.detail)
        if not quiet:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
            print(f"kit ready: {opts.out} ({len(doc['repos'])} repositories, {len(doc['wheels'])} wheels"
                  f"{' + base wheel' if doc['base_wheel'] else ''}, {doc['size_bytes'] / 1e6:.1f} MB)")
            print(f"  install offline: october_setup STACK --recipe {recipe} --kit {opts.out}")

    guarded(go, ui)


@fleet_app.command()
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
    smoke_format: str = typer.Option("fp16", "--smoke-format", metavar="awq|fp16", help="awq or fp16, for current smoke."),
    smoke_level: Optional[str] = typer.Option(None, "--smoke-level", metavar="LEVEL", help="Default: the level the stack promises."),
    smoke_arg: list[str] = typer.Option([], "--smoke-arg", metavar="ARG", help="Passed on to current smoke (repeatable, e.g. --smoke-arg=--fixtures=/d)."),
    system_python: Optional[str] = typer.Option(None, "--system-python", metavar="PYTHON", help="Take torch from this interpreter on every node (october_setup --system-python; a path each node sees)."),
    setup_arg: list[str] = typer.Option([], "--setup-arg", metavar="ARG", help="Passed on to october_setup (repeatable, e.g. --setup-arg=--skip-preflight=gpu)."),
    quiet: bool = quiet_option(),
) -> None:
    """One task per node, pinned to it: `october_setup STACK --recipe R --kit KIT --locked`, then `current smoke`.
    Writes a fleet receipt; re-running resumes only the nodes that did not finish.  Needs Ray (`uv sync --extra fleet`)."""
    ui = ConsoleReporter(quiet=quiet)

    def go() -> int:
        from october.installer.fleet.plan import FleetOptions
        from october.installer.fleet.run import run_fleet

        opts = FleetOptions(address=address, recipe=recipe, kit=kit.resolve(), stack=stack, receipt=receipt.resolve(),
                            cache_dir=cache_dir, lock_file=lock_file.resolve() if lock_file else None, select=select,
                            nodes=tuple(node), ship_kit=ship_kit, ship_dir=ship_dir, max_parallel=max_parallel,
                            timeout_s=timeout, smoke=smoke, smoke_format=smoke_format, smoke_level=smoke_level,
                            smoke_args=tuple(smoke_arg), system_python=system_python, setup_args=tuple(setup_arg))
        return run_fleet(opts, say=(lambda s: None) if quiet else print)

    code = guarded(go, ui)
    raise typer.Exit(code)


def doctor_table(results: list[Any]) -> list[str]:
    """The checks as an aligned table: CHECK, STATUS, DETAIL."""
    width = max([len("CHECK")] + [len(r.name) for r in results])
    lines = [f"{'CHECK':{width}}  {'STATUS':7}  DETAIL"]
    lines += [f"{r.name:{width}}  {r.status:7}  {r.detail}" for r in results]
    return lines


@current_app.command()
def doctor(
    recipe: str = recipe_option(),
    install: Path = typer.Option(Path("."), "--install", metavar="STACK",
                                 help="Where the stack lives or will live (for the disk check)."),
    skip_preflight: list[str] = typer.Option([], "--skip-preflight", metavar="CHECK",
                                             help="Skip one check by name (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the checks and machine facts as JSON."),
    system_python: Optional[Path] = typer.Option(None, "--system-python", metavar="PYTHON", help="Check the torch of this interpreter too."),
) -> None:
    """Run the preflight checks alone and print them as a table; exit 1 when one fails."""
    ui = ConsoleReporter()

    def go() -> int:
        from october.installer.core.runner import Runner
        from october.installer.recipe import load_recipe
        from october.installer.steps.env.systorch import with_system_torch
        from october.installer.steps.preflight import doctor as run_doctor
        from october.installer.steps.preflight import facts_json

        rec = with_system_torch(load_recipe(recipe), system_python)
        with tempfile.TemporaryDirectory(prefix="october-doctor-") as logs:
            results, facts = run_doctor(rec, install.resolve(), _skips(skip_preflight), Runner(Path(logs)))
        failed = sum(r.status == "failed" for r in results)
        if as_json:
            print(json.dumps({"recipe": {"name": rec.name, "sha256": rec.sha256}, "passed": failed == 0,
                              "checks": [{"name": r.name, "status": r.status, "detail": r.detail,
                                          "expected": r.expected, "found": r.found, "fix": r.fix} for r in results],
                              "facts": facts_json(facts)}, indent=2))
        else:
            print("\n".join(doctor_table(results)))
            print(f"{len(results) - failed} of {len(results)} checks passed" if failed else "all checks passed")
        return 1 if failed else 0

    raise typer.Exit(guarded(go, ui))


@current_app.command()
def verify(
    install: Path = typer.Option(..., "--install", metavar="STACK", help="The stack directory made by october_setup."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Re-check a stack against its lock and receipts, offline: fork commits and trees, every
    installed distribution and file, torch, the base wheel, the JIT libraries. Exit 0, or 13
    with every difference listed."""
    ui = ConsoleReporter()

    def go() -> int:
        from october.installer.verify import format_report, verify_stack

        bar = None if as_json else (lambda done, total: ui.transfer("hashing installed files", done, total, "B"))
        report = verify_stack(install, hashed=bar)
        if as_json:
            print(json.dumps(report.as_json(), indent=2))
            return 0 if report.ok else report.error().exit_code
        for line in format_report(report):
            print(line)
        if not report.ok:
            raise report.error()
        return 0

    raise typer.Exit(guarded(go, ui))


@current_app.command("env")
def env_cmd(
    install: Optional[Path] = typer.Option(None, "--install", metavar="STACK",
                                           help="Also report this stack (recipe, lock, forks, torch)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", "-r", metavar="NAME", help=RECIPE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """An environment report for bug reports: GPU, driver, CUDA, torch, fork commits, recipe,
    lock hash. Holds no secrets (token variables show as set / not set)."""
    ui = ConsoleReporter()

    def go() -> None:
        from october.installer.core.runner import Runner
        from october.installer.envreport import collect, format_text

        with tempfile.TemporaryDirectory(prefix="october-env-") as logs:
            report = collect(install.resolve() if install else None, recipe, Runner(Path(logs)))
        print(json.dumps(report, indent=2) if as_json else "\n".join(format_text(report)))

    guarded(go, ui)


@current_app.command("recipes")
def recipes_cmd() -> None:
    """List the shipped recipes, one line each (name, then description)."""
    ui = ConsoleReporter()

    def go() -> None:
        from october.installer.core.resources import shipped_recipes
        from october.installer.recipe import load_recipe

        paths = shipped_recipes()
        width = max((len(p.stem) for p in paths), default=0)
        for path in paths:
            try:
                rec = load_recipe(str(path))
                name, text = rec.name, rec.description or "(no description)"
            except OctoberError as exc:
                name, text = path.stem, f"INVALID: {exc.what}"
            print(f"{name:{width}}  {text}")

    guarded(go, ui)


@current_app.command()
def download(
    format: ModelFormat = typer.Option(..., "--format", "-f", help="Which of the recipe's models."),
    output: Path = typer.Option(Path("."), "--output", "-o", metavar="DIR",
                                help="Directory for <format>-download.json (made if missing), or a FILE.json."),
    recipe: str = recipe_option(),
    local_dir: Optional[Path] = typer.Option(None, "--local-dir", metavar="DIR",
                                             help="Where the model files go (default: the cache's models/)."),
    cache_dir: Optional[Path] = cache_dir_option(),
    offline: bool = typer.Option(False, "--offline", help="Re-verify an existing copy without network."),
    fixtures: Optional[Path] = typer.Option(None, "--fixtures", metavar="DIR",
                                            help="Calibrated scales dir (default $KNLP_KV_FIXTURES)."),
    quiet: bool = quiet_option(),
) -> None:
    """Download the recipe's pinned model and write a verified manifest."""
    ui = ConsoleReporter(quiet=quiet)

    def go() -> None:
        from october.installer.download import DownloadOptions, run_download
        from october.installer.recipe import load_recipe

        opts = DownloadOptions(recipe=load_recipe(recipe), format=format.value, output=output.resolve(),
                               local_dir=local_dir.resolve() if local_dir else None,
                               cache_dir=(cache_dir or default_cache_dir()).resolve(), offline=offline,
                               fixtures=fixtures.resolve() if fixtures else None, quiet=quiet)
        path = run_download(opts, bars=lambda label, done, total: ui.transfer(label, done, total, "B"))
        if not quiet:
            print(f"manifest written: {path}")

    guarded(go, ui)


@current_app.command()
def smoke(
    install: Path = typer.Option(..., "--install", metavar="STACK", help="The stack directory made by october_setup."),
    format: ModelFormat = typer.Option(..., "--format", "-f", help="Which of the recipe's models."),
    output: Path = typer.Option(..., "--output", "-o", metavar="DIR", help="Directory for receipt.json (made if missing)."),
    level: Optional[SmokeLevel] = typer.Option(None, "--level",
                                               help="What to exercise (default: the level the stack promises in its setup receipt; a lower level proves less and never passes as a stack verdict)."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", metavar="FILE",
                                            help="Download manifest (default: ./<format>-download.json)."),
    fixtures: Optional[Path] = typer.Option(None, "--fixtures", metavar="DIR",
                                            help="Calibrated scales dir (default $KNLP_KV_FIXTURES)."),
    recipe: str = recipe_option(),
) -> None:
    """Prove on this machine that the stack really does K16/V8; exit 0 only when receipt.json says passed."""
    ui = ConsoleReporter()

    def go() -> int:
        from october.installer.smoke.launch import SmokeOptions, run_smoke

        opts = SmokeOptions(install=install.resolve(), format=format.value, output=output.resolve(),
                            level=level.value if level else None,
                            fixtures=fixtures.resolve() if fixtures else None,
                            manifest=manifest.resolve() if manifest else None, recipe=recipe)
        return run_smoke(opts)

    raise typer.Exit(guarded(go, ui))


# ------------------------------------------------------------------------------ entry points


def _command_path(app: typer.Typer, prog: str, argv: list[str] | None) -> str:
    """``current smoke`` when the arguments name a subcommand of ``app``, else ``prog``."""
    args = sys.argv[1:] if argv is None else argv
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    first = next((a for a in args if not a.startswith("-")), None)
    return f"{prog} {first}" if len(names) > 1 and first in names else prog


def _main(app: typer.Typer, prog: str, argv: list[str] | None = None) -> int:
    """Run ``app``; typer's own parse errors become our usage message (what is wrong, what to do)."""
    try:
        rv = app(prog_name=prog, args=argv, standalone_mode=False)
    except click_exc.NoArgsIsHelpError as exc:
        exc.show()
        return int(exc.exit_code)
    except click_exc.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else _command_path(app, prog, argv)
        ConsoleReporter().error("usage error", f"{exc.format_message()}\n  -> run `{where} --help` for the options")
        return 2
    except (getattr(click_exc, "Abort", typer.Abort), typer.Abort):
        ConsoleReporter().error("interrupted", "stopped by the user; re-run the same command to resume")
        return 130
    return rv if isinstance(rv, int) else 0


def setup_main(argv: list[str] | None = None) -> int:
    """Console script ``october_setup`` (and ``python -m october.installer.october_setup``):
    ``october_setup kit ...`` writes a kit; ``october_setup fleet ...`` provisions a Ray cluster;
    anything else provisions a stack."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["kit"]:
        return _main(kit_app, "october_setup kit", args[1:])
    if args[:1] == ["fleet"]:
        return _main(fleet_app, "october_setup fleet", args[1:])
    return _main(setup_app, "october_setup", args)


def current_main(argv: list[str] | None = None) -> int:
    """Console script ``current`` (and ``python -m october``)."""
    return _main(current_app, "current", argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(setup_main())
