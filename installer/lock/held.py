"""Each distribution of an env held to the RECORD of the wheel it was installed from: what the install step asks of
an env uv installed (:mod:`october.installer.steps.indexcheck`) before the built-stack cache may keep it.

uv installs a wheel from its cache's unpacked copy, and the install's RECORD check holds each file to the installed
RECORD, which came from that copy too: a file edited there with its RECORD row, or added with a row of its own,
passes it.  Here the installed RECORD is compared with the wheel's own, each of the wheel's rows at the place it
installs to (site-packages; ``.data/purelib`` and ``platlib`` there too; ``scripts`` in the env's ``bin``, ``data``
at its root, ``headers`` in ``include/site/pythonX.Y/NAME``): every hashed row of the wheel must be installed there with its hash,
and every installed row must be one the wheel names (once), the installer's own dist-info files and the
entry-point scripts of the wheel's own ``entry_points.txt`` aside.  A script whose first bytes are ``#!python``
is installed with that line rewritten: held when the installed file is the wheel's bytes after that line, behind
a launcher uv writes for the env's ``bin/python`` (:func:`_launchers`), and is the file its installed RECORD row
hashes.

Which wheel: the listing's wheels for the package (``uv pip compile`` for the env's interpreter lists those its tags
take), the one whose name has the installed ``WHEEL``'s tags read first; the distribution is held when any of them
matches, named when all that could be read differ (the ``WHEEL`` file is a RECORD row: editing its tags does not
move a distribution out of reach), and not judged when none could be read (said why: a host that did not answer,
a package built from its sdist, which has no wheel listed, a script behind a launcher the hold does not know).
Every other distribution of the env but the forks the install built is not judged: one installed from a URL of its
own is not held to that URL; which distributions something the install trusts asks for by URL, and which no one
asked for, is :mod:`.asked`'s.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import threading
import time
import zipfile
from dataclasses import dataclass
from importlib.metadata import PathDistribution
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence
from urllib.parse import unquote, urlsplit

from packaging.utils import (InvalidWheelFilename, canonicalize_name, canonicalize_version,
                             parse_wheel_filename)

from ..core.hashing import record_digest, sha256_or_none
from ..core.redact import redact_url
from ..pyenv.dists import Dist, installed
from .asked import direct_url
from .installed import INSTALLER_FILES, Unlike, installed_digests, local_wheel, locked_sha256, wheel_rows


@dataclass(frozen=True)
class Held:
    """What :func:`held_to_index` found: the distributions unlike their wheel, and those it could not hold to one
    (``name version: why``)."""

    unlike: tuple[Unlike, ...]
    unjudged: tuple[str, ...]


SCRIPT_MARK = b"#!python"         # a wheel script's first bytes that ask for the installing interpreter (PEP 427)


HOLD_BUDGET_S = 120.0              # the reads of index wheels in one hold, at most (then: not judged, not stored)


SCRIPT_MAX = 1 << 20                # a script's bytes read from the wheel, at most (a larger one: the wheel unread)


@dataclass(frozen=True)
class WheelText:
    """What the hold reads of a wheel: its RECORD's rows (path -> hash; ``""`` for a row without one) and the bytes
    of each ``.data/scripts`` member that starts with ``#!python``."""

    rows: Mapping[str, str]
    scripts: Mapping[str, bytes]


# a wheel's text from its URL, listed size and locked sha256 -> (the text, why not)
RemoteRows = Callable[[str, "int | None", "str | None"], "tuple[WheelText | None, str]"]


def wheel_text(wheel: Path | IO[bytes]) -> WheelText | None:
    """The wheel's :class:`WheelText` (the zip directory, RECORD and the ``#!python`` scripts read); None when it
    cannot be read as a wheel with one RECORD."""
    rows = wheel_rows(wheel, unhashed=True)
    if rows is None:
        return None
    scripts: dict[str, bytes] = {}
    names = [p for p in rows if _kind(p) == "scripts"]
    if names:
        try:
            with zipfile.ZipFile(wheel) as zf:
                members = {i.filename: i for i in zf.infolist()}
                for name in (n for n in names if n in members):
                    with zf.open(members[name]) as fh:
                        if fh.read(len(SCRIPT_MARK)) == SCRIPT_MARK:
                            if members[name].file_size > SCRIPT_MAX:
                                return None
                            scripts[name] = SCRIPT_MARK + fh.read(SCRIPT_MAX)
        except (OSError, zipfile.BadZipFile):
            return None
    return WheelText(rows, scripts)


