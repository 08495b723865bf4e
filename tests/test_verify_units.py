"""Units of `current verify`: which unowned env files are legitimate, the setup command its fixes print.

Real directories and files (no stack needed); the end-to-end checks are in tests/test_verify*.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from october.installer.core.paths import StackPaths
from october.installer.core.resources import recipes_dir
from october.installer.engine import MARKER_FORMAT
from october.installer.pyenv.systorch import PTH_NAME, pth_text
from october.installer.verify.fix import remove_files, setup_command
from october.installer.pyenv.unowned import owned_paths, unowned


def _env(tmp: Path) -> tuple[Path, Path]:
    env = tmp / "env"
    site = env / "lib" / "python3.12" / "site-packages"
    (site / "pkg" / "__pycache__").mkdir(parents=True)
    (env / "bin").mkdir()
    for name in ("pyvenv.cfg", ".gitignore", ".lock", "CACHEDIR.TAG", "bin/activate", "bin/activate.fish",
                 "bin/activate_this.py", "bin/deactivate.bat", "bin/pydoc.bat", "pkg_owned"):
        (env / name).write_text("x")
    (env / "bin" / "python").symlink_to("/usr/bin/python3")
    (env / "bin" / "python3.12").symlink_to("python")
    (env / "lib64").symlink_to("lib")
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg" / "__pycache__" / "__init__.cpython-312.pyc").write_bytes(b"\xcb\x0d\x0d\x0a" + bytes(12))
    (site / "pkg" / "__pycache__" / "__init__.cpython-312.opt-1.pyc").write_bytes(b"\xcb\x0d\x0d\x0a\x03" + bytes(11))
    return env, site


def test_only_scaffolding_bytecode_with_its_source_and_our_pth_are_legitimately_unowned(tmp_path: Path) -> None:
    env, site = _env(tmp_path)
    owned = owned_paths([(site, "pkg/__init__.py"), (site, "../../../pkg_owned")])
    facts = {"site_packages": ["/opt/sys/site-packages"]}
    (site / PTH_NAME).write_text(pth_text(facts))
    assert unowned(env, owned, facts) == []
    # each of these is named: .pth files first
    planted = [site / "zz.pth", site / "zz_payload.py", site / "pkg" / "__pycache__" / "gone.cpython-312.pyc",
               env / "bin" / "tool", env / "include" / "x.h", site / "pkg" / "extra.so"]
    for p in planted:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    # session 36's review: bytecode Python runs whatever its source holds (PEP 552's unchecked hash, flags 1),
    # from uv's cache (uv copies every file of a cached wheel, a row or not), beside its source
    unchecked = site / "pkg" / "__pycache__" / "__init__.cpython-312.opt-2.pyc"
    unchecked.write_bytes(b"\xcb\x0d\x0d\x0a\x01" + bytes(11))
    got = unowned(env, owned, facts)
    assert got[0] == site / "zz.pth" and set(got) == {*planted, unchecked}


def test_scaffold_names_count_only_in_their_place_and_shape(tmp_path: Path) -> None:
    env, site = _env(tmp_path)
    owned = owned_paths([(site, "pkg/__init__.py"), (site, "../../../pkg_owned")])
    (env / "bin" / "python").unlink()
    (env / "bin" / "python").write_text("#!/bin/sh\n")          # a python that is a file, not the link
    (site / "pyvenv.cfg").write_text("x")                       # a top-level name, but in site-packages
    (env / "lib64").unlink()
    (env / "lib64").mkdir()
    (env / "lib64" / "f").write_text("x")
    (site / PTH_NAME).write_text("import os; os.system('x')\n")  # our name, not our text
    got = set(unowned(env, owned, {"site_packages": ["/opt/sys/site-packages"]}))
    assert got == {env / "bin" / "python", site / "pyvenv.cfg", env / "lib64" / "f", site / PTH_NAME}
    # without a system torch recorded, our .pth is not ours either
    (site / PTH_NAME).write_text(pth_text({"site_packages": []}))
    assert site / PTH_NAME in unowned(env, owned, None)


def test_the_setup_command_carries_the_recorded_options(tmp_path: Path) -> None:
    paths = StackPaths(tmp_path / "my stack")
    shipped = recipes_dir() / "flashinfer-pr3812.toml"
    receipt = {"recipe": {"name": "flashinfer-pr3812", "path": str(shipped)},
               "torch": {"source": "system", "python": "/opt/torch/.venv/bin/python"},
               "options": {"skip_preflight": ["nvcc", "gpu"]}}
    assert setup_command(paths, receipt, "--locked") == (
        f"october_setup '{paths.root}' --recipe flashinfer-pr3812 --system-python /opt/torch/.venv/bin/python "
        "--skip-preflight nvcc,gpu --locked")
    (paths.state).mkdir(parents=True)
    (paths.marker("jit")).write_text(json.dumps({"format_version": MARKER_FORMAT,
                                                 "outputs": {"shared_cache": {"dir": "/c/jit"}}}))
    receipt = {"recipe": {"name": "mine", "path": "/r/mine.toml"}, "torch": {"source": "index"}, "options": {}}
    assert setup_command(paths, receipt) == f"october_setup '{paths.root}' --recipe /r/mine.toml --cache-dir /c"


def test_remove_files_lists_at_most_ten_and_says_how_many_more(tmp_path: Path) -> None:
    files = [tmp_path / f"f{i}" for i in range(12)]
    text = remove_files(files)
    assert "`rm -f -- " + " ".join(str(f) for f in files[:10]) + "`" in text and "other 2 listed" in text


def test_one_reader_of_installed_distributions(tmp_path: Path) -> None:
    """pyenv/dists.dists_in is what verify, install's RECORD check and consistency, and the system
    torch's site listing see: each planted fault is left out or named, never a crash."""
    from october.installer.install.consistency import Dist as Needs, installed_in
    from october.installer.pyenv.systorch import site_distributions
    from october.installer.pyenv.dists import dists_in, installed

    first, second = tmp_path / "env" / "lib" / "python3.11" / "site-packages", tmp_path / "sys"

    def dist(site: Path, folder: str, metadata: bytes | None, direct_url: str | None = None) -> None:
        info = site / folder
        info.mkdir(parents=True)
        if metadata is not None:
            (info / "METADATA").write_bytes(metadata)
        if direct_url is not None:
            (info / "direct_url.json").write_text(direct_url)

    src = tmp_path / "src"
    dist(first, "Fork_Pkg-1.0.dist-info", b"Name: Fork_Pkg\nVersion: 1.0 \nRequires-Dist: b>=1\n\nlong text\n",
         json.dumps({"url": src.as_uri(), "dir_info": {"editable": True}}))
    dist(first, "b-2.0.dist-info", b"Name: b\nVersion: 2.0\n", "{not json")
    dist(first, "nometa-1.0.dist-info", None)
    dist(first, "noversion-1.0.dist-info", b"Name: noversion\nVersion: \n")
    dist(first, "latin-1.0.dist-info", b"Name: latin\nVersion: 1.0\nSummary: caf\xe9\n")
    dist(second, "b-1.0.dist-info", b"Name: b\nVersion: 1.0\n")
    dist(second, "torch-2.9.0.dist-info", b"Name: torch\nVersion: 2.9.0\n")

    got = installed(tmp_path / "env")
    assert sorted(got) == ["b", "fork-pkg", "latin"]          # a METADATA that is not UTF-8 is still read
    assert (got["fork-pkg"].version, got["fork-pkg"].requires) == ("1.0", ("b>=1",))
    assert got["fork-pkg"].editable_path == src.resolve() and got["fork-pkg"].site == first
    assert got["b"].direct_url == {"url": "unreadable"} and got["b"].editable_path is None
    assert installed_in([first]) == [Needs("fork-pkg", "1.0", ("b>=1",)), Needs("b", "2.0", ()),   # folder order
                                     Needs("latin", "1.0", ())]
    assert site_distributions([str(first), str(second)]) == {"b": "2.0", "fork-pkg": "1.0", "latin": "1.0",
                                                             "torch": "2.9.0"}      # the first site's b
    assert [d.version for d in dists_in([second], "torch-*.dist-info")] == ["2.9.0"]
    # a METADATA that cannot be read (here a directory): verify and the site listing skip it, but the
    # consistency check raises (its requirements would otherwise go unchecked); and a Requires-Dist after the
    # header block's blank line is the long description's text, not a header
    (second / "broken-1.0.dist-info" / "METADATA").mkdir(parents=True)
    dist(second, "late-1.0.dist-info", b"Name: late\nVersion: 1.0\n\nRequires-Dist: not-a-header\n")
    assert sorted(d.name for d in dists_in([second])) == ["b", "late", "torch"]
    assert [d.requires for d in dists_in([second]) if d.name == "late"] == [()]
    with pytest.raises(IsADirectoryError):
        installed_in([second])


