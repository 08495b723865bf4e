"""The loopback find-links server (tests/fixtures/findlinks_server.py) stands in for an index: its page gives each
wheel's sha256 as PyPI's pages do.  It keeps each file's digest rather than hashing every wheel on every page
request (as an index serves stored hashes); this holds the page to the bytes served when a wheel is replaced
under its name (a republished wheel: what the lock step's checks are tested against)."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import httpx

from tests.fixtures.findlinks_server import serve_find_links


def _page_digest(url: str, name: str) -> str:
    page = httpx.get(url, timeout=10).text
    found = re.search(re.escape(name) + r"#sha256=([0-9a-f]{64})", page)
    assert found, page
    return found.group(1)


def test_the_page_names_the_bytes_served_after_a_wheel_is_replaced_under_its_name(tmp_path: Path) -> None:
    wheel = tmp_path / "tinydep-1.0-py3-none-any.whl"
    wheel.write_bytes(b"a" * 1000)
    with serve_find_links(tmp_path) as links:
        assert _page_digest(links.url, wheel.name) == hashlib.sha256(b"a" * 1000).hexdigest()
        st = wheel.stat()
        wheel.write_bytes(b"b" * 1000)                           # in place: same inode, same size
        os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))     # and its mtime put back
        assert _page_digest(links.url, wheel.name) == hashlib.sha256(b"b" * 1000).hexdigest()
        (tmp_path / "new.whl").write_bytes(b"c" * 1000)
        os.replace(tmp_path / "new.whl", wheel)                  # replaced: another inode
        assert _page_digest(links.url, wheel.name) == hashlib.sha256(b"c" * 1000).hexdigest()
        served = httpx.get(links.url + wheel.name, timeout=10).content
        assert _page_digest(links.url, wheel.name) == hashlib.sha256(served).hexdigest()
