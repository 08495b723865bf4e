"""Download one wheel with httpx into a content-addressed cache, resuming with HTTP Range.

Layout under the cache dir::

    wheels/sha256/<hex>/<filename>      finished downloads, named by their sha256
    wheels/partial/<urlhash>.part       an unfinished download of one URL (resumed next time)
    wheels/partial/<urlhash>.json       its validator (ETag / Last-Modified) for If-Range
    wheels/partial/<urlhash>.lock       one downloader per URL at a time
    wheels/seen/<urlhash>.json          trust on first use: the sha256 a URL gave the first time

A URL downloaded without a pinned sha256 is trusted on first use; the hash it gave is
remembered, so a later download of that URL is a cache hit, and a host that later serves
other bytes under it is refused instead of silently trusted again.

The sha256 is computed while the bytes stream in; on resume the bytes already
on disk are hashed once and the stream continues, so every byte crosses the
network once.  A file whose sha256 differs from the expected one is deleted.

Assumptions about the wheel hosts (files.pythonhosted.org, GitHub release assets
and wheels.vllm.ai cannot be reached from the development machines, so they are
written down here, in one place, and each one fails closed):

* ``Range: bytes=N-`` is answered with ``206`` and ``Content-Range: bytes N-M/T``;
  a ``200`` means the host ignored the range (or the file changed, via
  ``If-Range``), and the download restarts from byte 0 with a fresh hash;
  a ``206`` starting anywhere but N restarts as well.
* ``416`` with ``Content-Range: bytes */T`` and T equal to what we hold means the
  partial file is already complete; any other 416 restarts from 0.
* Bodies are sent without content-coding (we ask for ``identity``); any other
  ``Content-Encoding`` is refused, since resume offsets and hashes are byte exact.
* Redirects (GitHub releases redirect to a storage host) are followed, but never
  from https down to plain http.
* ``404``/``410`` are final (wrong URL); ``408``/``429``/``5xx``, dropped
  connections and timeouts are retried with exponential backoff.
* A URL without a sha256 (trust on first use) must be https, except on loopback.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlsplit

from filelock import FileLock

if TYPE_CHECKING:
    import httpx

from .. import __version__
from ..core import jsonread
from ..core.atomic import write_json_atomic
from ..core.errors import WheelError
from ..core.hashing import sha256_file
from ..core.ids import SHA256
from ..core.redact import redact_url
from .partial import PartialFile

Progress = Callable[[int, "int | None"], None]
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")
_UNSATISFIED_RANGE = re.compile(r"^bytes\s+\*/(\d+)$")
CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This directory is a cache made by october; see https://bford.info/cachedir/\n")


@dataclass(frozen=True)
class DownloadPolicy:
    timeout_s: float = 60.0       # connect and per-read timeout
    attempts: int = 5             # total tries for transient failures
    backoff_s: float = 1.0        # first wait; doubles each retry
    backoff_max_s: float = 30.0


@dataclass(frozen=True)
class Downloaded:
    path: Path                    # the file in the content-addressed cache
    sha256: str
    size: int
    transferred: int              # body bytes this call received from the network
    resumed_from: int             # bytes of an earlier partial download that were kept
    cached: bool                  # True: already in the cache, nothing downloaded


def cache_path(cache_dir: Path, sha256: str, filename: str) -> Path:
    return cache_dir / "wheels" / "sha256" / sha256 / filename


def _url_key(url: str) -> str:
    # keyed without the URL's user:password@ (a rotated token resumes the same download; no secret in a name).
    # Not core.redact's masking: the key names the first-seen record of an unpinned URL, so it must not change
    # (a record under another key is trusted again on first use), and a masked ?key= would join two builds
    parts = urlsplit(url)
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl() if "@" in parts.netloc else url
    return hashlib.sha256(bare.encode("utf-8")).hexdigest()[:32]


def partial_path(cache_dir: Path, url: str) -> Path:
    return cache_dir / "wheels" / "partial" / f"{_url_key(url)}.part"


def seen_path(cache_dir: Path, url: str) -> Path:
    return cache_dir / "wheels" / "seen" / f"{_url_key(url)}.json"


def first_seen(cache_dir: Path, url: str, filename: str) -> str | None:
    """The sha256 this URL gave when it was first trusted (None: never downloaded unpinned)."""
    try:
        data = jsonread.loads(seen_path(cache_dir, url).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    sha = data.get("sha256") if isinstance(data, dict) and data.get("filename") == filename else None
    return sha if isinstance(sha, str) and SHA256.match(sha) else None


class _Retry(Exception):
    """A transient failure: ``kind`` is timeout | connection | http | short."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def _final_error(url: str, problem: _Retry, attempts: int, part: PartialFile, policy: DownloadPolicy) -> WheelError:
    shown = redact_url(url)
    held = f"{part.size} of {part.total if part.total is not None else '?'} bytes are saved in {part.path}"
    if problem.kind == "timeout":
        return WheelError(f"downloading the base wheel from {shown} timed out",
                          expected=f"data within {policy.timeout_s:g}s",
                          found=f"{problem} on each of {attempts} attempt(s); {held}",
                          fix="check the network or proxy (HTTPS_PROXY) and re-run; the download resumes")
    if problem.kind == "http":
        return WheelError(f"the wheel host kept failing for {shown}",
                          expected="HTTP 200 or 206 with the wheel",
                          found=f"{problem} on each of {attempts} attempt(s)",
                          fix="the host has a problem: try again later, or point [wheel].url at a mirror "
                              "serving the same file (same sha256)")
    return WheelError(f"the download of {shown} kept breaking off",
                      expected="the whole body",
                      found=f"{problem} ({attempts} attempt(s)); {held}",
                      fix="re-run october_setup: the download resumes where it stopped")


