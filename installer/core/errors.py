"""Every error a user can hit, in one place.

Each class carries its own exit code.  A message always says what was
expected, what was found, and what to do next; only the CLI's ``main`` catches
these and turns them into a printed message and an exit status.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import ClassVar, Sequence

SHOWN_MAX = 80      # characters of a value echoed from a file or a command line


def one_line(text: str, limit: int = SHOWN_MAX) -> str:
    """``text`` as one bounded line: control characters escaped (a newline in a value cannot start a
    line of its own in a message), cut to ``limit`` characters with an ellipsis.  Only the part that
    can be shown is looked at, so a 300 KB value costs no more than an 80-character one."""
    head = text[:limit + 1]
    shown = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in head)
    return shown if len(shown) <= limit and len(text) <= limit else shown[:max(limit - 3, 1)] + "..."


class OctoberError(Exception):
    """Base class: ``expected`` / ``found`` / ``fix`` make up the message."""

    exit_code: ClassVar[int] = 1
    title: ClassVar[str] = "error"

    def __init__(self, what: str, *, expected: str | None = None, found: str | None = None,
                 fix: str | None = None) -> None:
        self.what = what
        self.expected = expected
        self.found = found
        self.fix = fix
        super().__init__(self.message)

    @property
    def message(self) -> str:
        parts = [self.what.rstrip(".") + "."]
        if self.expected is not None:
            parts.append(f"Expected {self.expected}" + (f", found {self.found}." if self.found is not None else "."))
        elif self.found is not None:
            parts.append(f"Found {self.found}.")
        line1 = " ".join(parts)
        return f"{line1}\n  -> {self.fix}" if self.fix else line1

    def __str__(self) -> str:
        return self.message


class UsageError(OctoberError):
    exit_code = 2
    title = "usage error"


class RecipeError(OctoberError):
    """A recipe or forks.toml file is malformed or inconsistent."""

    exit_code = 3
    title = "recipe error"

    def __init__(self, file: Path | str, key: str, *, expected: str, found: str,
                 fix: str | None = None) -> None:
        self.file = one_line(str(file), 240)
        self.key = key = one_line(key)
        super().__init__(f"{self.file}: key '{key}' is invalid", expected=one_line(expected, 320),
                         found=one_line(found, 240), fix=one_line(fix or f"edit '{key}' in {self.file}", 400))


class RecipeNotFound(RecipeError):
    """``--recipe`` names no shipped recipe and no file (exit 3, like any recipe problem)."""

    def __init__(self, name: str, path: Path, *, available: Sequence[str]) -> None:
        self.file = str(path)
        self.key = "<file>"
        given_path = name.endswith(".toml") or "/" in name
        OctoberError.__init__(
            self, f"there is no recipe '{name}'",
            expected=f"a shipped recipe name ({', '.join(available) or 'none'}) or a path to a .toml file",
            found=f"no file {path}",
            fix="check the path" if given_path else "run `current recipes` to list them, or pass --recipe PATH.toml")


class PreflightError(OctoberError):
    """One or more machine checks failed; ``problems`` is the punch list."""

    exit_code = 4
    title = "preflight failed"

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        lines = [f"  - [{name}] {text}" for name, text in self.problems]
        super().__init__(
            f"{len(self.problems)} preflight check(s) failed:\n" + "\n".join(lines),
            fix="fix the items above, or skip one you know is fine with --skip-preflight NAME",
        )

    @property
    def message(self) -> str:  # the punch list is already complete; no expected/found line
        return f"{self.what}\n  -> {self.fix}"


class StackLockedError(OctoberError):
    exit_code = 5
    title = "stack busy"


class SmokeBusyError(StackLockedError):
    """Another `current smoke` holds the stack or the GPU (same code: the stack is busy)."""

    title = "smoke busy"


class DownloadBusyError(StackLockedError):
    """Another `current download` is writing the same model directory (same code: busy)."""

    title = "download busy"


class KitBusyError(StackLockedError):
    """Another `october_setup kit` is writing the same kit directory (same code: busy)."""

    title = "kit busy"


class CommandFailed(OctoberError):
    """An external command exited non-zero (or could not start)."""

    exit_code = 6
    title = "command failed"

    def __init__(self, step: str, argv: Sequence[str], returncode: int, tail: str,
                 log_path: Path | None) -> None:
        self.step = step
        self.argv = list(argv)
        self.returncode = returncode
        self.tail = tail
        self.log_path = log_path
        shown = " ".join(self.argv)
        where = f"; full log: {log_path}" if log_path else ""
        super().__init__(
            f"step '{step}': command `{shown}` failed",
            expected="exit code 0", found=f"exit code {returncode}",
            fix=f"read the last lines below{where}",
        )

    @property
    def message(self) -> str:
        if not self.tail.strip():
            return super().message
        return super().message + "".join("\n    | " + ln for ln in self.tail.rstrip().splitlines())


class ToolMissing(OctoberError):
    exit_code = 7
    title = "tool missing"


class FetchError(OctoberError):
    """git: a fork cannot be fetched, a commit is missing, a tree is dirty."""

    exit_code = 8
    title = "fetch failed"


class ClusterUnreachable(OctoberError):
    """``october_setup fleet``: nothing answers at the Ray cluster's address (an unreachable remote, as 8 is)."""

    exit_code = 8
    title = "Ray cluster unreachable"


