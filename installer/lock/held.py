"""Each distribution of an env held to the RECORD of the wheel it was installed from: what the install step asks of
an env uv installed (:mod:`october.installer.steps.indexcheck`) before the built-stack cache may keep it.

uv installs a wheel from its cache's unpacked copy, and the install's RECORD check holds each file to the installed
RECORD, which came from that copy too: a file edited there with its RECORD row, or added with a row of its own,
passes it.  Here the installed RECORD is compared with the wheel's own, each of the wheel's rows at the place it
installs to (site-packages; ``.data/purelib`` and ``platlib`` there too; ``scripts`` in the env's ``bin``, ``data``
at its root, ``headers`` in ``include/site/pythonX.Y/NAME``): every hashed row of the wheel must be installed there with its hash,
and every installed row must be one the wheel names, the installer's own dist-info files, bytecode and the
entry-point scripts of the wheel's own ``entry_points.txt`` aside.  A script whose first bytes are ``#!python``
is installed with that line rewritten: held when the installed file is the wheel's bytes after that line, behind
one of the two launchers uv writes for the env's ``bin/python`` (``#!PYTHON``, or for a path too long for a ``#!``
line a ``/bin/sh`` preamble that execs it), and is the file its installed RECORD row hashes.

Which wheel: the listing's wheels for the package (``uv pip compile`` for the env's interpreter lists those its tags
take), the one whose name has the installed ``WHEEL``'s tags read first; the distribution is held when any of them
matches, named when all that could be read differ (the ``WHEEL`` file is a RECORD row: editing its tags does not
move a distribution out of reach), and not judged when none could be read (said why: a host that did not answer,
a package built from its sdist, which has no wheel listed).  A distribution installed from a URL of its own
(``direct_url.json`` with ``archive_info``) is held to that file.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, canonicalize_version, parse_wheel_filename

from ..core.hashing import sha256_or_none
from ..verify_dists import Dist, installed
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


def held_diff(dist: Dist, wheel: WheelText) -> list[str]:
    """The paths where the installed RECORD is not the wheel's (see the module's rules): the wheel's path for a row
    not installed with its hash, the installed RECORD's for one the wheel does not name; ``["RECORD"]`` when the
    installed one cannot be read."""
    have = installed_digests(dist)
    if have is None:
        return ["RECORD"]
    site = dist.info.parent
    placed: dict[str, set[str]] = {}
    for path, digests in have.items():
        placed.setdefault(os.path.normpath(site / path), set()).update(digests)
    want: set[str] = set()
    differ: list[str] = []
    for path, digest in wheel.rows.items():
        where = _place(path, site, dist.name)
        want.add(where)
        if not digest or _installer_file(path) or digest in placed.get(where, set()):
            continue
        if path in wheel.scripts and _launched(wheel.scripts[path], placed.get(where, set()), site):
            continue
        differ.append(path)
    made = _entry_point_scripts(dist, site.parents[2])
    extra = [f"{p} (not in the wheel)" for p in have
             if os.path.normpath(site / p) not in want | made and not _installer_file(p) and not _bytecode(p)]
    return sorted(differ + extra)


def _launched(member: bytes, digests: set[str], site: Path) -> bool:
    """Whether the installed RECORD hashes a script as the wheel's ``member`` (which starts with ``#!python``) with
    that first line put as uv puts it for the env's ``bin/python``."""
    body, bindir = member.partition(b"\n")[2], site.parents[2] / "bin"
    for python in {os.fsencode(bindir / "python"), os.fsencode(Path(os.path.realpath(bindir)) / "python")}:
        for head in (b"#!" + python + b"\n", b"#!/bin/sh\n'''exec' '" + python + b"' \"$0\" \"$@\"\n' '''\n"):
            digest = base64.urlsafe_b64encode(hashlib.sha256(head + body).digest()).rstrip(b"=").decode()
            if f"sha256={digest}" in digests:
                return True
    return False


def _entry_point_scripts(dist: Dist, prefix: Path) -> set[str]:
    """Where the installer wrote the scripts of the distribution's ``entry_points.txt`` (a file held to the wheel)."""
    from importlib.metadata import PathDistribution

    try:
        points = PathDistribution(dist.info).entry_points
    except (OSError, ValueError, UnicodeDecodeError):
        return set()
    return {os.path.normpath(prefix / "bin" / p.name) for p in points if p.group in ("console_scripts", "gui_scripts")}


