"""The console scripts' entry points.  ``october_setup`` (and ``python -m october.installer.october_setup``, what
``fleet`` runs on each node): plain options are answered by the fast path (:mod:`october.installer.cli.noop`, no
command-line framework imported), everything else by the full command line (:func:`october.installer.cli.main.setup_main`).
``current`` (and ``python -m october``): :func:`october.installer.cli.main.current_main`, imported here so that Ctrl-C
while the tool is still importing gets the interrupt message and 130, not a traceback, as it does later."""

from __future__ import annotations

import atexit
import gc
import os
import sys


def _leave_quickly() -> None:
    """At the interpreter's exit (the last exit handler: registered first), after the other handlers ran: the
    collector stopped and every object kept out of it.  The teardown then frees the ~530 modules' objects by
    their reference counts without a collection over all of them (60-85 ms of a 1.1 s second stack here, 5-12 ms
    after); an object in a reference cycle is left to the process's end, as the operating system frees it."""
    gc.disable()
    gc.freeze()


atexit.register(_leave_quickly)


def compile_imported() -> int:
    """Under ``PYTHONDONTWRITEBYTECODE`` (set in many containers) Python compiles every module at every start
    and writes nothing (1.3 s of a 2.5 s no-op): after a run, compile the imported modules whose ``.pyc`` is
    missing or stale, where writable.  -> how many were compiled."""
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


def interrupted(command: str, args: list[str], exc: KeyboardInterrupt) -> int:
    """Ctrl-C (or SIGTERM/SIGHUP) that reached the entry point, before the command's own handler was in place
    (imports) or after it: run_guarded's message, its ``--json`` error document, its exit code."""
    from .core.cliargs import interrupt_message, print_json_error

    code, title, message = interrupt_message(exc)
    print(f"error: {title}: {message}", file=sys.stderr)
    if "--json" in args:            # stdout is JSON whatever happened (receipts/error.schema.json)
        print_json_error(command, code, title, message)
    return code


def setup_main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        from .cli.noop import fast_setup

        if (done := fast_setup(args)) is None:
            from .cli.main import setup_main as full

            done = full(args)
    except KeyboardInterrupt as exc:
        return interrupted("october_setup", args, exc)      # leaves at once: nothing compiled
    except BrokenPipeError as exc:     # the no-op's summary, printed outside the command's own guard
        return _reader_left(exc)
    compile_imported()
    return _flushed(done)


def current_main(argv: list[str] | None = None) -> int:
    """Console script ``current`` (and ``python -m october``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        from .cli.main import current_main as full

        return _flushed(full(args))
    except KeyboardInterrupt as exc:
        return interrupted("current", args, exc)
    except BrokenPipeError as exc:
        return _reader_left(exc)


def _flushed(code: int) -> int:
    from .core.cliargs import flush_stdout

    return flush_stdout(code)


def _reader_left(exc: BrokenPipeError) -> int:
    """stdout's reader left (``| head``): 141 and nothing more said; any other broken pipe is a failure."""
    from .core.cliargs import READER_GONE_EXIT, reader_gone

    if reader_gone(exc):
        return READER_GONE_EXIT
    raise exc


if __name__ == "__main__":
    sys.exit(setup_main())
