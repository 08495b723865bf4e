"""Command line: ``october_setup`` and ``current`` (doctor, download, smoke).

Thin on purpose: parse options into a frozen options object, call one function,
turn an :class:`OctoberError` into a message and its exit code.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer

# the click exceptions module typer parses with (recent typers carry their own copy of click)
click_exc: Any = importlib.import_module(typer.BadParameter.__module__)

from installer.errors import FileSystemError, OctoberError
from installer.paths import default_cache_dir
from installer.ui import ConsoleReporter

T = TypeVar("T")

setup_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Provision a pinned K16/V8 vLLM + FlashInfer stack from a recipe.")
current_app = typer.Typer(add_completion=False, no_args_is_help=True,
                          help="Check the machine, download pinned models, and prove a stack does K16/V8.")


def _version_callback(prog: str) -> Callable[[bool], None]:
    def show(value: bool) -> None:
        if value:
            from installer.version import version_line
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
    except OctoberError as exc:
        ui.error(exc.title, exc.message)
        raise typer.Exit(exc.exit_code) from None
    except OSError as exc:  # anything a step did not map: still a message, never a traceback
        err = FileSystemError.from_os_error(exc)
        ui.error(err.title, err.message)
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt:
        ui.error("interrupted", "stopped by the user; re-run the same command to resume")
        raise typer.Exit(130) from None


@setup_app.command()
def october_setup(
    stack: Path = typer.Argument(..., help="Directory to provision (created if missing)."),
    recipe: str = typer.Option("current", "--recipe", "-r", help="Recipe name in recipes/ or a path to a .toml."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Shared cache (git mirrors, wheels, uv)."),
    allow_dirty: bool = typer.Option(False, "--allow-dirty", help="Accept modified fork trees (recorded)."),
    skip_preflight: list[str] = typer.Option([], "--skip-preflight", help="Skip one preflight check by name (repeatable)."),
    locked: bool = typer.Option(False, "--locked", help="Install exactly what a lock says; fail on any difference."),
    lock_file: Optional[Path] = typer.Option(None, "--lock-file", help="Lock for --locked (default: locks/<recipe>.pylock.toml, else STACK/pylock.toml)."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Echo every command's output."),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_version_callback("october_setup"),
                                 help="Show the tool's version (and git commit in a checkout) and exit."),
) -> None:
    """Provision STACK from a recipe. Safe to interrupt and re-run: finished steps are skipped."""
    ui = ConsoleReporter(quiet=quiet, verbose=verbose)

    def go() -> None:
        from installer.pipeline import SetupOptions
        from installer.recipe import load_recipe
        from installer.setup import resolve_locked, run_setup

        rec = load_recipe(recipe)
        skips = tuple(s for item in skip_preflight for s in item.split(",") if s)
        opts = SetupOptions(stack=stack.resolve(), recipe=rec, cache_dir=(cache_dir or default_cache_dir()).resolve(),
                            allow_dirty=allow_dirty, skip_preflight=skips,
                            locked=resolve_locked(rec, stack.resolve(), locked, lock_file), quiet=quiet, verbose=verbose)
        result = run_setup(opts, ui, echo_commands=verbose)
        ran = sum(1 for r in result.records if r.status == "ran")
        if not quiet:
            print(f"stack ready: {result.paths.root} ({ran} step(s) ran, {len(result.records) - ran} cached)")
            print(f"  lock:    {result.paths.pylock}")
            print(f"  receipt: {result.paths.setup_receipt}")

    guarded(go, ui)


@current_app.command()
def doctor(
    recipe: str = typer.Option("current", "--recipe", "-r"),
    stack: Path = typer.Option(Path("."), "--stack", help="Where the stack will live (for the disk check)."),
    skip_preflight: list[str] = typer.Option([], "--skip-preflight"),
) -> None:
    """Run the preflight checks alone and print them as a table."""
    ui = ConsoleReporter()

    def go() -> int:
        from installer.preflight import doctor as run_doctor
        from installer.recipe import load_recipe
        from installer.runner import Runner
        import tempfile

        rec = load_recipe(recipe)
        skips = tuple(s for item in skip_preflight for s in item.split(",") if s)
        with tempfile.TemporaryDirectory(prefix="october-doctor-") as logs:
            results, _facts = run_doctor(rec, stack.resolve(), skips, Runner(Path(logs)))
        failed = 0
        for r in results:
            status = getattr(r, "status", None) or ("passed" if r.ok else "failed")
            failed += status == "failed"
            print(f"{status:8} {r.name:10} {r.detail}")
        print(f"{len(results) - failed} of {len(results)} checks passed" if failed else "all checks passed")
        return 1 if failed else 0

    code = guarded(go, ui)
    raise typer.Exit(code)


@current_app.command()
def download(
    format: str = typer.Option(..., "--format", "-f", help="awq or fp16"),
    output: Path = typer.Option(..., "--output", "-o", help="Manifest JSON to write."),
    recipe: str = typer.Option("current", "--recipe", "-r"),
    local_dir: Optional[Path] = typer.Option(None, "--local-dir"),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir"),
    offline: bool = typer.Option(False, "--offline", help="Re-verify an existing copy without network."),
    fixtures: Optional[Path] = typer.Option(None, "--fixtures", help="Calibrated scales dir (default $KNLP_KV_FIXTURES)."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Download the recipe's pinned model and write a verified manifest."""
    ui = ConsoleReporter(quiet=quiet)

    def go() -> None:
        from installer.download import DownloadOptions, run_download
        from installer.recipe import load_recipe

        opts = DownloadOptions(recipe=load_recipe(recipe), format=format, output=output.resolve(),
                               local_dir=local_dir.resolve() if local_dir else None,
                               cache_dir=(cache_dir or default_cache_dir()).resolve(), offline=offline,
                               fixtures=fixtures.resolve() if fixtures else None, quiet=quiet)
        path = run_download(opts)
        if not quiet:
            print(f"manifest written: {path}")

    guarded(go, ui)


