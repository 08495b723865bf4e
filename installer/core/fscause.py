"""What a failure really was when its cause is the filesystem: a full disk (any write, ours or a command's) or a
write not permitted (as a command's last errors say), turned into the error the user is shown (exit 19)."""

from __future__ import annotations

import re

from .errors import DISK_FULL_ERRNOS, CommandFailed, DiskFullError, FileSystemError, OctoberError, says_disk_full


# how "no permission to write there" reads in the output of uv (Rust's io errors), Python and git; not ssh's
# "Permission denied (publickey)", which is a fetch's authentication
_NOT_PERMITTED = re.compile(r"os error (13|30)\b|Errno (13|30)\b|\bEACCES\b|\bEROFS\b|Read-only file system|"
                            r": Permission denied\.?\s*$", re.MULTILINE)


# a line that begins an error of the command's own (an indented line below one continues it: uv folds lines)
_ERROR_START = re.compile(r"^\s*(error|fatal|cause|caused by|\w*Error)\b", re.IGNORECASE)


NOT_PERMITTED_FIX = ("make the path it names writable for this user (`ls -ld PATH`; a read-only mount or another "
                     "user's files?), or point STACK or --cache-dir at a place this user can write; then re-run the "
                     "same command (finished work is kept)")


def as_not_permitted(exc: BaseException) -> FileSystemError | None:
    """The FileSystemError a command's failure really is when the last errors it printed say a write was not
    permitted (uv's "(os error 13)", git's ": Permission denied"), or None.  Only a failed command (or a step's
    error raised from one) is read, only its last three errors (a warning above them, or a device such as
    /dev/nvidia-uvm, is not the cause), and the command's own lines, not the step's message, are quoted."""
    failed = exc if isinstance(exc, CommandFailed) else getattr(exc, "__cause__", None)
    if not isinstance(failed, CommandFailed) or isinstance(exc, FileSystemError):
        return None
    entries: list[str] = []
    for line in failed.tail.splitlines():
        if not line.strip():
            continue
        if entries and not _ERROR_START.match(line) and line[:1].isspace():
            entries[-1] += " " + line.strip()         # a folded line of the error above
        else:
            entries.append(line.strip())
    errors = [e for e in entries if _ERROR_START.match(e)][-3:]
    cause = next((e for e in reversed(errors) if _NOT_PERMITTED.search(e) and "/dev/" not in e), None)
    if cause is None:
        return None
    where = f" (full log: {failed.log_path})" if failed.log_path else ""
    return FileSystemError(exc.what.splitlines()[0] if isinstance(exc, OctoberError) else failed.what,
                           expected="a path this user can write", found=" ".join(cause.split()) + where,
                           fix=NOT_PERMITTED_FIX)


def as_disk_full(exc: BaseException) -> DiskFullError | None:
    """The DiskFullError that ``exc`` really is, or None."""
    if isinstance(exc, DiskFullError):
        return exc
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return DiskFullError.from_os_error(exc)
    if isinstance(exc, OctoberError) and says_disk_full(exc.message):
        return DiskFullError.from_error(exc)
    return None
