"""What every command of the CLI shares: how a Typer app is made (:func:`new_app`) and run
(:func:`run_app`: typer's parse errors become our usage message), the option spellings several
commands use, and :func:`guarded`, which turns an :class:`OctoberError` into a message and its exit code.

Each app is made, with its commands, in the module that holds them: ``october_setup`` (and its
``kit`` / ``fleet``) in :mod:`october.installer.cli.main`, ``current`` in :mod:`october.installer.cli.current`.
"""

from __future__ import annotations

import enum
import importlib
import sys
import textwrap
from pathlib import PurePath
from typing import Any, Callable, TypeVar

import typer
from typer.core import TyperCommand

from ..core.cliargs import (  # noqa: F401  (re-exported for the typer commands; shared with the plain fast path)
    READER_GONE_EXIT,
    CommandExit,
    cache_dir_argument,
    dir_option,
    empty_path,
    file_option,
    interrupt_message,
    kit_argument,
    locale_readable,
    print_json,
    print_json_error,
    reader_gone,
    run_guarded,
    split_skips,
)
from ..core.errors import EXIT_CODES
from ..core.ui import ConsoleReporter

T = TypeVar("T")

# the click exceptions module typer parses with (recent typers carry their own copy of click)
click_exc: Any = importlib.import_module(typer.BadParameter.__module__)

CONTEXT = {"help_option_names": ["-h", "--help"]}


def exit_codes_epilog(width: int = 100) -> str:
    """The one exit-code table (``errors.EXIT_CODES``), as every --help ends (``\b``: click keeps the lines)."""
    lines = ["\b", "Exit codes:"]
    for code, meaning in EXIT_CODES:
        lines += textwrap.wrap(meaning, width, initial_indent=f"  {code:>3}  ", subsequent_indent=" " * 7)
    return "\n".join(lines)


EPILOG = exit_codes_epilog()


# the metavars of the options and arguments that take a path (some are plain str: fleet's, which hold placeholders)
PATH_METAVARS = frozenset({"DIR", "FILE", "PYTHON", "STACK"})


# options whose value is a name or a path: empty, it is neither (``--recipe ""`` looked for ``recipes/.toml``)
NAME_OR_PATH_OPTIONS = frozenset({"--recipe"})


def is_path_param(param: Any) -> bool:
    """A parameter that takes a path: typed ``Path`` (typer keeps the annotation), named by a path metavar,
    or one of :data:`NAME_OR_PATH_OPTIONS`."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    return ((isinstance(annotation, type) and issubclass(annotation, PurePath)) or param.metavar in PATH_METAVARS
            or not NAME_OR_PATH_OPTIONS.isdisjoint(getattr(param, "opts", ())))


class Command(TyperCommand):
    """Every command: its usage line names its arguments as the help does (``STACK``, not typer's ``{STACK}``),
    and an empty path given to any path option or argument is a usage error (:func:`empty_path`), caught here on
    the raw text, before typer turns ``""`` into ``Path(".")`` and no command could tell it from the current
    directory."""

    def invoke(self, ctx: Any) -> Any:
        """Ctrl-C in a command outside its guard (typer made it a silent ``Exit(130)``, and CPython could still
        end the process by SIGINT): the interrupt's message, its ``--json`` document, 130."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            code, title, message = interrupt_message(exc)
            ConsoleReporter().error(title, message)
            if ctx.params.get("as_json"):
                print_json_error(ctx.command_path, code, title, message)
            raise CommandExit(code) from None

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in super().collect_usage_pieces(ctx)]

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            self._refuse_empty_paths(ctx, list(args))
        return super().parse_args(ctx, args)

    def _refuse_empty_paths(self, ctx: Any, args: list[str]) -> None:
        try:
            raw, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        except click_exc.ClickException:
            return                  # typer's own parse says what is wrong
        for param in self.get_params(ctx):
            given = raw.get(param.name)
            values = given if isinstance(given, (list, tuple)) else [given]
            empty = next((v for v in values if isinstance(v, str) and not v.strip()), None)
            if empty is None or not is_path_param(param):
                continue
            argument = param.param_type_name == "argument"
            name = param.metavar if argument else max(param.opts, key=len)
            run_guarded(lambda: empty_path(name, empty, argument=argument, required=param.required),
                        ConsoleReporter(), json_command=ctx.command_path if "--json" in args else None)


