"""Each distribution of an env held to the RECORD of the wheel it was installed from: what the install step asks of
an env uv installed (:mod:`october.installer.steps.indexcheck`) before the built-stack cache may keep it.

uv installs a wheel from its cache's unpacked copy, and the install's RECORD check holds each file to the installed
RECORD, which came from that copy too: a file edited there with its RECORD row, or added with a row of its own,
passes it.  Here the installed RECORD is compared with the wheel's own: every hashed row of the wheel must be
installed with its hash (``.data/purelib`` and ``platlib`` at the site root), and every installed row inside
site-packages must be one the wheel names, the installer's own dist-info files and bytecode aside.  Not compared:
what a wheel installs outside site-packages (``.data`` scripts, whose first line uv rewrites, headers and data, and
the entry-point scripts uv writes), which the install's RECORD check holds to the installed RECORD only.

Which wheel: the listing's wheels for the package (``uv pip compile`` for the env's interpreter lists those its tags
take), the one whose name has the installed ``WHEEL``'s tags read first; the distribution is held when any of them
matches, named when all that could be read differ (the ``WHEEL`` file is a RECORD row: editing its tags does not
move a distribution out of reach), and not judged when none could be read (said why: a host that did not answer,
a package built from its sdist, which has no wheel listed).  A distribution installed from a URL of its own
(``direct_url.json`` with ``archive_info``) is held to that file.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
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


# a wheel's rows (every path, unhashed ones ``""``) from its URL, listed size and locked sha256 -> (rows, why not)
RemoteRows = Callable[[str, "int | None", "str | None"], "tuple[dict[str, str] | None, str]"]


def held_diff(dist: Dist, rows: Mapping[str, str]) -> list[str]:
    """The paths where the installed RECORD is not the wheel's (see the module's rules); ``["RECORD"]`` when the
    installed one cannot be read."""
    have = installed_digests(dist)
    if have is None:
        return ["RECORD"]
    want: dict[str, str] = {}
    for path, digest in rows.items():
        top, _, rest = path.partition("/")
        if top.endswith(".data"):
            kind, _, inner = rest.partition("/")
            if kind not in ("purelib", "platlib"):
                continue                                # installed outside site-packages
            path = inner
        want[path] = digest
    differ = [p for p, d in want.items() if d and not _installer_file(p) and d not in have.get(p, set())]
    extra = [f"{p} (not in the wheel)" for p in have
             if p not in want and not p.startswith("../") and not _installer_file(p) and not _bytecode(p)]
    return sorted(differ + extra)


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
                rows, why = wheel_rows(path, unhashed=True), f"{path} is not readable as a wheel"
            else:
                size = entry.get("size")
                rows, why = remote(str(entry.get("url") or ""), size if isinstance(size, int) else None, want)
            if rows is None:
                unread += 1
                continue
            diff = held_diff(dist, rows)
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


def remote_rows(client: Any, with_credentials: Callable[[str], str] = lambda url: url) -> RemoteRows:
    """:data:`RemoteRows` over ``client`` (an ``httpx.Client``): the zip directory and RECORD read by Range requests
    (:class:`october.installer.wheels.rangefile.RangeFile`); ``with_credentials``: the URL with the source's
    ``user:password@`` for its host (never said: errors mask them).  After one failure a host is not asked
    again in this hold (an unanswering host would cost each wheel its whole timeout)."""
    from ..core.redact import redact_url
    from ..wheels.rangefile import RangeFile, Unreadable

    failed: dict[str, str] = {}
    lock = threading.Lock()

    def read(url: str, size: int | None, sha256: str | None) -> tuple[dict[str, str] | None, str]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return None, f"{redact_url(url) or 'no URL'} is neither a file here nor an http(s) URL"
        host = f"{parts.scheme}://{parts.hostname}:{parts.port}"
        with lock:
            earlier = failed.get(host)
        if earlier is not None:
            return None, f"not asked: an earlier request to that host failed ({earlier})"
        try:
            wheel = RangeFile(client, with_credentials(url), size, sha256)
        except Unreadable as exc:
            with lock:
                failed.setdefault(host, str(exc))
            return None, str(exc)
        rows = wheel_rows(wheel, unhashed=True)
        if rows is None and wheel.problem:
            with lock:
                failed.setdefault(host, wheel.problem)
        return rows, wheel.problem or f"{redact_url(url)} is not readable as a wheel with one RECORD"
    return read