class EnvError(OctoberError):
    exit_code = 9
    title = "environment error"


class WheelError(OctoberError):
    """The base wheel could not be downloaded or failed verification."""

    exit_code = 10
    title = "wheel verification failed"


class InstallError(OctoberError):
    """A post-install guard fired (torch moved, flashinfer not the fork, ...)."""

    exit_code = 11
    title = "install check failed"


class UnlikeRecordError(InstallError):
    """Files of the env unlike their RECORD (changed, missing) or owned by none: ``paths``, each of them."""

    def __init__(self, what: str, *, paths: Sequence[Path], expected: str | None = None, found: str | None = None,
                 fix: str | None = None) -> None:
        self.paths = tuple(paths)
        super().__init__(what, expected=expected, found=found, fix=fix)


class JitError(OctoberError):
    exit_code = 12
    title = "JIT build failed"


class UntrustedJitError(JitError):
    """A stack's JIT libraries unlike what its jit step recorded: nothing was built by the command that says so."""

    title = "JIT libraries not trusted"


class LockError(OctoberError):
    """A pylock cannot be written or a --locked install differs from it."""

    exit_code = 13
    title = "lock mismatch"


class ReceiptError(OctoberError):
    exit_code = 14
    title = "receipt invalid"


class DownloadError(OctoberError):
    """Model download, revision or hash verification failed."""

    exit_code = 15
    title = "download failed"


class ScalesError(OctoberError):
    """A calibrated scales file is missing, malformed or made for another model."""

    exit_code = 16
    title = "scales invalid"


class SmokeError(OctoberError):
    """The smoke harness could not run (not: a check failed; that is a receipt)."""

    exit_code = 17
    title = "smoke failed to run"


class StateError(OctoberError):
    exit_code = 18
    title = "stack state error"


class InternalError(OctoberError):
    """An exception no check of the tool turned into an error of its own: a bug of october's."""

    exit_code = 70                  # EX_SOFTWARE (sysexits.h)
    title = "internal error"


class FileSystemError(OctoberError):
    """A path the user gave cannot be read or written (permissions, a file where a directory
    belongs, a full disk): raised by the CLI for any OSError a step did not map itself."""

    exit_code = 19
    title = "file system error"

    @classmethod
    def from_os_error(cls, exc: OSError) -> "FileSystemError":
        where = exc.filename if exc.filename is not None else "a path"
        return cls(f"cannot use {where}", expected="a path that can be read and written there",
                   found=exc.strerror or type(exc).__name__,
                   fix="check the path (a file where a directory belongs?), its permissions and free space")


# flock(2) where the filesystem has no locks: Lustre mounted without -o flock (ENOSYS), NFS without its lock
# service (ENOLCK), some FUSE mounts (EOPNOTSUPP)
NO_LOCK_ERRNOS = frozenset({errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP})


def no_file_locks(lock: Path, exc: OSError, guards: str, option: str, what: str | None = None) -> FileSystemError:
    """The error for an ``flock`` on ``lock`` that its filesystem refuses (``exc.errno`` in NO_LOCK_ERRNOS);
    ``option``: what the user changes to put it elsewhere; ``what``: the folder as the user knows it."""
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return FileSystemError(f"the filesystem holding {what or lock.parent} has no file locks",
                           expected=f"an flock on {lock} ({guards})", found=f"{exc.strerror or exc} ({code})",
                           fix=f"give {option} a folder on a filesystem with file locks: a local disk, Lustre mounted "
                               "with -o flock, NFS with its lock service running (uv locks its cache and each "
                               "environment the same way, so it needs them there too)")


# how "the disk is full" reads in the output of git, uv, pip, gcc/ninja and Python
_DISK_FULL = re.compile(r"No space left on device|\bENOSPC\b|os error 28\b|Errno 28\b|Disk quota exceeded|"
                        r"\bEDQUOT\b|os error 122\b|Errno 122\b")
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_FIX = ("free space there (`df -h` shows which filesystem is full), or point the path that names it "
                 "(STACK, --cache-dir, --local-dir, --output, a kit's DIR) at a larger one; then re-run the same "
                 "command (finished work is kept)")


