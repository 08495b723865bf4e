"""Post-install guards: torch is still the pinned build, each fork is the editable checkout, the wheel's modules import.

``checks/probes/install_facts.py``, run with the stack python, reads the facts; :func:`evaluate` judges them and
raises every problem at once.  The modules imported are the base wheel's compiled extensions that the
precompiled install placed in the checkout (:func:`import_guard`), tried only where a CUDA library loads;
elsewhere the outcome is ``"not verifiable here: <reason>"``, never a pass.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ..core.errors import InstallError
from ..core.resources import stack_script
from ..core.runner import Runner
from ..wheels.extensions import extensions_from_record

PROBE = stack_script("install_facts.py")
MARK = "OCTOBER_PROBE "
OK = "ok"
NOT_VERIFIABLE = "not verifiable here"
CUDA_LIBS = ("libcuda.so.1",)


@dataclass(frozen=True)
class GuardSpec:
    python: Path
    torch_version: str
    forks: Mapping[str, Path]                  # import name -> checkout (STACK/src/<fork>)
    imports: tuple[str, ...] = ()              # e.g. ("vllm._C",): tried only where CUDA libraries load
    files: Mapping[str, Path] = field(default_factory=dict)   # module -> its .so: checked statically elsewhere
    cuda_libs: tuple[str, ...] = CUDA_LIBS
    system_torch: Mapping[str, Any] | None = None   # a site-provided torch (october.installer.pyenv.systorch.record)


@dataclass(frozen=True)
class GuardReport:
    results: Mapping[str, str]                 # check -> "ok" | "not verifiable here: ..."
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Problem:
    check: str
    expected: str
    found: str
    fix: str


def probe(runner: Runner, step: str, spec: GuardSpec, *, imports: bool = True) -> dict[str, Any]:
    """Run the probe with the stack python (``-I``: no PYTHONPATH, no user site, no cwd on sys.path)."""
    request = {"torch": "torch", "forks": {k: str(v) for k, v in spec.forks.items()},
               "imports": list(spec.imports) if imports else [], "cuda_libs": list(spec.cuda_libs),
               "files": {k: str(v) for k, v in spec.files.items()}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    env["VIRTUAL_ENV"] = str(spec.python.parent.parent)
    out = runner.run([str(spec.python), "-I", str(PROBE), json.dumps(request)], step=step, env=env).output
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        raise InstallError("the post-install probe printed no result", expected=f"a line starting '{MARK.strip()}'",
                           found=(out.strip().splitlines() or ["no output"])[-1][:300],
                           fix=f"run {spec.python} -I {PROBE} '{json.dumps(request)}' by hand and read its output")
    return json.loads(line[len(MARK):])


def _path_of(url: str) -> Path | None:
    parsed = urlparse(url)
    return Path(unquote(parsed.path)).resolve() if parsed.scheme == "file" else None


def _under(path: str | None, root: Path) -> bool:
    return bool(path) and Path(path).resolve().is_relative_to(root.resolve())


def _describe(d: Mapping[str, Any]) -> str:
    du = d.get("direct_url")
    if not du:
        where = "from an index (no direct_url.json)"
    else:
        editable = bool(du.get("dir_info", {}).get("editable"))
        where = f"from {du.get('url')}" + (" (editable)" if editable else " (not editable)")
    return f"{d.get('name')} {d.get('version')} {where}"


def _check_torch(spec: GuardSpec, facts: Mapping[str, Any]) -> list[_Problem]:
    if spec.system_torch is not None:        # a site-provided torch: nothing in the env may shadow or replace it
        from ..pyenv import systorch

        return [_Problem(*p) for p in systorch.guard_problems(spec.python.parent.parent, spec.system_torch,
                                                              facts.get("torch", {}))]
    versions = list(facts.get("torch", {}).get("versions", []))
    if versions == [spec.torch_version]:
        return []
    found = "no torch distribution" if not versions else "torch " + ", ".join(versions)
    return [_Problem("torch", f"torch {spec.torch_version} exactly (recipe [torch] version)", found,
                     "a fork or one of its dependencies moved torch: re-run october_setup (the env step "
                     "reinstalls the pinned torch); if it moves again, the fork needs another torch: pick a "
                     "recipe whose torch matches")]


def _check_fork(package: str, src: Path, facts: Mapping[str, Any]) -> list[_Problem]:
    info = facts.get("forks", {}).get(package, {})
    dists = list(info.get("dists", []))
    problems: list[_Problem] = []
    editable = [d for d in dists if d.get("direct_url")
                and _path_of(str(d["direct_url"].get("url", ""))) == src.resolve()
                and d["direct_url"].get("dir_info", {}).get("editable") is True]
    expected = f"{package} installed editable from {src} (direct_url.json: url file://{src}, editable)"
    fix = (f"something installed another {package} over the fork: re-run october_setup (the install step "
           f"lays the fork last, --no-deps), and keep `pip install {package}` out of the stack env")
    if not editable:
        found = "; ".join(_describe(d) for d in dists) or f"no distribution installed from {src}"
        problems.append(_Problem(package, expected, found, fix))
    copies = [d for d in dists if d.get("ships_package")]
    if copies:
        problems.append(_Problem(package, f"no other copy of the package '{package}' in the stack env",
                                 "; ".join(_describe(d) for d in copies) + f" ships {package}/__init__.py", fix))
    imp = info.get("import", {})
    locations = [imp.get("origin")] + list(imp.get("locations") or [])
    if not any(_under(p, src) for p in locations if p):
        if imp.get("origin") is None and imp.get("error") and editable:
            # installed from the fork as it should be, and still not importable: the fork's own packaging
            problems.append(_Problem(f"import {package}", f"`import {package}` to load from {src}",
                                     f"it fails: {imp['error']}",
                                     f"the fork installs as {package} but has no importable package of that name "
                                     f"(or it needs what the env lacks): check {src}'s packaging (its package "
                                     "folder, its requirements), or the fork's name in the recipe"))
            return problems
        where = imp.get("origin") or imp.get("error") or "nothing"
        problems.append(_Problem(f"import {package}", f"`import {package}` to load from {src}",
                                 f"it resolves to {where}", fix))
    return problems


def import_guard(wheel: Mapping[str, Any], checkouts: Mapping[str, Path]) -> tuple[str, ...]:
    """The modules to import after a precompiled install: the wheel's compiled extension modules (``extensions``
    of the wheel step's outputs, else its RECORD) whose file the install placed in a fork checkout (``checkouts``:
    top package -> checkout; the fork's setup.py decides what it copies).  None placed at all fails."""
    listed = wheel.get("extensions")
    if not isinstance(listed, list):
        path = Path(str(wheel.get("path", "")))
        listed = [e.as_json() for e in extensions_from_record(path)] if path.is_file() else []
    ours = _in_checkouts(listed, checkouts)
    shipped = [rel for _module, rel, _checkout in ours]
    placed = tuple(dict.fromkeys(module for module, rel, checkout in ours if (checkout / rel).is_file()))
    if not placed:
        where = ", ".join(str(p) for p in checkouts.values()) or "no checkout"
        raise InstallError(
            "the precompiled install placed none of the base wheel's compiled extension modules in the fork",
            expected=("one or more of " + ", ".join(shipped[:6]) + (" ..." if len(shipped) > 6 else "")
                      if shipped else "the base wheel to ship compiled extension modules (RECORD, PyInit_*)")
                     + f" under {where}",
            found="none of them" if shipped else "a wheel with no extension module",
            fix="check that the fork's setup.py honours VLLM_USE_PRECOMPILED / VLLM_PRECOMPILED_WHEEL_LOCATION "
                "(see logs/install.log), and that [wheel] in the recipe is a compiled vLLM wheel")
    return placed


