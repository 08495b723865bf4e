"""What both command lines share without typer (the no-op fast path must not import typer or click):
option values, options checked before anything is written, ``--json`` documents, and
:func:`run_guarded`, which turns an :class:`OctoberError` into a printed message and its exit code."""

from __future__ import annotations

import json
import locale
import os
import re
import select
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from .errors import FileSystemError, OctoberError, UsageError
from .fscause import as_disk_full, as_not_permitted

if TYPE_CHECKING:
    from .ui import ConsoleReporter

T = TypeVar("T")
READER_GONE_EXIT = 141      # 128 + SIGPIPE, as a shell reports `current recipes | head -1` (errors.EXIT_CODES)
JSON_FORMAT_VERSION = 1      # of every --json document (schemas: receipts/<kind>.schema.json)


class CommandExit(Exception):
    """A command ends with this exit code (its message already printed)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def split_skips(values: Sequence[str]) -> tuple[str, ...]:
    """``--skip-preflight a,b --skip-preflight c`` -> (a, b, c)."""
    return tuple(s for item in values for s in item.split(",") if s)


def print_json(kind: str, body: dict[str, Any]) -> None:
    """A --json document: ``format_version`` and ``kind`` first (schema ``receipts/<kind>.schema.json``)."""
    print(json.dumps({"format_version": JSON_FORMAT_VERSION, "kind": f"october-{kind}", **body}, indent=2))


def print_json_error(command: str, code: int, title: str, message: str) -> None:
    """A failed command's --json output (``receipts/error.schema.json``), so stdout is JSON whatever happened
    (unless its reader has left: the exit code stays the failure's)."""
    try:
        print_json("error", {"command": command, "ok": False, "exit_code": code,
                             "error": {"title": title, "message": message}})
        sys.stdout.flush()
    except BrokenPipeError as exc:
        reader_gone(exc)


def run_guarded(fn: Callable[[], T], ui: "ConsoleReporter", *, json_command: str | None = None) -> T:
    """Run ``fn``; an OctoberError (or OSError) becomes a printed message and :class:`CommandExit` with
    its exit code (and, with ``json_command``, the error as JSON on stdout); Ctrl-C is 130, SIGTERM and
    SIGHUP (``plan.Terminated``) 128 + the signal, as a shell reports them; stdout's reader gone (``| head``)
    is 141 and says nothing."""
    try:
        require_cwd()
        return fn()
    except (OctoberError, OSError) as exc:
        if reader_gone(exc):
            raise CommandExit(READER_GONE_EXIT) from None
        # ENOSPC anywhere (our writes, git, uv, a compiler), or a write a command was not permitted: exit 19
        full = as_disk_full(exc) or as_not_permitted(exc)
        err = full if full is not None else exc if isinstance(exc, OctoberError) else FileSystemError.from_os_error(exc)
        from .redact import env_secrets, redact
        code, title, message = err.exit_code, err.title, redact(err.message, env_secrets())
    except KeyboardInterrupt as exc:
        code, title, message = interrupt_message(exc)
    except CommandExit:
        raise                       # a command within that said its own
    except Exception as exc:        # a bug: still a message, its exit code (70) and --json's document
        if type(exc).__module__.startswith(("click", "typer")):
            raise                   # the command line's own answers (an exit, a usage error)
        code, title, message = internal_error(exc)
    ui.error(title, message)
    if json_command:
        print_json_error(json_command, code, title, message)
    raise CommandExit(code) from None


def require_cwd() -> None:
    """The current directory still exists: removed under the shell, a relative path failed with no path named, and
    an absolute STACK got as far as the lock step, where uv failed ("Current directory does not exist")."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise FileSystemError("the current directory no longer exists",
                              expected="a current directory that exists (relative paths, git and uv read it)",
                              found="it was removed after the shell entered it",
                              fix="cd to an existing directory (e.g. `cd ~`) and re-run; nothing was changed") from None


def interrupt_message(exc: KeyboardInterrupt) -> tuple[int, str, str]:
    """Ctrl-C (130) or SIGTERM/SIGHUP (``plan.Terminated``, 128 + the signal): exit code, title, message.

    The interrupt is handled here, so CPython must not take it for an unhandled one: an interrupt raised inside
    code that ``exec`` ran from a string (dataclasses and namedtuple make their methods so, at import) sets the
    interpreter's "unhandled KeyboardInterrupt" flag, and ``python -m`` (what fleet runs on each node) then
    ends by SIGINT after our message instead of with our code.  A string ``exec`` that succeeds clears it."""
    exec("None")  # noqa: S102 -- resets CPython's unhandled-KeyboardInterrupt flag (pythonrun.c run_eval_code_obj)
    signum = getattr(exc, "signum", None)
    why = str(exc) if isinstance(signum, int) else "stopped by the user"
    return (128 + signum if isinstance(signum, int) else 130), "interrupted", f"{why}; re-run the same command to resume"


def internal_error(exc: Exception) -> tuple[int, str, str]:
    """An exception none of the tool's checks made an error of its own: its traceback on stderr (secrets
    masked) for the report, and the exit code, title and message of :class:`InternalError`."""
    import traceback

    from .errors import InternalError
    from .redact import env_secrets, redact

    secrets = env_secrets()
    print(redact("".join(traceback.format_exception(exc)), secrets), file=sys.stderr, end="")
    err = InternalError(f"{type(exc).__name__}: {redact(str(exc), secrets)}",
                        fix="this is a bug of october's, not of your stack: please report it with the traceback "
                            "above and `current env`; re-running the same command resumes where it stopped")
    return err.exit_code, err.title, err.message


def reader_gone(exc: BaseException) -> bool:
    """``exc`` is stdout's reader having left (``current recipes | head -1``), not a failure of the command's
    own work (a child's pipe that broke is one): then stdout goes to /dev/null, so that nothing else, the
    interpreter's last flush included, writes to the closed pipe."""
    if not isinstance(exc, BrokenPipeError):
        return False
    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        if not any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0)):
            return False
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (OSError, ValueError, AttributeError):     # no stdout, or not a file: not this case
        return False
    return True


