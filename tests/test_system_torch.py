"""A site-provided torch (``--system-python``): preflight checks it, the env is made on its interpreter
with its site directories visible, nothing in the env may shadow it, the lock and receipt record it.

The "system" interpreters are real: a uv venv holding a small torch stand-in (a real wheel whose
``torch/__init__.py`` and ``torch/version.py`` carry ``__version__`` and ``cuda`` the way torch does; it is
a stand-in because a CUDA torch cannot be installed offline here, and the preflight/guard logic only reads
those attributes and the distribution metadata), and, in ``test_the_real_torch_of_the_dev_env_...``, this
project's own dev env with its real torch (2.15.0+cu132).
"""

from __future__ import annotations

import importlib.util

import compileall
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from october.installer.core.errors import EnvError, FileSystemError, InstallError, UsageError
from october.installer.install.guards import GuardSpec, evaluate, probe
from october.installer.machine import evaluate as preflight_evaluate
from october.installer.pyenv import systorch
from october.installer.pyenv.uvcmd import uv_exe
from october.installer.recipe import CudaPin, TorchPin, load_recipe, parse_arch_list
from october.installer.steps.env import EnvStep
from october.installer.steps.lock import installed_distributions, probe_env, system_section
from tests.fixtures import stack_forks as sf
from tests.fixtures.preflight import good_facts
from tests.fixtures.wheels import build_wheel

TORCH = "2.11.0+cu130"


def _torch_wheel(d: Path, version: str = TORCH, cuda: str = "13.0") -> Path:
    return build_wheel(d, "torch", version, {
        "torch/__init__.py": f'__version__ = "{version}"\nfrom . import version\n',
        "torch/version.py": f'__version__ = "{version}"\ncuda = "{cuda}"\n'})


