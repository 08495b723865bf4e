"""Lay variables over ``os.environ`` for the length of a ``with`` block, then restore it exactly."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def environ_overlay(extra: Mapping[str, str]) -> Iterator[None]:
    """Set ``extra`` in ``os.environ``; afterwards each variable has its old value again, or is unset
    when it had none (the CLI also runs in-process in tests, so nothing may leak)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