def flush_stdout(code: int) -> int:
    """The exit code once what is still buffered for stdout is written: a reader that left before the end
    (``current recipes --json | head -c 10``) is :data:`READER_GONE_EXIT` for a command that succeeded and
    nothing printed (not Python's "Exception ignored" and 120)."""
    if sys.stdout is None:
        return code             # started with stdout closed (``>&-``): Python set it to None, nothing to flush
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError) as exc:
        if reader_gone(exc) and code == 0:
            return READER_GONE_EXIT
    return code


def _kind(path: Path) -> str:
    return "a directory" if path.is_dir() else "a file" if path.exists() else "nothing"


def _file_above(path: Path) -> Path | None:
    """The first existing ancestor of ``path`` that is not a directory (it can never be made)."""
    for parent in [path, *path.parents]:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def dir_option(option: str, path: Path, *, must_exist: bool = False, fix: str | None = None,
               made: bool = True) -> Path:
    """A directory option (made if missing unless ``must_exist``; ``made``: False for one the command only reads,
    whose absence is its own to say): a file there or above it, or (``must_exist``) nothing there, is exit 19,
    said as such (``fix``: what to do, else "pass a directory")."""
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
    raise FileSystemError(what, expected="a directory" + ("" if must_exist or not made else " (made if missing)"),
                          found=f"{_kind(blocker or path)} at {blocker or path}", fix=fix or f"pass a directory to {option}")


def cache_apart(cache: Path, stack: Path) -> None:
    """``--cache-dir`` is not one of the stack's own parts, nor inside one: a step replaces them (``env``, a
    fork's clone, ``jit``, ``.state/pycache`` removed as each run starts) or rewrites them, which would take
    the cache with it (or fail late: uv will not clear an env that holds a cache).  The stack's directory
    itself, or a folder of the user's in it, is fine.  -> exit 2 naming the part."""
    from .paths import StackPaths

    owned = StackPaths(stack).parts()
    for part in owned:
        if cache == part or part in cache.parents:
            raise UsageError(f"--cache-dir {cache} is inside the stack's own {part.name}/",
                             expected=f"a --cache-dir outside {', '.join(p.name + '/' for p in owned)} of STACK "
                                      "(october_setup makes and replaces those)",
                             found=f"--cache-dir {cache}, " + (f"STACK's {part.name}/" if cache == part else f"under {part}"),
                             fix=f"pass another --cache-dir, e.g. {stack.parent / 'october-cache'} (or leave it "
                                 "out: $OCTOBER_CACHE_DIR or ~/.cache/october)")