def _uv(*args: str, cache: Path) -> None:
    env = dict(os.environ, UV_CACHE_DIR=str(cache))
    env.pop("VIRTUAL_ENV", None)
    subprocess.run([uv_exe(), *args], check=True, env=env, capture_output=True)


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A system interpreter (a venv, like the H200 image's /opt/torch/.venv) with torch 2.11.0+cu130."""
    root = tmp_path_factory.mktemp("system")
    wheels = root / "wheels"
    _torch_wheel(wheels)
    _uv("venv", "-q", "--python", sys.executable, str(root / "sys"), cache=root / "uvcache")
    _uv("pip", "install", "-q", "--python", str(root / "sys/bin/python"), "--no-index", "--find-links", str(wheels),
        f"torch=={TORCH}", cache=root / "uvcache")
    return root / "sys" / "bin" / "python"


def _recipe(tmp: Path, python: Path, version: str = TORCH, cuda: str = "13.0"):
    links = sf.Links(tmp / "links", b"")
    rec = sf.recipe(links, None, tmp, fork_uses=())
    return dataclasses.replace(rec, torch=TorchPin(version, source="system", system_python=str(python)),
                               cuda=CudaPin(version=cuda, arch_list=parse_arch_list("9.0"), variant="cu" + cuda.replace(".", "")))


def _env(tmp: Path, recipe):
    ctx = sf.context(tmp / "stack", recipe, tmp / "cache")
    out = EnvStep().run(ctx).to_json()
    ctx.done["env"] = sf.record(EnvStep().load(out))
    return ctx, out


def test_preflight_checks_version_and_cuda_build(tmp_path, system):
    facts = systorch.probe(sf.context(tmp_path / "s", _recipe(tmp_path, system), tmp_path / "c").runner, "t", system)
    assert facts["version"] == TORCH and facts["cuda"] == "13.0"
    assert systorch.check(_recipe(tmp_path, system), facts)[0] is True
    ok, expected, found, fix = systorch.check(_recipe(tmp_path, system, "2.11.0+cu129", "12.9"), facts)
    assert not ok and "torch 2.11.0+cu129 built for CUDA 12.9" in expected and "torch 2.11.0+cu130 (CUDA 13.0)" in found
    assert "--system-python" in fix
    ok, _, found, fix = systorch.check(_recipe(tmp_path, system, TORCH, "12.8"), facts)
    assert not ok and "CUDA build" in fix
    # the scenario hunt: the fix named only versions, the recipe's own among them, never the CUDA build wanted
    assert f"an interpreter with torch {TORCH} built for CUDA 12.8" in fix, fix
    assert f"a recipe pinning torch {TORCH} for CUDA 13.0" in fix and "differs:" in fix, fix
    # the same rule as the env step's (same_cuda_major): a torch for CUDA 13.0 runs kernels of a 13.1 toolkit
    ok, expected, _, _ = systorch.check(_recipe(tmp_path, system, TORCH, "13.1"), facts)
    assert ok and "built for CUDA 13.1 (or another 13.x" in expected, expected
    # In the preflight table: a failed, unskippable 'torch' check with the punch-list line.
    results = preflight_evaluate(_recipe(tmp_path, system, "2.10.0+cu128", "13.0"), good_facts(), ("nvcc", "cuda_arch"),
                                 facts)
    torch = next(r for r in results if r.name == "torch")
    assert torch.status == "failed" and "expected torch 2.10.0+cu128" in torch.detail and "-> " in torch.detail


def test_an_interpreter_without_torch_fails_preflight(tmp_path):
    ctx = sf.context(tmp_path / "s", _recipe(tmp_path, Path(sys.executable)), tmp_path / "c")
    bare = tmp_path / "bare"
    _uv("venv", "-q", "--python", sys.executable, str(bare), cache=tmp_path / "uvc")
    facts = systorch.probe(ctx.runner, "t", bare / "bin" / "python")
    ok, _, found, fix = systorch.check(_recipe(tmp_path, bare / "bin/python"), facts)
    assert not ok and "import torch failed" in found and "install torch" in fix


def test_env_on_the_system_interpreter_sees_its_torch_and_records_it(tmp_path, system):
    ctx, out = _env(tmp_path, _recipe(tmp_path, system))
    assert out["torch"] == TORCH and out["torch_source"] == "system" and out["torch_cuda"] == "13.0"
    sys_site = Path(out["system_torch"]["path"]).parent
    assert out["system_torch"]["path"] == str(sys_site / "torch")
    assert sys_site in {Path(p) for p in out["system_torch"]["site_packages"]}
    assert "include-system-site-packages = true" in (ctx.paths.env / "pyvenv.cfg").read_text()
    seen = subprocess.run([str(ctx.paths.python), "-I", "-c", "import torch; print(torch.__file__)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert Path(seen).parent == sys_site / "torch"
    assert not list(ctx.paths.env.glob("lib/python*/site-packages/torch*"))
    assert EnvStep().verify(ctx, EnvStep().load(out)) is None
    # lock: torch and its neighbours are the system's, not the env's packages
    raw = probe_env(ctx, "lock")
    _, own = installed_distributions(ctx, "lock", raw)
    assert "torch" not in {d.name for d in own}
    section = system_section(ctx, raw)
    assert section is not None and section["torch"]["version"] == TORCH and section["torch"]["cuda"] == "13.0"


def test_a_torch_installed_into_the_env_is_caught(tmp_path, system):
    """The guard proves nothing shadows the system torch: plant a torch in the env's own site-packages."""
    ctx, out = _env(tmp_path, _recipe(tmp_path, system))
    spec = GuardSpec(python=ctx.paths.python, torch_version=TORCH, forks={}, system_torch=out["system_torch"])
    assert evaluate(spec, probe(ctx.runner, "install", spec)).results["torch"] == "ok"
    wheels = tmp_path / "shadow"
    _torch_wheel(wheels)       # the very same version, but in the env: still a shadow
    _uv("pip", "install", "-q", "--python", str(ctx.paths.python), "--no-index", "--find-links", str(wheels),
        f"torch=={TORCH}", cache=tmp_path / "cache" / "uv")
    with pytest.raises(InstallError) as err:
        evaluate(spec, probe(ctx.runner, "install", spec))
    text = str(err.value)
    assert "no torch distribution in" in text and "it resolves to" in text and "re-run october_setup" in text
    assert "torch was installed into" in (EnvStep().verify(ctx, EnvStep().load(out)) or "")


def test_a_wrong_system_torch_stops_the_env_step(tmp_path, system):
    with pytest.raises(EnvError) as err:
        _env(tmp_path, _recipe(tmp_path, system, "2.11.0+cu129", "12.9"))
    assert "expected torch 2.11.0+cu129" in str(err.value).lower() or "2.11.0+cu129" in str(err.value)


def _index_only(tmp_path):
    """flashinfer-pr3812 with allow_system removed: a recipe that installs torch itself."""
    text = (Path(__file__).resolve().parent.parent / "recipes" / "flashinfer-pr3812.toml").read_text()
    path = tmp_path / "index-only.toml"
    path.write_text(text.replace("allow_system = true\n", ""))
    return load_recipe(str(path))


def test_the_recipe_must_allow_a_system_torch(tmp_path, system):
    rec = _index_only(tmp_path)
    with pytest.raises(UsageError) as err:
        systorch.with_system_torch(rec, system)
    assert "allow_system" in str(err.value)
    pr = load_recipe("flashinfer-pr3812")
    assert systorch.with_system_torch(pr, None).torch.from_system is False
    got = systorch.with_system_torch(pr, system).torch
    assert got.from_system and got.system_python == str(system.absolute()) and got.version == "2.11.0+cu130"
    with pytest.raises(FileSystemError, match="does not exist"):     # a path option naming nothing: exit 19
        systorch.with_system_torch(pr, tmp_path / "no-python")


def test_the_real_torch_of_the_dev_env_as_the_system_torch(tmp_path):
    """This project's dev env (its real torch) as the site-provided torch: probe, env, import, guard."""
    facts = json.loads(subprocess.run(     # the dev env's real torch, read without importing it here
        [sys.executable, "-W", "ignore", "-c", "import torch, json; print(json.dumps([torch.__version__, "
         "torch.version.cuda, torch.__file__]))"], capture_output=True, text=True, check=True).stdout.splitlines()[-1])
    version, cuda, torch_file = facts
    python = Path(sys.executable)
    rec = _recipe(tmp_path, python, version, cuda or "13.0")
    ctx, out = _env(tmp_path, rec)
    assert out["torch"] == version and Path(out["system_torch"]["path"]) == Path(torch_file).parent
    code = "import torch, json; print(json.dumps([torch.__version__, torch.__file__, float(torch.ones(3).sum())]))"
    got = json.loads(subprocess.run([str(ctx.paths.python), "-I", "-W", "ignore", "-c", code], capture_output=True, text=True,
                                    check=True).stdout.strip().splitlines()[-1])
    assert got[0] == version and Path(got[1]) == Path(torch_file) and got[2] == 3.0
    spec = GuardSpec(python=ctx.paths.python, torch_version=version, forks={}, system_torch=out["system_torch"])
    assert evaluate(spec, probe(ctx.runner, "install", spec)).results["torch"] == "ok"


def _world_on_system_torch(tmp_path: Path):
    """The offline fixture world whose recipe allows a site torch, and a system interpreter (a uv venv) with
    the torch stand-in installed by uv (no bytecode) -> (recipe taking torch from it, its site torch dir)."""
    from tests.fixtures.world import make_world

    world = make_world(tmp_path / "world")
    world.recipe.write_text(world.recipe.read_text().replace('version = "2.10.0+fixture"\n',
                                                             'version = "2.10.0+fixture"\nallow_system = true\n'))
    root = tmp_path / "system"
    _torch_wheel(root / "wheels", "2.10.0+fixture", "13.0")
    _uv("venv", "-q", "--python", sys.executable, str(root / "sys"), cache=root / "uvc")
    _uv("pip", "install", "-q", "--python", str(root / "sys/bin/python"), "--no-index", "--find-links",
        str(root / "wheels"), "torch==2.10.0+fixture", cache=root / "uvc")
    recipe = systorch.with_system_torch(load_recipe(str(world.recipe)), root / "sys/bin/python")
    return recipe, next((root / "sys").glob("lib/python*/site-packages/torch"))


def _pycs(top: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(top)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(top.rglob("*.pyc"))}


@pytest.mark.slow
def test_setup_end_to_end_with_a_site_provided_torch(tmp_path):
    """october_setup on the offline fixture world with torch from a system interpreter: every step runs,
    the lock lists no torch package but records the system torch, the receipt says where torch came from;
    the no-op re-run runs nothing; a torch planted into the env is noticed and the env made again."""
    from october.installer.engine import SetupOptions, SilentReporter
    from october.installer.lock.pylock import read_lock
    from october.installer.pipeline.plan import run_setup

    recipe, site_torch = _world_on_system_torch(tmp_path)
    root = site_torch.parents[4]
    # the site ships its torch compiled, as pip leaves it: the env step offers that bytecode to its prefix
    assert compileall.compile_dir(str(site_torch), quiet=1)
    shipped = _pycs(site_torch)
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    opts = SetupOptions(stack=stack, recipe=recipe, cache_dir=cache)
    first = run_setup(opts, SilentReporter())
    assert all(r.status == "ran" for r in first.records)
    # the run's torch imports shared one bytecode prefix, gone with the run; nothing was compiled beside
    # the system interpreter's own files (a -I probe would otherwise write torch/__pycache__ there)
    assert not (stack / ".state" / "pycache").exists()
    assert _pycs(site_torch) == shipped                  # names, bytes and mtimes: nothing written there
    env_log = (stack / "logs" / "env.log").read_text()
    assert f"-X pycache_prefix={stack / '.state' / 'pycache'}" in env_log
    offered = re.search(r"# (\d+) compiled module\(s\) of the site torch and (\d+) of its interpreter's", env_log)
    assert offered is not None and int(offered.group(1)) == len(shipped) > 0, env_log
    # and the standard library, where the system interpreter's sysconfig says, with its cache tag
    tag = sys.implementation.cache_tag
    stdlib_pycs = list(Path(sysconfig.get_path("stdlib")).glob(f"json/__pycache__/*.{tag}.pyc"))
    assert (int(offered.group(2)) > len(stdlib_pycs)) if stdlib_pycs else int(offered.group(2)) == 0, env_log
    lock = read_lock(stack / "pylock.toml")
    assert "torch" not in {p["name"] for p in lock["packages"]}
    assert {"alpha", "beta", "tinydep"} <= {p["name"] for p in lock["packages"]}
    system = lock["tool"]["october"]["system"]
    assert system["torch"]["version"] == "2.10.0+fixture" and system["torch"]["cuda"] == "13.0"
    assert Path(system["torch"]["path"]).is_relative_to(root / "sys")
    receipt = json.loads((stack / "receipts/setup.json").read_text())
    assert receipt["torch"]["source"] == "system" and receipt["torch"]["version"] == "2.10.0+fixture"
    torch_check = next(c for c in receipt["preflight"]["checks"] if c["name"] == "torch")
    assert torch_check["status"] == "passed"
    again = run_setup(opts, SilentReporter())
    assert all(r.status == "cached" for r in again.records)
    _uv("pip", "install", "-q", "--python", str(stack / "env/bin/python"), "--no-index", "--find-links",
        str(root / "wheels"), "torch==2.10.0+fixture", cache=root / "uvc")
    third = run_setup(opts, SilentReporter())
    assert {r.name: r.status for r in third.records}["env"] == "ran"
    assert not list((stack / "env").glob("lib/python*/site-packages/torch*"))


def test_a_kit_can_be_marked_for_a_site_provided_torch(tmp_path):
    pr = systorch.mark_system(load_recipe("flashinfer-pr3812"))
    assert pr.torch.from_system and pr.torch.system_python is None and pr.torch.index_url is None
    with pytest.raises(UsageError):
        systorch.mark_system(_index_only(tmp_path))


def test_supply_and_consistency_count_the_system_interpreter_s_packages(tmp_path, system):
    """With torch from the system, a supplied requirement the system already meets is not installed (it
    would only shadow the system's copy), and the system's distributions meet the env's requirements."""
    from october.installer.install import consistency

    have = systorch.site_distributions(systorch.site_dirs(systorch.probe(
        sf.context(tmp_path / "s", _recipe(tmp_path, system), tmp_path / "c").runner, "t", system)))
    assert have["torch"] == TORCH
    assert systorch.unmet(["torch>=2.11", "apache-tvm-ffi>=0.1.6", "torch<2"], have) == ["apache-tvm-ffi>=0.1.6",
                                                                                        "torch<2"]
    fork = consistency.Dist("flashinfer-python", "0.6.15", ("torch", "apache-tvm-ffi"))
    provided = consistency.installed_in([Path(d) for d in systorch.site_dirs({"site_packages": [
        str(p) for p in (system.parent.parent / "lib").glob("python*/site-packages")]})])
    missing = consistency.conflicts([fork], "3.11.7", provided)
    assert [c.requires for c in missing] == ["apache-tvm-ffi"]          # torch met by the system
    assert [c.requires for c in consistency.conflicts([fork], "3.11.7")] == ["apache-tvm-ffi", "torch"]


def test_preflight_locates_torch_without_importing_it_and_agrees_with_the_import(tmp_path):
    """Preflight's probe (``--locate``) reads torch's files instead of importing it (6.7 s cold on the H200);
    on a real torch both modes give the same facts, so the stand-in mode cannot drift from the import."""
    ctx = sf.context(tmp_path / "s", _recipe(tmp_path, Path(sys.executable)), tmp_path / "c")
    imported = systorch.probe(ctx.runner, "t", Path(sys.executable))
    located = systorch.probe(ctx.runner, "t", Path(sys.executable), locate=True)
    keys = ("version", "cuda", "file", "dist_version", "dist_site", "site_packages", "python")
    assert "error" not in imported and {k: located.get(k) for k in keys} == {k: imported.get(k) for k in keys}
    recipe = _recipe(tmp_path, Path(sys.executable), imported["version"], imported["cuda"] or "13.0")
    assert systorch.check(recipe, located)[0] == systorch.check(recipe, imported)[0]


def test_a_torch_that_is_not_there_fails_the_located_probe_too(tmp_path):
    """A package named torch whose import raises is still located (its version module read, nothing run);
    an interpreter with no torch at all fails both probes."""
    ctx = sf.context(tmp_path / "s", _recipe(tmp_path, Path(sys.executable)), tmp_path / "c")
    bare = tmp_path / "bare"
    _uv("venv", "-q", "--python", sys.executable, str(bare), cache=tmp_path / "uvc")
    py = bare / "bin" / "python"
    for locate in (False, True):
        assert "import torch failed" in systorch.probe(ctx.runner, "t", py, locate=locate)["error"]
    site = next((bare / "lib").glob("python3*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("raise RuntimeError('planted: importing torch runs this')\n")
    (site / "torch" / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    located = systorch.probe(ctx.runner, "t", py, locate=True)
    assert (located["version"], located["cuda"]) == ("2.11.0+cu130", "13.0") and "error" not in located
    assert "planted: importing torch runs this" in systorch.probe(ctx.runner, "t", py)["error"]


def test_a_supplied_package_that_needs_the_system_s_torch_installs_offline(tmp_path):
    """uv does not see a venv's system site packages (astral-sh/uv#7358).  Offline, from a find-links that
    holds only what the system lacks (as a kit made with --have does), a supplied package requiring torch
    and another system package made uv look for its own torch: "torch was not found" -- met on the real
    vLLM recipe (compressed-tensors needs torch).  The env now excludes torch and the system's packages
    from uv's resolution; a package the find-links carries (a version the stack needs) is installed."""
    root = tmp_path / "sys"
    wheels, kit = tmp_path / "syswheels", tmp_path / "kitwheels"
    _torch_wheel(wheels)
    build_wheel(wheels, "sysdep", "1.0")
    build_wheel(wheels, "carried", "1.0")
    _uv("venv", "-q", "--python", sys.executable, str(root), cache=tmp_path / "uvc")
    _uv("pip", "install", "-q", "--python", str(root / "bin/python"), "--no-index", "--find-links", str(wheels),
        f"torch=={TORCH}", "sysdep==1.0", "carried==1.0", cache=tmp_path / "uvc")
    build_wheel(kit, "needs-torch", "1.0", requires=[f"torch=={TORCH}", "sysdep>=1.0", "carried>=2.0"])
    build_wheel(kit, "carried", "2.0")
    rec = _recipe(tmp_path, root / "bin" / "python")
    rec = dataclasses.replace(rec, sources=dataclasses.replace(rec.sources, find_links=(str(kit),), no_index=True),
                              install=dataclasses.replace(rec.install, supply=("needs-torch",)))
    ctx, out = _env(tmp_path, rec)
    own = {p.name.split("-")[0] for p in ctx.paths.env.glob("lib/python*/site-packages/*.dist-info")}
    assert {"needs_torch", "carried"} <= own and not own & {"torch", "sysdep"}, own
    excluded = (ctx.paths.state / "system-excludes.txt").read_text().split()
    assert "torch" in excluded and "sysdep" in excluded and "needs-torch" not in excluded
    # the fault, planted: the same install without the excludes is what failed
    proc = subprocess.run([uv_exe(), "pip", "install", "--python", str(ctx.paths.python), "--no-index",
                           "--find-links", str(kit), "--reinstall", "needs-torch"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    assert proc.returncode != 0 and "torch" in proc.stderr


def test_a_system_package_s_requirement_is_checked_where_the_env_shadows_what_it_needs():
    """uv's resolution does not see the system interpreter's packages, so nothing there holds torch's own
    pins: a newer triton installed into the env would shadow the one torch pins, and the env's own
    requirements would all be met.  Planted: the system's torch requires triton==3.6.0 and an extra of a
    system package needs a distribution nobody installed; the env installs triton 3.9.0 and asks for
    the extra.  Both are named; untouched system requirements are not judged."""
    from october.installer.install import consistency

    system = [consistency.Dist("torch", TORCH, ("triton==3.6.0", "filelock")),
              consistency.Dist("triton", "3.6.0", ()),
              consistency.Dist("sysx", "1.0", ("speedup; extra == 'fast'", "gone-from-site>=1"))]
    env = [consistency.Dist("triton", "3.9.0", ()), consistency.Dist("needs-x", "1.0", ("sysx[fast]",))]
    found = {(c.package, c.requires, c.found) for c in consistency.conflicts(env, "3.12.3", system)}
    assert found == {("torch", "triton", "3.9.0"), ("sysx", "speedup", None)}
    # nothing shadowed, no extra asked: the system's own state is not judged
    assert consistency.conflicts([consistency.Dist("other", "1.0", ())], "3.12.3", system) == []


def test_a_system_requirement_s_name_is_read_as_packaging_reads_it():
    """The shadow check reads a system line's name before parsing it (issue 20: 2,800 lines of an image).
    Held: the name equals packaging's ``Requirement(line).name`` for every requirement of every distribution
    in this test env and for the odd spellings PEP 508 allows; and a shadow written in them is still found."""
    from importlib.metadata import distributions

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from october.installer.install import consistency

    odd = ["Triton (==3.6.0)", "TRITON[x,y]>=3.6,<3.7; python_version >= '3'", "  triton", "triton@ https://e.invalid/t.whl",
           "Triton_Lib.x-y>=1", "triton;extra=='z'", "t", "1x>=2"]
    lines = odd + [ln for d in distributions() for ln in (d.requires or [])]
    assert len(lines) > 100
    for line in lines:
        try:
            want = str(canonicalize_name(Requirement(line).name))
        except InvalidRequirement:
            continue
        assert consistency.requirement_name(line) == want, line
    system = [consistency.Dist("torch", TORCH, tuple(odd[:2]))]
    env = [consistency.Dist("triton", "3.9.0", ())]
    found = {(c.package, c.requires, c.found) for c in consistency.conflicts(env, "3.12.3", system)}
    assert found == {("torch", "triton", "3.9.0")}
    assert len(consistency.conflicts(env, "3.12.3", system)) == 2


def test_what_a_kit_left_out_must_be_in_the_system_interpreter(tmp_path):
    """A kit made with --have left out what that listing said the target has.  Planted: a kit whose
    manifest left out a distribution this interpreter lacks, and one at another version; the env step
    refuses before installing anything, naming both.  The same kit minus those two passes."""
    import dataclasses as dc

    from october.installer.kit.use import Kit

    root = tmp_path / "sys"
    wheels, kitdir = tmp_path / "syswheels", tmp_path / "kit"
    _torch_wheel(wheels)
    build_wheel(wheels, "sysdep", "1.0")
    _uv("venv", "-q", "--python", sys.executable, str(root), cache=tmp_path / "uvc")
    _uv("pip", "install", "-q", "--python", str(root / "bin/python"), "--no-index", "--find-links", str(wheels),
        f"torch=={TORCH}", "sysdep==1.0", cache=tmp_path / "uvc")
    (kitdir / "wheels").mkdir(parents=True)
    build_wheel(kitdir / "wheels", "needs-sysdep", "1.0", requires=["sysdep>=1.0"])
    rec = _recipe(tmp_path, root / "bin" / "python")
    rec = dc.replace(rec, sources=dc.replace(rec.sources, find_links=(str(kitdir / "wheels"),), no_index=True),
                     install=dc.replace(rec.install, supply=("needs-sysdep",)))

    def run(left_out):
        ctx = sf.context(tmp_path / f"stack{len(left_out)}", rec, tmp_path / "cache")
        kit = Kit(root=kitdir, manifest={"left_out": [{"package": p, "version": v, "filename": f"{p}-{v}.whl",
                                                       "why": "the target has it (--have)"} for p, v in left_out]},
                  repos={})
        ctx = dc.replace(ctx, options=dc.replace(ctx.options, kit=kit))
        return ctx, EnvStep().run(ctx)

    with pytest.raises(EnvError) as err:
        run([("sysdep", "1.0"), ("Absent_Pkg", "2.0"), ("sysdep", "9.0")])
    assert "Absent_Pkg==2.0 (found none)" in str(err.value) and "sysdep==9.0 (found 1.0)" in str(err.value)
    assert "left out 2 wheel(s)" in str(err.value)
    ctx, out = run([("sysdep", "1.0")])
    assert out.torch == TORCH


@pytest.mark.slow
def test_bytecode_a_killed_run_left_in_the_prefix_is_never_run(tmp_path):
    """The review: the run's pycache prefix was removed only as a run ended, so a run killed with SIGKILL left
    it, and the next run's imports executed it.  Planted: a compiled torch/version.py that also writes a marker
    file, its header matching the real source (mtime and size, as Python checks), where the prefix puts it.
    The run clears the prefix as it begins: the setup passes and the marker is never written."""
    import importlib._bootstrap_external as bootstrap

    from october.installer.engine import SetupOptions, SilentReporter
    from october.installer.pipeline.plan import run_setup

    recipe, site_torch = _world_on_system_torch(tmp_path)
    stack = tmp_path / "stack"
    source = site_torch / "version.py"
    marker = tmp_path / "the-planted-bytecode-ran"
    lie = compile(source.read_text() + f"open({str(marker)!r}, 'w').write('ran')\n", str(source), "exec")
    tag = sys.implementation.cache_tag
    planted = stack / ".state" / "pycache" / str(site_torch).lstrip(os.sep) / f"version.{tag}.pyc"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(bootstrap._code_to_timestamp_pyc(lie, source.stat().st_mtime, source.stat().st_size))
    copy = tmp_path / "copy-of-the-plant"
    shutil.copytree(stack / ".state" / "pycache", copy)
    subprocess.run([str(site_torch.parents[3] / "bin" / "python"), "-B", "-X", f"pycache_prefix={copy}", "-c",
                    "import torch.version"], check=True, env={k: v for k, v in os.environ.items() if k[:6] != "PYTHON"})
    assert marker.read_text() == "ran"                   # the plant is one Python runs, from a prefix
    marker.unlink()
    first = run_setup(SetupOptions(stack=stack, recipe=recipe, cache_dir=tmp_path / "cache"), SilentReporter())
    assert {r.name: r.status for r in first.records}["env"] == "ran"
    assert not marker.exists() and not (stack / ".state" / "pycache").exists()


def test_a_damaged_site_pyc_does_not_fail_the_env_step(tmp_path):
    """The review: a site .pyc with a good header and a damaged body made the probe fail where compiling the
    source passed.  The env step probes again without the site's bytecode, and says so in its log."""
    root = tmp_path / "system"
    _torch_wheel(root / "wheels")
    _uv("venv", "-q", "--python", sys.executable, str(root / "sys"), cache=root / "uvc")
    _uv("pip", "install", "-q", "--python", str(root / "sys/bin/python"), "--no-index", "--find-links",
        str(root / "wheels"), f"torch=={TORCH}", cache=root / "uvc")
    site_torch = next((root / "sys").glob("lib/python*/site-packages/torch"))
    assert compileall.compile_dir(str(site_torch), quiet=1)
    pyc = next(site_torch.glob("__pycache__/version.*.pyc"))
    mtime = pyc.stat().st_mtime_ns
    pyc.write_bytes(pyc.read_bytes()[:16] + b"\xff" * 40)         # the header kept, the code object not
    os.utime(pyc, ns=(mtime, mtime))
    ctx, out = _env(tmp_path, _recipe(tmp_path, root / "sys" / "bin" / "python"))
    assert out["torch"] == TORCH
    assert "# the probe failed with the site's bytecode offered; again without it" in \
        ctx.runner.log_path("env").read_text()


@pytest.mark.slow
def test_a_package_added_to_the_system_interpreter_after_setup_is_a_difference(tmp_path):
    """The scenario hunt: ``uv pip install`` into the ``--system-python`` interpreter after setup (a package
    the stack then imports from its site directories): verify passed and the re-run kept a lock that no
    longer said what the stack uses.  Now verify names it ([system], the lock's
    ``[tool.october.system.packages]`` against the site directories), and the re-run writes the lock again,
    saying why (the system is not this tool's to put back)."""
    from october.installer.engine import SetupOptions, SilentReporter
    from october.installer.lock.pylock import read_lock
    from october.installer.pipeline.plan import run_setup
    from tests.fixtures.root import PROJECT_ROOT
    from tests.fixtures.wheels import build_wheel

    recipe, site_torch = _world_on_system_torch(tmp_path)
    root = site_torch.parents[4]
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    opts = SetupOptions(stack=stack, recipe=recipe, cache_dir=cache)
    run_setup(opts, SilentReporter())

    def verify() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=300)

    assert verify().returncode == 0
    from october.installer.core.errors import LockError
    from october.installer.lock.drift import system_drift
    from october.installer.lock.pylock import locked_state

    golden = tmp_path / "golden.pylock.toml"
    golden.write_bytes((stack / "pylock.toml").read_bytes())
    older = read_lock(golden)                     # a lock of an earlier version: no `sites`
    del older["tool"]["october"]["system"]["sites"]
    assert system_drift(older, stack / "env") is None
    build_wheel(root / "extra", "sysextra", "1.0", {"sysextra/__init__.py": "X = 1\n"})
    _uv("pip", "install", "-q", "--python", str(root / "sys/bin/python"), "--no-index", "--find-links",
        str(root / "extra"), "sysextra==1.0", cache=root / "uvc")
    found = verify()
    assert found.returncode == 13 and "[system]" in found.stderr and "sysextra - -> 1.0" in found.stderr, found.stderr
    # the review's hunt: a stack of an earlier version (no `sites` in its lock) is held to the stack
    # interpreter's sys.path instead, and --locked compares the system's packages too
    assert "sysextra - -> 1.0" in (system_drift(older, stack / "env") or "")
    with pytest.raises(LockError) as refused:
        run_setup(SetupOptions(stack=tmp_path / "locked", recipe=recipe, cache_dir=cache,
                               locked=locked_state(golden)), SilentReporter())
    assert "sysextra from the system interpreter: lock says none, stack has 1.0" in str(refused.value)
    again = run_setup(opts, SilentReporter())
    assert {r.name: r.status for r in again.records}["lock"] == "ran"
    assert read_lock(stack / "pylock.toml")["tool"]["october"]["system"]["packages"]["sysextra"] == "1.0"
    assert verify().returncode == 0
    assert all(r.status == "cached" for r in run_setup(opts, SilentReporter()).records)
    # a .pth dropped into a system site folder runs in every Python of the stack (site.addsitedir reads it)
    site = Path(read_lock(stack / "pylock.toml")["tool"]["october"]["system"]["sites"][0])
    (site / "zz-hook.pth").write_text("import os\n")
    found = verify()
    assert found.returncode == 13 and "[system]" in found.stderr and "zz-hook.pth - -> " in found.stderr, found.stderr
    assert {r.name: r.status for r in run_setup(opts, SilentReporter()).records}["lock"] == "ran"
    assert verify().returncode == 0
    (site / "zz-hook.pth").write_text("import sys\n")          # changed in place
    assert "zz-hook.pth " in verify().stderr
    assert {r.name: r.status for r in run_setup(opts, SilentReporter()).records}["lock"] == "ran"
    (site / "zz-hook.pth").unlink()
    assert verify().returncode == 13
    assert {r.name: r.status for r in run_setup(opts, SilentReporter()).records}["lock"] == "ran"
    assert verify().returncode == 0
    # the verify hunt: a sitecustomize module there runs at every start too (it moved the JIT workspace): named,
    # and the re-run locks it again
    for planted in ("sitecustomize.py", "usercustomize"):
        where = site / planted
        where.mkdir() if "." not in planted else None
        (where / "__init__.py" if where.is_dir() else where).write_text("import os\n")
        found = verify()
        assert found.returncode == 13 and f"{planted} - -> " in found.stderr, found.stderr
        assert {r.name: r.status for r in run_setup(opts, SilentReporter()).records}["lock"] == "ran"
        assert verify().returncode == 0
    # the bytecode Python writes into the package as it imports it is not a change
    (site / "usercustomize" / "__pycache__").mkdir()
    (site / "usercustomize" / "__pycache__" / "__init__.cpython-312.pyc").write_bytes(importlib.util.MAGIC_NUMBER + bytes(12))   # flags 0: held to its source
    assert verify().returncode == 0


def _dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.slow
def test_a_name_in_two_system_site_folders_is_the_one_python_imports_and_no_difference(tmp_path):
    """The review: with one distribution in two system site folders (Debian's /usr/local/.../dist-packages
    before /usr/lib/python3/dist-packages), the lock kept the shadowed copy and the check read the folders in
    another order: a fresh stack was a [system] difference and re-locked on every run.  Both now take the first
    on sys.path, the one Python imports."""
    from october.installer.engine import SetupOptions, SilentReporter
    from october.installer.lock.pylock import read_lock
    from october.installer.pipeline.plan import run_setup
    from tests.fixtures.root import PROJECT_ROOT
    from tests.fixtures.wheels import build_wheel

    recipe, site_torch = _world_on_system_torch(tmp_path)
    root, site = site_torch.parents[4], site_torch.parent
    build_wheel(root / "extra", "sysextra", "1.0", {"sysextra/__init__.py": "X = 1\n"})
    _uv("pip", "install", "-q", "--python", str(root / "sys/bin/python"), "--no-index", "--find-links",
        str(root / "extra"), "sysextra==1.0", cache=root / "uvc")
    later = root / "later-site"                         # after the venv's own site on sys.path (a .pth adds it)
    _dist_info(later, "aaaextra", "2.0")                # sorts first: its folder is met first by name
    _dist_info(later, "sysextra", "0.9")                # shadowed by the 1.0 above
    (site / "zz_later.pth").write_text(f"{later}\n")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    opts = SetupOptions(stack=stack, recipe=recipe, cache_dir=cache)
    run_setup(opts, SilentReporter())
    system = read_lock(stack / "pylock.toml")["tool"]["october"]["system"]
    assert system["packages"]["sysextra"] == "1.0" and system["packages"]["aaaextra"] == "2.0"
    assert system["sites"].index(str(site)) < system["sites"].index(str(later))
    checked = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr
    assert all(r.status == "cached" for r in run_setup(opts, SilentReporter()).records)


def test_a_pth_dropped_into_a_system_site_folder_that_held_no_distribution_is_a_difference(tmp_path: Path) -> None:
    """The review: only the site folders a system distribution came from were held to their .pth files; the
    stack's Python reads .pth files in every site folder the env's own .pth adds (an empty dist-packages of
    the base interpreter).  The lock records those (``pth_sites``) and each file's full sha256."""
    from october.installer.lock.drift import site_pth, system_drift

    used, empty = tmp_path / "site-packages", tmp_path / "dist-packages"
    used.mkdir()
    empty.mkdir()
    _dist_info(used, "certifi", "2024.2.2")
    lock = {"tool": {"october": {"system": {"packages": {"certifi": "2024.2.2"}, "sites": [str(used)],
                                            "pth_sites": [str(used), str(empty)],
                                            "pth": site_pth([str(used), str(empty)])}}}}
    assert system_drift(lock, tmp_path / "env") is None
    (empty / "zz-hook.pth").write_text("import os\n")
    found = system_drift(lock, tmp_path / "env")
    assert found is not None and f"{empty / 'zz-hook.pth'} - -> " in found
    assert len(found.rsplit(" ", 1)[-1]) == 64


@pytest.mark.slow
def test_the_system_torch_swapped_for_another_cuda_build_of_its_version_is_a_difference(tmp_path):
    """The scenario hunt: `uv pip install --reinstall` of the same torch version built for another CUDA into
    the --system-python interpreter passed verify (it compared the version only; the lock records the CUDA
    build).  Its version.py (read, not run) is held to the lock's [tool.october.system.torch] cuda."""
    from october.installer.engine import SetupOptions, SilentReporter
    from october.installer.pipeline.plan import run_setup
    from tests.fixtures.root import PROJECT_ROOT

    recipe, site_torch = _world_on_system_torch(tmp_path)
    root = site_torch.parents[4]
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    run_setup(SetupOptions(stack=stack, recipe=recipe, cache_dir=cache), SilentReporter())

    def verify() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=300)

    assert verify().returncode == 0
    _torch_wheel(root / "other", "2.10.0+fixture", "12.8")
    _uv("pip", "install", "-q", "--reinstall", "--python", str(root / "sys/bin/python"), "--no-index", "--find-links",
        str(root / "other"), "torch==2.10.0+fixture", cache=root / "uvc2")
    found = verify()
    assert found.returncode == 13 and "built for CUDA 13.0" in found.stderr and "a build for CUDA 12.8" in found.stderr, \
        found.stderr
    # torch's own generated file, as the real wheels write it
    from october.installer.pyenv.venv import torch_cuda

    real = tmp_path / "version.py"
    real.write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\n"
                    "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n")
    assert torch_cuda(real) == "13.0"
    real.write_text("__version__ = '2.11.0+cpu'\ncuda: Optional[str] = None\n")
    assert torch_cuda(real) is None


@pytest.mark.slow
def test_a_lock_that_predates_the_pth_record_is_written_again_by_the_noop(tmp_path):
    """The upgrade hunt: a --system-python stack set up by the earlier october (its lock records no .pth files
    of the system site folders) passed verify and every re-run with a .pth planted there, as its lock was never
    written again.  The no-op now writes such a lock again, which from then on holds the site folders' .pth
    files."""
    import json as _json

    from october.installer.core.hashing import sha256_file
    from october.installer.engine import SetupOptions, SilentReporter
    from october.installer.lock.pylock import read_lock
    from october.installer.pipeline.plan import run_setup
    from tests.fixtures.root import PROJECT_ROOT

    recipe, site_torch = _world_on_system_torch(tmp_path)
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    opts = SetupOptions(stack=stack, recipe=recipe, cache_dir=cache)
    run_setup(opts, SilentReporter())
    import tomli_w

    lock = stack / "pylock.toml"
    data = read_lock(lock)
    assert data["tool"]["october"]["system"].pop("pth_sites") and data["tool"]["october"]["system"].pop("pth") is not None
    lock.write_text(tomli_w.dumps(data))
    assert "pth_sites" not in read_lock(lock)["tool"]["october"]["system"]
    marker = stack / ".state" / "lock.json"
    doc = _json.loads(marker.read_text())
    doc["outputs"]["sha256"] = sha256_file(lock)
    marker.write_text(_json.dumps(doc))
    again = run_setup(opts, SilentReporter())
    assert {r.name: r.status for r in again.records}["lock"] == "ran"
    assert read_lock(lock)["tool"]["october"]["system"].get("pth_sites")
    site = Path(read_lock(lock)["tool"]["october"]["system"]["sites"][0])
    (site / "zz-late.pth").write_text("import os\n")
    found = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                           capture_output=True, text=True, timeout=300)
    assert found.returncode == 13 and "zz-late.pth" in found.stderr, found.stderr


@pytest.mark.slow
def test_a_sitecustomize_there_at_setup_is_no_difference_for_a_lock_that_predates_its_record(tmp_path):
    """The review: a system site folder with a sitecustomize (images write one for vLLM) failed `current verify`
    of an unchanged stack set up by the earlier version (its lock records no startup modules: the module was
    taken for an added file).  Such a lock is not held to them, and is not written again for that alone (the
    upgrade hunt: that re-lock ran a new resolution, which failed where the wheel sources were gone)."""
    import json as _json

    import tomli_w

    from october.installer.core.hashing import sha256_file
    from october.installer.engine import SetupOptions, SilentReporter
    from october.installer.lock.drift import system_drift
    from october.installer.lock.pylock import read_lock
    from october.installer.pipeline.plan import run_setup

    recipe, _site_torch = _world_on_system_torch(tmp_path)
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    opts = SetupOptions(stack=stack, recipe=recipe, cache_dir=cache)
    run_setup(opts, SilentReporter())
    lock = stack / "pylock.toml"
    assert read_lock(lock)["tool"]["october"]["system"]["startup"] == {}
    site = Path(read_lock(lock)["tool"]["october"]["system"]["sites"][0])
    (site / "sitecustomize.py").write_text("import os\n")          # the image's own, there before the upgrade
    assert "sitecustomize.py" in (system_drift(read_lock(lock), stack / "env") or "")     # this version's lock
    data = read_lock(lock)
    data["tool"]["october"]["system"].pop("startup")               # the lock as the earlier version wrote it
    lock.write_text(tomli_w.dumps(data))
    marker = stack / ".state" / "lock.json"
    doc = _json.loads(marker.read_text())
    doc["outputs"]["sha256"] = sha256_file(lock)
    marker.write_text(_json.dumps(doc))
    assert system_drift(read_lock(lock), stack / "env") is None     # verify's [system] check of that lock
    assert {r.name: r.status for r in run_setup(opts, SilentReporter()).records}["lock"] == "cached"