def _fatal_status(url: str, status: int, reason: str) -> WheelError:
    shown = redact_url(url)
    if status in (404, 410):
        return WheelError(f"the base wheel URL {shown} does not exist", expected="HTTP 200 with the wheel",
                          found=f"HTTP {status} {reason}",
                          fix="check [wheel].url and [wheel].filename in the recipe (the release may have "
                              "been yanked or moved)")
    return WheelError(f"the wheel host refused {shown}", expected="HTTP 200 with the wheel",
                      found=f"HTTP {status} {reason}",
                      fix="check the URL and any credentials or proxy it needs, then re-run")


def _check_url(url: str, sha256: str | None) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WheelError(f"[wheel].url {redact_url(url)!r} is not an http(s) URL",
                         expected="an https:// URL of the wheel", found=f"scheme {parts.scheme!r}",
                         fix="set [wheel].url in the recipe to the wheel's https download URL")
    if sha256 is None and parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        raise WheelError(f"refusing to trust {redact_url(url)} on first use over plain http",
                         expected="an https URL, or a [wheel].sha256 in the recipe",
                         found="an http URL and no sha256",
                         fix="use the https URL, or add the wheel's sha256 to [wheel] in the recipe")


def _request(client: httpx.Client, url: str, part: PartialFile, progress: Progress | None,
             counter: list[int]) -> int | None:
    """One GET; returns the total size when the body was complete, raises _Retry otherwise."""
    headers: dict[str, str] = {}
    offset = part.size
    if offset > 0:
        headers["Range"] = f"bytes={offset}-"
        if part.validator:
            headers["If-Range"] = part.validator
    with client.stream("GET", url, headers=headers) as resp:
        status = resp.status_code
        if urlsplit(url).scheme == "https" and resp.url.scheme != "https":
            raise WheelError(f"the wheel host redirected {redact_url(url)} to plain http",
                             expected="https all the way", found=str(redact_url(str(resp.url))),
                             fix="use a URL that stays on https")
        if status == 416 and offset > 0:
            m = _UNSATISFIED_RANGE.match(resp.headers.get("content-range", ""))
            if m and int(m.group(1)) == offset:
                return offset                       # we already hold every byte
            part.restart()
            raise _Retry("short", f"HTTP 416 for a resume at byte {offset}; restarted from 0")
        if status in (408, 429) or status >= 500:
            raise _Retry("http", f"HTTP {status} {resp.reason_phrase}")
        if status not in (200, 206):
            raise _fatal_status(url, status, resp.reason_phrase)
        coding = resp.headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("", "identity"):
            raise WheelError(f"the wheel host compressed {redact_url(url)} in transit",
                             expected="Content-Encoding: identity (byte-exact resume and hash)",
                             found=f"Content-Encoding: {coding}",
                             fix="use a different URL or mirror for the wheel")
        total: int | None
        if status == 206:
            m = _CONTENT_RANGE.match(resp.headers.get("content-range", ""))
            if not m or int(m.group(1)) != offset:
                part.restart()
                raise _Retry("short", f"a 206 with Content-Range {resp.headers.get('content-range')!r} "
                                      f"for a resume at byte {offset}; restarted from 0")
            total = int(m.group(3)) if m.group(3) != "*" else None
        else:
            if offset > 0:
                part.restart()                      # range ignored or file changed: start over cleanly
            length = resp.headers.get("content-length")
            total = int(length) if length and length.isdigit() else None
        part.total = total
        part.remember(resp.headers)
        for chunk in resp.iter_raw():               # as received: no buffered bytes lost on a drop
            part.write(chunk)
            counter[0] += len(chunk)
            if progress is not None:
                progress(part.size, total)
            if total is not None and part.size > total:
                part.restart()
                raise _Retry("short", f"the host sent more than the {total} bytes it announced")
    if total is not None and part.size != total:
        raise _Retry("short", f"the body ended at byte {part.size} of {total}")
    return part.size


def request_headers() -> dict[str, str]:
    """Every request's headers: bytes as stored (offsets and hashes are byte exact), and who asks."""
    return {"Accept-Encoding": "identity", "User-Agent": f"october/{__version__}"}


def netrc_auth() -> httpx.Auth | None:
    """Credentials for a URL without its own ``user:password@`` (httpx sends those): ``~/.netrc``'s (or
    ``$NETRC``'s) for the host, as uv and pip read it; None without one."""
    import httpx

    netrc = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    if not netrc.is_file():
        return None
    try:
        return httpx.NetRCAuth(str(netrc))
    except Exception:       # netrc.NetrcParseError, unreadable: as if there were none (uv says what is wrong)
        return None