def extension_files(wheel: Mapping[str, Any], checkouts: Mapping[str, Path], modules: tuple[str, ...]
                    ) -> dict[str, Path]:
    """Each imported module's file as the precompiled install placed it in the fork checkout."""
    return {module: checkout / rel for module, rel, checkout in _in_checkouts(wheel.get("extensions") or [], checkouts)
            if module in modules and (checkout / rel).is_file()}


def _in_checkouts(extensions: list[Mapping[str, Any]], checkouts: Mapping[str, Path]) -> list[tuple[str, str, Path]]:
    """(module, its path in the wheel, its fork's checkout) of each listed extension module of a fork."""
    rows = [(str(ext.get("module", "")), str(ext.get("path", ""))) for ext in extensions]
    return [(module, rel, checkouts[top]) for module, rel in rows
            if module and (top := module.split(".", 1)[0]) in checkouts]


def _check_imports(spec: GuardSpec, facts: Mapping[str, Any]) -> tuple[dict[str, str], list[_Problem]]:
    results: dict[str, str] = {}
    problems: list[_Problem] = []
    cuda = facts.get("cuda", {})
    for name in spec.imports:
        got = facts.get("imports", {}).get(name)
        if got is None:
            problems.append(_Problem(f"import {name}", f"the probe to try `import {name}`", "no result",
                                     "re-run october_setup; report this as a bug if it repeats"))
        elif not got.get("attempted"):
            verdict, problem = _judge_static(name, got.get("static"), cuda)
            if problem is not None:
                problems.append(problem)
            else:
                results[f"import {name}"] = verdict
        elif got.get("ok"):
            results[f"import {name}"] = OK
        else:
            problems.append(_Problem(f"import {name}", f"`import {name}` to work (CUDA library: {cuda.get('lib')})",
                                     str(got.get("error")),
                                     "an ABI mismatch (`undefined symbol ... c10::`) means torch is not the build "
                                     "the base wheel was compiled against; `libcudart.so.N` means the wheel's CUDA "
                                     "variant does not match the toolkit: fix the recipe's [wheel] or [torch]"))
    return results, problems