def test_bytecode_of_a_source_with_nan_constants_is_its_own(tmp_path: Path) -> None:
    """The scenario hunt: ``NAN = 1e309 - 1e309`` folds to a NaN constant, and code objects holding NaN are never
    equal, so the bytecode the stack's own Python wrote was called other code.  Real interpreter, real import."""
    import os
    import subprocess
    import sys

    from october.installer.pyenv.bytecode import candidates, forged

    pkg = tmp_path / "fork" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "consts.py").write_text("NAN = 1e309 - 1e309\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # the review: imported through a linked folder, the pyc carries that name, not the path verify reads
    (tmp_path / "linked").symlink_to(tmp_path / "fork")
    subprocess.run([sys.executable, "-c", "import pkg.consts"], cwd=tmp_path, check=True,
                   env={**env, "PYTHONPATH": str(tmp_path / "linked")})
    pairs = candidates([tmp_path / "fork"])
    assert len(pairs) == 1 and forged(Path(sys.executable), pairs) == []


def test_bytecode_through_a_linked_pycache_odd_names_and_no_debug_ranges(tmp_path: Path) -> None:
    """The review: a ``__pycache__`` that is a link to a folder elsewhere was not entered (a fork whose
    .gitignore hides the link, as vLLM's ``vllm/vllm_flash_attn/*`` does); a file named like bytecode that
    Python never loads (``.opt-x``) stopped the whole comparison; bytecode Python wrote under ``-X
    no_debug_ranges`` (no column table) was called other code.  Real interpreter, real py_compile."""
    import subprocess
    import sys

    from october.installer.pyenv.bytecode import candidates, forged

    py = Path(sys.executable)
    tag = sys.implementation.cache_tag
    pkg = tmp_path / "fork" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text("VALUE = 1\n")
    (pkg / "plain.py").write_text("def f():\n    return 1 + 2\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (pkg / "__pycache__").symlink_to(elsewhere, target_is_directory=True)
    forge = ("import marshal, py_compile, sys; src, pyc = sys.argv[1:3]; py_compile.compile(src, cfile=pyc); "
             "h = open(pyc, 'rb').read()[:16]; "
             "open(pyc, 'wb').write(h + marshal.dumps(compile('VALUE = 666\\n', src, 'exec', dont_inherit=True)))")
    subprocess.run([str(py), "-c", forge, str(pkg / "mod.py"), str(elsewhere / f"mod.{tag}.pyc")], check=True)
    subprocess.run([str(py), "-X", "no_debug_ranges", "-c",
                    f"import py_compile; py_compile.compile({str(pkg / 'plain.py')!r}, cfile={str(elsewhere / f'plain.{tag}.pyc')!r})"],
                   check=True)
    (elsewhere / f"mod.{tag}.opt-x.pyc").write_bytes((elsewhere / f"mod.{tag}.pyc").read_bytes())
    value = subprocess.run([str(py), "-c", "import pkg.mod; print(pkg.mod.VALUE)"], cwd=tmp_path / "fork",
                           capture_output=True, text=True, check=True).stdout.strip()
    assert value == "666"                                   # Python runs it in place of the source
    pairs = candidates([tmp_path / "fork"])
    assert {p.name for p, _ in pairs} == {f"mod.{tag}.pyc", f"plain.{tag}.pyc", f"mod.{tag}.opt-x.pyc"}
    found = forged(py, pairs)
    assert found == [(pkg / "__pycache__" / f"mod.{tag}.pyc", "not the code of mod.py")], found
