"""Command line: ``october_setup`` (and ``october_setup kit`` / ``fleet``) and ``current`` (doctor,
verify, env, recipes, download, smoke): the entry points.

The apps and the options several commands share are in :mod:`october.installer.cli_common`; the
commands in :mod:`october.installer.cli_setup` (``october_setup``, ``kit``, ``fleet``) and
:mod:`october.installer.cli_current` (the ``current`` subcommands), which register themselves on
those apps when imported here.

One vocabulary: the stack is ``STACK`` (positional) for ``october_setup`` and ``--install STACK``
for every ``current`` command that looks at one; ``--format`` and ``--level`` are choices;
``--output`` names a directory (``download`` also takes a ``FILE.json``); ``--json`` prints the
machine-readable form of a report.
"""

from __future__ import annotations

import sys

import typer

# importing the command modules registers their commands on the apps
from . import cli_current, cli_setup  # noqa: F401
from .cli_common import (
    click_exc,
    current_app,
    fleet_app,
    guarded,
    kit_app,
    print_json_error,
    setup_app,
)
from .core.ui import ConsoleReporter

__all__ = ["current_app", "current_main", "fleet_app", "guarded", "kit_app", "setup_app", "setup_main"]


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
        text = f"{exc.format_message()}\n  -> run `{where} --help` for the options"
        ConsoleReporter().error("usage error", text)
        if "--json" in (sys.argv[1:] if argv is None else argv):      # stdout is JSON whatever happened
            print_json_error(where, 2, "usage error", text)
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
