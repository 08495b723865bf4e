"""The install guards rule by rule, without running an install (bench/mutate.py's `install-*` modules).

:mod:`~october.installer.install.guards` judges the probe's facts (plain dicts, as
``checks/probes/install_facts.py`` prints them), :mod:`~october.installer.install.consistency` reads
``.dist-info`` directories written here, :mod:`~october.installer.install.nested` parses the
guard log and runs the real guard script.  tests/test_install_step.py and tests/test_install_nested.py
run the same rules inside real installs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from october.installer.core.errors import InstallError
from october.installer.install import nested
from october.installer.install.consistency import (
    Conflict,
    Dist,
    conflicts,
    env_python_version,
    installed,
    installed_in,
    judge,
    marker_environment,
)
from october.installer.install.guards import NOT_VERIFIABLE, OK, GuardSpec, _under, evaluate, import_guard
from october.installer.recipe import load_recipe  # noqa: F401  (first: recipe -> policy -> consistency import order)
from october.installer.recipe.install import DeclaredException

SRC = Path("/stack/src/flashinfer")
SPEC = GuardSpec(python=Path("/stack/env/bin/python"), torch_version="2.10.0+cu128", forks={"flashinfer": SRC},
                 imports=("vllm._C",))


def _editable(url: str = f"file://{SRC}", editable: Any = True, ships: bool = False) -> dict[str, Any]:
    return {"name": "flashinfer-python", "version": "0.6.7", "ships_package": ships,
            "direct_url": {"url": url, "dir_info": {"editable": editable}}}


def _facts(**over: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "torch": {"versions": ["2.10.0+cu128"]},
        "forks": {"flashinfer": {"dists": [_editable()], "import": {"origin": f"{SRC}/flashinfer/__init__.py"}}},
        "cuda": {"present": True, "lib": "libcuda.so.1", "reason": "loads"},
        "imports": {"vllm._C": {"attempted": True, "ok": True, "error": None}}}
    facts.update(over)
    return facts


def _fails(facts: dict[str, Any]) -> str:
    with pytest.raises(InstallError) as err:
        evaluate(SPEC, facts)
    return str(err.value)


# ------------------------------------------------------------------------------------------ guards


def test_all_good_is_ok_for_every_check() -> None:
    report = evaluate(SPEC, _facts())
    assert dict(report.results) == {"torch": OK, "flashinfer": OK, "import vllm._C": OK}
    assert report.facts["torch"] == {"versions": ["2.10.0+cu128"]}


@pytest.mark.parametrize("versions,found", [([], "no torch distribution"), (["2.10.0+cu128", "2.11.0"],
                                                                              "torch 2.10.0+cu128, 2.11.0")])
def test_torch_missing_or_twice(versions: list[str], found: str) -> None:
    msg = _fails(_facts(torch={"versions": versions}))
    assert "post-install check [torch] failed" in msg and found in msg


@pytest.mark.parametrize("dist", [
    _editable(editable=False), _editable(editable="yes"), _editable(url="file:///elsewhere/flashinfer"),
    _editable(url=f"https://host{SRC}"), {"name": "flashinfer-python", "version": "0.6.7"}])
def test_the_fork_must_be_installed_editable_from_its_checkout(dist: dict[str, Any]) -> None:
    msg = _fails(_facts(forks={"flashinfer": {"dists": [dist], "import": {"origin": f"{SRC}/flashinfer/__init__.py"}}}))
    assert "post-install check [flashinfer] failed" in msg and "installed editable from" in msg


def test_no_distribution_at_all_is_named() -> None:
    msg = _fails(_facts(forks={"flashinfer": {"dists": [], "import": {"origin": f"{SRC}/x.py"}}}))
    assert f"no distribution installed from {SRC}" in msg


def test_another_copy_of_the_package_is_refused() -> None:
    other = {"name": "flashinfer-python", "version": "0.6.0", "ships_package": True, "direct_url": None}
    msg = _fails(_facts(forks={"flashinfer": {"dists": [_editable(), other],
                                              "import": {"origin": f"{SRC}/flashinfer/__init__.py"}}}))
    assert "no other copy of the package 'flashinfer'" in msg and "from an index (no direct_url.json)" in msg


@pytest.mark.parametrize("imp", [{"origin": "/site-packages/flashinfer/__init__.py"}, {"error": "No module"}, {},
                                 {"origin": None, "locations": ["/elsewhere/flashinfer"]}])
def test_the_import_must_resolve_into_the_checkout(imp: dict[str, Any]) -> None:
    msg = _fails(_facts(forks={"flashinfer": {"dists": [_editable()], "import": imp}}))
    assert "post-install check [import flashinfer] failed" in msg


def test_a_namespace_import_located_in_the_checkout_is_accepted() -> None:
    facts = _facts(forks={"flashinfer": {"dists": [_editable()],
                                         "import": {"origin": None, "locations": [str(SRC / "flashinfer")]}}})
    assert evaluate(SPEC, facts).results["flashinfer"] == OK


def test_under_means_inside_the_root() -> None:
    assert _under(str(SRC / "a.py"), SRC) and _under(str(SRC), SRC)
    assert not _under("/stack/src/flashinfer-other/a.py", SRC)
    assert not _under(None, SRC) and not _under("", SRC)


def test_several_problems_are_listed_together_with_each_fix_once() -> None:
    msg = _fails(_facts(torch={"versions": []}, forks={"flashinfer": {"dists": [], "import": {}}}))
    assert msg.startswith("3 post-install checks failed") and msg.count("re-run october_setup (the install step") == 1


def test_imports_not_attempted_failed_or_missing() -> None:
    got = evaluate(SPEC, _facts(cuda={"reason": "no libcuda"}, imports={"vllm._C": {"attempted": False}}))
    assert got.results["import vllm._C"].startswith(f"{NOT_VERIFIABLE}: no CUDA") and "(no libcuda)" in got.results["import vllm._C"]
    msg = _fails(_facts(imports={"vllm._C": {"attempted": True, "ok": False, "error": "undefined symbol"}}))
    assert "[import vllm._C]" in msg and "undefined symbol" in msg
    assert "the probe to try `import vllm._C`" in _fails(_facts(imports={}))


def _ext_wheel(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    checkout = tmp_path / "vllm-src"
    (checkout / "vllm").mkdir(parents=True)
    (checkout / "vllm" / "_C.abi3.so").write_bytes(b"x")
    wheel = {"extensions": [{"module": "vllm._C", "path": "vllm/_C.abi3.so"},
                            {"module": "vllm._moe_C", "path": "vllm/_moe_C.abi3.so"},
                            {"module": "vllm._C", "path": "vllm/_C.abi3.so"},
                            {"module": "other._x", "path": "other/_x.so"}, {"module": "", "path": "x.so"}]}
    return wheel, checkout


def test_import_guard_takes_what_was_placed_once(tmp_path: Path) -> None:
    wheel, checkout = _ext_wheel(tmp_path)
    assert import_guard(wheel, {"vllm": checkout}) == ("vllm._C",)
    (checkout / "vllm" / "_C.abi3.so").unlink()
    with pytest.raises(InstallError, match="placed none") as err:
        import_guard(wheel, {"vllm": checkout})
    assert err.value.found == "none of them"
    with pytest.raises(InstallError) as err:
        import_guard({"extensions": []}, {})
    assert err.value.found == "a wheel with no extension module" and "no checkout" in err.value.expected


# ------------------------------------------------------------------------------------- consistency


def _site(tmp_path: Path, dists: dict[str, tuple[str, list[str]]]) -> Path:
    site = tmp_path / "env" / "lib" / "python3.12" / "site-packages"
    for name, (version, requires) in dists.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
        (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n")
    return site


def test_installed_reads_every_dist_info(tmp_path: Path) -> None:
    site = _site(tmp_path, {"A_Pkg": ("1.0 ", ["b>=1"]), "b": ("2.0", [])})
    (site / "nometa-1.0.dist-info").mkdir()
    (site / "noname-1.0.dist-info").mkdir()
    (site / "noname-1.0.dist-info" / "METADATA").write_text("Version: 1.0\n")
    got = installed(tmp_path / "env")
    assert got == [Dist("a-pkg", "1.0", ("b>=1",)), Dist("b", "2.0", ())]
    assert installed_in([site]) == got


def test_conflicts_names_missing_and_wrong_versions_only(tmp_path: Path) -> None:
    dists = [Dist("a", "1.0", ("b>=2", "c", "d==1.0", "e; python_version < '3'", "f[x]>=1", "junk ((")),
             Dist("b", "1.5", ()), Dist("d", "1.0", ()), Dist("f", "1.0", ("g; extra == 'x'", "h; extra == 'y'"))]
    got = conflicts(dists, "3.12.1")
    assert got == [Conflict("a", "1.0", "b>=2", "b", "1.5"), Conflict("a", "1.0", "c", "c", None),
                   Conflict("f", "1.0", "g; extra == 'x'", "g", None)]
    assert got[0].describe() == "a 1.0 requires b>=2, but b 1.5 is installed"
    assert got[1].describe() == "a 1.0 requires c, but c is not installed"
    provided = [Dist("c", "3.0", ()), Dist("g", "1.0", ())]
    assert conflicts(dists, "3.12.1", provided) == [Conflict("a", "1.0", "b>=2", "b", "1.5")]


def test_an_unparsable_installed_version_is_a_conflict() -> None:
    got = conflicts([Dist("a", "1.0", ("b>=1",)), Dist("b", "not a version", ())], "3.12.0")
    assert got == [Conflict("a", "1.0", "b>=1", "b", "not a version")]


def test_prereleases_satisfy_a_specifier() -> None:
    assert conflicts([Dist("a", "1.0", ("b>=1",)), Dist("b", "2.0rc1", ())], "3.12.0") == []


def test_markers_use_the_stack_python() -> None:
    env = marker_environment("3.10.4")
    assert (env["python_full_version"], env["python_version"], env["implementation_version"]) == \
        ("3.10.4", "3.10", "3.10.4")
    dists = [Dist("a", "1.0", ("b; python_version >= '3.11'",))]
    assert conflicts(dists, "3.10.4") == [] and len(conflicts(dists, "3.12.0")) == 1


def test_judge_splits_declared_undeclared_and_unused() -> None:
    c1 = Conflict("vllm", "0.18", "flashinfer-python==0.5", "flashinfer-python", "0.6")
    c2 = Conflict("vllm", "0.18", "xformers", "xformers", None)
    e1 = DeclaredException("vllm", "flashinfer-python", "superseded by the fork")
    e2 = DeclaredException("vllm", "triton", "not used")
    got = judge([c1, c2], [e1, e2])
    assert got.declared == ((c1, e1),) and got.undeclared == (c2,) and got.unused == (e2,)
    body = got.as_json()
    assert body["undeclared"] == [c2.describe()] and body["unused_declarations"] == [
        {"package": "vllm", "requires": "triton"}]
    assert body["declared"][0]["why"] == "superseded by the fork"


def test_env_python_version_reads_pyvenv_cfg(tmp_path: Path) -> None:
    assert env_python_version(tmp_path) is None
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.12.3\n")
    assert env_python_version(tmp_path) == "3.12.3"
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert env_python_version(tmp_path) is None


def test_the_env_s_own_python_decides_the_markers_and_the_recipe_s_only_without_one(tmp_path: Path) -> None:
    """require_consistent reads the markers with the env's Python (pyvenv.cfg), the recipe's only where the
    env names none: a requirement only Python 3.11 has is unmet in a 3.11 env under a 3.12 recipe."""
    from october.installer.install.consistency import require_consistent

    _site(tmp_path, {"a": ("1.0", ['c>=1; python_version < "3.12"'])})
    env = tmp_path / "env"
    assert require_consistent(env, "3.12.3", (), ()).undeclared == ()       # no pyvenv.cfg: the recipe's 3.12
    (env / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.11.9\n")
    with pytest.raises(InstallError, match="inconsistent: 1 requirement"):
        require_consistent(env, "3.12.3", (), ())                             # the env's 3.11 asks for c


def test_the_stack_python_s_reported_markers_decide_over_the_tool_s(tmp_path: Path) -> None:
    """The markers the stack's own Python reported (the install guards' probe) decide which requirements hold:
    the tool may run on another interpreter (a PyPy tool over a CPython stack, another machine's build of it).
    Planted: a requirement only a PyPy stack has, unmet; the tool's CPython alone would pass it."""
    from october.installer.install.consistency import require_consistent

    _site(tmp_path, {"a": ("1.0", ['c>=1; implementation_name == "pypy"'])})
    env = tmp_path / "env"
    assert require_consistent(env, "3.12.3", (), ()).undeclared == ()       # this CPython: not asked
    with pytest.raises(InstallError, match="inconsistent: 1 requirement"):
        require_consistent(env, "3.12.3", (), (), {"implementation_name": "pypy"})
    assert require_consistent(env, "3.12.3", (), (), {"implementation_name": "cpython"}).undeclared == ()


# ------------------------------------------------------------------------------------------ nested


def test_attempt_packages_skip_options_and_their_values() -> None:
    a = nested.Attempt("uv", ("pip", "install", "--python", "/p/python", "--no-deps", "-e", "/src/x",
                              "cuda-tile>=1", "nixl", "--index-url", "https://i", "nixl", "not a req ((", "-m"))
    assert a.packages == ("cuda-tile", "nixl")
    assert nested.Attempt("pip", ("install", "-r", "reqs.txt")).packages == ()
    assert nested.Attempt("pip3", ("install", "Foo_Bar")).packages == ("foo-bar",)
    assert a.command.startswith("uv pip install --python /p/python")


def test_judge_nested_attempts() -> None:
    attempts = [nested.Attempt("uv", ("pip", "install", "nixl")), nested.Attempt("uv", ("pip", "install", "nixl")),
                nested.Attempt("pip", ("install", "cuda-tile", "evil", "evil")),
                nested.Attempt("pip", ("install", "-r", "x"))]
    v = nested.judge(attempts, {"nixl": "NIXL off", "cuda-tile": "not needed"})
    assert dict(v.refused_declared) == {"nixl": "NIXL off", "cuda-tile": "not needed"}
    assert v.undeclared == ("evil",) and v.unparsed == ("pip install -r x",) and len(v.attempts) == 3
    assert v.as_json()["undeclared"] == ["evil"] and v.as_json()["refused"] == {"nixl": "NIXL off",
                                                                               "cuda-tile": "not needed"}


def test_read_attempts_parses_the_log(tmp_path: Path) -> None:
    log = tmp_path / "nested.log"
    assert nested.read_attempts(log) == []
    log.write_text(f"uv{nested.SEP}pip{nested.SEP}install{nested.SEP}a b\n\n  \npip\n")
    assert nested.read_attempts(log) == [nested.Attempt("uv", ("pip", "install", "a b")), nested.Attempt("pip", ())]


def test_the_guard_scripts_record_and_refuse(tmp_path: Path) -> None:
    d = nested.install_guard(tmp_path / "guard")
    assert nested.install_guard(d) == d                       # idempotent
    (d / "pip").write_text("#!/bin/sh\nexit 0\n")              # a changed script is rewritten
    nested.install_guard(d)
    log = tmp_path / "log"
    env = {**os.environ, **nested.guard_env(d, log, os.environ.get("PATH", ""))}
    for tool in nested.GUARDED:
        assert os.access(d / tool, os.X_OK)
        proc = subprocess.run([tool, "install", "x y"], env=env, capture_output=True, text=True)
        assert proc.returncode == nested.REFUSED_EXIT and "refused nested" in proc.stderr
    assert [a.tool for a in nested.read_attempts(log)] == ["uv", "pip", "pip3"]
    assert nested.read_attempts(log)[0].args == ("install", "x y")


def test_guard_env_puts_the_guard_first_and_closes_the_index(tmp_path: Path) -> None:
    env = nested.guard_env(tmp_path, tmp_path / "log", "/usr/bin")
    assert env["PATH"] == f"{tmp_path}{os.pathsep}/usr/bin" and env[nested.LOG_VAR] == str(tmp_path / "log")
    assert env["PIP_NO_INDEX"] == "1"
    assert nested.guard_env(tmp_path, tmp_path / "log", "")["PATH"] == str(tmp_path)


def test_a_uv_in_the_env_bin_shadows_the_guard(tmp_path: Path) -> None:
    assert nested.shadowing(tmp_path) == []
    (tmp_path / "pip").write_text("")
    assert nested.shadowing(tmp_path) == []
    (tmp_path / "uv").write_text("")
    assert nested.shadowing(tmp_path) == [tmp_path / "uv"]


def test_the_probe_runs_isolated_in_the_stack_python_and_asks_for_the_imports(tmp_path: Path) -> None:
    """The real probe script, run by this interpreter (the test env stands in for the stack env)."""
    import sys

    from october.installer.core.runner import Runner
    from october.installer.install.guards import probe

    so = tmp_path / "json.so"                         # no driver: the import is checked statically, on this file
    spec = GuardSpec(python=Path(sys.executable), torch_version="0", forks={}, imports=("json",),
                     files={"json": so}, cuda_libs=("libnot-a-real-library.so.9",))
    facts = probe(Runner(tmp_path / "logs"), "install", spec)
    assert facts["imports"] == {"json": {"attempted": False, "ok": None, "error": None,
                                         "static": {"error": f"no file {so}"}}}
    assert facts["cuda"]["present"] is False
    assert probe(Runner(tmp_path / "logs"), "install", spec, imports=False)["imports"] == {}


@pytest.mark.parametrize("imp,where", [({"error": "No module named flashinfer"}, "it fails: No module named flashinfer"),
                                       ({}, "it resolves to nothing"),
                                       ({"origin": "/x/flashinfer/__init__.py", "error": "e"},
                                        "it resolves to /x/flashinfer/__init__.py")])
def test_a_wrong_import_says_where_it_resolved(imp: dict[str, Any], where: str) -> None:
    msg = _fails(_facts(forks={"flashinfer": {"dists": [_editable()], "import": imp}}))
    assert where in msg


SYSTEM = {"version": "2.10.0+cu128", "site_packages": ["/usr/lib/python3/site-packages"]}


def test_a_site_provided_torch_is_judged_by_its_own_rules() -> None:
    spec = GuardSpec(python=Path("/stack/env/bin/python"), torch_version="2.10.0+cu128", forks={}, imports=(),
                     system_torch=SYSTEM)
    good = {"dists": [{"version": "2.10.0", "site": "/usr/lib/python3/site-packages"}],
            "import": {"origin": "/usr/lib/python3/site-packages/torch/__init__.py"}}
    assert evaluate(spec, _facts(torch=good)).results == {"torch": OK}
    shadow = {"dists": [{"version": "2.10.0", "site": "/usr/lib/python3/site-packages"},
                        {"version": "2.11.0", "site": "/stack/env/lib/python3.12/site-packages"}],
              "import": {"origin": "/stack/env/lib/python3.12/site-packages/torch/__init__.py"}}
    with pytest.raises(InstallError) as err:
        evaluate(spec, _facts(torch=shadow))
    # (no env on disk here, so the "installed into the env" rule has no site to match: two problems, not three)
    assert str(err.value).startswith("2 post-install checks failed")
    assert "exactly one torch, 2.10.0+cu128" in str(err.value) and "[import torch]" in str(err.value)


def test_a_probe_that_prints_no_result_is_an_install_error(tmp_path: Path) -> None:
    """A broken stack interpreter (a script that prints something else stands in for it)."""
    from october.installer.core.runner import Runner
    from october.installer.install.guards import probe

    fake = tmp_path / "env" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'Fatal Python error: init_fs_encoding'\n")
    fake.chmod(0o755)
    spec = GuardSpec(python=fake, torch_version="0", forks={})
    with pytest.raises(InstallError, match="printed no result") as err:
        probe(Runner(tmp_path / "logs"), "install", spec)
    assert err.value.found == "Fatal Python error: init_fs_encoding"
    fake.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(InstallError, match="printed no result") as err:
        probe(Runner(tmp_path / "logs"), "install", spec)
    assert err.value.found == "no output"


def test_nothing_placed_lists_the_first_six_shipped_modules(tmp_path: Path) -> None:
    checkout = tmp_path / "vllm-src"
    checkout.mkdir()
    for n, more in ((7, " ..."), (6, "")):
        wheel = {"extensions": [{"module": f"vllm._m{i}", "path": f"vllm/_m{i}.so"} for i in range(n)]}
        with pytest.raises(InstallError) as err:
            import_guard(wheel, {"vllm": checkout})
        assert err.value.expected == ("one or more of " + ", ".join(f"vllm/_m{i}.so" for i in range(6)) + more
                                      + f" under {checkout}")


def test_an_extra_asked_for_only_under_an_inactive_marker_is_not_wanted() -> None:
    dists = [Dist("a", "1.0", ("f[x]>=1; python_version < '3'",)), Dist("f", "1.0", ("g; extra == 'x'",))]
    assert conflicts(dists, "3.12.0") == []
    dists[0] = Dist("a", "1.0", ("f[x]>=1",))
    assert conflicts(dists, "3.12.0") == [Conflict("f", "1.0", "g; extra == 'x'", "g", None)]


def test_run_guards_probes_and_judges(tmp_path: Path) -> None:
    """The real probe in this interpreter (the test env stands in for a stack env with its torch)."""
    import importlib.metadata
    import sys

    from october.installer.core.runner import Runner
    from october.installer.install.guards import run_guards

    torch = importlib.metadata.version("torch")
    spec = GuardSpec(python=Path(sys.executable), torch_version=torch, forks={}, imports=())
    report = run_guards(Runner(tmp_path / "logs"), "install", spec)
    assert dict(report.results) == {"torch": OK} and report.facts["torch"]["versions"] == [torch]
    with pytest.raises(InstallError, match=r"\[torch\]"):
        run_guards(Runner(tmp_path / "logs"), "install", GuardSpec(python=Path(sys.executable), torch_version="0.0.1",
                                                                   forks={}, imports=()))


def test_attempt_packages_edge_cases() -> None:
    assert nested.Attempt("pip", ("nixl",)).packages == ("nixl",)                  # a requirement first
    assert nested.Attempt("uv", ("pip", "install", "pip")).packages == ("pip",)     # a package named pip
    assert nested.Attempt("uv", ("pip", "install", "--upgrade-package", "torch", "-c", "constraints",
                                 "nixl")).packages == ("nixl",)                     # option values are not packages


def test_install_guard_makes_missing_parents(tmp_path: Path) -> None:
    d = nested.install_guard(tmp_path / "a" / "b" / "guard")
    assert sorted(p.name for p in d.iterdir()) == sorted(nested.GUARDED)


def test_a_fork_installed_right_that_does_not_import_blames_its_packaging_not_an_overwrite() -> None:
    """The scenario hunt: a fork installed editable from its checkout whose ``import`` fails was reported as
    "something installed another flashinfer over the fork"; the fix now points at the fork's packaging."""
    msg = _fails(_facts(forks={"flashinfer": {"dists": [_editable()], "import": {"error": "No module named 'flashinfer'"}}}))
    assert "it fails: No module named 'flashinfer'" in msg and "check " in msg and "packaging" in msg
    assert "something installed another" not in msg
