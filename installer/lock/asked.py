"""What the install trusts to ask for a distribution by URL, for the hold (:mod:`.held`) and the checks after each
uv install (:mod:`october.installer.steps.indexcheck`).

Every other distribution of the env but the forks the install built is not judged: one installed from a URL of its
own is not held to that URL, since its ``direct_url.json``, which says so, could be uv's cache's (an index
distribution with one planted there would otherwise choose the wheel it is held to, or leave the listing).  So a
distribution with a ``direct_url.json`` is taken as installed from a URL only where something the install trusts
asks for it so (:func:`asked_by_url`: ``name @ url``, a path or a URL in the recipe's lines, ``name @ url`` in the
``Requires-Dist`` of the forks' own distributions, a path, URL or git source of a fork's ``[tool.uv.sources]``,
each URL for the one distribution its name or file says); any other is named (:func:`unasked`): nothing the
install ran put it there, so uv's cache (or whoever wrote the env) did.  No other distribution's ``Requires-Dist``
asks for anything here: uv's cache serves its METADATA too (PyPI refuses uploads that require a URL; a dependency
that needs one goes into the recipe's ``[install] supply``).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import unquote, urlsplit

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename, parse_wheel_filename)

from ..core.hashing import sha256_or_none
from ..core.pyproject import project_name
from ..core.redact import redact_url
from ..pyenv.dists import Dist, record_rows
from .installed import local_wheel


@dataclass(frozen=True)
class Asked:
    """What asks for a distribution by URL: canonical names (``name @ url``: any URL), and (name, URL) pairs (a
    path or a URL, as ``direct_url.json`` writes it: :func:`url_key`; the name its file or project says, None
    where nothing says one)."""

    names: frozenset[str]
    urls: frozenset[tuple[str | None, str]]
    wanted: frozenset[tuple[str, str]] = frozenset()    # (name, the URL as asked), for :func:`url_packages`

    def covers(self, dist: Dist, claimed: Mapping[str, int]) -> bool:
        """Whether ``dist`` is asked for; ``claimed``: how many distributions give each URL key (a URL with no name
        covers the one distribution that gives it, none where several do)."""
        key = url_key(str(direct_url(dist).get("url") or ""))
        return dist.name in self.names or (dist.name, key) in self.urls or (
            (None, key) in self.urls and claimed.get(key) == 1)


def direct_url(dist: Dist) -> Mapping[str, Any]:
    """The distribution's ``direct_url.json`` as a mapping ({} where there is none or it is not an object)."""
    return dist.direct_url if isinstance(dist.direct_url, Mapping) else {}


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9.+-]*://")


_VCS = re.compile(r"^(git|hg|svn|bzr)\+", re.IGNORECASE)


def url_key(url: str) -> str:
    """A URL as requirements and ``direct_url.json`` both write it: the scheme in lower case, no VCS prefix
    (``git+``) nor the revision after the repository's last ``@``, no fragment, no credentials, a ``file:`` path
    resolved (``localhost`` dropped); an absolute path as its ``file:`` URL."""
    url = url.strip()
    if url.startswith("/"):
        url = Path(url).as_uri()
    vcs = bool(_VCS.match(url))
    parts = urlsplit(_VCS.sub("", url).split("#", 1)[0])
    scheme, path = parts.scheme.lower(), parts.path
    if vcs and "@" in path:
        path = path.rsplit("@", 1)[0]
    host = parts.netloc.rsplit("@", 1)[-1].lower()
    if scheme == "file":
        path, host = Path(unquote(path)).resolve().as_posix(), ("" if host in ("", "localhost") else host)
    return f"{scheme}://{host}{path.rstrip('/')}" + (f"?{parts.query}" if parts.query else "")