def _judge_static(name: str, static: Mapping[str, Any] | None, cuda: Mapping[str, Any]
                  ) -> tuple[str, _Problem | None]:
    """No driver here: tell a missing driver apart from torch ABI drift by the extension's ELF symbols."""
    no_driver = f"{NOT_VERIFIABLE}: no CUDA driver ({cuda.get('reason', '?')})"
    if not static:
        return f"{no_driver}; torch ABI not checked (no extension file given)", None
    if static.get("error"):
        return f"{no_driver}; torch ABI not checked ({static['error']})", None
    drivers = [lib for lib in static.get("missing_libs", []) if lib.startswith("libcuda.so")]
    other_libs = [lib for lib in static.get("missing_libs", []) if lib not in drivers]
    unresolved = list(static.get("unresolved", []))
    if unresolved:
        return "", _Problem(f"import {name}", f"every symbol {static.get('file')} needs defined by the env's torch "
                            "and libraries (the torch build the base wheel was compiled against)",
                            f"torch ABI drift: {len(unresolved)} undefined symbol(s): {', '.join(unresolved[:6])}"
                            + (f"; libraries not found: {', '.join(other_libs)}" if other_libs else ""),
                            "torch is not the build the base wheel was compiled against: make the recipe's [torch] "
                            "the version the wheel pins (its METADATA torch==)")
    if other_libs:
        return "", _Problem(f"import {name}", f"every library {static.get('file')} needs, but the driver, in the env",
                            f"not found: {', '.join(other_libs)}",
                            "`libcudart.so.N` missing means the wheel's CUDA variant does not match the env's "
                            "CUDA runtime wheels: fix the recipe's [wheel] or [torch]")
    left = static.get("driver_symbols", [])
    rest = f" except {len(left)} driver symbol(s) ({', '.join(drivers) or 'the driver'} absent)" if left else ""
    return (f"{no_driver}; torch ABI checked statically: {static.get('checked')} undefined symbols of "
            f"{Path(str(static.get('file'))).name}, all defined by the env's torch and libraries{rest}"), None


def evaluate(spec: GuardSpec, facts: Mapping[str, Any]) -> GuardReport:
    """Judge the probe's facts; raise one :class:`InstallError` listing every problem."""
    problems = _check_torch(spec, facts)
    for package, src in spec.forks.items():
        problems += _check_fork(package, src, facts)
    import_results, import_problems = _check_imports(spec, facts)
    problems += import_problems
    if len(problems) == 1:
        p = problems[0]
        raise InstallError(f"post-install check [{p.check}] failed in {spec.python.parent.parent}",
                           expected=p.expected, found=p.found, fix=p.fix)
    if problems:
        lines = "\n".join(f"  - [{p.check}] expected {p.expected}; found {p.found}" for p in problems)
        fixes = "\n  -> ".join(dict.fromkeys(p.fix for p in problems))
        raise InstallError(f"{len(problems)} post-install checks failed in {spec.python.parent.parent}:\n{lines}",
                           fix=fixes)
    results = {"torch": OK, **{package: OK for package in spec.forks}, **import_results}
    return GuardReport(results=results, facts=facts)


def run_guards(runner: Runner, step: str, spec: GuardSpec, *, imports: bool = True) -> GuardReport:
    return evaluate(spec, probe(runner, step, spec, imports=imports))


def spec_for(wheel: Mapping[str, Any] | None, checkouts: Mapping[str, Path], *, python: Path, torch_version: str,
             cuda_libs: tuple[str, ...] | None = None, system_torch: Mapping[str, Any] | None = None) -> GuardSpec:
    """The guards' spec for the forks at ``checkouts`` (import name -> path); with a base ``wheel`` (its verified
    result), its extension modules are imported where ``cuda_libs`` (default :data:`CUDA_LIBS`) load."""
    imports = import_guard(wheel, checkouts) if wheel is not None else ()
    files = extension_files(wheel, checkouts, imports) if wheel is not None and imports else {}
    return GuardSpec(python=python, torch_version=torch_version, forks=checkouts, imports=imports, files=files,
                     cuda_libs=cuda_libs or CUDA_LIBS, system_torch=system_torch)
