"""The real index: wheels uv installs from PyPI held to the RECORD read from files.pythonhosted.org by Range
requests (:mod:`october.installer.wheels.rangefile`), through the listing ``uv pip compile`` writes as the lock step
runs it.  A platform wheel (markupsafe: the listed files of this interpreter's tags; tokenizers, whose WHEEL writes its compressed tag set as one tag, not as its file name says it) and a pure one (idna); then the same
after uv's cache is edited with its RECORD row.  Nothing stood in: real PyPI, real uv, its real cache."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from october.installer.lock.held import held_to_index, remote_rows
from october.installer.pyenv.uvcmd import uv_exe
from october.installer.wheels.rangefile import RangeFile
from tests.test_index_held import poison_uv_cache

pytestmark = [pytest.mark.real, pytest.mark.slow]
PINS = ("idna==3.10", "markupsafe==3.0.2", "tokenizers==0.20.3")   # tokenizers: its WHEEL writes the compressed tag


def _run(cache: Path, *argv: str) -> None:
    env = dict(os.environ, UV_CACHE_DIR=str(cache), UV_LINK_MODE="copy")
    env.pop("VIRTUAL_ENV", None)
    subprocess.run([uv_exe(), *argv], check=True, env=env, capture_output=True, timeout=300)


def _env(tmp: Path, name: str, cache: Path, pins: tuple[str, ...] = PINS) -> Path:
    env = tmp / name
    _run(cache, "venv", "-q", "--python", sys.executable, str(env))
    _run(cache, "pip", "install", "-q", "--no-deps", "--python", str(env / "bin" / "python"), *pins)
    return env


def _listing(tmp: Path, cache: Path, python: Path, pins: tuple[str, ...] = PINS) -> list[dict]:
    (tmp / "req.in").write_text("".join(f"{p}\n" for p in pins))
    _run(cache, "pip", "compile", str(tmp / "req.in"), "--no-deps", "--no-header", "--quiet", "--python",
         os.path.realpath(python), "-o", str(tmp / "pylock.toml"))
    return list(tomllib.loads((tmp / "pylock.toml").read_text())["packages"])


def test_pypi_wheels_are_held_to_their_record_read_by_range_requests(tmp_path: Path) -> None:
    cache = tmp_path / "uvc"
    clean = _env(tmp_path, "clean", cache)
    packages = _listing(tmp_path, cache, clean / "bin" / "python")
    assert all("manylinux" in w["url"] for p in packages if p["name"] == "markupsafe" for w in p["wheels"])
    with httpx.Client(follow_redirects=True) as http:
        held = held_to_index(packages, clean, remote_rows(http))
        assert held.unlike == () and held.unjudged == (), held
        # the zip directory and RECORD, not the wheel
        (idna,) = [w for p in packages if p["name"] == "idna" for w in p["wheels"]]
        view = RangeFile(http, idna["url"], idna["size"], idna["hashes"]["sha256"])
        assert view.read(4) == b"PK\x03\x04" and view.requests <= 2
        poison_uv_cache(cache, "idna/core.py", "planted = True\n")
        poisoned = _env(tmp_path, "poisoned", cache)
        held = held_to_index(packages, poisoned, remote_rows(http))
    assert [(u.name, u.files) for u in held.unlike] == [("idna", ("idna/core.py",))]


def test_pypi_wheels_with_data_scripts_and_headers_are_held_where_uv_puts_them(tmp_path: Path) -> None:
    """awscli's ``.data/scripts`` (``aws``, ``aws_completer``: ``#!python``, rewritten by uv; ``aws.cmd`` and the
    completers: copied) and pybind11_global's ``.data/data`` (``include/``, ``share/cmake``) and ``.data/headers``:
    held to the wheels on files.pythonhosted.org as uv installs them; then ``aws`` edited in uv's cache with its
    RECORD row: named."""
    pins = ("awscli==1.36.0", "pybind11_global==2.13.6")
    cache = tmp_path / "uvc"
    clean = _env(tmp_path, "clean", cache, pins)
    assert (clean / "bin" / "aws").read_bytes().startswith(b"#!" + os.fsencode(clean / "bin" / "python") + b"\n")
    assert list(clean.glob("include/site/python*/pybind11-global/pybind11/pybind11.h"))
    packages = _listing(tmp_path, cache, clean / "bin" / "python", pins)
    with httpx.Client(follow_redirects=True) as http:
        held = held_to_index(packages, clean, remote_rows(http))
        assert held.unlike == () and held.unjudged == (), held
        aws = "awscli-1.36.0.data/scripts/aws"
        (original,) = cache.glob(f"archive-v*/*/{aws}")
        poison_uv_cache(cache, aws, original.read_text() + "import os  # planted\n")
        poisoned = _env(tmp_path, "poisoned", cache, pins)
        held = held_to_index(packages, poisoned, remote_rows(http))
    assert [(u.name, u.files) for u in held.unlike] == [("awscli", (aws,))], held


def test_the_find_links_stand_in_answers_ranges_as_the_real_file_host_does(tmp_path: Path) -> None:
    """``serve_find_links(ranges=True)`` stands in for files.pythonhosted.org in the benches and the stack tests:
    held here to the real host's answer to the same two Range requests (status, Content-Range, body length)."""
    from tests.fixtures.findlinks_server import serve_find_links

    cache = tmp_path / "uvc"
    env = _env(tmp_path, "env", cache)
    (idna,) = [w for p in _listing(tmp_path, cache, env / "bin" / "python") if p["name"] == "idna" for w in p["wheels"]]
    with httpx.Client(follow_redirects=True) as http:
        real = [http.get(idna["url"], headers={"Range": r}) for r in ("bytes=0-99", f"bytes={idna['size'] - 22}-")]
        (tmp_path / "links").mkdir()
        (tmp_path / "links" / "idna-3.10-py3-none-any.whl").write_bytes(http.get(idna["url"]).content)
        with serve_find_links(tmp_path / "links", ranges=True) as links:
            ours = [http.get(links.url + "idna-3.10-py3-none-any.whl", headers={"Range": r})
                    for r in ("bytes=0-99", f"bytes={idna['size'] - 22}-")]
    for a, b in zip(real, ours):
        assert (a.status_code, a.headers["Content-Range"], a.content) == \
            (b.status_code, b.headers["Content-Range"], b.content)


