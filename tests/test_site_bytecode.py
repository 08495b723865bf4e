"""A site torch's own bytecode offered to the run's pycache prefix (:mod:`october.installer.pyenv.sitebytecode`),
against the real interpreter: ``python -v`` says where each module's code came from.  The package is a
stand-in named ``torch`` compiled by ``compileall`` as a site install is; nothing is mocked."""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
from pathlib import Path

from october.installer.pyenv.sitebytecode import roots, seed

TAG = sys.implementation.cache_tag


def _site(tmp: Path) -> Path:
    site = tmp / "site"
    (site / "torch" / "sub").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("import torch.sub.m\nX = 1\n")
    (site / "torch" / "sub" / "__init__.py").write_text("Y = 2\n")
    (site / "torch" / "sub" / "m.py").write_text("Z = 3\n")
    assert compileall.compile_dir(str(site), quiet=1)
    return site


def _import(site: Path, prefix: Path) -> str:
    """``python -v -X pycache_prefix=prefix -c 'import torch'``'s account of where torch's code came from."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run([sys.executable, "-v", "-X", f"pycache_prefix={prefix}", "-c", "import torch"],
                          env={**env, "PYTHONPATH": str(site)}, capture_output=True, text=True, check=True)
    return "\n".join(ln for ln in done.stderr.splitlines() if "code object from" in ln and "torch" in ln)


def test_the_site_bytecode_is_what_the_prefixed_import_runs(tmp_path: Path) -> None:
    site = _site(tmp_path)
    bare = _import(site, tmp_path / "bare")
    assert bare.count(".py\n") + bare.endswith(".py") == 3, bare          # without: compiled from source
    prefix = tmp_path / "prefix"
    assert seed([site / "torch"], TAG, prefix, tmp_path / "stack") == [3]
    seeded = _import(site, prefix)
    assert seeded.count(".pyc'") == 3 and str(prefix) in seeded, seeded
    assert all(p.is_symlink() for p in prefix.rglob("*.pyc") if "torch" in p.parts)


def test_a_stale_module_is_compiled_again_and_the_site_file_is_left_alone(tmp_path: Path) -> None:
    site = _site(tmp_path)
    prefix = tmp_path / "prefix"
    seed([site / "torch"], TAG, prefix, tmp_path / "stack")
    shipped = next((site / "torch" / "sub" / "__pycache__").glob("m.*.pyc"))
    before = shipped.read_bytes()
    (site / "torch" / "sub" / "m.py").write_text("Z = 30  # changed after the site was compiled\n")
    said = _import(site, prefix)
    assert "m.py" in said and said.count(".pyc'") == 2, said             # m from its source, the rest seeded
    assert shipped.read_bytes() == before
    link = prefix / str(site / "torch" / "sub").lstrip(os.sep) / shipped.name
    assert link.exists() and not link.is_symlink()      # written by the import into the prefix, over the link


def test_nothing_is_offered_from_inside_the_stack_or_for_another_python(tmp_path: Path) -> None:
    site = _site(tmp_path / "stack" / "env")
    prefix = tmp_path / "prefix"
    assert seed([site / "torch"], TAG, prefix, tmp_path / "stack") == [0]
    assert seed([site / "torch"], "cpython-27", prefix, tmp_path / "elsewhere") == [0]
    assert seed([site / "torch"], None, prefix, tmp_path / "elsewhere") == [0]     # caches no bytecode
    assert seed([tmp_path / "nowhere" / "torch"], TAG, prefix, tmp_path / "stack") == [0]
    assert seed([Path("torch")], TAG, prefix, tmp_path / "stack") == [0]
    assert not prefix.exists() or not any(prefix.rglob("*.pyc"))


def test_the_standard_library_is_seeded_without_its_site_packages_or_tests(tmp_path: Path) -> None:
    """The interpreter's own library (where ``sysconfig.get_path("stdlib")`` says), as a real one is laid out:
    its compiled modules are linked, those of its site-packages and test directories are not, nor those of
    another tag or an optimisation level."""
    lib = tmp_path / "base" / "lib64" / "python3.99"
    for rel in ("json/__init__.py", "site-packages/other/__init__.py", "test/test_x.py", "tests/y.py"):
        (lib / rel).parent.mkdir(parents=True, exist_ok=True)
        (lib / rel).write_text("A = 1\n")
    for src in lib.rglob("*.py"):
        (src.parent / "__pycache__").mkdir(exist_ok=True)
        for name in (f"{src.stem}.{TAG}.pyc", f"{src.stem}.{TAG}.opt-1.pyc", f"{src.stem}.cpython-27.pyc"):
            (src.parent / "__pycache__" / name).write_bytes(b"bytecode")
    found = roots(tmp_path / "site" / "torch" / "__init__.py", str(lib))
    assert found == [tmp_path / "site" / "torch", lib]
    prefix = tmp_path / "prefix"
    assert seed(found, TAG, prefix, tmp_path / "stack") == [0, 1]
    linked = [p.relative_to(prefix / str(lib).lstrip(os.sep)) for p in prefix.rglob("*.pyc")]
    assert linked == [Path("json") / f"__init__.{TAG}.pyc"]
    assert roots(Path("/s/torch/__init__.py"), None) == [Path("/s/torch")]


def test_the_probe_reports_where_its_interpreter_keeps_the_standard_library(tmp_path: Path) -> None:
    """The env step takes the standard library and the cache tag from the system interpreter's probe, not a
    guess from its version (``lib64``, a free-threaded ``cpython-313t``): held against this interpreter."""
    import json
    import sysconfig

    probe = Path(__file__).resolve().parents[1] / "checks" / "probes" / "torch_facts.py"
    out = subprocess.run([sys.executable, "-I", str(probe), "--locate"], capture_output=True, text=True,
                         check=True).stdout
    facts = json.loads(out.split("OCTOBER_TORCH ", 1)[1])
    assert facts["stdlib"] == sysconfig.get_path("stdlib") and Path(facts["stdlib"], "os.py").is_file()
    assert facts["cache_tag"] == sys.implementation.cache_tag


def test_a_prefix_that_cannot_take_links_ends_the_seeding_without_an_error(tmp_path: Path) -> None:
    """Seeding only saves time: where no link can be made (planted: the prefix is a file, so no directory
    can be made under it) it stops and says how many it made, and the import compiles as before."""
    site = _site(tmp_path)
    prefix = tmp_path / "prefix"
    prefix.write_text("not a directory\n")
    assert seed([site / "torch"], TAG, prefix, tmp_path / "stack") == [0]
    assert prefix.read_text() == "not a directory\n"


def test_a_stack_inside_a_seeded_root_offers_none_of_its_own_bytecode(tmp_path: Path) -> None:
    """The review: only a root inside the stack was refused, not the stack inside a root.  Planted: a stack
    (with a fork's compiled module) under the standard library's directory."""
    site = _site(tmp_path)
    stack = site / "torch" / "sub" / "stack"
    (stack / "src" / "fork" / "pkg" / "__pycache__").mkdir(parents=True)
    (stack / "src" / "fork" / "pkg" / "__pycache__" / f"evil.{sys.implementation.cache_tag}.pyc").write_bytes(b"x")
    prefix = tmp_path / "prefix"
    assert seed([site / "torch"], TAG, prefix, stack) == [3]
    assert not [p for p in prefix.rglob("*.pyc") if "evil" in p.name]
