"""Test-wide guards: no test may reach beyond loopback, or touch the user's caches.

The autouse fixture below makes any in-process socket connection to a non-loopback address
raise, so a unit test can never reach GitHub, PyPI or the Hugging Face hub by accident
(subprocesses are kept offline by their own arguments: ``--no-index``, file:// URLs and
loopback servers).
"""

from __future__ import annotations

import ipaddress
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
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    yield