def _kind(path: str) -> str:
    """A wheel path's ``.data`` scheme (``purelib``, ``scripts``, ...); "" for a path at the wheel's root."""
    top, _, rest = path.partition("/")
    return rest.partition("/")[0] if top.endswith(".data") and "/" in rest else ""


def _place(path: str, site: Path, name: str) -> str:
    """Where a wheel path is installed, for an env whose site-packages is ``site`` (``PREFIX/lib/pythonX.Y/...``)."""
    kind, prefix = _kind(path), site.parents[2]
    inner = path.split("/", 2)[2] if kind else path
    base = {"": site, "purelib": site, "platlib": site, "scripts": prefix / "bin", "data": prefix,
            "headers": prefix / "include" / "site" / site.parent.name / str(canonicalize_name(name))}.get(kind)
    return os.path.normpath(base / inner if base is not None else site / path)


def held_diff(dist: Dist, wheel: WheelText) -> tuple[list[str], list[str]]:
    """(the paths where the installed RECORD is not the wheel's, see the module's rules: the wheel's path for a row
    not installed with its hash, the installed RECORD's for one the wheel does not name or that is not a plain
    path; ``["RECORD"]`` when the installed one cannot be read), (the wheel's ``#!python`` scripts installed as
    its bytes behind a launcher this hold does not know)."""
    have = installed_digests(dist)
    if have is None:
        return ["RECORD"], []
    site = dist.info.parent
    placed: dict[str, set[str]] = {}
    for path, digests in have.items():
        placed.setdefault(os.path.normpath(site / path), set()).update(digests)
    want: set[str] = set()
    differ: list[str] = []
    unsure: list[str] = []
    for path, digest in wheel.rows.items():
        where = _place(path, site, dist.name)
        want.add(where)
        got = placed.get(where, set())
        if not digest or _installer_file(path) or (got == {digest}):
            continue
        # two installed rows for one path (a second one planted through .data/purelib): named, whichever is right
        launched = _launched(Path(where), wheel.scripts[path], got, site) \
            if path in wheel.scripts and len(got) == 1 else False
        if launched is None:
            unsure.append(path)
        elif not launched:
            differ.append(path)
    # uv's entry-point scripts: where it wrote them, one row each (a planted file there has a row of its own)
    made = {p for p in _entry_point_scripts(dist, site.parents[2]) if len(placed.get(p, ())) == 1}
    # bytecode too: uv records none it writes, and one in uv's cache with a row would run for its module
    extra = [f"{p} (not a plain path)" if _abnormal(p) else f"{p} (not in the wheel)" for p in have
             if _abnormal(p) or (os.path.normpath(site / p) not in want | made and not _installer_file(p))]
    return sorted(differ + extra), sorted(unsure)


def _launched(script: Path, member: bytes, digests: set[str], site: Path) -> bool | None:
    """True: the installed ``script`` is the wheel's ``member`` (which starts with ``#!python``) with its first line
    put as uv puts it for the env's ``bin/python`` (:func:`_launchers`), and the file its installed RECORD row
    hashes; False: it is not; None: the member's bytes behind a ``/bin/sh`` launcher of another shape (one a later
    uv may write: not judged rather than named)."""
    try:
        data = script.read_bytes()
    except OSError:
        return False
    eol = re.search(rb"\r\n|\n|\r", member)
    body = member[eol.end():] if eol else b""         # uv ends the first line at \r\n, \n or \r
    if "sha256=" + record_digest(hashlib.sha256(data).digest()) not in digests or not data.endswith(body):
        return False
    head, bindir = data[:len(data) - len(body)], site.parents[2] / "bin"
    coding = _CODING.match(body.split(b"\n", 1)[0])
    for python in {os.fsencode(bindir / "python"), os.fsencode(Path(os.path.realpath(bindir)) / "python")}:
        if head in _launchers(python, coding.group(1) if coding else None):
            return True
    shell = head.startswith(b"#!/bin/sh\n") and b"\n'''exec' " in head and head.endswith(b"\n' '''\n")
    return None if shell else False


_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")     # PEP 263's declaration


def _launchers(python: bytes, coding: bytes | None) -> tuple[bytes, ...]:
    """The first lines uv 0.13 writes for a ``#!python`` script on POSIX: ``#!PYTHON``; for a path over 125 bytes
    or with a space, a ``/bin/sh`` preamble that execs it (the path quoted; with the script's coding declaration,
    a ``# coding:`` line and the path as ``printf %b`` octal escapes)."""
    tail = b' "$0" "$@"\n\' \'\'\'\n'
    quoted = b"'''exec' '" + python.replace(b"'", b"'\"'\"'") + b"'" + tail
    escaped = b"'''exec' \"$(printf %b " + b" ".join(b"'\\'0%03o" % c for c in python) + b')"' + tail
    return (b"#!" + python + b"\n", b"#!/bin/sh\n" + quoted) + \
        ((b"#!/bin/sh\n# coding: " + coding + b"\n" + escaped,) if coding else ())


