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
from typing import IO, Any, Mapping, Sequence
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name, canonicalize_version

from ..core.hashing import sha256_or_none
from ..pyenv.dists import Dist, installed, record_rows


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


def wheel_rows(wheel: Path | IO[bytes], *, unhashed: bool = False) -> dict[str, str] | None:
    """path -> hash of the hashed rows of the wheel's RECORD (its zip directory and that one member read; ``wheel``:
    a path or a seekable file), or None when it cannot be read as a wheel with one RECORD.  A member whose size in the zip directory is not its
    RECORD row's (a file changed, its RECORD not) gets the hash ``size-differs``: the RECORD does not describe
    that wheel's bytes.  ``unhashed``: the rows without a hash too (hash ``""``): every path the wheel names."""
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
        if row and row[0] and unhashed and (len(row) < 2 or not row[1]):
            rows[row[0]] = ""
        elif len(row) > 1 and row[1]:
            size = row[2] if len(row) > 2 else ""
            rows[row[0]] = "size-differs" if size.isdigit() and sizes.get(row[0]) != int(size) else row[1]
    return rows


def installed_digests(dist: Dist) -> dict[str, set[str]] | None:
    """path -> the digests the installed RECORD gives it (a path with two rows has both); None: unreadable."""
    out: dict[str, set[str]] = {}
    try:
        for path, digest, _size in record_rows(dist):
            out.setdefault(path, set()).add(digest)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return out


def _unlike(dist: Dist, rows: Mapping[str, str]) -> list[str]:
    """The wheel's rows the installed RECORD does not hold with the same hash (``.data`` files are installed
    elsewhere, scripts rewritten, the installer's own dist-info files written by it: not compared; a path with
    two rows matches either)."""
    installed = installed_digests(dist)
    if installed is None:
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
        wants = [locked_sha256(entry) for entry in wheels]
        shas = [sha256_or_none(path) for path, _d in judged]
        if all(sha is not None and sha == want for sha, want in zip(shas, wants)):
            found.append(Unlike(dist.name, dist.version, judged[0][0], str(shas[0]), tuple(judged[0][1])))
    return found


def locked_sha256(entry: Any) -> str | None:
    hashes = entry.get("hashes") if isinstance(entry, Mapping) else None
    value = hashes.get("sha256") if isinstance(hashes, Mapping) else None
    return value if isinstance(value, str) else None


def describe(found: Sequence[Unlike], shown: int = 3) -> str:
    """One line per package: its name, the wheel, the files that differ (the first few)."""
    return "; ".join(f"{u.name} {u.version}: {len(u.files)} file(s) unlike {u.wheel.name} (sha256 {u.sha256[:12]}): "
                     + ", ".join(u.files[:shown]) + (", ..." if len(u.files) > shown else "") for u in found)

