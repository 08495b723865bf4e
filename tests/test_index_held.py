"""What uv's cache serves is held to the index's own wheel (:mod:`october.installer.steps.indexcheck`): an unpacked
wheel edited in ``CACHE/uv`` together with its RECORD row passed the install's RECORD check and ``current verify``
of a new stack, and was stored, signed, in the built-stack cache for every later stack (session 34's review).

Real parts: real uv installing real wheels into real venvs, its real cache; the index's files served by loopback
HTTP (:mod:`tests.fixtures.wheel_server`, which honours Range as files.pythonhosted.org does, or ignores it) and the
find-links server without Range; the offline fixture world's stacks.  The real index's Range answers are the real
tier's (``test_index_held_real.py``).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from october.installer.core.hashing import record_digest
from october.installer.lock.asked import asked_by_url, unasked
from october.installer.lock.held import held_to_index, remote_rows
from october.installer.lock.installed import wheel_rows
from october.installer.pyenv.uvcmd import uv_exe
from october.installer.pyenv.dists import Dist
from october.installer.wheels.rangefile import BLOCK, RangeFile
from tests.fixtures.wheel_server import WheelServer
from tests.fixtures.wheels import build_wheel


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _big_wheel(out: Path) -> Path:
    """A wheel larger than a few of the reader's blocks, its RECORD at the end (as every builder writes it)."""
    noise = {f"big/part{i}.bin": os.urandom(BLOCK // 2) for i in range(8)}
    return build_wheel(out, "big", "1.0", {"big/__init__.py": "X = 1\n", **noise})


def test_a_wheel_s_record_is_read_by_range_requests_as_from_the_file(tmp_path: Path) -> None:
    wheel = _big_wheel(tmp_path / "w")
    data = wheel.read_bytes()
    with WheelServer() as srv, httpx.Client() as http:
        srv.add("/big.whl", data)
        remote = RangeFile(http, srv.url("/big.whl"), len(data), _sha(data))
        assert wheel_rows(remote) == wheel_rows(wheel) and wheel_rows(wheel)
        # the zip directory and the RECORD member, not the file: the server's bytes tell
        assert remote.requests <= 3 and srv.bytes_sent < len(data)
        assert all(r.status == 206 for r in srv.requests)
        # a size not listed: learnt from the first answer
        assert wheel_rows(RangeFile(http, srv.url("/big.whl"))) == wheel_rows(wheel)


@pytest.mark.parametrize("fault, said", [
    ("ignore_range, other sha256", "sha256 is not the locked one"),
    ("status 404", "HTTP 404"),
    ("status 401", "HTTP 401"),
    ("other size", "the lock lists"),
    ("content-coding", "Content-Encoding gzip"),
])
def test_a_host_that_does_not_give_the_bytes_leaves_the_wheel_unread_and_says_why(tmp_path: Path, fault: str,
                                                                                    said: str) -> None:
    wheel = _big_wheel(tmp_path / "w")
    data = wheel.read_bytes()
    mode = {"ignore_range, other sha256": {"ignore_range": True}, "status 404": {"status": 404},
            "status 401": {"status": 401}, "other size": {}, "content-coding": {"encoding": "gzip"}}[fault]
    size = len(data) + 1 if fault == "other size" else len(data)
    sha = _sha(b"another file") if "sha256" in fault else _sha(data)
    with WheelServer() as srv, httpx.Client() as http:
        srv.add("/big.whl", data, **mode)
        rows, why = remote_rows(http)(srv.url("/big.whl"), size, sha)
    assert rows is None and said in why, why


def test_a_host_that_ignores_range_is_read_whole_when_the_file_is_the_locked_one(tmp_path: Path) -> None:
    data = _big_wheel(tmp_path / "w").read_bytes()
    with WheelServer() as srv, httpx.Client() as http:
        srv.add("/big.whl", data, ignore_range=True)
        text, why = remote_rows(http)(srv.url("/big.whl"), len(data), _sha(data))
    assert text and "big/__init__.py" in text.rows, why


def test_credentials_in_the_url_are_not_in_what_is_said(tmp_path: Path) -> None:
    with WheelServer() as srv, httpx.Client() as http:
        srv.add("/big.whl", b"x", status=404)
        url = srv.url("/big.whl").replace("http://", "http://user:s3cretpw@")
        _rows, why = remote_rows(http)(url, 1, _sha(b"x"))
    assert "s3cretpw" not in why and "HTTP 404" in why


def test_a_host_that_trickles_is_read_no_longer_than_the_hold_s_budget(tmp_path: Path) -> None:
    """Every read of a trickling host meets httpx's per-read timeout, so only the hold's own budget ends it: the
    wheel being read stops there, and no wheel is asked after it (each unread: not judged, the stack not stored)."""
    import time

    data = _big_wheel(tmp_path / "w").read_bytes()
    with WheelServer() as srv, httpx.Client(timeout=5) as http:
        srv.add("/slow.whl", data, trickle=0.05)
        srv.add("/other.whl", data)
        read = remote_rows(http, budget_s=1.0)
        start = time.monotonic()
        text, why = read(srv.url("/slow.whl"), len(data), _sha(data))
        spent = time.monotonic() - start
        assert text is None and "not read in the time the hold gives index wheels" in why, why
        assert 1.0 <= spent < 3.0, spent
        text, why = read(srv.url("/other.whl"), len(data), _sha(data))
        assert text is None and why.startswith("not asked: the 1 s the hold gives index wheels had passed"), why
        assert [r.path for r in srv.requests].count("/other.whl") == 0


def _env(tmp: Path, name: str, wheel: Path | str, cache: Path, links: Path | None = None) -> Path:
    """A venv with ``wheel`` (a file, or a requirement such as ``tinydep @ URL``, or ``tinydep==1.0`` from the
    find-links folder ``links``, as from an index: no ``direct_url.json`` of uv's) installed by real uv."""
    env = tmp / name
    run = dict(os.environ, UV_CACHE_DIR=str(cache), UV_LINK_MODE="copy")
    run.pop("VIRTUAL_ENV", None)
    subprocess.run([uv_exe(), "venv", "-q", str(env)], check=True, env=run, capture_output=True)
    found = ["--no-index", "--find-links", str(links)] if links is not None else []
    subprocess.run([uv_exe(), "pip", "install", "-q", "--no-deps", "--python", str(env / "bin" / "python"), *found,
                    str(wheel)], check=True, env=run, capture_output=True)
    return env


def poison_uv_cache(cache: Path, member: str, text: str) -> Path:
    """Edit the unpacked copy of ``member`` in uv's cache and its RECORD row to match (hash and size), as one who
    writes the cache can; -> the edited file."""
    (target,) = [p for p in cache.glob(f"archive-v*/*/{member}")]
    target.write_text(text)
    (record,) = target.parents[len(Path(member).parts) - 1].glob("*.dist-info/RECORD")
    rows = [[p, _digest(text), str(len(text.encode()))] if p == member else [p, h, s]
            for p, h, s in csv.reader(io.StringIO(record.read_text()))]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    record.write_text(out.getvalue())
    return target


def test_a_distribution_uv_s_cache_served_edited_is_named_whichever_way_its_wheel_is_read(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
    data = wheel.read_bytes()
    cache = tmp_path / "uvc"
    clean = _env(tmp_path, "clean", wheel, cache)
    poison_uv_cache(cache, "tinydep/__init__.py", "VALUE = 666\n")
    poisoned = _env(tmp_path, "poisoned", wheel, cache)
    assert (next(poisoned.glob("lib/python*/site-packages")) / "tinydep" / "__init__.py").read_text() == "VALUE = 666\n"
    with WheelServer() as srv, httpx.Client() as http:
        srv.add("/" + wheel.name, data)
        for entry in ({"path": str(wheel)}, {"url": srv.url("/" + wheel.name), "size": len(data)}):
            package = {"name": "tinydep", "version": "1.0", "wheels": [{**entry, "hashes": {"sha256": _sha(data)}}]}
            assert held_to_index([package], clean, remote_rows(http)).unlike == ()
            held = held_to_index([package], poisoned, remote_rows(http))
            assert [(u.name, u.files) for u in held.unlike] == [("tinydep", ("tinydep/__init__.py",))], entry
            assert held.unjudged == ()


def _digest(data: str | bytes) -> str:
    """``sha256=...`` as a RECORD writes it."""
    return "sha256=" + record_digest(hashlib.sha256(data.encode() if isinstance(data, str) else data).digest())


def _add_row(cache: Path, row: str) -> Path:
    """A row appended to the RECORD of the unpacked tinydep in uv's cache -> the folder the wheel is unpacked in."""
    (record,) = cache.glob("archive-v*/*/tinydep-1.0.dist-info/RECORD")
    record.write_text(record.read_text() + row + "\n")
    return record.parent.parent


def _add_to_cache(cache: Path, member: str, text: str) -> None:
    """A file added to the unpacked tinydep in uv's cache, with a RECORD row of its own (the review's plant)."""
    root = _add_row(cache, f"{member},{_digest(text)},{len(text.encode())}")
    (root / member).parent.mkdir(parents=True, exist_ok=True)
    (root / member).write_text(text)


def _held_after(tmp: Path, files: dict, plant, wheels: str = "listed") -> tuple:
    """tinydep installed clean, ``plant(cache)``, installed again from that cache -> (held, poisoned env)."""
    wheel = build_wheel(tmp / "w", "tinydep", "1.0", files)
    cache = tmp / "uvc"
    _env(tmp, "clean", wheel, cache)
    plant(cache)
    env = _env(tmp, "poisoned", wheel, cache)
    listed = [{"path": str(wheel), "hashes": {"sha256": _sha(wheel.read_bytes())}}] if wheels == "listed" else []
    package = {"name": "tinydep", "version": "1.0", "wheels": listed}
    with httpx.Client() as http:
        return held_to_index([package], env, remote_rows(http)), env


@pytest.mark.parametrize("plant, named", [
    ("a .pth added with its row", "zz_evil.pth (not in the wheel)"),
    ("a module added with its row", "tinydep/extra.py (not in the wheel)"),
    ("a .data/purelib file edited", "tinydep-1.0.data/purelib/tinydep/__init__.py"),
    ("the WHEEL tags edited with the file", "tinydep-1.0.dist-info/WHEEL"),
    ("a .data/scripts body edited", "tinydep-1.0.data/scripts/tool"),
    ("a .data/scripts first line pointed at another python", "tinydep-1.0.data/scripts/tool"),
    ("a .data/scripts file added with its row", "../../../bin/zz_evil (not in the wheel)"),
    ("a .data/headers file edited", "tinydep-1.0.data/headers/tiny.h"),
    ("a .pth added through .data/data with its row", "zz_evil.pth (not in the wheel)"),
    ("an entry-point script replaced through .data/data", "../../../bin/tinytool (not in the wheel)"),
    ("bytecode with no source, named through __pycache__/..", "__pycache__/../sitecustomize.pyc (not a plain path)"),
    ("a second row for a wheel's file, through ./", "tinydep/./__init__.py (not a plain path)"),
    ("a second row for a wheel's file, through its .data folder", "tinydep/__init__.py"),
    ("bytecode added with its row", "tinydep/__pycache__/__init__.cpython-3.pyc (not in the wheel)"),
])
def test_what_the_review_planted_in_uv_s_cache_is_named(tmp_path: Path, plant: str, named: str) -> None:
    """Session 35's review: rows the installed RECORD has beyond the wheel's were not looked at (a ``.pth`` ran at
    every start of every later stack), ``.data/purelib`` files were skipped, and a WHEEL whose tags were edited
    made its distribution "not judged" (the edit chose which wheel it was held to)."""
    files = {"tinydep/__init__.py": "VALUE = 1\ndef main():\n    pass\n",
             "tinydep-1.0.data/scripts/tool": "#!python\nprint(1)\n", "tinydep-1.0.data/headers/tiny.h": "int tiny;\n",
             "tinydep-1.0.dist-info/entry_points.txt": "[console_scripts]\ntinytool = tinydep:main\n"}
    if "purelib" in plant:
        files = {"tinydep-1.0.data/purelib/tinydep/__init__.py": "VALUE = 1\n"}

    def do(cache: Path) -> None:
        lib = next((tmp_path / "clean").glob("lib/python*")).name
        if "scripts body" in plant:
            poison_uv_cache(cache, "tinydep-1.0.data/scripts/tool", "#!python\nimport os; print(1)\n")
        elif "first line" in plant:
            poison_uv_cache(cache, "tinydep-1.0.data/scripts/tool", f"#!{tmp_path}/evil/python\nprint(1)\n")
        elif "scripts file added" in plant:
            _add_to_cache(cache, "tinydep-1.0.data/scripts/zz_evil", "#!python\nimport os\n")
        elif "headers" in plant:
            poison_uv_cache(cache, "tinydep-1.0.data/headers/tiny.h", "int evil;\n")
        elif "entry-point" in plant:
            _add_to_cache(cache, "tinydep-1.0.data/data/bin/tinytool", "#!/bin/sh\necho planted\n")
        elif "bytecode with no source" in plant:
            root = _add_row(cache, "__pycache__/../sitecustomize.pyc,,")
            (root / "sitecustomize.pyc").write_bytes(b"not really bytecode")
        elif "through its .data folder" in plant:
            _add_to_cache(cache, "tinydep-1.0.data/purelib/tinydep/__init__.py", "VALUE = 666\n")
        elif "bytecode added" in plant:
            _add_to_cache(cache, "tinydep/__pycache__/__init__.cpython-3.pyc", "not really bytecode")
        elif "second row" in plant:
            _add_row(cache, f"tinydep/./__init__.py,{_digest('VALUE = 1')},9")
        elif ".data/data" in plant:
            _add_to_cache(cache, f"tinydep-1.0.data/data/lib/{lib}/site-packages/zz_evil.pth", "import os\n")
        elif "pth" in plant:
            _add_to_cache(cache, "zz_evil.pth", "import os\n")
        elif "module" in plant:
            _add_to_cache(cache, "tinydep/extra.py", "EVIL = 1\n")
        elif "purelib" in plant:
            poison_uv_cache(cache, "tinydep-1.0.data/purelib/tinydep/__init__.py", "VALUE = 666\n")
        else:
            poison_uv_cache(cache, "tinydep/__init__.py", "VALUE = 666\n")
            poison_uv_cache(cache, "tinydep-1.0.dist-info/WHEEL",
                            "Wheel-Version: 1.0\nGenerator: x\nRoot-Is-Purelib: true\nTag: py2-none-any\n")

    held, _env_dir = _held_after(tmp_path, files, do)
    assert held.unjudged == () and len(held.unlike) == 1, held
    assert any(named in f for f in held.unlike[0].files), held.unlike[0].files


@pytest.mark.parametrize("where", ["short path", "path too long for a #! line", "path with a space",
                                   "long path with a quote"])
def test_a_healthy_wheel_with_data_scripts_and_entry_points_is_held(tmp_path: Path, where: str) -> None:
    """What uv writes beyond the wheel's rows (its own dist-info files, entry-point scripts) and where it puts the
    ``.data`` files (scripts in ``bin/`` with their ``#!python`` line rewritten: ``#!PYTHON``, or a ``/bin/sh``
    launcher for a path over 127 bytes or with a space, the path quoted, or with the script's coding declaration
    as octal escapes; data at the env's root, into site-packages too; headers) is not a difference (the review
    of session 36: the coding launcher, a quote in the path and a first line ended by a lone CR were named)."""
    import sys

    tmp = tmp_path / {"short path": "t", "path too long for a #! line": "x" * 130, "path with a space": "a b",
                      "long path with a quote": "it's" + "x" * 130}[where]
    lib = f"lib/python{sys.version_info.major}.{sys.version_info.minor}"
    files = {"tinydep/__init__.py": "def main():\n    pass\n", "tinydep-1.0.data/scripts/tool": "#!python\nprint(1)\n",
             "tinydep-1.0.data/scripts/tool2": "#!python -u\r\nprint(2)\r\n",
             "tinydep-1.0.data/scripts/plain.sh": "#!/bin/sh\necho 1\n",
             "tinydep-1.0.data/scripts/latin": "#!python\n# -*- coding: latin-1 -*-\nprint(1)\n",
             "tinydep-1.0.data/scripts/vim": "#!python\n# vim: set fileencoding=utf-8 :\nprint(1)\n",
             "tinydep-1.0.data/scripts/third": "#!python\n\n# coding: utf-8\nprint(1)\n",
             "tinydep-1.0.data/scripts/cr": "#!python\rprint(1)\r", "tinydep-1.0.data/scripts/noeol": "#!python",
             "tinydep-1.0.data/purelib/tinydep_extra.py": "X = 1\n",
             "tinydep-1.0.data/data/share/tinydep/x.txt": "x\n",
             f"tinydep-1.0.data/data/{lib}/site-packages/tinydep-paths.pth": "\n",
             "tinydep-1.0.data/headers/tiny.h": "int tiny;\n",
             "tinydep-1.0.dist-info/entry_points.txt": "[console_scripts]\ntinytool = tinydep:main\n"}
    held, env = _held_after(tmp, files, lambda cache: None)
    assert (env / "bin" / "tinytool").is_file() and (env / "bin" / "tool").is_file()
    first = (env / "bin" / "tool").read_bytes().split(b"\n")[0]
    assert first == (b"#!" + os.fsencode(env / "bin" / "python") if where == "short path" else b"#!/bin/sh"), first
    assert ((env / "bin" / "latin").read_bytes().split(b"\n")[1] == b"# coding: latin-1") == (where != "short path")
    assert next(env.glob("lib/python*/site-packages/tinydep-paths.pth")).is_file()
    assert held == type(held)(unlike=(), unjudged=()), held


def test_a_script_behind_a_shell_launcher_of_another_shape_is_not_judged(tmp_path: Path) -> None:
    """A ``/bin/sh`` preamble of a shape uv 0.13 does not write (a later uv's, say) before the wheel's bytes: not
    judged (the stack not stored) rather than named (the install failed); a ``#!`` line with more after it: named."""
    files = {"tinydep/__init__.py": "X = 1\n", "tinydep-1.0.data/scripts/tool": "#!python\nprint(1)\n"}
    other = b"#!/bin/sh\n'''exec' \"$(dirname -- \"$0\")\"/python \"$0\" \"$@\"\n' '''\n"
    for head, verdict in ((other, "unjudged"), (None, "unlike")):
        tmp = tmp_path / verdict
        wheel = build_wheel(tmp / "w", "tinydep", "1.0", files)
        env = _env(tmp, "env", wheel, tmp / "uvc")
        script = env / "bin" / "tool"
        data = head + b"print(1)\n" if head else script.read_bytes().replace(b"\n", b"\nimport os\n", 1)
        script.write_bytes(data)
        (record,) = env.glob("lib/python*/site-packages/tinydep-1.0.dist-info/RECORD")
        record.write_text("".join(f"../../../bin/tool,{_digest(data)},{len(data)}\n" if line.startswith("../../../bin/tool,")
                                  else line for line in record.read_text().splitlines(keepends=True)))
        package = {"name": "tinydep", "version": "1.0",
                   "wheels": [{"path": str(wheel), "hashes": {"sha256": _sha(wheel.read_bytes())}}]}
        with httpx.Client() as http:
            held = held_to_index([package], env, remote_rows(http))
        if verdict == "unjudged":
            assert held.unlike == () and len(held.unjudged) == 1, held
            assert "a launcher the hold does not know" in held.unjudged[0], held
        else:
            assert held.unjudged == () and [u.files for u in held.unlike] == [("tinydep-1.0.data/scripts/tool",)]


def test_a_wheel_zipfile_cannot_read_is_not_judged_and_the_hold_goes_on(tmp_path: Path) -> None:
    """The review: a script member stored with a method zipfile does not read (deflate64) raised through the
    hold and ended the install with a traceback; now that wheel is unread (not judged), the others are held."""
    import zipfile

    files = {"tinydep/__init__.py": "X = 1\n", "tinydep-1.0.data/scripts/s": "#!python\nprint(1)\n"}
    clean = build_wheel(tmp_path / "w", "tinydep", "1.0", files)
    env = _env(tmp_path, "env", clean, tmp_path / "uvc")
    data = bytearray(clean.read_bytes())
    name = b"tinydep-1.0.data/scripts/s"
    for sig, method_at, name_len_at, name_at in ((b"PK\x03\x04", 8, 26, 30), (b"PK\x01\x02", 10, 28, 46)):
        pos = data.find(sig)
        while pos >= 0:
            n = int.from_bytes(data[pos + name_len_at:pos + name_len_at + 2], "little")
            if data[pos + name_at:pos + name_at + n] == name:
                data[pos + method_at:pos + method_at + 2] = (9).to_bytes(2, "little")     # deflate64
            pos = data.find(sig, pos + 1)
    odd = tmp_path / "odd" / clean.name
    odd.parent.mkdir()
    odd.write_bytes(bytes(data))
    with pytest.raises(NotImplementedError), zipfile.ZipFile(odd) as zf:
        zf.read(name.decode())
    package = {"name": "tinydep", "version": "1.0", "wheels": [{"path": str(odd), "hashes": {"sha256": _sha(bytes(data))}}]}
    with httpx.Client() as http:
        held = held_to_index([package], env, remote_rows(http))
    assert held.unlike == () and len(held.unjudged) == 1 and "NotImplementedError" in held.unjudged[0], held


def test_a_distribution_with_no_wheel_listed_is_not_judged(tmp_path: Path) -> None:
    held, _env_dir = _held_after(tmp_path, {"tinydep/__init__.py": "VALUE = 1\n"}, lambda cache: None,
                                 wheels="none")
    assert held.unlike == () and len(held.unjudged) == 1 and "sdist" in held.unjudged[0]


def test_a_distribution_installed_from_a_url_of_its_own_is_not_judged(tmp_path: Path) -> None:
    """A dependency named by URL (``tinydep @ http://...whl``) is not in the index listing; its ``direct_url.json``
    names a file, but that file is uv's cache's to plant too (the next test), so the distribution is not held to
    it: not judged, clean or poisoned, and the stack is not stored.  That only while a requirement asks for it by
    URL: asked for by none, it is named unasked (the install step fails)."""
    from october.installer.pyenv.dists import installed
    from tests.fixtures.findlinks_server import serve_find_links

    wheel = build_wheel(tmp_path / "w", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
    cache = tmp_path / "uvc"
    with serve_find_links(wheel.parent, ranges=True) as links, httpx.Client() as http:
        url = links.url + wheel.name
        for name in ("clean", "poisoned"):
            if name == "poisoned":
                poison_uv_cache(cache, "tinydep/__init__.py", "VALUE = 666\n")
            env = _env(tmp_path, name, f"tinydep @ {url}", cache)
            held = held_to_index([], env, remote_rows(http))
            assert held.unlike == () and len(held.unjudged) == 1, held
            assert held.unjudged[0].startswith(f"tinydep 1.0: installed from {url} (its direct_url.json)")
            assert unasked(installed(env), asked_by_url(installed(env), ["torch==2.4", f"tinydep @ {url}"])) == ()
            assert unasked(installed(env), asked_by_url(installed(env), ["tinydep==1.0"])) == (
                f"tinydep 1.0: from {url} (its direct_url.json)",)


@pytest.mark.parametrize("planted", ["dir_info", "archive_info of a wheel in uv's cache"])
def test_a_direct_url_planted_in_uv_s_cache_takes_no_distribution_out_of_the_hold(tmp_path: Path,
                                                                                  planted: str) -> None:
    """The review of session 36: tinydep edited in uv's cache with a ``direct_url.json`` added there with its row
    left the lock's index listing (a direct-URL distribution) and was held to nothing, or to the planter's own
    wheel; now whatever is not a listed wheel's nor a fork's is not judged (the stack is not stored), and one with
    a ``direct_url.json`` that no requirement asks for by URL is named (the install step fails)."""
    import json

    from october.installer.lock.pylock import Installed, split_installed
    from october.installer.pyenv.dists import installed

    evil = build_wheel(tmp_path / "evil", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 666\n"})

    def plant(cache: Path) -> None:
        poison_uv_cache(cache, "tinydep/__init__.py", "VALUE = 666\n")
        info = {"url": "file:///nonexistent", "dir_info": {}} if planted == "dir_info" else \
            {"url": evil.as_uri(), "archive_info": {"hashes": {"sha256": _sha(evil.read_bytes())}}}
        _add_to_cache(cache, "tinydep-1.0.dist-info/direct_url.json", json.dumps(info))

    wheel = build_wheel(tmp_path / "w", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
    cache = tmp_path / "uvc"
    assert installed(_env(tmp_path, "clean", "tinydep==1.0", cache, wheel.parent))["tinydep"].direct_url is None
    plant(cache)
    env = _env(tmp_path, "poisoned", "tinydep==1.0", cache, wheel.parent)
    dists = installed(env)
    _, index, _ = split_installed([Installed(d.name, d.version, d.direct_url) for d in dists.values()], {})
    assert index == []                     # the lock's listing would not name it: what the plant was for
    with httpx.Client() as http:
        held = held_to_index([], env, remote_rows(http), dists)
    assert held.unlike == () and [u.split(":")[0] for u in held.unjudged] == ["tinydep 1.0"], held
    (named,) = unasked(dists, asked_by_url(dists, ["tinydep==1.0"]))
    assert named.startswith("tinydep 1.0: from ") and (
        "file:///nonexistent" if planted == "dir_info" else evil.as_uri()) in named, named


def test_what_a_fork_s_install_built_is_not_held_and_anything_else_unlisted_is_not_judged(tmp_path: Path) -> None:
    """fork_dists: a fork's own install is the distribution of its name, editable from its checkout's root (where
    none has the name, the only one there); a ``direct_url.json`` naming the checkout makes nothing else a fork's
    (the review of session 37: tinydep planted in uv's cache with ``dir_info`` of ``STACK/src/alpha`` was taken
    for the fork's, neither held nor named, and stored)."""
    import json

    from october.installer.lock.asked import fork_dists
    from october.installer.pyenv.dists import installed

    fork = tmp_path / "src" / "alpha"
    fork.mkdir(parents=True)
    (fork / "pyproject.toml").write_text('[project]\nname = "alpha"\nversion = "1.0"\n[build-system]\n'
                                         'requires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    (fork / "alpha.py").write_text("A = 1\n")
    wheel = build_wheel(tmp_path / "w", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
    env = _env(tmp_path, "env", wheel, tmp_path / "uvc")
    run = dict(os.environ, UV_CACHE_DIR=str(tmp_path / "uvc"))
    subprocess.run([uv_exe(), "pip", "install", "-q", "--no-deps", "--python", str(env / "bin" / "python"),
                    "-e", str(fork)], check=True, env=run, capture_output=True)
    dists = installed(env)
    assert fork_dists(dists, [(fork, "alpha")]) == {"alpha"} == fork_dists(dists, [(fork, "Alpha_")])
    assert fork_dists(dists, [(fork, "not-its-name")]) == {"alpha"}            # the only one at the root
    assert fork_dists(dists, [(tmp_path / "src" / "beta", "alpha")]) == set()
    own = lambda d: d.name in fork_dists(dists, [(fork, "alpha")])      # noqa: E731
    package = {"name": "tinydep", "version": "1.0", "wheels": [{"path": str(wheel),
                                                                "hashes": {"sha256": _sha(wheel.read_bytes())}}]}
    with httpx.Client() as http:
        assert held_to_index([package], env, remote_rows(http), own=own) \
            == type(held_to_index([], env, remote_rows(http)))(unlike=(), unjudged=())
        held = held_to_index([package], env, remote_rows(http))        # alpha: not a fork's, not listed
    assert held.unlike == () and [u.split(":")[0] for u in held.unjudged] == ["alpha 1.0"], held
    asks = [f"tinydep @ {wheel.as_uri()}"]                 # installed by its path: a direct_url.json of uv's
    assert unasked(dists, asked_by_url(dists, asks, own), own) == ()
    assert [u.split(":")[0] for u in unasked(dists, asked_by_url(dists, asks))] == ["alpha 1.0"]
    for url in (fork.as_uri(), (fork / "sub").as_uri()):           # planted: the root, or a folder inside it
        (dists["tinydep"].info / "direct_url.json").write_text(json.dumps({"url": url, "dir_info": {"editable": True}}))
        planted = installed(env)
        assert fork_dists(planted, [(fork, "alpha")]) == {"alpha"}
        assert fork_dists(planted, [(fork, "not-its-name")]) == (set() if url == fork.as_uri() else {"alpha"})
        is_alpha = lambda d: d.name == "alpha"     # noqa: E731
        assert [u.split(":")[0] for u in unasked(planted, asked_by_url(planted, [], is_alpha), is_alpha)] == ["tinydep 1.0"]


def _dist(tmp: Path, name: str, requires: tuple[str, ...] = (), url: str | None = None) -> Dist:
    info = tmp / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    return Dist(name, "1.0", info, {"url": url, "archive_info": {}} if url else None, requires)


def test_what_asks_for_a_distribution_by_url_is_followed_from_the_recipe_and_the_forks_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """asked_by_url: the recipe's lines (``name @ url``; a path or a URL with no name, for the distribution its
    file names, or the one that gives it), the forks' ``[tool.uv.sources]`` (name, URL) and a fork's
    ``Requires-Dist``; never another distribution's ``Requires-Dist`` (uv's cache serves its METADATA: the reviews
    of session 37 planted one in a distribution built from its sdist, and in one asked for by URL) nor a
    planter's."""
    from october.installer.lock.asked import asked_files, given_path, named_url, url_key

    u = "https://example.invalid/x.whl"
    helper = tmp_path / "h" / "helper-1.0-py3-none-any.whl"
    vcs = "https://github.com/a/vcsdep"
    dists = {d.name: d for d in [
        _dist(tmp_path, "fork", ("viaurl @ " + u, "plain>=1", "not a requirement ~~", f'semi @ {u}; python_version >= "3"'),
              url="file:///src/fork"),
        _dist(tmp_path, "viaurl", ("deeper @ " + u,), url=u),
        _dist(tmp_path, "deeper", (), url=u),
        _dist(tmp_path, "semi", (), url=u),
        _dist(tmp_path, "indexdist", ("Fromindex_URL @ " + u,)),
        _dist(tmp_path, "fromindex-url", (), url=u),
        _dist(tmp_path, "planted", ("alsoplanted @ " + u,), url="file:///nonexistent"),
        _dist(tmp_path, "alsoplanted", (), url=u),
        _dist(tmp_path, "recipe-url", (), url=u),
        _dist(tmp_path, "helper", (), url=helper.as_uri()),
        _dist(tmp_path, "liar", (), url=helper.as_uri()),                 # another's file: not its own
        _dist(tmp_path, "vcsdep", (), url=vcs),
        _dist(tmp_path, "uvsourced", (), url="file:///elsewhere/uvsourced"),
        _dist(tmp_path, "uvsourced-liar", (), url="file:///elsewhere/uvsourced")]}
    fork = lambda d: d.name == "fork"       # noqa: E731
    recipe = ["torch==2.4", "recipe-url @ " + u, str(helper), f"git+{vcs}@v1.0#egg=x"]
    sources = [("UvSourced", "/elsewhere/uvsourced")]
    asked = asked_by_url(dists, recipe, fork, sources)
    assert asked.names == {"viaurl", "semi", "recipe-url"}, asked
    assert asked.urls == {("helper", url_key(helper.as_uri())), (None, vcs),
                          ("uvsourced", "file:///elsewhere/uvsourced")}, asked
    assert asked_by_url(dists, [], lambda d: False).names == set()
    named = unasked(dists, asked, fork)
    assert sorted(h.split(":")[0] for h in named) == [
        "alsoplanted 1.0", "deeper 1.0", "fromindex-url 1.0", "liar 1.0", "planted 1.0", "uvsourced-liar 1.0"], named
    twice = {**dists, "vcs-twin": _dist(tmp_path, "vcs-twin", (), url=vcs)}     # a URL with no name given twice
    named = unasked(twice, asked_by_url(twice, recipe, fork, sources), fork)
    assert {"vcsdep 1.0", "vcs-twin 1.0"} <= {h.split(":")[0] for h in named}
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "My.Proj"\n')
    assert named_url(str(project))[0] == named_url(project.as_uri())[0] == "my-proj"
    assert named_url(f"https://h.example{project}")[0] is None                # no local file read for a remote URL
    assert named_url("https://h.example/d/x-1.0.tar.gz")[0] == "x" and named_url(str(helper))[0] == "helper"
    # markers, in the env's Python's environment (the third review: a false marker still asked)
    linux = {"sys_platform": "linux", "python_version": "3.11", "python_full_version": "3.11.7"}
    marked = {"fork": _dist(tmp_path / "m", "fork", (f"win @ {u} ; sys_platform == 'win32'",
                                                      f"lin @ {u}; sys_platform == 'linux'",
                                                      f"wsemi @ {u}; sys_platform == 'win32'",
                                                      f"old @ {u} ; python_version < '3'",
                                                      f"odd @ {u} ; platform_tag == 'x'"), url="file:///src/fork")}
    assert asked_by_url(marked, [], fork, environment=linux).names == {"lin", "odd"}       # odd: not evaluable
    assert asked_by_url(marked, [], fork).names == {"win", "lin", "wsemi", "old", "odd"}   # not evaluated
    assert asked_by_url(marked, [f"rwin @ {u} ; sys_platform == 'win32'"], fork, environment=linux).names == {
        "lin", "odd"}
    unnamed = [f"{helper} ; sys_platform == 'win32'", f"{helper}; sys_platform == 'linux'"]      # a path's marker
    assert asked_by_url(dists, unnamed[:1], fork, environment=linux).urls == set()
    assert asked_by_url(dists, unnamed[1:], fork, environment=linux).urls == {("helper", url_key(helper.as_uri()))}
    # a relative path, as uv reads it: against the working directory (session 37 left it refused)
    helper.parent.mkdir()
    monkeypatch.chdir(helper.parent)
    assert asked_by_url(dists, [f"./{helper.name}"], fork).urls == {("helper", url_key(helper.as_uri()))}
    assert given_path("../h/./x.whl") == str(tmp_path / "h" / "x.whl") and given_path("plain>=1") == "plain>=1"
    # the local files the lines name, by their bytes (the built-stack key's): paths, file: URLs, relative paths
    helper.write_bytes(b"not really a wheel")
    sha = hashlib.sha256(b"not really a wheel").hexdigest()
    assert asked_files([f"./{helper.name}", f"helper @ {helper.as_uri()}; python_version >= '3'", "plain>=1",
                        f"x @ {u}", str(tmp_path / "missing-1.0-py3-none-any.whl")]) == {str(helper): sha}


@pytest.mark.parametrize("given, written", [
    ("/abs/x.whl", "file:///abs/x.whl"),
    ("file://localhost/abs/x.whl", "file:///abs/x.whl"),
    ("http://user:pw@Host.example/x.whl", "http://host.example/x.whl"),
    ("git+file:///repo@v1#subdirectory=sub", "file:///repo"),
    ("GIT+HTTPS://h.example/o/r.git@feature/x", "https://h.example/o/r.git"),
    ("https://h.example/x.whl#sha256=00", "https://h.example/x.whl"),
    ("file:///a%20b/dir/", "file:///a b/dir"),
])
def test_a_url_a_recipe_gives_and_the_one_uv_writes_have_one_key(given: str, written: str) -> None:
    """The second review of session 37: ``file://localhost/``, credentials, a ``git+file`` revision, a branch with a
    ``/`` and an upper-case scheme were keyed apart from what uv writes into ``direct_url.json``."""
    from october.installer.lock.asked import url_key

    assert url_key(given) == url_key(written)


def test_a_fork_s_uv_sources_are_read_from_its_checkout(tmp_path: Path) -> None:
    """Only the path, URL and git sources (a table or a list of tables; a path against the checkout), each with its
    marker: an index or workspace source installs with no ``direct_url.json`` (the second review of session 37: a
    name alone covered a plant on torch when the fork took torch from an index source)."""
    from october.installer.lock.asked import uv_sources

    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    (a / "pyproject.toml").write_text('[tool.uv.sources]\ntinydep = { path = "x.whl" }\nOther = { git = "https://g/o" }\n'
                                      'torch = { index = "pytorch-cpu" }\nws = { workspace = true }\n'
                                      'multi = [{ url = "https://u/m.whl", marker = "sys_platform == \'linux\'" }, '
                                      '{ index = "x" }]\n')
    (b / "pyproject.toml").write_text("not toml [")
    assert uv_sources([a, b, c]) == [("tinydep", (a / "x.whl").resolve().as_uri(), None),
                                     ("Other", "https://g/o", None),
                                     ("multi", "https://u/m.whl", "sys_platform == 'linux'")]


@pytest.mark.slow
@pytest.mark.parametrize("served", ["find-links folder", "find-links over http", "over http with ranges"])
def test_a_poisoned_uv_cache_reaches_neither_a_new_stack_nor_the_built_stack_cache(tmp_path: Path,
                                                                                     served: str) -> None:
    """The review's plant: the unpacked tinydep in ``CACHE/uv`` edited with its RECORD row, then a stack that
    cannot take the built-stack entry (a new key: here the entry is gone).  Before: over http it was installed,
    passed verify and was stored for every later stack.  Now the install step refuses it with the lock step's
    error for a stale env (nothing removed, nothing stored); the fix's commands make the re-run clean, and the
    entry it stores and the next stack are clean."""
    import re
    import shutil

    from october.installer.core.errors import LockError
    from tests.fixtures.builtcache import entries
    from tests.fixtures.findlinks_server import serve_find_links
    from tests.fixtures.world import make_world
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup, verify

    world = make_world(tmp_path / "world")
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    with serve_find_links(world.wheels, ranges=served == "over http with ranges") as links:
        if served != "find-links folder":
            world.recipe.write_text(world.recipe.read_text().replace('find_links = ["wheels"]',
                                                                     f'find_links = ["{links.url}"]'))
        setup(world, tmp_path / "s1", cache)
        clean = (site(tmp_path / "s1") / "tinydep" / "__init__.py").read_text()
        poison_uv_cache(cache / "uv", "tinydep/__init__.py", clean + "import os  # planted\n")
        shutil.rmtree(cache / "built")
        with pytest.raises(LockError, match="does not hold the files its lock would name") as info:
            setup(world, s2, cache)
        assert "uv's cache edited" in str(info.value) and "tinydep 1.0: 1 file(s) unlike" in str(info.value)
        assert bool(links.ranged) == (served == "over http with ranges")     # read by ranges where answered
        assert not (cache / "built").exists() or entries(cache) == []          # nothing stored
        assert "planted" in (site(s2) / "tinydep" / "__init__.py").read_text()  # nothing removed
        for command in re.findall(r"`([^`]+)`", info.value.fix or ""):
            if "rm -rf" in command or "cache clean" in command:
                subprocess.run(command, shell=True, check=True, capture_output=True)
        setup(world, s2, cache)
        assert (site(s2) / "tinydep" / "__init__.py").read_text() == clean
        (entry,) = entries(cache)
        stored = list(entry.rglob("tinydep/__init__.py"))
        assert stored and all(p.read_text() == clean for p in stored)
        assert verify(s2).returncode == 0
        setup(world, tmp_path / "s3", cache)
        assert (site(tmp_path / "s3") / "tinydep" / "__init__.py").read_text() == clean


@pytest.mark.slow
@pytest.mark.parametrize("points", ["nowhere", "into the new stack's fork checkout"])
def test_a_direct_url_planted_in_uv_s_cache_fails_the_install_and_nothing_is_stored(tmp_path: Path,
                                                                                    points: str) -> None:
    """Session 36's review plant on a whole stack: the unpacked tinydep in ``CACHE/uv`` edited with its RECORD row
    and a ``direct_url.json`` added there with a row of its own (the listing then takes tinydep for a direct-URL
    distribution, out of the hold), the built-stack entry gone.  Before: the stack was built with the edited file
    and set up with exit 0, only not stored.  Now the install step fails (exit 11) naming it and the URL; nothing
    stored, nothing removed; the fix's commands (the env removed: the env step makes it again) make the re-run
    clean, verify passes, and the entry it stores and the next stack are clean.  The same with the planted URL
    naming the new stack's fork checkout, editable (the review of session 37: taken for the fork's own install,
    it was neither held nor named, and stored for every later stack)."""
    import json
    import re
    import shutil

    from october.installer.core.errors import InstallError
    from tests.fixtures.builtcache import entries
    from tests.fixtures.world import make_world
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup, verify

    world = make_world(tmp_path / "world")
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    clean = (site(tmp_path / "s1") / "tinydep" / "__init__.py").read_text()
    poison_uv_cache(cache / "uv", "tinydep/__init__.py", clean + "import os  # planted\n")
    url = "file:///nonexistent" if points == "nowhere" else (s2 / "src" / "alpha").as_uri()
    _add_to_cache(cache / "uv", "tinydep-1.0.dist-info/direct_url.json",
                  json.dumps({"url": url, "dir_info": {"editable": points != "nowhere"}}))
    shutil.rmtree(cache / "built")
    with pytest.raises(InstallError, match="came from a URL that no requirement asks for") as info:
        setup(world, s2, cache)
    assert info.value.exit_code == 11
    assert f"tinydep 1.0: from {url} (its direct_url.json)" in str(info.value), str(info.value)
    assert not (cache / "built").exists() or entries(cache) == []              # nothing stored
    assert "planted" in (site(s2) / "tinydep" / "__init__.py").read_text()      # nothing removed
    commands = re.findall(r"`([^`]+)`", info.value.fix or "")
    assert len(commands) == 2, info.value.fix
    for command in commands:
        subprocess.run(command, shell=True, check=True, capture_output=True)
    setup(world, s2, cache)
    assert (site(s2) / "tinydep" / "__init__.py").read_text() == clean
    assert not (next(site(s2).glob("tinydep-*.dist-info")) / "direct_url.json").exists()
    assert verify(s2).returncode == 0
    (entry,) = entries(cache)                     # the re-run made the env again, held it and stored it
    stored = list(entry.rglob("tinydep/__init__.py"))
    assert stored and all(p.read_text() == clean for p in stored)
    setup(world, tmp_path / "s3", cache)
    assert (site(tmp_path / "s3") / "tinydep" / "__init__.py").read_text() == clean


@pytest.mark.slow
def test_a_stack_whose_wheels_cannot_be_read_is_not_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The find-links server ignores Range, as some private hosts do; with a whole read allowed only up to 100
    bytes (stood in for a wheel over :data:`WHOLE_MAX` on such a host: the only part not real) no wheel can be
    held to its file: the stack is built and works, and is not stored (said in its log)."""
    from october.installer.wheels import rangefile
    from tests.fixtures.builtcache import entries
    from tests.fixtures.findlinks_server import serve_find_links
    from tests.fixtures.world import make_world
    from tests.test_setup_e2e import setup, verify

    monkeypatch.setattr(rangefile, "WHOLE_MAX", 100)
    world = make_world(tmp_path / "world")
    cache = tmp_path / "cache"
    with serve_find_links(world.wheels) as links:
        world.recipe.write_text(world.recipe.read_text().replace('find_links = ["wheels"]', f'find_links = ["{links.url}"]'))
        setup(world, tmp_path / "s1", cache)
    log = (tmp_path / "s1" / "logs" / "install.log").read_text()
    assert not (cache / "built").exists() or entries(cache) == []
    assert "not stored in the built-stack cache:" in log and "could not be held to the wheel they came from" in log
    assert "ignores Range requests" in log
    assert verify(tmp_path / "s1").returncode == 0


@pytest.mark.slow
def test_a_stack_on_a_host_that_wants_credentials_is_held_and_stored_without_saying_them(tmp_path: Path) -> None:
    """The review: the recipe's find-links URL carries ``user:password@``; uv's listing names the files without
    them, and the range reads were refused (401): every such stack was left out of the built-stack cache.  The
    reads now take the source's credentials for its host; no log holds them."""
    from tests.fixtures.builtcache import entries
    from tests.fixtures.findlinks_server import serve_find_links
    from tests.fixtures.world import make_world
    from tests.test_setup_e2e import setup

    world = make_world(tmp_path / "world")
    cache, token = tmp_path / "cache", "qTOKENq"
    with serve_find_links(world.wheels, auth=("user", token), ranges=True) as links:
        base = links.url.replace("http://", f"http://user:{token}@")
        world.recipe.write_text(world.recipe.read_text().replace('find_links = ["wheels"]', f'find_links = ["{base}"]'))
        setup(world, tmp_path / "s1", cache)
        assert links.ranged                 # held by range reads, with the credentials
    log = (tmp_path / "s1" / "logs" / "install.log").read_text()
    assert len(entries(cache)) == 1, [ln for ln in log.splitlines() if "not stored" in ln or "not held" in ln]
    assert not any(token in p.read_text(errors="ignore") for p in (tmp_path / "s1" / "logs").glob("*"))


def _tinydep_removed_by_hand(tmp: Path) -> tuple:
    """A fixture-world stack set up, then tinydep uninstalled from its env by hand -> (world, stack, cache)."""
    from tests.fixtures.world import make_world
    from tests.test_setup_e2e import setup

    world = make_world(tmp / "world")
    cache, stack = tmp / "cache", tmp / "s1"
    setup(world, stack, cache)
    run = dict(os.environ, UV_CACHE_DIR=str(cache / "uv"))
    run.pop("VIRTUAL_ENV", None)
    subprocess.run([uv_exe(), "pip", "uninstall", "-q", "--python", str(stack / "env" / "bin" / "python"), "tinydep"],
                   check=True, env=run, capture_output=True)
    return world, stack, cache


@pytest.mark.slow
def test_an_install_with_no_listing_of_its_own_asks_no_index_and_is_not_stored(tmp_path: Path) -> None:
    """A re-run whose lock step is done (a distribution removed by hand and put back) lists nothing during the
    install: the hold does not list the env itself (that asked the index during the install, which the real
    FlashInfer install's test forbids), and the stack is not stored from that run, said in its log."""
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup

    world, stack, cache = _tinydep_removed_by_hand(tmp_path)
    ran = {r.name: r.status for r in setup(world, stack, cache).records}
    assert ran["install"] == "ran" and ran["lock"] == "cached", ran
    assert (site(stack) / "tinydep" / "__init__.py").is_file()
    log = (stack / "logs" / "install.log").read_text()
    assert "# not held to the sources' wheels: the env's listing is not there" in log
    assert "# not stored in the built-stack cache: the env was not held to the sources' wheels" in log


@pytest.mark.slow
def test_a_direct_url_planted_for_a_re_run_with_no_listing_of_its_own_fails_the_install(tmp_path: Path) -> None:
    """The run above (lock step done: no listing during the install, so no hold) with session 36's plant in uv's
    cache for the distribution it puts back: named all the same (the rule needs no listing), exit 11."""
    import json

    from october.installer.core.errors import InstallError
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup

    world, stack, cache = _tinydep_removed_by_hand(tmp_path)
    poison_uv_cache(cache / "uv", "tinydep/__init__.py", "VALUE = 666  # planted\n")
    _add_to_cache(cache / "uv", "tinydep-1.0.dist-info/direct_url.json",
                  json.dumps({"url": "file:///nonexistent", "dir_info": {}}))
    with pytest.raises(InstallError, match="came from a URL that no requirement asks for") as info:
        setup(world, stack, cache)
    assert info.value.exit_code == 11 and "tinydep 1.0: from file:///nonexistent" in str(info.value)
    assert "planted" in (site(stack) / "tinydep" / "__init__.py").read_text()     # named, nothing removed


@pytest.mark.slow
@pytest.mark.parametrize("asks", ["[install] supply, name @ URL", "[build] requirements, a path",
                                  "[install] supply, name @ relative path", "[build] requirements, a relative path"])
def test_a_package_the_recipe_asks_for_by_url_is_held_to_that_wheel(tmp_path: Path, asks: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``[install] supply = ["urldep @ file:///...whl"]`` or ``[build] requirements = ["/.../urldep-1.0-...whl"]``
    (the first review of session 37: a path was refused), or either as a path relative to the working directory
    (``./urldep-1.0-...whl``: uv reads it against its own, which is the setup's; session 37 left it refused, exit
    11): uv writes urldep's ``direct_url.json``; the recipe asks
    for it by URL, so the install is not refused, and urldep is held to the wheel the recipe names (not the one its
    ``direct_url.json`` names): stored, verify 0.  Then urldep edited in uv's cache with its RECORD row (the third
    review: held to nothing, it reached the next stack with exit 0): the next stack fails with the lock step's error
    for a stale env (exit 13), nothing stored."""
    import shutil

    from october.installer.core.errors import LockError
    from tests.fixtures.builtcache import entries
    from tests.fixtures.world import make_world
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup, verify

    world = make_world(tmp_path / "world")
    urldep = build_wheel(tmp_path / "elsewhere", "urldep", "1.0", {"urldep/__init__.py": "U = 1\n"})
    given = urldep.as_uri() if asks.endswith("URL") else str(urldep)
    if asks.endswith("relative path"):
        (tmp_path / "elsewhere" / "sub").mkdir()
        monkeypatch.chdir(tmp_path / "elsewhere" / "sub")
        given = f"../{urldep.name}"
    world.recipe.write_text(world.recipe.read_text() + (f'[install]\nsupply = ["urldep @ {given}"]\n'
                                                        if asks.startswith("[install]") else
                                                        f'[build]\nrequirements = ["{given}"]\n'))
    cache, stack = tmp_path / "cache", tmp_path / "s1"
    setup(world, stack, cache)
    assert (next(site(stack).glob("urldep-1.0.dist-info")) / "direct_url.json").is_file()
    assert "urldep 1.0: installed from" not in (stack / "logs" / "install.log").read_text()     # held, not loose
    assert len(entries(cache)) == 1 and verify(stack).returncode == 0
    poison_uv_cache(cache / "uv", "urldep/__init__.py", "U = 666  # planted\n")
    shutil.rmtree(cache / "built")
    with pytest.raises(LockError, match="does not hold the files its lock would name") as info:
        setup(world, tmp_path / "s2", cache)
    assert info.value.exit_code == 13 and "urldep 1.0: 1 file(s) unlike" in str(info.value), str(info.value)
    assert not (cache / "built").exists() or entries(cache) == []


@pytest.mark.slow
def test_a_local_wheel_the_recipe_names_keys_the_stored_stack_by_its_bytes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``[build] requirements = ["../urldep-1.0-...whl"]``: the same line names other bytes from another working
    directory, or once the file is replaced.  The built-stack key names each local file a requirement names by its
    sha256 (``lock.asked.asked_files``), so a stack stored with one file's install is never taken for another's:
    each new stack gets the wheel its line names now (before, the key held the line only: a second stack from
    another directory took the first one's urldep)."""
    from tests.fixtures.builtcache import entries
    from tests.fixtures.world import make_world
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup, verify

    world = make_world(tmp_path / "world")
    world.recipe.write_text(world.recipe.read_text() + '[build]\nrequirements = ["../urldep-1.0-py3-none-any.whl"]\n')
    cache = tmp_path / "cache"
    for n, where in enumerate(["a", "b", "b"], 1):
        (tmp_path / where / "sub").mkdir(parents=True, exist_ok=True)
        (tmp_path / where / "urldep-1.0-py3-none-any.whl").unlink(missing_ok=True)
        build_wheel(tmp_path / where, "urldep", "1.0", {"urldep/__init__.py": f"U = {n}\n"})
        monkeypatch.chdir(tmp_path / where / "sub")
        setup(world, tmp_path / f"s{n}", cache)
        assert (site(tmp_path / f"s{n}") / "urldep" / "__init__.py").read_text() == f"U = {n}\n"
        assert len(entries(cache)) == n and verify(tmp_path / f"s{n}").returncode == 0


def _with_uv_sources(tmp_path: Path, sources: str):
    """The fixture world with alpha's ``[tool.uv.sources]`` set to ``sources`` (alpha is installed with its
    dependencies; it needs tinydep)."""
    from tests.fixtures.world import make_world, publish

    world = make_world(tmp_path / "world")
    pyproject = world.alpha_work / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.uv.sources]\n" + sources + "\n")
    world.set_pin("alpha", publish(world.alpha_work, world.alpha_bare, "uv sources"))
    return world


def _plant_with_direct_url(cache: Path, url: str) -> None:
    """tinydep edited in uv's cache (RECORD row to match) with a ``direct_url.json`` naming ``url`` planted."""
    import json
    import shutil

    poison_uv_cache(cache / "uv", "tinydep/__init__.py", "VALUE = 666  # planted\n")
    _add_to_cache(cache / "uv", "tinydep-1.0.dist-info/direct_url.json", json.dumps({"url": url, "archive_info": {}}))
    shutil.rmtree(cache / "built")


@pytest.mark.slow
def test_a_fork_s_uv_sources_with_one_wheel_per_platform_install_and_are_held(tmp_path: Path) -> None:
    """The first review of session 38: alpha's ``[tool.uv.sources]`` gives tinydep one wheel per platform
    (markers); uv installs the linux one; the hold judged each wheel apart and called the healthy install unlike the
    win one (exit 13).  Now the sources' markers are evaluated in the env's Python and every wheel asked for one
    name is one package's: installed, held, stored, verify 0."""
    from tests.fixtures.builtcache import entries
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup, verify

    lin = build_wheel(tmp_path / "lin", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
    win = build_wheel(tmp_path / "win", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1  # win build\n"},
                      tag="py3-none-win_amd64")
    world = _with_uv_sources(tmp_path, f'tinydep = [{{ path = "{lin}", marker = "sys_platform == \'linux\'" }}, '
                                       f'{{ path = "{win}", marker = "sys_platform == \'win32\'" }}]')
    cache, stack = tmp_path / "cache", tmp_path / "s1"
    setup(world, stack, cache)
    assert lin.name in (next(site(stack).glob("tinydep-1.0.dist-info")) / "direct_url.json").read_text()
    assert len(entries(cache)) == 1 and verify(stack).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("asker", ["a uv source with a false marker", "a --no-deps fork's Requires-Dist",
                                   "a --no-deps fork's uv source"])
def test_what_uv_never_followed_asks_for_nothing(tmp_path: Path, asker: str) -> None:
    """The first review of session 38, two false passes: alpha's ``[tool.uv.sources]`` gives tinydep by URL under
    a marker false here, or beta (installed ``--no-deps``) declares ``tinydep @ URL`` (or gives it so in its
    ``[tool.uv.sources]``): uv installs tinydep from the index either way.  Then tinydep edited in uv's cache with a ``direct_url.json`` planted (naming that URL, or
    any): the new stack took the planted bytes with exit 0 (not stored; verify 0).  Now neither asks: exit 11,
    named, nothing stored."""
    from october.installer.core.errors import InstallError
    from tests.fixtures.builtcache import entries
    from tests.fixtures.gitrepos import git
    from tests.fixtures.pkgs import write_project
    from tests.fixtures.world import make_world, publish
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup

    url = "https://example.invalid/tinydep-1.0-py3-none-any.whl"
    if asker.startswith("a uv source"):
        world = _with_uv_sources(tmp_path, f'tinydep = {{ url = "{url}", marker = "sys_platform == \'win32\'" }}')
    else:
        world = make_world(tmp_path / "world")
        beta_work = tmp_path / "beta_work"
        git("clone", "-q", world.beta_bare.as_uri(), str(beta_work), cwd=tmp_path)
        write_project(beta_work, "beta", "0.2", packages={"beta": {"__init__.py": "B = 2\n"}},
                      dependencies=[f"tinydep @ {url}" if asker.endswith("Requires-Dist") else "tinydep"])
        if asker.endswith("uv source"):
            pyproject = beta_work / "pyproject.toml"
            pyproject.write_text(pyproject.read_text() + f'\n[tool.uv.sources]\ntinydep = {{ url = "{url}" }}\n')
        world.set_pin("beta", publish(beta_work, world.beta_bare, "beta needs tinydep by URL"))
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    assert not (next(site(tmp_path / "s1").glob("tinydep-1.0.dist-info")) / "direct_url.json").exists()
    assert len(entries(cache)) == 1
    _plant_with_direct_url(cache, "file:///nonexistent" if asker.endswith("Requires-Dist") else url)
    with pytest.raises(InstallError, match="came from a URL that no requirement asks for") as info:
        setup(world, tmp_path / "s2", cache)
    assert info.value.exit_code == 11 and "tinydep 1.0: from" in str(info.value)
    assert not (cache / "built").exists() or entries(cache) == []


@pytest.mark.slow
def test_a_path_with_a_marker_in_the_recipe_asks_for_its_wheel(tmp_path: Path) -> None:
    """The first review of session 38: ``[build] requirements = ["/.../urldep-1.0-...whl ; sys_platform ==
    'linux'"]`` was read with its marker as the path (exit 11).  The marker is read apart, as uv reads it, and
    evaluated: installed, held to that wheel, stored, verify 0."""
    from tests.fixtures.builtcache import entries
    from tests.fixtures.world import make_world
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup, verify

    world = make_world(tmp_path / "world")
    urldep = build_wheel(tmp_path / "elsewhere", "urldep", "1.0", {"urldep/__init__.py": "U = 1\n"})
    world.recipe.write_text(world.recipe.read_text() +
                            f'[build]\nrequirements = ["{urldep} ; sys_platform == \'linux\'"]\n')
    cache, stack = tmp_path / "cache", tmp_path / "s1"
    setup(world, stack, cache)
    assert list(site(stack).glob("urldep-1.0.dist-info"))
    assert len(entries(cache)) == 1 and verify(stack).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("named", ["a wheel committed in the fork, by its uv sources",
                                   "a wheel elsewhere, by the fork's dependencies"])
def test_the_files_a_fork_names_key_the_stored_stack_as_they_should(tmp_path: Path, named: str) -> None:
    """The second review of session 38: a wheel committed inside alpha's checkout (``[tool.uv.sources]`` path) put
    each stack's own path into the key, so no second stack ever took the entry (the fork's commit pins those
    bytes: now left out of the key); a wheel outside it named by alpha's ``dependencies`` (``tinydep @ file:``)
    was not in the key, so a stack made after the file was replaced took the first one's tinydep (exit 0, verify
    0).  Now the second stack takes the entry in the first case and gets the new bytes in the second."""
    from tests.fixtures.builtcache import entries
    from tests.fixtures.pkgs import write_project
    from tests.fixtures.world import make_world, publish
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup, verify

    world = make_world(tmp_path / "world")
    if named.startswith("a wheel committed"):
        build_wheel(world.alpha_work / "vendor", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
        pyproject = world.alpha_work / "pyproject.toml"
        pyproject.write_text(pyproject.read_text() +
                             '\n[tool.uv.sources]\ntinydep = { path = "vendor/tinydep-1.0-py3-none-any.whl" }\n')
    else:
        wheel = build_wheel(tmp_path / "elsewhere", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
        write_project(world.alpha_work, "alpha", "0.1", packages={"alpha": {"__init__.py": "A = 1\n"}},
                      dependencies=[f"tinydep @ {wheel.as_uri()}"])
    world.set_pin("alpha", publish(world.alpha_work, world.alpha_bare, named))
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    assert len(entries(cache)) == 1
    if named.startswith("a wheel elsewhere"):
        wheel.unlink()
        build_wheel(tmp_path / "elsewhere", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 2\n"})
    setup(world, tmp_path / "s2", cache)
    took = "env copied from the built-stack cache entry" in (tmp_path / "s2" / "logs" / "env.log").read_text()
    value = (site(tmp_path / "s2") / "tinydep" / "__init__.py").read_text()
    if named.startswith("a wheel committed"):
        assert took and len(entries(cache)) == 1 and value == "VALUE = 1\n"
    else:
        assert not took and len(entries(cache)) == 2 and value == "VALUE = 2\n"
    assert verify(tmp_path / "s2").returncode == 0


def test_bytecode_found_its_source_s_code_is_not_compared_again_until_it_changes(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs after every uv install (the second review of session 38: each compared the whole env's
    bytecode again, 2-10 s on a real stack with ``UV_COMPILE_BYTECODE=1``): a pyc found its source's code is not
    compared again while neither file changed; one replaced (a forged one in its place) is."""
    import importlib.util
    import py_compile
    import sys

    from october.installer.pyenv import bytecode as verify_bytecode
    from october.installer.install.records import forged_bytecode

    site_dir = tmp_path / "env" / "lib" / "python3" / "site-packages"
    site_dir.mkdir(parents=True)
    (tmp_path / "env" / "bin").mkdir()
    (tmp_path / "env" / "bin" / "python").symlink_to(sys.executable)
    source = site_dir / "mod.py"
    source.write_text("X = 1\n")
    pyc = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(str(source), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    compared: list[int] = []
    real = verify_bytecode.forged
    monkeypatch.setattr(verify_bytecode, "forged", lambda python, pairs, *a: (compared.append(len(pairs)),
                                                                               real(python, pairs, *a))[1])
    assert forged_bytecode(tmp_path / "env", set()) == [] and compared == [1]
    assert forged_bytecode(tmp_path / "env", set()) == [] and compared == [1, 0]
    pyc.unlink()
    assert forged_pyc(source, "X = 666\n") == pyc
    found = forged_bytecode(tmp_path / "env", set())
    assert compared == [1, 0, 1] and [p for p, _ in found] == [pyc], found


@pytest.mark.slow
def test_a_fork_whose_uv_sources_name_a_path_installs_and_is_held_to_that_wheel(tmp_path: Path) -> None:
    """The review of session 37: a fork's ``[tool.uv.sources]`` (``tinydep = { path = ... }``) makes uv install
    tinydep from that path with a ``direct_url.json`` while the fork's ``Requires-Dist`` says plain ``tinydep``;
    the rule refused it (exit 11).  The fork's checkout asks for it: installed, held to that wheel, stored."""
    from tests.fixtures.builtcache import entries
    from tests.fixtures.world import make_world, publish
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup, verify

    world = make_world(tmp_path / "world")
    wheel = build_wheel(tmp_path / "elsewhere", "tinydep", "1.0", {"tinydep/__init__.py": "VALUE = 1\n"})
    pyproject = world.alpha_work / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + f'\n[tool.uv.sources]\ntinydep = {{ path = "{wheel}" }}\n')
    world.set_pin("alpha", publish(world.alpha_work, world.alpha_bare, "tinydep from a path"))
    cache, stack = tmp_path / "cache", tmp_path / "s1"
    setup(world, stack, cache)
    assert "[tool.uv.sources]" in (stack / "src" / "alpha" / "pyproject.toml").read_text()
    durl = next(site(stack).glob("tinydep-1.0.dist-info")) / "direct_url.json"
    assert durl.is_file() and wheel.name in durl.read_text()
    assert len(entries(cache)) == 1 and verify(stack).returncode == 0      # held to the wheel the source names


@pytest.mark.slow
def forged_pyc(source: Path, code: str) -> Path:
    """A checked hash-based ``.pyc`` of ``source`` beside it (its ``__pycache__``), with the source's hash and
    ``code``'s bytecode: Python loads it in place of the source, whose hash it matches.  -> the pyc."""
    import importlib.util
    import marshal

    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little")
                    + importlib.util.source_hash(source.read_bytes()) + marshal.dumps(compile(code, str(source), "exec")))
    return pyc


def test_bytecode_planted_in_uv_s_cache_that_is_not_its_source_s_code_fails_the_install(tmp_path: Path) -> None:
    """The third review of session 37: a checked hash-based ``tinydep/__pycache__/__init__.cpython-311.pyc`` with
    the clean source's hash and other code, put beside the unpacked tinydep in uv's cache with no RECORD row: uv
    copied it, the unowned check let it pass (Python holds it to its source's hash, which matches), and the new
    stack ran its code, was set up (exit 0) and stored.  Now the install step compares it with what its source
    compiles to in the env's Python, before anything runs there: exit 11, named, nothing stored."""
    import shutil

    from october.installer.core.errors import UnlikeRecordError
    from tests.fixtures.builtcache import entries
    from tests.fixtures.world import make_world
    from tests.test_setup_e2e import setup

    world = make_world(tmp_path / "world")
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    (source,) = (cache / "uv").glob("archive-v*/*/tinydep/__init__.py")
    pwned = tmp_path / "pwned"
    forged_pyc(source, f"VALUE = 666\nopen({str(pwned)!r}, 'w').close()\n")
    shutil.rmtree(cache / "built")
    with pytest.raises(UnlikeRecordError, match="not their source's code") as info:
        setup(world, s2, cache)
    assert info.value.exit_code == 11 and "tinydep/__pycache__/__init__" in str(info.value), str(info.value)
    assert not pwned.exists()                                    # nothing ran it
    assert not (cache / "built").exists() or entries(cache) == []


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["false", "true"])
def test_bytecode_a_pth_imports_is_checked_before_the_env_s_python_starts(tmp_path: Path, isolation: str) -> None:
    """The first review of session 38: a ``[build]`` requirement ``hookdep`` ships a ``.pth`` that imports
    ``hookdep_hook`` at every start (as setuptools' ``distutils-precedence.pth`` imports ``_distutils_hack``); a
    checked hash-based ``.pyc`` of it, other code, planted in uv's cache: the install step named it (exit 11), but
    its code had run 3-4 times by then (the env step's probes, uv's own starts of the env's Python, a build without
    isolation).  Now every uv install into the env is followed by the bytecode check (``StackUv.after_install``),
    which compares in the env's Python with ``-I -S``: exit 11 and the planted code never ran."""
    import shutil

    from october.installer.core.errors import UnlikeRecordError
    from tests.fixtures.builtcache import entries
    from tests.fixtures.world import make_world
    from tests.test_setup_e2e import setup

    world = make_world(tmp_path / "world")
    build_wheel(world.wheels, "hookdep", "1.0", {"hookdep-precedence.pth": "import hookdep_hook\n",
                                                  "hookdep_hook.py": "HOOK = 1\n"})
    text = world.recipe.read_text() + '[build]\nrequirements = ["hookdep==1.0"]\n'
    assert "build_isolation = false" in text
    world.recipe.write_text(text.replace("build_isolation = false", f"build_isolation = {isolation}"))
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    (source,) = (cache / "uv").glob("archive-v*/*/hookdep_hook.py")
    pwned = tmp_path / "pwned"
    forged_pyc(source, f"HOOK = 1\nopen({str(pwned)!r}, 'a').write('ran\\n')\n")
    shutil.rmtree(cache / "built")
    with pytest.raises(UnlikeRecordError, match="not their source's code") as info:
        setup(world, tmp_path / "s2", cache)
    assert info.value.exit_code == 11 and "hookdep_hook" in str(info.value), str(info.value)
    assert not pwned.exists(), pwned.read_text()                  # it never ran
    assert not (cache / "built").exists() or entries(cache) == []


def test_the_distributions_a_pth_starts_are_the_ones_it_names(tmp_path: Path) -> None:
    """started_by_pth: the owner of a ``.pth`` with an ``import`` line, and the owner of each top-level module a name
    on such a line names (``import x``, ``__import__('y')``), whoever ships the ``.pth``; not a ``.pth`` of paths
    only, nor an editable install's (built here from a folder), nor a module nobody names."""
    from october.installer.lock.asked import started_by_pth
    from october.installer.pyenv.dists import Dist

    site_dir = tmp_path / "site"

    def dist(name: str, files: dict[str, str], editable: bool = False) -> Dist:
        info = site_dir / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        for path, text in files.items():
            (site_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (site_dir / path).write_text(text)
        (info / "RECORD").write_text("".join(f"{p},,\n" for p in files) + f"{info.name}/RECORD,,\n")
        url = {"url": (tmp_path / name).as_uri(), "dir_info": {"editable": True}} if editable else None
        return Dist(name, "1.0", info, url)

    dists = {d.name: d for d in [
        dist("hooks", {"hooks.pth": "import os; __import__('shimmod').go()\nimport plainmod\n"}),
        dist("shim", {"shimmod/__init__.py": "", "shimmod/x.py": ""}),
        dist("plain", {"plainmod.py": ""}),
        dist("paths", {"paths.pth": "/some/dir\n# import nothing\n", "pathsmod.py": ""}),
        dist("unnamed", {"unnamedmod/__init__.py": ""}),
        dist("fork", {"__editable__.fork.pth": "import forkfinder; forkfinder.install()\n", "forkfinder.py": ""},
             editable=True)]}
    assert [d.name for d in started_by_pth(dists)] == ["hooks", "plain", "shim"]


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["the module a .pth imports", "the .pth itself", "the module, RECORD left",
                                     "a .pth no RECORD owns", "a direct_url.json"])
def test_what_a_pth_runs_is_held_to_its_wheel_before_the_env_s_python_starts(tmp_path: Path, planted: str) -> None:
    """The second review of session 38: a ``[build]`` requirement ``hookdep`` ships a ``.pth`` that imports
    ``hookdep_hook`` at every start; ``hookdep_hook.py`` (or the ``.pth``) edited in uv's cache with its RECORD row:
    the install step's hold named it (exit 13), but the planted code had run five times by then (the env step's
    probes, uv's own starts of the env's Python).  Now what a ``.pth`` starts is held to its wheel right after the
    uv install that put it there: exit 13, the planted code never ran, nothing stored.  The third review: the
    module edited with its RECORD row left as it was, a ``.pth`` no RECORD owns put beside the unpacked wheel, a
    ``direct_url.json`` planted (with its row) beside the edit: each ran 4-8 times before the install step's
    checks named it; now each is named right after the install (exit 11) and never runs."""
    import json
    import shutil

    from october.installer.core.errors import InstallError, LockError
    from tests.fixtures.builtcache import entries
    from tests.fixtures.world import make_world
    from tests.test_setup_e2e import setup

    world = make_world(tmp_path / "world")
    build_wheel(world.wheels, "hookdep", "1.0", {"hookdep-precedence.pth": "import hookdep_hook\n",
                                                  "hookdep_hook.py": "HOOK = 1\n"})
    world.recipe.write_text(world.recipe.read_text() + '[build]\nrequirements = ["hookdep==1.0"]\n')
    cache = tmp_path / "cache"
    setup(world, tmp_path / "s1", cache)
    assert len(entries(cache)) == 1
    pwned = tmp_path / "pwned"
    run = f"open({str(pwned)!r}, 'a').write('ran\\n')"
    (hook,) = (cache / "uv").glob("archive-v*/*/hookdep_hook.py")
    if planted in ("the module a .pth imports", "a direct_url.json"):
        poison_uv_cache(cache / "uv", "hookdep_hook.py", f"HOOK = 1\n{run}\n")
    elif planted == "the .pth itself":
        poison_uv_cache(cache / "uv", "hookdep-precedence.pth", f"import hookdep_hook; {run}\n")
    elif planted == "the module, RECORD left":
        hook.write_text(f"HOOK = 1\n{run}\n")
    else:
        (hook.parent / "zz_planted.pth").write_text(f"import os; {run}\n")
    if planted == "a direct_url.json":
        (record,) = (cache / "uv").glob("archive-v*/*/hookdep-1.0.dist-info/RECORD")
        durl = json.dumps({"url": "file:///nonexistent", "dir_info": {}})
        (record.parent / "direct_url.json").write_text(durl)
        record.write_text(record.read_text() + f"hookdep-1.0.dist-info/direct_url.json,{_digest(durl)},{len(durl)}\n")
    shutil.rmtree(cache / "built")
    expect, match = {"the module, RECORD left": (InstallError, "differ from their distribution's RECORD"),
                     "a .pth no RECORD owns": (InstallError, "that no installed distribution's RECORD owns"),
                     "a direct_url.json": (InstallError, "came from a URL that no requirement asks for")}.get(
        planted, (LockError, "does not hold the files its lock would name"))
    with pytest.raises(expect, match=match) as info:
        setup(world, tmp_path / "s2", cache)
    assert info.value.exit_code == (13 if expect is LockError else 11), str(info.value)
    assert expect is not LockError or "hookdep 1.0: 1 file(s) unlike" in str(info.value), str(info.value)
    assert not pwned.exists(), pwned.read_text()              # it never ran
    assert "env" in str(info.value) and not (cache / "built").exists() or entries(cache) == []


@pytest.mark.slow
def test_a_url_requirement_whose_marker_is_false_asks_for_nothing(tmp_path: Path) -> None:
    """The third review of session 37: alpha requires ``tinydep`` and ``tinydep @ URL ; sys_platform == 'win32'``;
    uv installs tinydep from the index (no ``direct_url.json``), but the URL line counted as asking, so a plant
    (tinydep edited in uv's cache with a planted ``direct_url.json``) passed with exit 0.  Now the marker is
    evaluated in the env's Python's environment (the install facts): exit 11."""
    import json
    import shutil

    from october.installer.core.errors import InstallError
    from tests.fixtures.pkgs import write_project
    from tests.fixtures.world import make_world, publish
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup

    world = make_world(tmp_path / "world")
    write_project(world.alpha_work, "alpha", "0.1", packages={"alpha": {"__init__.py": "A = 1\n"}},
                  dependencies=["tinydep", "tinydep @ https://example.invalid/tinydep-1.0-py3-none-any.whl ; "
                                "sys_platform == 'win32'"])
    world.set_pin("alpha", publish(world.alpha_work, world.alpha_bare, "a URL for another platform"))
    cache, s2 = tmp_path / "cache", tmp_path / "s2"
    setup(world, tmp_path / "s1", cache)
    meta = next(site(tmp_path / "s1").glob("alpha-*.dist-info/METADATA")).read_text()
    assert "tinydep @ https://example.invalid/tinydep-1.0-py3-none-any.whl" in meta, meta
    poison_uv_cache(cache / "uv", "tinydep/__init__.py", "VALUE = 666  # planted\n")
    _add_to_cache(cache / "uv", "tinydep-1.0.dist-info/direct_url.json",
                  json.dumps({"url": "file:///nonexistent", "dir_info": {}}))
    shutil.rmtree(cache / "built")
    with pytest.raises(InstallError, match="came from a URL that no requirement asks for") as info:
        setup(world, s2, cache)
    assert info.value.exit_code == 11 and "tinydep 1.0: from file:///nonexistent" in str(info.value)


@pytest.mark.slow
def test_an_env_made_again_after_its_lock_is_held_to_the_lock_s_wheels(tmp_path: Path) -> None:
    """The third review of session 37: a stack's env removed (as the fixes of october's errors say) and made again
    after its lock step is done has no listing of its own, so it was held to nothing: tinydep edited in uv's cache
    with its RECORD row reached it with exit 0 (only `current verify` named it).  Now it is held to the wheels of
    the stack's lock: the lock step's error for a stale env (exit 13), nothing removed, nothing stored."""
    import shutil

    from october.installer.core.errors import LockError
    from tests.fixtures.builtcache import entries
    from tests.fixtures.world import make_world
    from tests.test_cache_isolation import site
    from tests.test_setup_e2e import setup

    world = make_world(tmp_path / "world")
    cache, stack = tmp_path / "cache", tmp_path / "s1"
    setup(world, stack, cache)
    poison_uv_cache(cache / "uv", "tinydep/__init__.py", "VALUE = 666  # planted\n")
    shutil.rmtree(stack / "env")
    shutil.rmtree(cache / "built")
    with pytest.raises(LockError, match="does not hold the files its lock would name") as info:
        setup(world, stack, cache)
    assert info.value.exit_code == 13 and "tinydep 1.0: 1 file(s) unlike" in str(info.value), str(info.value)
    assert "planted" in (site(stack) / "tinydep" / "__init__.py").read_text()
    assert not (cache / "built").exists() or entries(cache) == []
    log = (stack / "logs" / "install.log").read_text()
    assert "held to the wheels of the stack's lock where it has one" in log


def test_a_distribution_asked_for_by_a_wheel_s_url_is_held_to_that_wheel_not_its_direct_url(tmp_path: Path) -> None:
    """url_packages: the wheel the requirement names (a local file with its sha256 taken now; another URL with its
    ``#sha256=``), never the URL the ``direct_url.json`` gives; an sdist, a folder or a VCS URL holds nothing."""
    from october.installer.lock.asked import asked_by_url, url_packages

    local = build_wheel(tmp_path / "w", "localdep", "1.0", {"localdep/__init__.py": "L = 1\n"})
    dists = {d.name: d for d in [
        _dist(tmp_path, "localdep", (), url="file:///planted/elsewhere.whl"),
        _dist(tmp_path, "remote", (), url="https://planted.example/r.whl"),
        _dist(tmp_path, "sdistdep", (), url="https://h.example/sdistdep-1.0.tar.gz"),
        _dist(tmp_path, "vcsdep", (), url="https://github.com/a/vcsdep"),
        _dist(tmp_path, "indexed")]}
    recipe = [f"localdep @ {local.as_uri()}", "remote @ https://h.example/remote-1.0-py3-none-any.whl#sha256=ab",
              "sdistdep @ https://h.example/sdistdep-1.0.tar.gz", "vcsdep @ git+https://github.com/a/vcsdep@v1",
              "indexed @ https://h.example/indexed-1.0-py3-none-any.whl"]
    packages = url_packages(dists, asked_by_url(dists, recipe))
    assert packages == [
        {"name": "localdep", "version": "1.0", "wheels": [{"path": str(local), "hashes": {"sha256": _sha(local.read_bytes())}}]},
        {"name": "remote", "version": "1.0",
         "wheels": [{"url": "https://h.example/remote-1.0-py3-none-any.whl", "hashes": {"sha256": "ab"}}]}], packages
    # every wheel asked for one name is one package's: held where one of them is installed (the second review of
    # session 38: a fork's uv sources gave one wheel per platform, each judged apart)
    other = build_wheel(tmp_path / "w2", "localdep", "1.0", {"localdep/__init__.py": "L = 1\n"}, tag="py3-none-win_amd64")
    (both,) = url_packages(dists, asked_by_url(dists, [f"localdep @ {local.as_uri()}"], sources=[("localdep", str(other))]))
    assert sorted(w["path"] for w in both["wheels"]) == sorted([str(local), str(other)]), both