def _entry_point_scripts(dist: Dist, prefix: Path) -> set[str]:
    """Where the installer wrote the scripts of the distribution's ``entry_points.txt`` (a file held to the wheel)."""
    try:
        points = PathDistribution(dist.info).entry_points
    except (OSError, ValueError, UnicodeDecodeError):
        return set()
    return {os.path.normpath(prefix / "bin" / p.name) for p in points if p.group in ("console_scripts", "gui_scripts")}


def _installer_file(path: str) -> bool:
    top, _, name = path.partition("/")
    return top.endswith(".dist-info") and name in INSTALLER_FILES


def _abnormal(path: str) -> bool:
    """A RECORD path with ``.``, ``..`` or an empty part past its leading run of ``../`` (as uv writes paths
    outside site-packages): one file under two names, or a name that leaves where it claims to be."""
    parts = path.split("/")
    while parts and parts[0] == "..":
        parts.pop(0)
    return not parts or any(p in ("", ".", "..") for p in parts)


def candidates(package: Mapping[str, Any], dist: Dist) -> list[Mapping[str, Any]]:
    """The package's listed wheels, the one whose file name has the installed ``WHEEL``'s tags first."""
    try:
        text = (dist.info / "WHEEL").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    tags = {line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")}
    wheels = [w for w in package.get("wheels") or () if isinstance(w, Mapping)]
    return sorted(wheels, key=lambda w: _tags(w) != tags)


def _tags(entry: Mapping[str, Any]) -> set[str] | None:
    name = file_name(entry)
    try:
        return {str(t) for t in parse_wheel_filename(name)[3]} if name else None
    except InvalidWheelFilename:
        return None


def file_name(entry: Mapping[str, Any]) -> str | None:
    where = entry.get("name") or entry.get("path") or urlsplit(str(entry.get("url") or "")).path
    return unquote(str(where).rsplit("/", 1)[-1]) or None


def held_to_index(packages: Sequence[Mapping[str, Any]], env: Path, remote: RemoteRows,
                  dists: Mapping[str, Dist] | None = None, threads: int = 8, *,
                  own: Callable[[Dist], bool] = lambda dist: False, wait_s: float | None = None) -> Held:
    """Each distribution of ``packages`` installed in ``env`` at its listed version, held to its wheel (see the
    module): a file here read as such (named only while it still has the locked sha256), any other through
    ``remote``.  Every other distribution of the env is not judged, but those ``own`` says the install built
    (the forks): one installed from a URL of its own, or listed at another version, is not held to a wheel (its
    ``direct_url.json`` may be uv's cache's too; :func:`.asked.unasked` names one no requirement asks for).  ``wait_s``:
    the reads not done by then are not judged, and not waited for."""
    dists = installed(env) if dists is None else dists
    todo: list[tuple[Dist, Mapping[str, Any]]] = []
    for package in packages:
        dist = dists.get(str(canonicalize_name(str(package.get("name", "")))))
        if dist is not None and canonicalize_version(dist.version) == canonicalize_version(str(package.get("version", ""))):
            todo.append((dist, package))
    taken = {id(dist) for dist, _ in todo}
    loose = [f"{d.name} {d.version}: " + (f"installed from {redact_url(str(direct_url(d).get('url')))} (its "
                                          "direct_url.json), not from a wheel the listing names"
                                          if d.direct_url else "no wheel of the listing is its version")
             for d in dists.values() if id(d) not in taken and not own(d)]

    def judge(item: tuple[Dist, Mapping[str, Any]]) -> Unlike | str | None:
        dist, package = item
        wheels, why, differs, unread = candidates(package, dist), "no wheel is listed (built from its sdist?)", None, 0
        for entry in wheels:
            path, want = local_wheel(entry), locked_sha256(entry)
            try:
                if path is not None:
                    text, why = wheel_text(path), f"{path} is not readable as a wheel"
                else:
                    size = entry.get("size")
                    text, why = remote(str(entry.get("url") or ""), size if isinstance(size, int) else None, want)
                diff, unsure = held_diff(dist, text) if text is not None else ([], [])
            except Exception as exc:        # a member zipfile cannot read (deflate64, encrypted), bad data: not judged
                text, why = None, f"{file_name(entry) or 'its wheel'} could not be read ({type(exc).__name__}: {exc})"
            if text is None:
                unread += 1
                continue
            if not diff and not unsure:
                return None
            if not diff:
                why, unread = f"script(s) behind a launcher the hold does not know: {', '.join(unsure)}", unread + 1
            elif path is not None and sha256_or_none(path) != want:
                why, unread = f"{path} is no longer the listed file", unread + 1
            elif differs is None:
                differs = Unlike(dist.name, dist.version, Path(file_name(entry) or "wheel"), str(want), tuple(diff))
        # named only when every listed wheel was read and differs: an unread one may be the one installed
        return differs if differs is not None and not unread else f"{dist.name} {dist.version}: {why}"

    verdicts = _within(judge, todo, threads, wait_s)
    late = f"not read in the {wait_s or 0:g} s the hold waits"
    verdicts = [f"{d.name} {d.version}: {late}" if v is _LATE else v for v, (d, _) in zip(verdicts, todo)]
    return Held(unlike=tuple(v for v in verdicts if isinstance(v, Unlike)),
                unjudged=tuple([v for v in verdicts if isinstance(v, str)] + loose))


_LATE = object()


def _within(work: Callable[[Any], Any], items: Sequence[Any], threads: int, wait_s: float | None) -> list[Any]:
    """``work`` over ``items`` in up to ``threads`` daemon threads -> each result (an error raised in one is raised
    here), :data:`_LATE` for one not done in ``wait_s`` seconds: its thread is left behind (a daemon: it never
    holds the process at its end, as a pool's worker would)."""
    results: list[Any] = [_LATE] * len(items)
    failures: list[BaseException] = []
    pending: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(len(items)):
        pending.put(i)

    def run() -> None:
        while True:
            try:
                i = pending.get_nowait()
            except queue.Empty:
                return
            try:
                results[i] = work(items[i])
            except BaseException as exc:       # handed to the caller's thread
                failures.append(exc)

    workers = [threading.Thread(target=run, name="october-hold", daemon=True)
               for _ in range(max(1, min(threads, len(items))))]
    for w in workers:
        w.start()
    end = None if wait_s is None else time.monotonic() + wait_s
    for w in workers:
        w.join(None if end is None else max(0.0, end - time.monotonic()))
    if failures:
        raise failures[0]
    return results


def remote_rows(client: Any, with_credentials: Callable[[str], str] = lambda url: url,
                budget_s: float = HOLD_BUDGET_S) -> RemoteRows:
    """:data:`RemoteRows` over ``client`` (an ``httpx.Client``): the zip directory and RECORD read by Range requests
    (:class:`october.installer.wheels.rangefile.RangeFile`); ``with_credentials``: the URL with the source's
    ``user:password@`` for its host (never said: errors mask them).  After one failure a host is not asked
    again in this hold (an unanswering host would cost each wheel its whole timeout), and nothing is asked or
    read once ``budget_s`` seconds have passed since this call (a wheel then unread: not judged)."""
    from ..wheels.rangefile import RangeFile, Unreadable

    failed: dict[str, str] = {}
    lock = threading.Lock()
    deadline = time.monotonic() + budget_s

    def read(url: str, size: int | None, sha256: str | None) -> tuple[WheelText | None, str]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return None, f"{redact_url(url) or 'no URL'} is neither a file here nor an http(s) URL"
        host = f"{parts.scheme}://{parts.hostname}:{parts.port}"
        if time.monotonic() > deadline:
            return None, f"not asked: the {budget_s:.0f} s the hold gives index wheels had passed"
        with lock:
            earlier = failed.get(host)
        if earlier is not None:
            return None, f"not asked: an earlier request to that host failed ({earlier})"
        try:
            wheel = RangeFile(client, with_credentials(url), size, sha256, deadline)
        except Unreadable as exc:
            with lock:
                failed.setdefault(host, str(exc))
            return None, str(exc)
        text = wheel_text(wheel)
        if text is None and wheel.problem:
            with lock:
                failed.setdefault(host, wheel.problem)
        return text, wheel.problem or f"{redact_url(url)} is not readable as a wheel with one RECORD"
    return read


def locked_wheels(pylock: Path) -> list[Mapping[str, Any]]:
    """The packages with wheels of the stack's lock (what an earlier run's lock step listed, held to its files), or
    none where there is no readable lock."""
    import tomllib

    try:
        with open(pylock, "rb") as fh:
            packages = tomllib.load(fh).get("packages", [])
    except (OSError, tomllib.TOMLDecodeError):
        return []
    return [p for p in packages if isinstance(p, dict) and isinstance(p.get("wheels"), list)] \
        if isinstance(packages, list) else []
