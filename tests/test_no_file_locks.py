"""A stack or a smoke output on a filesystem without file locks (Lustre mounted without ``-o flock``: ENOSYS;
NFS without its lock service: ENOLCK) is refused with an error that says so, names the lock file and says
where to go instead (exit 19), not a bare "Function not implemented" for "a path".

Such a filesystem cannot exist here: the stand-in is ``fcntl.flock`` raising the errno the kernel gives for
files under one folder (by the descriptor's path in /proc), in the tool's own process, through a
``sitecustomize`` on PYTHONPATH for the CLI run and monkeypatch for the in-process ones.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.core.errors import FileSystemError, SmokeBusyError
from october.installer.core.stackmutex import StackLock
from october.installer.smoke import mutex
from tests.fixtures.root import PROJECT_ROOT

STAND_IN = '''
import errno, fcntl, os
_real = fcntl.flock
def flock(fd, op):
    root = os.environ["NO_FLOCK_UNDER"]
    path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
    if path.startswith(root):
        raise OSError(errno.ENOSYS, "Function not implemented")
    return _real(fd, op)
fcntl.flock = flock
'''


def _refusing(monkeypatch: pytest.MonkeyPatch, module: object, code: int) -> None:
    real = module.fcntl.flock                                   # type: ignore[attr-defined]

    def flock(fd: int, op: int) -> None:
        if op & mutex.fcntl.LOCK_UN:
            return real(fd, op)
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(module.fcntl, "flock", flock)           # type: ignore[attr-defined]


def test_a_stack_on_a_filesystem_without_locks_is_refused_naming_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STAND_IN)
    lustre = tmp_path / "lustre"
    env = dict(os.environ, PYTHONPATH=str(site), NO_FLOCK_UNDER=f"{lustre}/")
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(lustre / "stack"), "--recipe",
                           "current", "--cache-dir", str(tmp_path / "cache")], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 19, proc.stdout + proc.stderr
    err = proc.stderr
    assert f"the filesystem holding {lustre / 'stack'} has no file locks" in err, err
    assert f"an flock on {lustre / 'stack' / '.october.lock'}" in err and "(ENOSYS)" in err
    assert "give STACK a folder on a filesystem with file locks" in err and "Lustre mounted with -o flock" in err
    assert "Traceback" not in err


def test_a_cache_on_a_filesystem_without_locks_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """filelock would fall back to soft locks there (printing a raw UserWarning), and uv's first command then
    failed on its own cache lock (exit 6): the cache's filesystem is tried first."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STAND_IN)
    lustre = tmp_path / "lustre"
    env = dict(os.environ, PYTHONPATH=str(site), NO_FLOCK_UNDER=f"{lustre}/")
    lustre.mkdir()
    for argv in ([str(tmp_path / "stack"), "--recipe", "current"], ["kit", "--recipe", "current", str(tmp_path / "kit")]):
        proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", *argv, "--cache-dir",
                               str(lustre / "cache")], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 19, proc.stdout + proc.stderr
        assert f"the filesystem holding the cache directory {lustre / 'cache'} has no file locks" in proc.stderr, \
            proc.stderr
        assert "give --cache-dir a folder" in proc.stderr and "UserWarning" not in proc.stderr
        assert ".october-write-check-" in proc.stderr and "(ENOSYS)" in proc.stderr
        assert not (lustre / "cache").exists() and list(lustre.iterdir()) == []     # nothing made or left there
        assert not (tmp_path / "stack").exists() and not (tmp_path / "kit").exists()


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_stack_lock_the_filesystem_refuses_is_a_named_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  code: int) -> None:
    from october.installer.core import stackmutex

    _refusing(monkeypatch, stackmutex, code)
    with pytest.raises(FileSystemError) as err, StackLock(tmp_path / "stack" / ".october.lock"):
        pass
    assert err.value.exit_code == 19 and "has no file locks" in str(err.value)
    assert errno.errorcode[code] in str(err.value.found)


def test_a_smoke_output_on_a_filesystem_without_locks_is_refused_and_a_held_one_still_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    with mutex.output_lock(out), pytest.raises(SmokeBusyError):      # a real flock still held: busy, as before
        with mutex.output_lock(out):
            pass
    _refusing(monkeypatch, mutex, errno.ENOLCK)
    with pytest.raises(FileSystemError) as err, mutex.output_lock(out):
        pass
    assert f"an flock on {out / mutex.output_lock.NAME}" in str(err.value.expected) and "give --output a" in err.value.fix
    assert "one `current smoke` at a time on the output directory" in str(err.value.expected)
    with pytest.raises(FileSystemError), mutex.SmokeMutex(tmp_path / "stack", "cpu", {}):
        pass