def says_disk_full(text: str) -> bool:
    return bool(_DISK_FULL.search(text))


class DiskFullError(FileSystemError):
    """A write failed because a filesystem is full (ENOSPC / EDQUOT), in our code or in any command."""

    title = "disk full"

    @classmethod
    def from_os_error(cls, exc: OSError) -> "DiskFullError":
        where = exc.filename if exc.filename is not None else "a path"
        return cls(f"cannot write {where}", expected="free space on its filesystem",
                   found=exc.strerror or "ENOSPC", fix=DISK_FULL_FIX)

    @classmethod
    def from_error(cls, exc: OctoberError) -> "DiskFullError":
        """Another error whose cause, as its message shows, was a full disk (e.g. git's)."""
        lines = [ln.strip(" |") for ln in exc.message.splitlines()]
        cause = next((ln for ln in lines if says_disk_full(ln)), "No space left on device")
        cause = cause.rsplit("found ", 1)[-1].rstrip(".").strip()
        return cls(exc.what.splitlines()[0], expected="free space on the filesystem written to",
                   found=cause, fix=DISK_FULL_FIX)


class KitError(OctoberError):
    """An offline kit cannot be made, or cannot be used: missing, tampered, or for another recipe."""

    exit_code = 20
    title = "kit error"


# The one table of exit codes: the README's "Exit codes" table and every command's --help epilog
# are this table (tests/test_conventions.py holds the three equal, and every class above to a code here).
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, 'success (for `current smoke`: the receipt says `passed: true`)'),
    (1, "`current smoke`: a check did not pass (see the receipt); `current doctor`: a check failed; `october_setup fleet`: the fleet did not pass (the receipt names each node's status and what differs)"),
    (2, 'usage error (an unknown or missing option, a value not among the choices, options that exclude each other)'),
    (3, 'recipe or forks.toml invalid (the message names the file and key)'),
    (4, 'preflight failed (the punch list names every failed check)'),
    (5, "another `october_setup` holds the stack (for it, `current smoke` and `current verify`), another `current smoke` holds the stack or the GPU (the message names the holder's pid and command), or another `current download` writes the same model directory"),
    (6, 'an external command failed (the message names the step, command, exit code, log)'),
    (7, 'a required program is missing (also: Ray, for `october_setup fleet`)'),
    (8, 'fetch failed (unreachable remote, missing commit, dirty tree); `october_setup fleet`: the Ray cluster cannot be reached'),
    (9, 'the stack env could not be made as the recipe says'),
    (10, 'the base wheel failed download or verification'),
    (11, "a post-install guard fired (torch moved, flashinfer not the fork, an extension module of the base wheel does not import, a fork's build tried to install packages, an undeclared conflict in the env, `import flashinfer` fails with the stack environment)"),
    (12, 'JIT build failed, or the installed FlashInfer is not the asymmetric fork, or the stack\'s JIT '
         'libraries differ from what its jit step recorded'),
    (13, 'the stack differs from the lock (`october_setup --locked`, `current verify`)'),
    (14, 'a receipt or manifest does not match its schema'),
    (15, 'model download or verification failed'),
    (16, 'calibrated scales invalid or for another model'),
    (17, 'the smoke harness could not run'),
    (18, 'stack state error'),
    (19, 'a path cannot be read or written, or is the wrong kind (a missing file, a file where a directory belongs, permissions, a stack or smoke output on a filesystem without file locks); "disk full" when any write ran out of space (ours, git\'s, uv\'s, a compiler\'s)'),
    (20, 'an offline kit cannot be made or used (missing piece, tampered file, other recipe)'),
    (21, '`current smoke --diagnostic-cache`: the diagnostic finished and every engine check passed on every symmetric cache asked for (the harness agrees with the engine; never a stack verdict: `passed` is false; a check that did not pass is exit 1)'),
    (70, "internal error: a bug of october's, not of the stack (the traceback is printed above the message; please report it, with `current env`)"),
    (130, "interrupted (Ctrl-C); re-run the same command to resume"),
    (141, "stdout's reader left before the output was written (`current recipes | head -1`): nothing more is printed, as a shell reports SIGPIPE"),
    (143, "`october_setup` stopped by SIGTERM (129: SIGHUP): timeout(1), a cancelled CI job, a closed terminal; "
          "the run stops as on Ctrl-C (a background JIT build killed, the stack lock released); re-run to resume. "
          "A signal ignored by whoever started the run stays ignored: under `nohup october_setup ...` a closed "
          "terminal does not stop it"),
)
