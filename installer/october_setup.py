"""The ``october_setup`` console script (and ``python -m october.installer.october_setup``, what ``fleet``
runs on each node): plain options (``STACK --recipe R --cache-dir C ...``) are answered
by the fast path (:mod:`october.installer.noop`, no command-line framework imported: a finished stack
that still verifies is a no-op, anything else runs the same provisioning function as the full command
line); everything else (help, --json, -v, kit, fleet, usage errors) by the full command line
(:func:`october.installer.cli.setup_main`)."""

from __future__ import annotations

import os
import sys


def compile_imported() -> int:
    """Under ``PYTHONDONTWRITEBYTECODE`` (set in many containers) Python compiles every module it
    imports at every start and writes nothing: 1.3 s of a 2.5 s no-op (issue 20).  After a run, the
    modules it imported whose ``.pyc`` is missing or older than the source are compiled once, where
    the files can be written (the tool's own modules, its env's packages); anything read-only is left
    as it is.  ``uv tool install --compile-bytecode`` (or ``UV_COMPILE_BYTECODE=1 uv sync``) does the
    same at install time.  -> how many were compiled."""
    if not sys.dont_write_bytecode:
        return 0                    # Python writes them itself as it imports
    stale: list[tuple[str, str]] = []
    for mod in list(sys.modules.values()):
        spec = getattr(mod, "__spec__", None)
        origin, cached = getattr(spec, "origin", None), getattr(spec, "cached", None)
        if not (isinstance(origin, str) and isinstance(cached, str) and origin.endswith(".py")):
            continue
        try:
            if os.stat(cached).st_mtime_ns >= os.stat(origin).st_mtime_ns:
                continue
        except OSError:
            pass
        stale.append((origin, cached))
    if not stale:
        return 0
    import py_compile

    done = 0
    for origin, cached in stale:
        try:
            py_compile.compile(origin, cfile=cached, doraise=True)
            done += 1
        except (OSError, py_compile.PyCompileError):
            continue                # read-only, or not ours to fix: Python compiles it in memory
    return done


def setup_main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        from .noop import fast_setup

        if (done := fast_setup(args)) is not None:
            return done
        from .cli import setup_main as full

        return full(args)
    finally:
        compile_imported()


if __name__ == "__main__":
    sys.exit(setup_main())