@current_app.command()
def smoke(
    install: Path = typer.Option(..., "--install", help="The stack directory made by october_setup."),
    format: str = typer.Option(..., "--format", "-f", help="awq or fp16"),
    output: Path = typer.Option(..., "--output", "-o", help="Directory for receipt.json."),
    level: Optional[str] = typer.Option(None, "--level", help="kernel, engine or reference (default: highest supported)."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", help="Download manifest (default: <format>-download.json)."),
    fixtures: Optional[Path] = typer.Option(None, "--fixtures", help="Calibrated scales dir (default $KNLP_KV_FIXTURES)."),
    recipe: str = typer.Option("current", "--recipe", "-r"),
) -> None:
    """Prove on this machine that the stack really does K16/V8; exit 0 only when receipt.json says passed."""
    ui = ConsoleReporter()

    def go() -> int:
        from installer.smoke import SmokeOptions, run_smoke

        opts = SmokeOptions(install=install.resolve(), format=format, output=output.resolve(), level=level,
                            fixtures=fixtures.resolve() if fixtures else None,
                            manifest=manifest.resolve() if manifest else None, recipe=recipe)
        return run_smoke(opts)

    code = guarded(go, ui)
    raise typer.Exit(code)


@current_app.command("recipes")
def recipes_cmd() -> None:
    """List the shipped recipes, one line each (name, then description)."""
    ui = ConsoleReporter()

    def go() -> None:
        from installer.recipe import load_recipe
        from installer.resources import shipped_recipes

        paths = shipped_recipes()
        width = max((len(p.stem) for p in paths), default=0)
        for path in paths:
            try:
                rec = load_recipe(str(path))
                text = rec.description or "(no description)"
                name = rec.name
            except OctoberError as exc:
                name, text = path.stem, f"INVALID: {exc.what}"
            print(f"{name:{width}}  {text}")

    guarded(go, ui)


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
        return exc.exit_code
    except click_exc.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else _command_path(app, prog, argv)
        ConsoleReporter().error("usage error", f"{exc.format_message()}\n  -> run `{where} --help` for the options")
        return 2
    except (click_exc.Abort, typer.Abort):
        ConsoleReporter().error("interrupted", "stopped by the user; re-run the same command to resume")
        return 130
    return rv if isinstance(rv, int) else 0


def setup_main(argv: list[str] | None = None) -> int:
    """Console script ``october_setup`` (and ``python -m installer.october_setup``)."""
    return _main(setup_app, "october_setup", argv)


def current_main(argv: list[str] | None = None) -> int:
    """Console script ``current`` (and ``python -m installer``)."""
    return _main(current_app, "current", argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(setup_main())