def _fetch(url: str, part: PartialFile, policy: DownloadPolicy, progress: Progress | None,
           sleep: Callable[[float], None], counter: list[int]) -> None:
    import httpx  # here, not at the top: a stack from the cache or a kit never downloads (0.12 s)

    timeout = httpx.Timeout(policy.timeout_s)
    auth = None if urlsplit(url).username else netrc_auth()
    with httpx.Client(timeout=timeout, follow_redirects=True, headers=request_headers(), auth=auth) as client:
        for attempt in range(1, policy.attempts + 1):
            try:
                _request(client, url, part, progress, counter)
                return
            except httpx.TimeoutException as exc:
                problem = _Retry("timeout", f"no data for {policy.timeout_s:g}s ({type(exc).__name__})")
            except httpx.TransportError as exc:
                problem = _Retry("connection", f"the connection dropped: {exc or type(exc).__name__}")
            except _Retry as exc:
                problem = exc
            part.fh.flush()
            if attempt == policy.attempts:
                raise _final_error(url, problem, attempt, part, policy)
            sleep(min(policy.backoff_s * 2 ** (attempt - 1), policy.backoff_max_s))


def _check_filename(filename: str, suffix: str = ".whl") -> None:
    if not filename or "/" in filename or "\\" in filename or filename in (".", "..") \
            or not filename.endswith(suffix):
        raise WheelError(f"[wheel].filename {filename!r} is not a plain {suffix} file name",
                         expected="a name like vllm-0.18.0-cp38-abi3-manylinux_2_31_x86_64.whl"
                                  if suffix == ".whl" else f"a plain file name ending in {suffix}",
                         found=repr(filename), fix="fix [wheel].filename in the recipe")


def download_wheel(url: str, filename: str, cache_dir: Path, *, sha256: str | None = None,
                   policy: DownloadPolicy = DownloadPolicy(), progress: Progress | None = None,
                   sleep: Callable[[float], None] = time.sleep, suffix: str = ".whl") -> Downloaded:
    """Fetch ``url`` into the cache; check ``sha256`` when given (else the caller trusts on first use).
    ``suffix``: what the file name must end in (``.tar.gz`` for a fork's sdist)."""
    _check_filename(filename, suffix)
    if sha256 is not None and not SHA256.match(sha256):
        raise WheelError("the expected wheel sha256 is malformed", expected="64 lowercase hex characters",
                         found=repr(sha256), fix="fix [wheel].sha256 in the recipe (or the lock)")
    _check_url(url, sha256)
    tag = cache_dir / "wheels" / "CACHEDIR.TAG"
    if not tag.exists():
        tag.parent.mkdir(parents=True, exist_ok=True)
        tag.write_text(CACHEDIR_TAG, encoding="utf-8")
    remembered = first_seen(cache_dir, url, filename) if sha256 is None else None
    tofu = sha256 is None
    sha256 = sha256 or remembered
    if sha256 is not None:
        hit = cache_path(cache_dir, sha256, filename)
        if hit.exists():
            if sha256_file(hit) == sha256:
                return Downloaded(hit, sha256, hit.stat().st_size, 0, 0, True)
            hit.unlink()                              # a damaged cache entry: fetch again
    part_path = partial_path(cache_dir, url)
    part_path.parent.mkdir(parents=True, exist_ok=True)
    counter = [0]
    with FileLock(str(part_path.with_suffix(".lock"))):
        part = PartialFile(part_path, url)
        try:
            _fetch(url, part, policy, progress, sleep, counter)
        except BaseException:
            if part.size == 0:
                part.discard()                        # nothing worth resuming
            part.close()
            raise
        part.close()
        digest = part.hasher.hexdigest()
        if remembered is not None and digest != remembered:
            part.discard()
            raise WheelError(f"[sha256] {redact_url(url)} now serves other bytes than when it was first trusted",
                             expected=f"sha256 {remembered} (first seen, recorded in {seen_path(cache_dir, url)})",
                             found=f"sha256 {digest} ({part.size} bytes)",
                             fix="the file was deleted; pin [wheel].sha256 in the recipe to the wheel you mean "
                                 "(delete the record above only if the change is expected)")
        if sha256 is not None and digest != sha256:
            part.discard()
            raise WheelError(f"[sha256] the file downloaded from {redact_url(url)} is not the pinned wheel",
                             expected=f"sha256 {sha256}", found=f"sha256 {digest} ({part.size} bytes)",
                             fix="the file was deleted; check [wheel].url and [wheel].sha256 in the recipe "
                                 "(a host serving other bytes under that URL is a red flag), then re-run")
        final = cache_path(cache_dir, digest, filename)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part_path, final)
        part.meta_path.unlink(missing_ok=True)
        if tofu and remembered is None:
            write_json_atomic(seen_path(cache_dir, url), {"url": redact_url(url), "filename": filename,
                                                          "sha256": digest, "tool": __version__})
        return Downloaded(final, digest, final.stat().st_size, counter[0], part.resumed_from, False)
