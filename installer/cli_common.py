"""What every command of the CLI shares: the Typer apps (``october_setup``, ``october_setup kit``,
``october_setup fleet``, ``current``), the option spellings several commands use, and
:func:`guarded`, which turns an :class:`OctoberError` into a message and its exit code.

The commands register themselves on these apps from :mod:`october.installer.cli_setup` and
:mod:`october.installer.cli_current`; :mod:`october.installer.cli` holds the entry points.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, TypeVar

import typer

from october.installer.core.cliargs import split_skips  # noqa: F401  (shared with the no-op fast path)
from october.installer.core.errors import FileSystemError, OctoberError, as_disk_full
from october.installer.core.ui import ConsoleReporter

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
