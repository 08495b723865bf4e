"""The ``october_setup`` console script: a finished stack that still verifies is answered by the no-op
fast path (:mod:`october.installer.noop`, no command-line framework imported); everything else by
the full command line (:func:`october.installer.cli.setup_main`)."""

from __future__ import annotations

import sys


def setup_main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    from october.installer.noop import try_noop

    done = try_noop(args)
    if done is not None:
        return done
    from october.installer.cli import setup_main as full

    return full(args)