def named_url(url: str, name: str | None = None) -> tuple[str | None, str]:
    """(canonical name, :func:`url_key`) of a path or a URL: ``name`` where given, else the name of the wheel or
    sdist file it ends in, or of the local project folder it is (its ``pyproject.toml``), else None."""
    if name is not None:
        return str(canonicalize_name(name)), url_key(url)
    parts = urlsplit(_VCS.sub("", url if _SCHEME.match(url) else Path(url).as_uri()))
    last = unquote(parts.path).rstrip("/")
    file = last.rsplit("/", 1)[-1]
    found: str | None = None
    try:
        found = parse_wheel_filename(file)[0] if file.endswith(".whl") else parse_sdist_filename(file)[0] \
            if file.endswith((".tar.gz", ".zip")) else project_name(Path(last)) if parts.scheme == "file" else None
    except (InvalidWheelFilename, InvalidSdistFilename):
        pass
    return (str(canonicalize_name(found)) if found else None), url_key(url)


def _asks(line: str, environment: Mapping[str, str] | None = None) -> tuple[str | None, tuple[str | None, str] | None]:
    """What a requirement line asks for by URL: ``name @ url`` -> (name, (name, url)), nothing where its marker is false
    in ``environment`` (the env's Python's; None: not evaluated); a path or a URL with no name -> (None,
    :func:`named_url`); ``name @ url;marker`` (``packaging`` wants a space before the ``;``, uv does not) read as
    with the space; anything else -> (None, None)."""
    for text in (line, re.sub(r"(@\s*\S+?);", r"\1 ;", line, count=1)):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if not req.url or not marker_holds(str(req.marker) if req.marker is not None else None, environment):
            return None, None
        return str(canonicalize_name(req.name)), (str(canonicalize_name(req.name)), req.url)
    named = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*@\s*\S", line)
    if named:
        return str(canonicalize_name(named.group(1))), None
    if not marker_holds(_unnamed(line)[1], environment):
        return None, None
    text = given_path(line)
    return (None, named_url(text)) if text.startswith("/") or _SCHEME.match(text) else (None, None)


def _unnamed(line: str) -> tuple[str, str | None]:
    """A requirement line with no name -> (its path or URL, without extras; its marker, None where none): the
    marker after a ``;`` with a space on either side (uv's reading: a ``;`` inside a URL is the URL's)."""
    split = re.search(r"\s+;|;\s+", line)
    text, marker = (line[:split.start()], line[split.end():]) if split else (line, "")
    return re.sub(r"\[[^\]/]*\]$", "", text.strip()), (marker.strip() or None)


def marker_holds(marker: str | None, environment: Mapping[str, str] | None) -> bool:
    """Whether a requirement's (or a uv source's) marker holds in ``environment`` (the env's Python's PEP 508
    environment; None: not evaluated, it holds; one that cannot be evaluated holds: asking stays the safe side of
    a false fail only where the marker says nothing we can read)."""
    if not marker or environment is None:
        return True
    try:
        return bool(Marker(marker).evaluate(dict(environment)))
    except Exception:  # noqa: BLE001 - an unknown marker variable or value, a marker that does not parse
        return True


def given_path(line: str) -> str:
    """A requirement line with no name as uv reads it, its marker and extras left out (:func:`_unnamed`): a
    relative path (one that starts with ``.`` or ``~``, has a ``/``, or ends as a wheel or an sdist does) made
    absolute against the working directory uv ran in (this process's: the install does not change it), ``~``
    expanded; anything else as written."""
    text = _unnamed(line)[0]
    if not text or _SCHEME.match(text) or text.startswith("/"):
        return text
    if text.startswith((".", "~")) or "/" in text or text.endswith((".whl", ".tar.gz", ".zip")):
        return os.path.abspath(os.path.expanduser(text))
    return text


def asked_files(lines: Sequence[str], outside: Path | None = None) -> dict[str, str | None]:
    """Each local file a requirement line names (``name @ file:...``, a path; a relative one as uv reads it:
    :func:`given_path`) -> its sha256 (None: not readable), but those inside ``outside`` (the stack: a fork
    checkout's files are its commit's, and their paths differ per stack).  The same line can name other bytes
    tomorrow, or from another working directory: the built-stack key names these, so an entry holding one file's
    install is never taken for another's."""
    out: dict[str, str | None] = {}
    for line in lines:
        given = given_path(line)
        for text in (line, re.sub(r"(@\s*\S+?);", r"\1 ;", line, count=1)):
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            given = given_path(req.url) if req.url else ""
            break
        bare = given.split("#", 1)[0]
        local = local_wheel({"path": bare} if bare.startswith("/") else {"url": bare})
        if local is not None and local.is_file() and not (outside is not None and local.resolve().is_relative_to(
                outside.resolve())):
            out[str(local)] = sha256_or_none(local)
    return out


