"""The lock step's hold of each locked wheel that is a file here to the installed RECORD
(:mod:`october.installer.lock.installed`), on wheels installed by the real uv: a healthy install is never stale,
a wheel whose bytes the installed RECORD does not describe is named (the review of the republished-wheel fix)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from october.installer.lock.installed import unlike_locked
from october.installer.pyenv.uvcmd import uv_exe
from tests.fixtures.wheels import build_wheel


def _installed(tmp: Path, wheel: Path) -> Path:
    env = tmp / "env"
    run = dict(os.environ, UV_CACHE_DIR=str(tmp / "uvc"))
    run.pop("VIRTUAL_ENV", None)
    subprocess.run([uv_exe(), "venv", "-q", str(env)], check=True, env=run, capture_output=True)
    subprocess.run([uv_exe(), "pip", "install", "-q", "--no-deps", "--python", str(env / "bin" / "python"),
                    str(wheel)], check=True, env=run, capture_output=True)
    return env


def _locked(wheel: Path, name: str) -> dict:
    return {"name": name, "version": "1.0",
            "wheels": [{"path": str(wheel), "hashes": {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}}]}


def test_a_healthy_wheel_that_ships_its_own_installer_file_is_not_stale(tmp_path: Path) -> None:
    """uv writes a second INSTALLER row beside the wheel's own: the last row won, the healthy install was called
    stale, and the lock step removed the env on every run."""
    wheel = build_wheel(tmp_path / "w", "shipsinst", "1.0", {"shipsinst/__init__.py": "X = 1\n",
                                                              "shipsinst-1.0.dist-info/INSTALLER": "builder33\n"})
    env = _installed(tmp_path, wheel)
    assert unlike_locked([_locked(wheel, "shipsinst")], env) == []


def test_a_republished_wheel_that_kept_the_old_record_is_named(tmp_path: Path) -> None:
    """uv does not check a wheel's RECORD as it installs it: a republished tinydep whose file changed and whose
    RECORD was left as it was compared equal to the installed RECORD (verify 0).  A member whose size is not its
    row's is a difference."""
    old = build_wheel(tmp_path / "old", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
    env = _installed(tmp_path, old)
    assert unlike_locked([_locked(old, "tinydep")], env) == []
    new = build_wheel(tmp_path / "new", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"},
                      tamper={"tinydep/__init__.py": b"VALUE = 666\n"})
    found = unlike_locked([_locked(new, "tinydep")], env)
    assert [(u.name, u.files) for u in found] == [("tinydep", ("tinydep/__init__.py",))]


def test_a_locked_wheel_s_file_url_is_read_as_uv_reads_it() -> None:
    """A kit's or a local mirror's wheels are ``file://`` URLs in the lock, quoted (a space is ``%20``); a wheel
    on another host or on an index is not a file here.  (``unquote`` is ``urllib.request.url2pathname`` on
    POSIX; the lock's reader no longer imports urllib.request, which brings http.client and ssl.)"""
    from october.installer.lock.installed import local_wheel

    assert local_wheel({"url": "file:///k%20it/wheels/a-1.0-py3-none-any.whl"}) == Path("/k it/wheels/a-1.0-py3-none-any.whl")
    assert local_wheel({"url": "file://localhost/w/a.whl"}) == Path("/w/a.whl")
    assert local_wheel({"url": "file://elsewhere/w/a.whl"}) is None
    assert local_wheel({"url": "https://files.example/a%20b.whl"}) is None
    assert local_wheel({"path": "/w/a.whl"}) == Path("/w/a.whl") and local_wheel({"path": "w/a.whl"}) is None
