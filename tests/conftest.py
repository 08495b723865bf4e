"""Test-wide guards: no test may reach beyond loopback, or touch the user's caches or cache key.

The autouse fixture below makes any in-process socket connection to a non-loopback address
raise, so a unit test can never reach GitHub, PyPI or the Hugging Face hub by accident
(subprocesses are kept offline by their own arguments: ``--no-index``, file:// URLs and
loopback servers).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _loopback(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX
        return True
    host = address[0] if isinstance(address, tuple) else address
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    if not _loopback(address):
        raise ConnectionRefusedError(f"tests may only connect to loopback, not {address!r}")
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> Any:
    if not _loopback(address):
        raise ConnectionRefusedError(f"tests may only connect to loopback, not {address!r}")
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    cache: Path = tmp_path_factory.mktemp("october-cache")
    monkeypatch.setenv("OCTOBER_CACHE_DIR", str(cache))
    monkeypatch.setenv("OCTOBER_LOCK_DIR", str(tmp_path_factory.mktemp("october-locks")))  # smoke GPU locks
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    yield


@pytest.fixture(scope="session", autouse=True)
def _cache_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The cache's signing key (core/cachekey.py): one for the whole session, never the user's own.  Session-wide,
    set before any module fixture builds a stack: a stack a module fixture set up under another key than its
    tests' was never copied from the cache (CI: the real tier's second stack)."""
    saved = {k: os.environ.get(k) for k in ("OCTOBER_KEY_FILE", "OCTOBER_CACHE_KEY")}
    os.environ["OCTOBER_KEY_FILE"] = str(tmp_path_factory.getbasetemp() / "october-cache.key")
    os.environ.pop("OCTOBER_CACHE_KEY", None)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v




# ---------------------------------------------------------------------------------------------
# The `real` tier: tests that exercise real artifacts reachable from this workplace (PyPI's
# vLLM wheels and other packages, the real FlashInfer/CCCL objects in ../shared/real-forks).
# They are allowed past the loopback guard (PyPI only is reachable here) and are run by CI.


def real_forks_dir() -> Path:
    """Where the real fork tars live: $OCTOBER_REAL_FORKS, ../shared/real-forks beside the
    checkout, or /work/shared/real-forks.  A missing copy fails the test (never a silent skip)."""
    import os

    candidates = []
    if os.environ.get("OCTOBER_REAL_FORKS"):
        candidates.append(Path(os.environ["OCTOBER_REAL_FORKS"]))
    root = Path(__file__).resolve().parent.parent
    candidates += [root.parent / "shared" / "real-forks", Path("/work/shared/real-forks")]
    for c in candidates:
        if (c / "github.com+flashinfer-ai+flashinfer.git.tar").is_file():
            return c
    raise RuntimeError("real tier: expected the real fork tars (github.com+flashinfer-ai+flashinfer.git.tar) "
                       f"in one of {[str(c) for c in candidates]}, found none.\n"
                       "  -> set OCTOBER_REAL_FORKS to the directory that holds them")


@pytest.fixture(scope="session")
def real_mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real fork tars unpacked as ``MIRROR/github.com/OWNER/NAME.git`` (read-only use)."""
    import tarfile

    mirror = tmp_path_factory.mktemp("real-mirror")
    for tar in sorted(real_forks_dir().glob("*.tar")):
        with tarfile.open(tar) as tf:
            tf.extractall(mirror, filter="data")
    return mirror


def real_cache_dir() -> Path:
    """A cache for big real downloads (the vLLM base wheels) that survives between test runs and
    CI runs on this machine: $OCTOBER_REAL_CACHE or ~/.cache/october-real-tier."""
    import os

    d = Path(os.environ.get("OCTOBER_REAL_CACHE") or Path.home() / ".cache" / "october-real-tier")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(autouse=True)
def _real_tier_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                       _offline: None) -> None:
    """A test marked ``real`` may reach the real package index (PyPI): undo the loopback guard."""
    if request.node.get_closest_marker("real") is not None:
        monkeypatch.setattr(socket.socket, "connect", _real_connect)
        monkeypatch.setattr(socket.socket, "connect_ex", _real_connect_ex)