def _installer_file(path: str) -> bool:
    top, _, name = path.partition("/")
    return top.endswith(".dist-info") and name in INSTALLER_FILES


def _bytecode(path: str) -> bool:
    return "/__pycache__/" in f"/{path}" and path.endswith(".pyc")


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


def direct_packages(dists: Mapping[str, Dist]) -> list[dict[str, Any]]:
    """Each distribution installed from a wheel URL of its own (``direct_url.json`` with ``archive_info``), as a
    listing's package: that one wheel, with the hash ``direct_url.json`` gives."""
    out: list[dict[str, Any]] = []
    for dist in dists.values():
        d = dist.direct_url or {}
        info = d.get("archive_info")
        if not isinstance(info, Mapping) or not isinstance(d.get("url"), str):
            continue
        hashes = info.get("hashes") if isinstance(info.get("hashes"), Mapping) else {}
        sha = hashes.get("sha256") or str(info.get("hash") or "").partition("sha256=")[2] or None
        wheel = {"url": d["url"], **({"hashes": {"sha256": sha}} if sha else {})}
        out.append({"name": dist.name, "version": dist.version,
                    "wheels": [wheel] if str(d["url"]).split("#")[0].endswith(".whl") else []})
    return out


def held_to_index(packages: Sequence[Mapping[str, Any]], env: Path, remote: RemoteRows,
                  dists: Mapping[str, Dist] | None = None, threads: int = 8) -> Held:
    """Each distribution of ``packages`` installed in ``env`` at its listed version, held to its wheel (see the
    module): a file here read as such (named only while it still has the locked sha256), any other through
    ``remote``."""
    from concurrent.futures import ThreadPoolExecutor

    dists = installed(env) if dists is None else dists
    todo: list[tuple[Dist, Mapping[str, Any]]] = []
    for package in packages:
        dist = dists.get(str(canonicalize_name(str(package.get("name", "")))))
        if dist is not None and canonicalize_version(dist.version) == canonicalize_version(str(package.get("version", ""))):
            todo.append((dist, package))

    def judge(item: tuple[Dist, Mapping[str, Any]]) -> Unlike | str | None:
        dist, package = item
        wheels, why, differs, unread = candidates(package, dist), "no wheel is listed (built from its sdist?)", None, 0
        for entry in wheels:
            path, want = local_wheel(entry), locked_sha256(entry)
            if path is not None:
                text, why = wheel_text(path), f"{path} is not readable as a wheel"
            else:
                size = entry.get("size")
                text, why = remote(str(entry.get("url") or ""), size if isinstance(size, int) else None, want)
            if text is None:
                unread += 1
                continue
            diff = held_diff(dist, text)
            if not diff:
                return None
            if path is not None and sha256_or_none(path) != want:
                why, unread = f"{path} is no longer the listed file", unread + 1
            elif differs is None:
                differs = Unlike(dist.name, dist.version, Path(file_name(entry) or "wheel"), str(want), tuple(diff))
        # named only when every listed wheel was read and differs: an unread one may be the one installed
        return differs if differs is not None and not unread else f"{dist.name} {dist.version}: {why}"

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(todo)))) as pool:
        verdicts = list(pool.map(judge, todo))
    return Held(unlike=tuple(v for v in verdicts if isinstance(v, Unlike)),
                unjudged=tuple(v for v in verdicts if isinstance(v, str)))


def remote_rows(client: Any, with_credentials: Callable[[str], str] = lambda url: url,
                budget_s: float = HOLD_BUDGET_S) -> RemoteRows:
    """:data:`RemoteRows` over ``client`` (an ``httpx.Client``): the zip directory and RECORD read by Range requests
    (:class:`october.installer.wheels.rangefile.RangeFile`); ``with_credentials``: the URL with the source's
    ``user:password@`` for its host (never said: errors mask them).  After one failure a host is not asked
    again in this hold (an unanswering host would cost each wheel its whole timeout), and nothing is asked or
    read once ``budget_s`` seconds have passed since this call (a wheel then unread: not judged)."""
    from ..core.redact import redact_url
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
