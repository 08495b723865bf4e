"""What every command of the CLI shares: the Typer apps (``october_setup``, ``october_setup kit``,
``october_setup fleet``, ``current``), the option spellings several commands use, and
:func:`guarded`, which turns an :class:`OctoberError` into a message and its exit code.

The commands register themselves on these apps from :mod:`october.installer.cli_setup` and
:mod:`october.installer.cli_current`; :mod:`october.installer.cli` holds the entry points.
"""

from __future__ import annotations

import enum
import importlib
import json
import textwrap
from pathlib import Path
from typing import Any, Callable, TypeVar

import typer
from typer.core import TyperCommand

from october.installer.core.cliargs import split_skips  # noqa: F401  (shared with the no-op fast path)
from october.installer.core.errors import EXIT_CODES, FileSystemError, OctoberError, UsageError, as_disk_full
from october.installer.core.ui import ConsoleReporter

T = TypeVar("T")

# the click exceptions module typer parses with (recent typers carry their own copy of click)
click_exc: Any = importlib.import_module(typer.BadParameter.__module__)

CONTEXT = {"help_option_names": ["-h", "--help"]}
JSON_FORMAT_VERSION = 1      # of every --json document (schemas: receipts/<kind>.schema.json)


def exit_codes_epilog(width: int = 100) -> str:
    """The one exit-code table (``errors.EXIT_CODES``), as every --help ends (``\b``: click keeps the lines)."""
    lines = ["\b", "Exit codes:"]
    for code, meaning in EXIT_CODES:
        lines += textwrap.wrap(meaning, width, initial_indent=f"  {code:>3}  ", subsequent_indent=" " * 7)
    return "\n".join(lines)


EPILOG = exit_codes_epilog()


class Command(TyperCommand):
    """A command's usage line names its arguments as the help does (``STACK``, not typer's ``{STACK}``)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in super().collect_usage_pieces(ctx)]


def command(app: typer.Typer, name: str | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Register a command alike everywhere: -h/--help, the exit-code table as its epilog."""
    return app.command(name, cls=Command, context_settings=CONTEXT, epilog=EPILOG)


def _app(help_text: str) -> typer.Typer:
    """Every command group is built alike: plain help (rich_markup_mode=None: flags show no "<bool>",
    choices show as <awq|fp16>), -h, help when called bare, no shell completion, our own error messages."""
    return typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                       pretty_exceptions_enable=False, help=help_text, context_settings=CONTEXT, epilog=EPILOG)


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
    return typer.Option(False, "--quiet", "-q", help="No progress or notes on stderr, errors only (not with -v).")


def verbose_option(help_text: str = "Show details on stderr (not with -q).") -> Any:
    return typer.Option(False, "--verbose", "-v", help=help_text)


def json_option(what: str = "the result") -> Any:
    return typer.Option(False, "--json", help=f"Print {what} as JSON on stdout (format_version 1; also on failure).")


def reporter(quiet: bool, verbose: bool) -> ConsoleReporter:
    """The console for one command; -q and -v together are a usage error (exit 2), refused first."""
    if quiet and verbose:
        raise click_exc.UsageError("--quiet and --verbose exclude each other: pass one of them, or neither")
    return ConsoleReporter(quiet=quiet, verbose=verbose)


def json_doc(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """A --json document: ``format_version`` and ``kind`` first (schema ``receipts/<kind>.schema.json``)."""
    return {"format_version": JSON_FORMAT_VERSION, "kind": f"october-{kind}", **body}


def print_json(kind: str, body: dict[str, Any]) -> None:
    print(json.dumps(json_doc(kind, body), indent=2))


def print_json_error(command: str, code: int, title: str, message: str) -> None:
    """A failed command's --json output (``receipts/error.schema.json``), so stdout is JSON whatever happened."""
    print_json("error", {"command": command, "ok": False, "exit_code": code,
                         "error": {"title": title, "message": message}})


def version_callback(prog: str) -> Callable[[bool], None]:
    def show(value: bool) -> None:
        if value:
            from october.installer.core.version import version_line
            print(version_line(prog))
            raise typer.Exit(0)
    return show


@current_app.callback()
def _current_options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=version_callback("current"),
                                 help="Show the tool's version (and git commit in a checkout) and exit."),
) -> None:
    """Check the machine, download pinned models, and prove a stack does K16/V8."""


def guarded(fn: Callable[[], T], ui: ConsoleReporter, *, json_command: str | None = None) -> T:
    """Run ``fn``; an OctoberError becomes a printed message and its exit code (and, with
    ``json_command``, the error as JSON on stdout)."""
    try:
        return fn()
    except (OctoberError, OSError) as exc:
        full = as_disk_full(exc)          # ENOSPC anywhere (our writes, git, uv, a compiler): exit 19
        err = full if full is not None else exc if isinstance(exc, OctoberError) else FileSystemError.from_os_error(exc)
        ui.error(err.title, err.message)
        if json_command:
            print_json_error(json_command, err.exit_code, err.title, err.message)
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt as exc:
        # Ctrl-C: 130; SIGTERM/SIGHUP turned into plan.Terminated: 128 + the signal, as a shell reports it
        signum = getattr(exc, "signum", None)
        code = 128 + signum if isinstance(signum, int) else 130
        why = f"stopped by {exc}" if signum is not None else "stopped by the user"
        ui.error("interrupted", f"{why}; re-run the same command to resume")
        if json_command:
            print_json_error(json_command, code, "interrupted", f"{why}; re-run the same command to resume")
        raise typer.Exit(code) from None


# ------------------------------------------------------------------ options checked before anything is written


def _kind(path: Path) -> str:
    return "a directory" if path.is_dir() else "a file" if path.exists() else "nothing"


def _file_above(path: Path) -> Path | None:
    """The first existing ancestor of ``path`` that is not a directory (it can never be made)."""
    for parent in [path, *path.parents]:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def dir_option(option: str, path: Path, *, must_exist: bool = False) -> Path:
    """A directory option (made if missing unless ``must_exist``): a file there or above it, or
    (``must_exist``) nothing there, is exit 19, said as such."""
    path = path.expanduser()
    blocker = _file_above(path)
    if blocker == path:
        what = f"{option} {path} is a file"
    elif blocker is not None:
        what = f"{option} {path} lies under a file ({blocker})"
    elif must_exist and not path.is_dir():
        what = f"{option} {path} does not exist"
    else:
        return path.resolve()
    raise FileSystemError(what, expected="a directory" + ("" if must_exist else " (made if missing)"),
                          found=f"{_kind(blocker or path)} at {blocker or path}", fix=f"pass a directory to {option}")


def file_option(option: str, path: Path) -> Path:
    """A file option that must exist: nothing there, or a directory, is exit 19."""
    path = path.expanduser()
    if not path.is_file():
        what = f"{option} {path} is a directory" if path.is_dir() else f"{option} {path} does not exist"
        raise FileSystemError(what, expected="an existing file", found=f"{_kind(path)} at {path}",
                              fix=f"check the path given to {option}")
    return path.resolve()


def stack_argument(value: str) -> Path:
    """STACK: an empty or blank path is refused (it would silently mean the current directory)."""
    if not value.strip():
        raise UsageError("the stack path is empty", expected="a directory path, e.g. ./stack", found=repr(value),
                         fix="pass the directory to provision as STACK")
    return dir_option("STACK", Path(value))
