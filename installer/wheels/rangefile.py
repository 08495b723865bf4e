"""A wheel on an HTTP host, read as a file: only the bytes :mod:`zipfile` asks for, fetched with Range requests.

What the install step holds an env's index distributions to (:func:`october.installer.lock.held.held_to_index`)
is each wheel's own RECORD; a wheel uv took from its cache is not on this machine as a file, so its zip directory
and RECORD member are read from the index's URL: two or three requests of :data:`BLOCK` bytes for a small wheel,
the directory's size more for a large one (torch's is ~2 MB of 900).  Assumptions about the host, each failing
closed (the wheel is then not judged, and the caller says so):

* ``Range: bytes=A-B`` is answered with ``206`` and ``Content-Range: bytes A'-B'/T`` with ``A' <= A``; the bytes
  sent past ``B`` are not read.  ``T`` must be the size the lock listed (another size: another file).
* A ``200`` means the host ignores ranges: the whole file is read (at most :data:`WHOLE_MAX` bytes) and must hash
  to the locked sha256.
* Anything else (401, 404, 5xx, a timeout, a content-coding) makes the file unreadable here, and so does a
  ``deadline`` passed (a host that trickles bytes never meets the per-read timeout).
"""

from __future__ import annotations

import hashlib
import io
import re
import time
from typing import TYPE_CHECKING

from ..core.redact import redact_url

if TYPE_CHECKING:
    import httpx

BLOCK = 64 * 1024
WHOLE_MAX = 64 * 1024 * 1024
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")


class Unreadable(OSError):
    """The host did not give the bytes asked for (the message says why, the URL's credentials masked)."""


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of ``url``: each read not yet held is fetched (``BLOCK`` bytes at least) and
    kept.  ``size``: the file's size as listed, when known (else learnt from the first answer); ``sha256``: the
    locked digest, checked when the host answers with the whole file; ``deadline``: a :func:`time.monotonic` time
    after which nothing more is asked or read."""

    def __init__(self, client: httpx.Client, url: str, size: int | None = None, sha256: str | None = None,
                 deadline: float | None = None) -> None:
        super().__init__()
        self.client, self.url, self.sha256, self.deadline = client, url, sha256, deadline
        self.segments: list[tuple[int, bytes]] = []
        self.problem: str | None = None         # why the last fetch failed (zipfile may turn the error into its own)
        self.requests = 0
        self.pos = 0
        self.size = size
        if size is None:
            self._fetch(0, BLOCK - 1)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self._size()}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: bytearray | memoryview) -> int:      # type: ignore[override]
        n = min(len(buffer), max(0, self._size() - self.pos))
        if n == 0:
            return 0
        data = self._held(self.pos, n)
        if data is None:
            # a block at least; near the end, the block before it too (the zip directory is read backwards)
            self._fetch(max(0, min(self.pos, self._size() - BLOCK)), min(self._size(), self.pos + max(n, BLOCK)) - 1)
            data = self._held(self.pos, n)
        if data is None:                    # the answer did not cover what was asked
            self.problem = f"{redact_url(self.url)}: bytes {self.pos}-{self.pos + n - 1} were not sent"
            raise Unreadable(self.problem)
        buffer[:n] = data
        self.pos += n
        return n

    def _size(self) -> int:
        assert self.size is not None
        return self.size

    def _held(self, start: int, n: int) -> bytes | None:
        for begin, data in self.segments:
            if begin <= start and start + n <= begin + len(data):
                return data[start - begin:start - begin + n]
        return None

    def _fetch(self, start: int, end: int) -> None:
        """Ask for bytes ``start``..``end`` and keep what came (see the module's assumptions)."""
        self.requests += 1
        try:
            self._ask(start, end)
        except Unreadable as exc:
            self.problem = str(exc)
            raise

    def _ask(self, start: int, end: int) -> None:
        import httpx

        where = redact_url(self.url)
        self._in_time(where)
        try:
            with self.client.stream("GET", self.url, headers={"Range": f"bytes={start}-{end}"}) as answer:
                if answer.headers.get("Content-Encoding", "identity") != "identity":
                    raise Unreadable(f"{where}: sent with Content-Encoding {answer.headers['Content-Encoding']}")
                if answer.status_code == 206:
                    self._keep_range(answer, start, end, where)
                elif answer.status_code == 200:
                    self._keep_whole(answer, where)
                else:
                    raise Unreadable(f"{where}: HTTP {answer.status_code} for a range of the file")
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
            raise Unreadable(f"{where}: {type(exc).__name__}: {redact_url(str(exc)) or 'no answer'}") from None

    def _in_time(self, where: str) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Unreadable(f"{where}: not read in the time the hold gives index wheels")

    def _keep_range(self, answer: httpx.Response, start: int, end: int, where: str) -> None:
        m = _CONTENT_RANGE.match(answer.headers.get("Content-Range", ""))
        if m is None:
            raise Unreadable(f"{where}: a 206 without a byte Content-Range")
        first, total = int(m.group(1)), int(m.group(3))
        if self.size is None:
            self.size = total
        if total != self.size:
            raise Unreadable(f"{where}: the file is {total} bytes, the lock lists {self.size}")
        if first > start:
            raise Unreadable(f"{where}: asked for bytes from {start}, sent from {first}")
        want = min(end, total - 1) + 1 - first
        data = bytearray()
        for chunk in answer.iter_bytes():
            self._in_time(where)
            data += chunk
            if len(data) >= want:
                break                       # a host that sends past the range: the rest is not read
        self.segments.append((first, bytes(data[:want])))

    def _keep_whole(self, answer: httpx.Response, where: str) -> None:
        data = bytearray()
        for chunk in answer.iter_bytes():
            self._in_time(where)
            data += chunk
            if len(data) > WHOLE_MAX:
                raise Unreadable(f"{where}: the host ignores Range requests and the file is over "
                                 f"{WHOLE_MAX >> 20} MiB (not read whole)")
        if self.size is not None and len(data) != self.size:
            raise Unreadable(f"{where}: the file is {len(data)} bytes, the lock lists {self.size}")
        if self.sha256 is None or hashlib.sha256(data).hexdigest() != self.sha256:
            raise Unreadable(f"{where}: sent whole, its sha256 is not the locked one")
        self.size = len(data)
        self.segments = [(0, bytes(data))]


def client(timeout_s: float = 30.0) -> httpx.Client:
    """The client the range reads share (threads may share it): identity coding, redirects followed, credentials
    from the URL itself or ``~/.netrc`` as :mod:`october.installer.wheels.download` sends them."""
    import httpx

    from .download import netrc_auth, request_headers

    return httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=True, headers=request_headers(),
                        auth=netrc_auth(), limits=httpx.Limits(max_connections=16))