def require_cache_writable(cache: Path) -> None:
    """``--cache-dir`` as :func:`require_writable` checks it, file locks included (uv and this tool lock its
    entries; without them uv's first command failed, exit 6)."""
    require_writable("--cache-dir", cache, what="the cache directory", locks="uv and october lock the cache's entries")


def require_writable(option: str, path: Path, *, what: str, locks: str | None = None) -> None:
    """``path`` (a directory, made later if missing) can be written: a file is made and removed in it, or in
    the nearest directory above it that exists.  Checked with the options, before anything is written: a
    read-only mount, an immutable directory, permissions.  -> exit 19 naming ``what``.  ``locks``: what the
    file locks there guard; the file is then also locked once, so a filesystem without locks (where uv fails
    on its first lock) is said as such (:func:`~october.installer.core.errors.no_file_locks`)."""
    import tempfile

    from .stackmutex import flock_now

    probe = next((p for p in (path, *path.parents) if p.is_dir()), None)
    try:
        if probe is None:
            raise OSError("no directory above it exists")
        with tempfile.TemporaryFile(dir=probe, prefix=".october-write-check-") as tmp:    # never named: never left
            if locks is not None:
                flock_now(tmp.fileno(), probe / ".october-write-check-*", locks, option, f"{what} {path}")
    except OSError as exc:
        raise FileSystemError(f"cannot use {what} {path}", expected=f"a writable directory for {option}",
                              found=f"{probe}: {exc.strerror or exc}",
                              fix=f"pass {option} pointing at a writable directory") from None


def file_option(option: str, path: Path) -> Path:
    """A file option that must exist: nothing there, or a directory, is exit 19."""
    path = path.expanduser()
    if not path.is_file():
        what = f"{option} {path} is a directory" if path.is_dir() else f"{option} {path} does not exist"
        raise FileSystemError(what, expected="an existing file", found=f"{_kind(path)} at {path}",
                              fix=f"check the path given to {option}")
    return path.resolve()


def empty_path(name: str, value: str, *, argument: bool = False, required: bool = True) -> None:
    """An empty or blank path (``--cache-dir ""``, ``STACK ""``) is a usage error (exit 2): ``Path("")`` is the
    current directory, which would silently become the cache, the stack or the output.  ``name``: the option
    (``--cache-dir``) or the argument's metavar (``STACK``).  The one check both command lines use: the typer
    commands for every path option (:class:`~october.installer.cli.common.Command`), the plain fast path by
    leaving such a run to them."""
    if value.strip():
        return
    if argument:
        raise UsageError(f"the {name.lower()} path is empty",
                         expected=f"a path as {name} (an empty one would mean the current directory)",
                         found=repr(value), fix=f"pass the path as {name}")
    if name == "--recipe":
        raise UsageError("--recipe is given an empty value", expected="a recipe name (`current recipes` lists them) "
                         "or the path of a recipe file after --recipe", found=repr(value),
                         fix="pass a recipe name or path to --recipe" + ("" if required else ", or leave --recipe out"))
    raise UsageError(f"{name} is given an empty path",
                     expected=f"a path after {name} (an empty one would mean the current directory)", found=repr(value),
                     fix=f"pass a path to {name}" + ("" if required else f", or leave {name} out for its default"))


