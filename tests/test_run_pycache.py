"""One bytecode prefix per run for the stack env's torch imports (issue 20): a site torch without
bytecode (the H200 image's) is compiled by every import; with ``-X pycache_prefix`` the first import of
the run writes the bytecode under STACK/.state/pycache and the next ones read it -- even with
PYTHONDONTWRITEBYTECODE set and ``-I`` -- and nothing is written beside the sources.  Real interpreters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from october.installer.core.paths import StackPaths


def _import(pkg_dir: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    code = f"import sys; sys.path.insert(0, {str(pkg_dir)!r}); import heavy; print(heavy.__cached__)"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, *args, "-I", "-c", code], env=env, capture_output=True, text=True,
                          check=True)


def test_the_first_import_writes_under_the_prefix_and_the_next_one_reads_it(tmp_path: Path) -> None:
    paths = StackPaths(tmp_path / "stack")
    assert paths.pycache_args() == ["-X", f"pycache_prefix={tmp_path / 'stack' / '.state' / 'pycache'}"]
    site = tmp_path / "site"
    site.mkdir()
    (site / "heavy.py").write_text("VALUE = 1\n")
    first = _import(site, paths.pycache_args())
    cached = Path(first.stdout.strip())
    assert cached.is_file() and cached.is_relative_to(paths.run_pycache)
    assert not (site / "__pycache__").exists()                    # nothing beside the source
    stamp = cached.stat().st_mtime_ns
    second = _import(site, paths.pycache_args())
    assert Path(second.stdout.strip()) == cached and cached.stat().st_mtime_ns == stamp   # read, not rewritten
    (site / "heavy.py").write_text("VALUE = 2  # changed\n")       # a changed source is compiled again
    os.utime(site / "heavy.py", ns=(stamp + 5 * 10**9, stamp + 5 * 10**9))
    _import(site, paths.pycache_args())
    assert cached.stat().st_mtime_ns != stamp