def asked_by_url(dists: Mapping[str, Dist], requirements: Sequence[str],
                 own: Callable[[Dist], bool] = lambda dist: False,
                 sources: Sequence[tuple[str, str]] = (), environment: Mapping[str, str] | None = None) -> Asked:
    """What asks for a distribution by URL: ``requirements`` (the recipe's lines: ``name @ url``, or a path or a
    URL with no name), ``sources`` ((name, URL) of the forks' ``[tool.uv.sources]``), and ``name @ url`` in the
    ``Requires-Dist`` of a distribution ``own`` says the install built (the forks, built from their checkouts: never
    one uv's cache served, whose METADATA the cache could have written).  A requirement whose marker is false in
    ``environment`` (the env's Python's PEP 508 environment; None: markers not evaluated) asks for nothing: uv
    installed that name otherwise (the third review of session 37: a false ``; sys_platform == 'win32'`` line made
    a planted ``direct_url.json`` count as asked); a named one's URL is not compared (a VCS URL is written otherwise
    in ``direct_url.json``)."""
    names: set[str] = set()
    urls = {named_url(url, name) for name, url in sources}
    wanted = {(str(canonicalize_name(name)), url) for name, url in sources}
    for line in [*requirements, *(r for d in dists.values() if own(d) for r in d.requires)]:
        name, url = _asks(line, environment)
        if name is not None:
            names.add(name)
            wanted.update([(name, given_path(url[1]))] if url is not None else [])
        elif url is not None:
            urls.add(url)
            wanted.update([(url[0], given_path(line))] if url[0] is not None else [])
    return Asked(frozenset(names), frozenset(urls), frozenset(wanted))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def started_by_pth(dists: Mapping[str, Dist]) -> list[Dist]:
    """The distributions whose code a ``.pth`` runs at every start of the env's Python (``site`` executes each of
    its lines that begins with ``import``, before anything the start was for): each that owns such a ``.pth`` in its
    site directory, and each that owns a top-level module or package a name on such a line names (``import x``,
    ``__import__('x')``); none installed editable (built from a folder here: no wheel holds it)."""
    owner: dict[str, str] = {}
    pths: list[tuple[str, Path]] = []
    for dist in dists.values():
        try:
            rows = [row[0] for row in record_rows(dist)]
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        for path in rows:
            top = path.split("/", 1)[0]
            owner.setdefault(top[:-3] if top.endswith(".py") else top, dist.name)
            if "/" not in path and path.endswith(".pth"):
                pths.append((dist.name, dist.site / path))
    started: set[str] = set()
    for name, pth in pths:
        try:
            lines = [ln for ln in pth.read_text(encoding="utf-8", errors="replace").splitlines()
                     if ln.startswith(("import ", "import\t"))]
        except OSError:
            continue
        started.update([name] if lines else [])
        started.update(owner[word] for line in lines for word in _NAME.findall(line) if word in owner)
    return [dists[name] for name in sorted(started) if dists[name].editable_path is None]