# characters a stack or cache path cannot hold, and why: each passed the option checks, preflight and fetch,
# then broke a later step with a message about something else (the audit's cases)
UNUSABLE_CHARS = {
    "#": "uv reads the stack's forks as file:// URLs and a kit's wheels as --find-links, where '#' starts a URL "
         "fragment (uv: `Distribution not found at: file:///.../st`, `Failed to read --find-links directory`)",
    ":": "the stack's env and the cache's build tools go on PATH, whose separator is ':' (uv: `path segment "
         "contains separator ':'`)",
    "$": "GitPython expands environment variables in the paths it is given ($HOME in a path names another "
         "directory)",
    "\n": "the stack's path is written into STACK/stack-env.json's variables and STACK/activate, where a line "
          "break ends the value",
    "\r": "the stack's path is written into STACK/stack-env.json's variables and STACK/activate, where a line "
          "break ends the value",
}
# '$' only where GitPython would read a variable ($NAME, ${NAME}: its own pattern); '$1' or a trailing '$' is kept
_VARIABLE = re.compile(r"\$(\{\s?)?[a-zA-Z_]")
STACK_CHARS = ("#", ":", "$", "\n", "\r")
KIT_CHARS = ("#",)                # uv reads the kit's wheels as --find-links: '#' cut the path there
CACHE_CHARS = (":", "$")          # '#' in the cache is never part of a file:// URL uv reads


def usable_chars(option: str, path: Path, chars: Sequence[str]) -> Path:
    """``path`` (absolute, as the tool will use it) holds none of ``chars`` (:data:`UNUSABLE_CHARS`): one
    that does is exit 19 naming the character and why, before anything is written."""
    bad = next((c for c in chars if (_VARIABLE.search(str(path)) if c == "$" else c in str(path))), None)
    if bad is None:
        return path
    shown, where = (repr(bad), repr(str(path))) if bad in "\n\r" else (f"'{bad}'", str(path))
    raise FileSystemError(f"{option} {where} cannot be used: it contains {shown}",
                          expected=f"a path without {', '.join(repr(c) for c in chars)}",
                          found=f"{shown} in {where} ({UNUSABLE_CHARS[bad]})",
                          fix=f"choose a path for {option} without {shown} (in it or in the directories above it)")


def locale_readable(option: str, path: Path) -> Path:
    """``path`` in the locale's encoding: the editable installs put the stack's path in ``.pth`` files, which
    Python up to 3.12 reads in that encoding whatever its UTF-8 mode says (``LC_ALL=C``: ascii), so a stack
    at a path it cannot encode makes the stack's Python fail at every start (exit 19 here instead)."""
    encoding = locale.getencoding()
    utf8 = encoding.lower().replace("-", "") == "utf8"
    try:
        str(path).encode(encoding)
    except UnicodeEncodeError as exc:
        bad = str(path)[exc.start]
        raise FileSystemError(f"{option} {path} cannot be used under this locale: it contains {bad!r}",
                              expected=f"a path the locale's encoding ({encoding}) can write",
                              found=f"{bad!r} in {path}; the stack's Python reads its path from .pth files in that "
                                    "encoding and would fail at every start",
                              fix="choose a path whose name is valid UTF-8" if utf8 else
                              "set a UTF-8 locale (e.g. `export LC_ALL=C.UTF-8`) for setting up and using the stack, "
                              "or choose an ASCII path") from None
    return path


def stack_argument(value: str) -> Path:
    """STACK: an empty or blank path is refused (it would silently mean the current directory), and so is
    one holding a character a later step cannot use (:data:`STACK_CHARS`), or one the locale cannot encode
    (:func:`locale_readable`).  The one check of both command lines (the typer command through
    :func:`~october.installer.cli.provision.provision`, and the fast path)."""
    empty_path("STACK", value, argument=True)
    return locale_readable("STACK", usable_chars("STACK", dir_option("STACK", Path(value)), STACK_CHARS))


def kit_argument(option: str, value: Path) -> Path:
    """``--kit`` (or ``october_setup kit DIR``): not a file, and without :data:`KIT_CHARS` (a kit made there
    could never be installed from: uv cut its find-links path at '#', and env failed with exit 6)."""
    return usable_chars(option, dir_option(option, value, made=option != "--kit"), KIT_CHARS)


def cache_dir_argument(value: Path) -> Path:
    """``--cache-dir`` (its default already filled in): a directory, made if missing, without
    :data:`CACHE_CHARS`.  Both command lines check it here."""
    return usable_chars("--cache-dir", dir_option("--cache-dir", value), CACHE_CHARS)