def test_the_real_setuptools_pth_names_setuptools_and_an_edit_of_what_it_starts_is_held(tmp_path: Path) -> None:
    """Real setuptools from PyPI ships ``distutils-precedence.pth`` (``__import__('_distutils_hack')``, run at every
    start of the env's Python): :func:`~october.installer.lock.asked.started_by_pth` names setuptools, which the
    install holds to its wheel right after the uv install (``steps/indexcheck.hold_started``), read by Range
    requests through the listing ``uv pip compile`` writes; ``_distutils_hack`` edited in uv's cache with its
    RECORD row: unlike."""
    from october.installer.lock.asked import started_by_pth
    from october.installer.pyenv.dists import installed

    pins = ("setuptools==80.9.0", "idna==3.10")
    cache = tmp_path / "uvc"
    clean = _env(tmp_path, "clean", cache, pins)
    pth = next(clean.glob("lib/python*/site-packages/distutils-precedence.pth"))
    assert "_distutils_hack" in pth.read_text()
    assert [d.name for d in started_by_pth(installed(clean))] == ["setuptools"]
    packages = [p for p in _listing(tmp_path, cache, clean / "bin" / "python", pins) if p["name"] == "setuptools"]
    with httpx.Client(follow_redirects=True) as http:
        held = held_to_index(packages, clean, remote_rows(http), {"setuptools": installed(clean)["setuptools"]})
        assert held.unlike == () and held.unjudged == (), held
        poison_uv_cache(cache, "_distutils_hack/__init__.py", "planted = True\n")
        poisoned = _env(tmp_path, "poisoned", cache, pins)
        held = held_to_index(packages, poisoned, remote_rows(http), {"setuptools": installed(poisoned)["setuptools"]})
    assert [u.name for u in held.unlike] == ["setuptools"], held