def url_packages(dists: Mapping[str, Dist], asked: Asked) -> list[dict[str, Any]]:
    """Packages as a listing gives them for the distributions asked for by a wheel's URL (``asked.wanted``), so that
    :func:`.held.held_to_index` holds each to the wheels the *requirements* name, not the one its ``direct_url.json``
    (which uv's cache can plant) names: a local file read here (its sha256 taken now), another URL by Range
    requests (its ``#sha256=`` where given).  Every wheel asked for one name is one package's (a fork's
    ``[tool.uv.sources]`` may give one per platform, the first review of session 38: each judged apart, the one not
    installed made the healthy install unlike): held where one of them is the installed one.  A URL that is no
    wheel (an sdist, a folder, a VCS repository) is left out: that distribution is not judged."""
    wheels: dict[str, list[dict[str, Any]]] = {}
    for name, url in sorted(wanted for wanted in asked.wanted if wanted[0] in dists):
        if dists[name].direct_url is None or _VCS.match(url):
            continue
        bare, _, fragment = url.strip().partition("#")
        local = local_wheel({"path": bare} if bare.startswith("/") else {"url": bare})
        if not (str(local) if local is not None else unquote(urlsplit(bare).path)).endswith(".whl"):
            continue
        sha = sha256_or_none(local) if local is not None else \
            fragment[len("sha256="):] if fragment.startswith("sha256=") else None
        if local is None or sha is not None:
            wheels.setdefault(name, []).append({**({"path": str(local)} if local is not None else {"url": bare}),
                                                **({"hashes": {"sha256": sha}} if sha else {})})
    return [{"name": name, "version": dists[name].version, "wheels": listed} for name, listed in wheels.items()]


def unasked(dists: Mapping[str, Dist], asked: Asked, own: Callable[[Dist], bool] = lambda dist: False) -> tuple[str, ...]:
    """Each distribution with a ``direct_url.json`` that ``own`` does not say the install built and that nothing
    asks for by URL (``asked``: :func:`asked_by_url`'s answer), as ``name version: from URL (its
    direct_url.json)``."""
    given = [d for d in dists.values() if d.direct_url is not None and not own(d)]
    claimed = Counter(url_key(str(direct_url(d).get("url") or "")) for d in given)
    return tuple(f"{d.name} {d.version}: from {redact_url(str(direct_url(d).get('url') or '(no url)'))} (its "
                 "direct_url.json)" for d in given if not asked.covers(d, claimed))


def fork_dists(dists: Mapping[str, Any], forks: Sequence[tuple[Path, str]]) -> frozenset[str]:
    """The names of the forks' own installs: for each fork (checkout, distribution name), the distribution of that
    name whose ``direct_url.json`` says editable from the checkout's root; where none has the name (a checkout that
    declares none: the fork's name stood in), the only one editable from the root.  Nothing else counts, wherever
    its ``direct_url.json`` points: uv's cache can plant one naming a checkout."""
    names: set[str] = set()
    for path, name in forks:
        root = path.resolve()
        at_root = [d for d in dists.values() if _editable_dir(d) == root]
        named = [d for d in at_root if d.name == canonicalize_name(name)]
        names.update(d.name for d in (named or (at_root if len(at_root) == 1 else [])))
    return frozenset(names)


def _editable_dir(dist: Any) -> Path | None:
    info = direct_url(dist)
    url = str(info.get("url") or "")
    if not isinstance(info.get("dir_info"), dict) or info["dir_info"].get("editable") is not True \
            or not url.startswith("file://"):
        return None
    return Path(unquote(urlsplit(url).path)).resolve()


def uv_sources(checkouts: Sequence[Path]) -> list[tuple[str, str, str | None]]:
    """(name, URL, marker) of each path, URL or git source the forks' ``[tool.uv.sources]`` give (a path resolved
    against the checkout; the entry's ``marker``, None where it has none): uv follows them when it installs the fork
    with its dependencies, where the marker holds, so those distributions come with a ``direct_url.json`` naming
    that URL.  An ``index``, ``workspace`` or other source installs without one.  The checkouts are the fetch
    step's, held clean to their commits."""
    from ..core.pyproject import pyproject, table

    out: list[tuple[str, str, str | None]] = []
    for checkout in checkouts:
        for name, given in table(pyproject(checkout), "tool", "uv", "sources").items():
            for entry in (given if isinstance(given, list) else [given]):
                where = entry.get("path") or entry.get("url") or entry.get("git") if isinstance(entry, dict) else None
                if isinstance(where, str) and where:
                    url = (checkout / where).resolve().as_uri() if "path" in entry else where
                    marker = entry.get("marker")
                    out.append((str(name), url, marker if isinstance(marker, str) and marker else None))
    return out
