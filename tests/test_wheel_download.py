"""october.installer.wheels.download against a real loopback HTTP server (no mocks)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from october.installer.core.errors import WheelError
from october.installer.wheels.download import DownloadPolicy, cache_path, download_wheel, partial_path
from tests.fixtures.wheel_server import WheelServer

NAME = "vllm-0.18.0-cp38-abi3-manylinux_2_17_x86_64.whl"
DATA = os.urandom(300_000)
SHA = hashlib.sha256(DATA).hexdigest()
FAST = DownloadPolicy(timeout_s=5, attempts=3, backoff_s=0)


@pytest.fixture
def server():
    with WheelServer() as srv:
        yield srv


def test_download_streams_into_content_addressed_cache(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", DATA)
    seen: list[tuple[int, int | None]] = []
    got = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST,
                         progress=lambda d, t: seen.append((d, t)))
    assert got.path == cache_path(tmp_path, SHA, NAME) == tmp_path / "wheels" / "sha256" / SHA / NAME
    assert got.path.read_bytes() == DATA and got.sha256 == SHA and got.size == len(DATA)
    assert got.transferred == len(DATA) and not got.cached
    assert seen[-1] == (len(DATA), len(DATA))
    assert not partial_path(tmp_path, server.url("/w.whl")).exists()
    assert (tmp_path / "wheels" / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    # A second call is served from the cache: no request, no bytes.
    again = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    assert again.cached and again.transferred == 0 and len(server.requests) == 1


def test_tofu_download_is_named_by_its_computed_hash(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", DATA)
    got = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=None, policy=FAST)
    assert got.sha256 == SHA and got.path == cache_path(tmp_path, SHA, NAME)


def test_dropped_connection_resumes_and_moves_only_missing_bytes(server: WheelServer, tmp_path: Path) -> None:
    cut = 100_003
    server.add("/w.whl", DATA, drop_after=cut)
    got = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    assert got.path.read_bytes() == DATA
    first, second = server.requests
    assert (first.range, first.status, first.sent) == (None, 200, cut)
    assert (second.range, second.status, second.sent) == (f"bytes={cut}-", 206, len(DATA) - cut)
    assert server.bytes_sent == len(DATA) == got.transferred


def test_partial_from_an_earlier_run_is_resumed(server: WheelServer, tmp_path: Path) -> None:
    cut = 123_456
    server.add("/w.whl", DATA, drop_after=cut)
    once = DownloadPolicy(timeout_s=5, attempts=1, backoff_s=0)
    with pytest.raises(WheelError) as err:
        download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=once)
    msg = str(err.value)
    assert "kept breaking off" in msg and f"{cut} of {len(DATA)} bytes are saved" in msg and "resumes" in msg
    part = partial_path(tmp_path, server.url("/w.whl"))
    assert part.stat().st_size == cut
    got = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=once)
    assert got.resumed_from == cut and got.transferred == len(DATA) - cut
    assert server.requests[-1].range == f"bytes={cut}-"
    assert server.bytes_sent == len(DATA)            # every byte crossed the wire once
    assert got.path.read_bytes() == DATA and not part.exists()


def test_a_200_answer_to_a_range_request_restarts_cleanly(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", DATA, ignore_range=True)
    part = partial_path(tmp_path, server.url("/w.whl"))
    part.parent.mkdir(parents=True)
    part.write_bytes(b"stale bytes of some other file")
    got = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    assert got.path.read_bytes() == DATA and got.resumed_from == 0
    assert server.requests[0].range is not None and server.requests[0].status == 200


def test_changed_file_on_the_host_restarts_via_if_range(server: WheelServer, tmp_path: Path) -> None:
    route = server.add("/w.whl", DATA[:1000] + b"x" * 5000, drop_after=500)
    with pytest.raises(WheelError):
        download_wheel(server.url("/w.whl"), NAME, tmp_path, policy=DownloadPolicy(attempts=1, backoff_s=0))
    route.data, route.etag = DATA, '"v2"'             # the host now serves another file
    got = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    assert got.path.read_bytes() == DATA and server.requests[-1].status == 200


def test_a_complete_partial_finishes_on_416(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", DATA)
    part = partial_path(tmp_path, server.url("/w.whl"))
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA)
    got = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    assert got.transferred == 0 and server.requests[0].status == 416 and got.path.read_bytes() == DATA


def test_wrong_sha256_fails_and_deletes_the_file(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", DATA)
    wrong = "0" * 64
    with pytest.raises(WheelError) as err:
        download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=wrong, policy=FAST)
    msg = str(err.value)
    assert "[sha256]" in msg and f"Expected sha256 {wrong}" in msg and f"found sha256 {SHA}" in msg
    assert "deleted" in msg
    assert not partial_path(tmp_path, server.url("/w.whl")).exists()
    assert not list((tmp_path / "wheels").rglob("*.whl")) and not list((tmp_path / "wheels").rglob("*.part"))


def test_damaged_cache_entry_is_fetched_again(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", DATA)
    hit = cache_path(tmp_path, SHA, NAME)
    hit.parent.mkdir(parents=True)
    hit.write_bytes(b"bit rot")
    got = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    assert not got.cached and got.path.read_bytes() == DATA


def test_404_is_final_and_clear(server: WheelServer, tmp_path: Path) -> None:
    with pytest.raises(WheelError) as err:
        download_wheel(server.url("/missing.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    msg = str(err.value)
    assert "does not exist" in msg and "HTTP 404" in msg and "[wheel].url" in msg
    assert len(server.requests) == 1                  # not retried


def test_500_is_retried_then_reported(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", status=500)
    with pytest.raises(WheelError) as err:
        download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    msg = str(err.value)
    assert "kept failing" in msg and "HTTP 500" in msg and "3 attempt(s)" in msg and "mirror" in msg
    assert len(server.requests) == 3


def test_stalled_host_times_out_with_a_clear_message(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", DATA, stall=True)
    policy = DownloadPolicy(timeout_s=0.3, attempts=1, backoff_s=0)
    with pytest.raises(WheelError) as err:
        download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=policy)
    msg = str(err.value)
    assert "timed out" in msg and "data within 0.3s" in msg and "resumes" in msg


def test_backoff_doubles_between_attempts(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", status=503)
    waits: list[float] = []
    policy = DownloadPolicy(timeout_s=5, attempts=4, backoff_s=0.5, backoff_max_s=1.5)
    with pytest.raises(WheelError):
        download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=policy, sleep=waits.append)
    assert waits == [0.5, 1.0, 1.5]


def test_tofu_over_plain_http_to_a_remote_host_is_refused(tmp_path: Path) -> None:
    """No request is made: the URL is refused before any connection (example.invalid never resolves)."""
    with pytest.raises(WheelError) as err:
        download_wheel("http://example.invalid/vllm.whl", NAME, tmp_path, sha256=None, policy=FAST)
    assert "plain http" in str(err.value) and "sha256" in str(err.value)


@pytest.mark.parametrize("bad", ["../evil.whl", "dir/x.whl", "vllm.tar.gz", ""])
def test_filename_must_be_a_plain_wheel_name(tmp_path: Path, bad: str) -> None:
    with pytest.raises(WheelError) as err:
        download_wheel("https://example.invalid/x.whl", bad, tmp_path, sha256=SHA, policy=FAST)
    assert "[wheel].filename" in str(err.value)


def test_failed_download_leaves_no_empty_partial(server: WheelServer, tmp_path: Path) -> None:
    with pytest.raises(WheelError):
        download_wheel(server.url("/missing.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    assert not partial_path(tmp_path, server.url("/missing.whl")).exists()



def test_a_206_at_the_wrong_offset_restarts_from_zero(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", DATA, range_from_zero=True, drop_after=1000)
    got = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    assert got.path.read_bytes() == DATA
    assert [r.range for r in server.requests] == [None, "bytes=1000-", None]


def test_compressed_transfer_is_refused(server: WheelServer, tmp_path: Path) -> None:
    server.add("/w.whl", DATA, encoding="gzip")
    with pytest.raises(WheelError) as err:
        download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=SHA, policy=FAST)
    assert "Content-Encoding: identity" in str(err.value) and "gzip" in str(err.value)


def test_malformed_expected_sha256(tmp_path: Path) -> None:
    with pytest.raises(WheelError) as err:
        download_wheel("https://example.invalid/x.whl", NAME, tmp_path, sha256="ABC", policy=FAST)
    assert "64 lowercase hex" in str(err.value)


def test_tofu_remembers_the_first_hash_and_refuses_changed_bytes(server: WheelServer, tmp_path: Path) -> None:
    """Trust on first use means once: the same URL is then a cache hit, and other bytes are refused."""
    server.add("/w.whl", DATA)
    first = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=None, policy=FAST)
    assert first.sha256 == SHA and not first.cached
    again = download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=None, policy=FAST)
    assert again.cached and again.transferred == 0 and len(server.requests) == 1
    # the host now serves other bytes under the same URL, and the cached copy is gone
    first.path.unlink()
    server.add("/w.whl", DATA[::-1])
    with pytest.raises(WheelError) as err:
        download_wheel(server.url("/w.whl"), NAME, tmp_path, sha256=None, policy=FAST)
    assert "now serves other bytes than when it was first trusted" in err.value.message
    assert f"sha256 {SHA}" in err.value.message and "pin [wheel].sha256" in err.value.message
    assert not partial_path(tmp_path, server.url("/w.whl")).exists()


def test_an_interrupted_download_keeps_no_credential_on_disk(server: WheelServer, tmp_path: Path) -> None:
    """A partial download left behind (connection dropped, no retries left) must not hold the URL's token."""
    server.add("/w.whl", DATA, drop_after=1000)
    url = server.url("/w.whl").replace("http://", "http://user:hf_SECRETTOKEN123@")
    with pytest.raises(WheelError):
        download_wheel(url, NAME, tmp_path, sha256=SHA, policy=DownloadPolicy(timeout_s=2, attempts=1, backoff_s=0))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".part" for p in files)            # the partial is kept for resuming
    assert any(p.suffix == ".json" for p in files)            # with its validator, for If-Range
    assert not [p for p in files if b"hf_SECRETTOKEN123" in p.read_bytes()]
