"""Is each index package of a lock the file the lock names, as installed?  A wheel republished under the same
file name (a private index, a find-links folder; PyPI forbids it) is hashed anew by ``uv pip compile`` while the
env holds the old bytes (uv's cache and the built-stack cache take a file's name as its identity): the lock would
then name a file that is not installed.

Held by RECORDs, no process: the locked wheel's own RECORD, and each member's size in its zip directory against
that RECORD's, against the installed ``.dist-info/RECORD`` (the install step and ``current verify`` hold each
installed file to that RECORD).  Only a wheel this machine has as a file (a find-links folder, a ``file://`` URL)
is read (its zip directory and RECORD: no full read while they agree), and a difference is named only while that
file still has the locked sha256; a package with any other file (an index's URL, an sdist) is not judged here.
Not seen: a member changed to the same size under a RECORD left as it was (installing that wheel, the install
step's RECORD check names it).
"""

from __future__ import annotations

import csv
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, canonicalize_version, parse_wheel_filename

from ..core.hashing import sha256_or_none
from ..verify_dists import Dist, installed, record_rows


@dataclass(frozen=True)
class Unlike:
    """An installed distribution that is not the locked wheel: ``files`` its rows that differ from the wheel's."""

    name: str
    version: str
    wheel: Path
    sha256: str
    files: tuple[str, ...]


def local_wheel(entry: Mapping[str, Any]) -> Path | None:
    """The file of a lock's wheel entry on this machine (a ``file://`` URL or an absolute path), or None."""
    url, path = entry.get("url"), entry.get("path")
    if isinstance(url, str):
        parts = urlsplit(url)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            return None
        return Path(unquote(parts.path))    # urllib.request.url2pathname on POSIX (it imports http.client and ssl)
    return Path(path) if isinstance(path, str) and Path(path).is_absolute() else None


# what an installer writes into the dist-info (uv adds its own rows; a wheel that ships one keeps both)
INSTALLER_FILES = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json", "RECORD"})