def command(app: typer.Typer, name: str | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Register a command alike everywhere: -h/--help, the exit-code table as its epilog."""
    return app.command(name, cls=Command, context_settings=CONTEXT, epilog=EPILOG)


def new_app(help_text: str) -> typer.Typer:
    """Every command group is built alike: plain help (rich_markup_mode=None: flags show no "<bool>",
    choices show as <awq|fp16>), -h, help when called bare, no shell completion, our own error messages."""
    return typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                       pretty_exceptions_enable=False, help=help_text, context_settings=CONTEXT, epilog=EPILOG)


def _command_path(app: typer.Typer, prog: str, argv: list[str] | None) -> str:
    """``current smoke`` when the arguments name a subcommand of ``app``, else ``prog``."""
    args = sys.argv[1:] if argv is None else argv
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    first = next((a for a in args if not a.startswith("-")), None)
    return f"{prog} {first}" if len(names) > 1 and first in names else prog


def run_app(app: typer.Typer, prog: str, argv: list[str] | None = None) -> int:
    """Run ``app``; typer's own parse errors become our usage message (what is wrong, what to do)."""
    try:
        rv = app(prog_name=prog, args=argv, standalone_mode=False)
    except CommandExit as exc:      # refused while parsing (Command: an empty path), the message printed
        return exc.code
    except click_exc.NoArgsIsHelpError as exc:
        exc.show()
        return int(exc.exit_code)
    except click_exc.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else _command_path(app, prog, argv)
        text = f"{exc.format_message()}\n  -> run `{where} --help` for the options"
        ConsoleReporter().error("usage error", text)
        if "--json" in (sys.argv[1:] if argv is None else argv):      # stdout is JSON whatever happened
            print_json_error(where, 2, "usage error", text)
        return 2
    except (getattr(click_exc, "Abort", typer.Abort), typer.Abort):
        ConsoleReporter().error("interrupted", "stopped by the user; re-run the same command to resume")
        return 130
    except SystemExit as exc:       # click's own answer to a broken pipe (``--help | head``) is exit 1
        if isinstance(exc.__context__, BrokenPipeError) and reader_gone(exc.__context__):
            return READER_GONE_EXIT
        raise
    return rv if isinstance(rv, int) else 0


class ModelFormat(str, enum.Enum):
    awq = "awq"
    fp16 = "fp16"


class SmokeLevel(str, enum.Enum):
    reference = "reference"
    kernel = "kernel"
    engine = "engine"


class DiagnosticCache(str, enum.Enum):
    """`current smoke --diagnostic-cache` (october.checks.contract.DIAGNOSTIC_CACHES)."""

    bf16 = "bf16"
    fp8_e4m3 = "fp8_e4m3"
    both = "both"


RECIPE_HELP = "Recipe name (see `current recipes`) or a path to a .toml."
CACHE_HELP = "Shared cache (default $OCTOBER_CACHE_DIR or ~/.cache/october)."


# the options several commands share, spelled once
def recipe_option(help_text: str = RECIPE_HELP) -> Any:
    return typer.Option("current", "--recipe", "-r", metavar="NAME", help=help_text)


def cache_dir_option(help_text: str = CACHE_HELP) -> Any:
    return typer.Option(None, "--cache-dir", metavar="DIR", help=help_text)


def quiet_option() -> Any:
    return typer.Option(False, "--quiet", "-q", help="No progress or notes on stderr: warnings and errors only (not with -v).")


def verbose_option(help_text: str = "Show details on stderr (not with -q).") -> Any:
    return typer.Option(False, "--verbose", "-v", help=help_text)


def json_option(what: str = "the result") -> Any:
    return typer.Option(False, "--json", help=f"Print {what} as JSON on stdout (format_version 1; also on failure).")


def reporter(quiet: bool, verbose: bool) -> ConsoleReporter:
    """The console for one command; -q and -v together are a usage error (exit 2), refused first."""
    if quiet and verbose:
        raise click_exc.UsageError("--quiet and --verbose exclude each other: pass one of them, or neither")
    return ConsoleReporter(quiet=quiet, verbose=verbose)


def version_option(prog: str) -> Any:
    def show(value: bool) -> None:
        if value:
            from ..core.version import version_line
            print(version_line(prog))
            raise typer.Exit(0)
    return typer.Option(False, "--version", is_eager=True, callback=show,
                        help="Show the tool's version (and git commit in a checkout) and exit.")


def guarded(fn: Callable[[], T], ui: ConsoleReporter, *, json_command: str | None = None) -> T:
    """Run ``fn``; an OctoberError becomes a printed message and its exit code (and, with
    ``json_command``, the error as JSON on stdout): :func:`~october.installer.core.cliargs.run_guarded`
    as a typer exit."""
    try:
        return run_guarded(fn, ui, json_command=json_command)
    except CommandExit as exc:
        raise typer.Exit(exc.code) from None