def wheel_rows(wheel: Path | IO[bytes]) -> dict[str, str] | None:
    """path -> hash of the hashed rows of the wheel's RECORD (its zip directory and that one member read; ``wheel``:
    a path or a seekable file), or None when it cannot be read as a wheel with one RECORD.  A member whose size in the zip directory is not its
    RECORD row's (a file changed, its RECORD not) gets the hash ``size-differs``: the RECORD does not describe
    that wheel's bytes."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            records = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
            if len(records) != 1:
                return None
            text = zf.read(records[0]).decode("utf-8")
            sizes = {i.filename: i.file_size for i in zf.infolist()}
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError):
        return None
    rows = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) > 1 and row[1]:
            size = row[2] if len(row) > 2 else ""
            rows[row[0]] = "size-differs" if size.isdigit() and sizes.get(row[0]) != int(size) else row[1]
    return rows


def _unlike(dist: Dist, rows: Mapping[str, str]) -> list[str]:
    """The wheel's rows the installed RECORD does not hold with the same hash (``.data`` files are installed
    elsewhere, scripts rewritten, the installer's own dist-info files written by it: not compared; a path with
    two rows matches either)."""
    installed: dict[str, set[str]] = {}
    try:
        for path, digest, _size in record_rows(dist):
            installed.setdefault(path, set()).add(digest)
    except OSError:
        return ["RECORD"]
    return sorted(p for p, digest in rows.items()
                  if not p.split("/", 1)[0].endswith(".data") and digest not in installed.get(p, set())
                  and not (p.count("/") == 1 and p.split("/")[0].endswith(".dist-info")
                           and p.split("/")[1] in INSTALLER_FILES))


def unlike_locked(packages: Sequence[Mapping[str, Any]], env: Path,
                  dists: Mapping[str, Dist] | None = None) -> list[Unlike]:
    """Each index package whose every wheel is a file here with its locked sha256, installed in ``env`` (``dists``:
    its distributions by canonical name, when read already) at the locked version, yet none of those wheels'
    RECORD is the installed one."""
    dists = installed(env) if dists is None else dists
    found: list[Unlike] = []
    for package in packages:
        wheels = package.get("wheels")
        dist = dists.get(str(canonicalize_name(str(package.get("name", "")))))
        if not isinstance(wheels, list) or not wheels or "sdist" in package or dist is None \
                or canonicalize_version(dist.version) != canonicalize_version(str(package.get("version", ""))):
            continue
        judged: list[tuple[Path, list[str]]] = []
        for entry in wheels:
            path = local_wheel(entry) if isinstance(entry, Mapping) else None
            rows = wheel_rows(path) if path is not None else None
            if path is None or rows is None:
                judged = []         # a file not read here: not judged
                break
            judged.append((path, _unlike(dist, rows)))
        if not judged or not all(diff for _p, diff in judged):
            continue
        # the wheels differ from what is installed: named only when each is still the file the lock names (hashed
        # now, not on every run: one republished again since is not this stack's to answer for)
        wants = [_locked_sha256(entry) for entry in wheels]
        shas = [sha256_or_none(path) for path, _d in judged]
        if all(sha is not None and sha == want for sha, want in zip(shas, wants)):
            found.append(Unlike(dist.name, dist.version, judged[0][0], str(shas[0]), tuple(judged[0][1])))
    return found


def _locked_sha256(entry: Any) -> str | None:
    hashes = entry.get("hashes") if isinstance(entry, Mapping) else None
    value = hashes.get("sha256") if isinstance(hashes, Mapping) else None
    return value if isinstance(value, str) else None


def describe(found: Sequence[Unlike], shown: int = 3) -> str:
    """One line per package: its name, the wheel, the files that differ (the first few)."""
    return "; ".join(f"{u.name} {u.version}: {len(u.files)} file(s) unlike {u.wheel.name} (sha256 {u.sha256[:12]}): "
                     + ", ".join(u.files[:shown]) + (", ..." if len(u.files) > shown else "") for u in found)


@dataclass(frozen=True)
class Held:
    """What :func:`held_to_index` found: the installed distributions unlike their index wheel, and those it could
    not hold to one (``name version: why``)."""

    unlike: tuple[Unlike, ...]
    unjudged: tuple[str, ...]


# the wheel's rows from its URL, its listed size and locked sha256 -> (rows or None, why not)
RemoteRows = Callable[[str, "int | None", "str | None"], "tuple[dict[str, str] | None, str]"]


def installed_wheel(package: Mapping[str, Any], dist: Dist) -> Mapping[str, Any] | None:
    """The lock entry of the wheel ``dist`` was installed from: the one whose file name's tags are the
    installed ``WHEEL``'s ``Tag`` lines (None: no listed wheel has them, e.g. a wheel built from the sdist)."""
    try:
        text = (dist.info / "WHEEL").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    tags = {line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")}
    for entry in package.get("wheels") or ():
        name = _file_name(entry) if isinstance(entry, Mapping) else None
        try:
            listed = {str(t) for t in parse_wheel_filename(name)[3]} if name else None
        except InvalidWheelFilename:
            listed = None
        if listed and listed == tags:
            return entry
    return None


def _file_name(entry: Mapping[str, Any]) -> str | None:
    where = entry.get("name") or entry.get("path") or urlsplit(str(entry.get("url") or "")).path
    return unquote(str(where).rsplit("/", 1)[-1]) or None


def held_to_index(packages: Sequence[Mapping[str, Any]], env: Path, remote: RemoteRows,
                  dists: Mapping[str, Dist] | None = None, threads: int = 8) -> Held:
    """Each index distribution installed in ``env`` at its listed version, held to the RECORD of the wheel it was
    installed from (:func:`installed_wheel`): a file here is read as such (and named only while it still has the
    locked sha256), any other through ``remote``.  What uv's cache served is then tied to the index's file: an
    unpacked wheel edited in that cache together with its RECORD row passes the install's RECORD check, not
    this one."""
    from concurrent.futures import ThreadPoolExecutor

    dists = installed(env) if dists is None else dists
    todo: list[tuple[Dist, Mapping[str, Any]]] = []
    unjudged: list[str] = []
    for package in packages:
        dist = dists.get(str(canonicalize_name(str(package.get("name", "")))))
        if dist is None or canonicalize_version(dist.version) != canonicalize_version(str(package.get("version", ""))):
            continue
        entry = installed_wheel(package, dist)
        if entry is None:
            unjudged.append(f"{dist.name} {dist.version}: no listed wheel has its tags (built from its sdist?)")
        else:
            todo.append((dist, entry))

    def judge(item: tuple[Dist, Mapping[str, Any]]) -> Unlike | str | None:
        dist, entry = item
        path, want = local_wheel(entry), _locked_sha256(entry)
        if path is not None:
            rows, why = wheel_rows(path), f"{path} is not readable as a wheel"
        else:
            size = entry.get("size")
            rows, why = remote(str(entry.get("url") or ""), size if isinstance(size, int) else None, want)
        if rows is None:
            return f"{dist.name} {dist.version}: {why}"
        diff = _unlike(dist, rows)
        if not diff:
            return None
        if path is not None and sha256_or_none(path) != want:
            return f"{dist.name} {dist.version}: {path} is no longer the listed file"
        return Unlike(dist.name, dist.version, Path(_file_name(entry) or "wheel"), str(want), tuple(diff))

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(todo)))) as pool:
        verdicts = list(pool.map(judge, todo))
    return Held(unlike=tuple(v for v in verdicts if isinstance(v, Unlike)),
                unjudged=tuple(unjudged + [v for v in verdicts if isinstance(v, str)]))


def remote_rows(client: Any) -> RemoteRows:
    """:data:`RemoteRows` over ``client`` (an ``httpx.Client``): the zip directory and RECORD read by Range requests
    (:class:`october.installer.wheels.rangefile.RangeFile`)."""
    from ..core.redact import redact_url
    from ..wheels.rangefile import RangeFile, Unreadable

    def read(url: str, size: int | None, sha256: str | None) -> tuple[dict[str, str] | None, str]:
        if urlsplit(url).scheme not in ("http", "https"):
            return None, f"{redact_url(url) or 'no URL'} is neither a file here nor an http(s) URL"
        try:
            wheel = RangeFile(client, url, size, sha256)
        except Unreadable as exc:
            return None, str(exc)
        rows = wheel_rows(wheel)
        return rows, wheel.problem or f"{redact_url(url)} is not readable as a wheel with one RECORD"
    return read
