"""A site-provided torch (``--system-python PATH`` or ``[torch] source = "system"``): the stack env is made on
that interpreter, whose torch it uses and never replaces.  Preflight probes it (:data:`PROBE`, :func:`check`);
the env gets ``--system-site-packages`` plus a ``.pth`` (:func:`pth_text`) adding the interpreter's own site
directories (a venv made from a venv sees only the *base* interpreter's); the install guard
(:func:`guard_problems`) refuses a torch in the env or a second one.  The tool env never imports torch.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import EnvError, FileSystemError, UsageError
from ..core.redact import redact_url
from ..core.resources import stack_script
from ..core.runner import Runner
from ..recipe import Recipe
from .venv import same_cuda_major

PROBE = stack_script("torch_facts.py")
MARK = "OCTOBER_TORCH "
PTH_NAME = "_october_system_site.pth"


def with_system_torch(recipe: Recipe, python: Path | None) -> Recipe:
    """The recipe with torch taken from ``python``; a usage error when the recipe does not allow it."""
    t = recipe.torch
    if python is None:
        if t.from_system:
            raise UsageError(f"recipe {recipe.name} takes torch from the system", expected="--system-python PATH "
                             "(the interpreter whose torch the stack uses)", found="no --system-python",
                             fix=f"pass --system-python /path/to/python with torch {t.version} installed")
        return recipe
    _require_allowed(recipe, "--system-python", f"--system-python {python}")
    exe = usable_interpreter(Path(python))
    return dataclasses.replace(recipe, torch=dataclasses.replace(t, source="system", system_python=str(exe),
                                                                 index_url=None))


def usable_interpreter(python: Path, option: str = "--system-python") -> Path:
    """``python`` (absolute, links kept: a venv's python is one) is an executable file; nothing there, a
    directory or a file this user cannot execute is exit 19 (a path option naming nothing usable), said as
    such, before anything is written (preflight would otherwise start it inside a new STACK)."""
    import os
    import shlex

    exe = python.expanduser().absolute()
    if exe.is_file() and os.access(exe, os.X_OK):
        return exe
    found = (f"{exe} is a directory" if exe.is_dir() else f"{exe} does not exist" if not exe.exists()
             else f"{exe} is a file this user cannot execute (mode {exe.stat().st_mode & 0o777:o})" if exe.is_file()
             else f"{exe} is not a regular file")
    raise FileSystemError(f"{option} {exe} is not an interpreter that can run", expected="the path of an "
                          "executable Python interpreter", found=found,
                          fix=f"pass the interpreter itself to {option}, e.g. /opt/torch/.venv/bin/python"
                              + (f" (or make it executable: chmod +x {shlex.quote(str(exe))})" if exe.is_file() else ""))


def mark_system(recipe: Recipe) -> Recipe:
    """The recipe with torch from the system, no interpreter named yet (an offline kit made elsewhere
    carries no torch wheel for it); a usage error when the recipe does not allow it."""
    _require_allowed(recipe, "--system-torch", "--system-torch")
    return dataclasses.replace(recipe, torch=dataclasses.replace(recipe.torch, source="system", index_url=None))


def _require_allowed(recipe: Recipe, option: str, found: str) -> None:
    t = recipe.torch
    if not (t.from_system or t.allow_system):
        raise UsageError(f"recipe {recipe.name} installs torch {t.version} itself",
                         expected="a recipe with [torch] source = \"system\" or allow_system = true",
                         found=found, fix=f"drop {option}, or use a recipe that allows a site-provided torch")


def probe(runner: Runner, step: str, python: Path, *, locate: bool = False,
          python_args: Sequence[str] = ()) -> dict[str, Any]:
    """Facts about ``python`` and its torch (a missing torch: ``error`` says why); ``locate``: from torch's
    files, without importing it (preflight)."""
    done = runner.run([str(python), *python_args, "-I", str(PROBE), *(["--locate"] if locate else [])], step=step,
                      check=False, timeout=300)
    line = next((ln for ln in reversed(done.output.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        tail = (done.output.strip().splitlines() or ["no output"])[-1][:300]
        return {"python_path": str(python), "error": f"{python} did not run the torch probe (exit {done.returncode}: "
                f"{tail})"}
    facts: dict[str, Any] = json.loads(line[len(MARK):])
    facts["python_path"] = str(python)
    return facts


def cuda_of(recipe: Recipe) -> str | None:
    """The CUDA build the recipe's torch must have: [cuda] version, else the +cuXYZ local tag."""
    if recipe.cuda is not None:
        return recipe.cuda.version
    local = recipe.torch.version.partition("+")[2]
    if local.startswith("cu") and local[2:].isdigit() and len(local) >= 5:
        return f"{local[2:-1]}.{local[-1]}"
    return None


def check(recipe: Recipe, facts: Mapping[str, Any]) -> tuple[bool, str, str, str]:
    """-> (ok, expected, found, fix) for preflight's ``torch`` check."""
    want, cuda = recipe.torch.version, cuda_of(recipe)
    py = facts.get("python_path") or recipe.torch.system_python
    major = f" (or another {cuda.partition('.')[0]}.x: the same major runs its kernels)" if cuda else ""
    expected = f"torch {want}" + (f" built for CUDA {cuda}{major}" if cuda else "") + f" importable by {py}"
    if facts.get("error"):
        return False, expected, str(facts["error"]), (f"install torch {want} into that interpreter, or point "
                                                       "--system-python at one that has it")
    found = f"torch {facts.get('version')} (CUDA {facts.get('cuda')}) at {facts.get('file')}"
    problems = []
    if facts.get("version") != want:
        problems.append("version")
    if cuda is not None and not same_cuda_major(facts.get("cuda"), cuda):
        problems.append("CUDA build")
    if facts.get("dist_version") not in (None, *same_build(str(facts.get("version")))):
        problems.append("metadata")
        found += f"; its metadata says {facts.get('dist_version')}"
    if not problems:
        return True, expected, found, ""
    built = f"torch {want}" + (f" built for CUDA {cuda} (or another {cuda.partition('.')[0]}.x)" if cuda else "")
    theirs = f"torch {facts.get('version')}" + (f" for CUDA {facts.get('cuda')}" if "CUDA build" in problems else "")
    fix = (f"the {' and '.join(problems)} differ{'s' if len(problems) == 1 else ''}: point --system-python at an "
           f"interpreter with {built}, or pick a recipe pinning {theirs}")
    if recipe.torch.allow_system and recipe.torch.index_url:
        fix += f", or drop --system-python to install torch {want} from {redact_url(recipe.torch.index_url)}"
    return False, expected, found, fix


def same_build(version: str) -> tuple[str, str]:
    """The versions a torch distribution's metadata may carry for ``torch.__version__`` = ``version``:
    the index builds keep the local tag (2.11.0+cu130), PyPI's CUDA wheels drop it (2.15.0 for 2.15.0+cu132)."""
    return version, version.partition("+")[0]


def site_dirs(facts: Mapping[str, Any]) -> list[str]:
    return [str(d) for d in facts.get("site_packages") or [] if isinstance(d, str)]


def pth_text(facts: Mapping[str, Any]) -> str:
    """A ``.pth`` that adds the interpreter's site directories (and their ``.pth`` files) *after* the env's own."""
    lines = [f"import site; site.addsitedir({d!r})" for d in site_dirs(facts)]
    return "# written by october: torch comes from the system interpreter's site directories\n" + "\n".join(lines) + "\n"


def write_pth(env: Path, facts: Mapping[str, Any]) -> Path:
    sites = sorted(env.glob("lib/python*/site-packages"))
    if not sites:
        raise EnvError("the stack env has no site-packages", expected=f"{env}/lib/pythonX.Y/site-packages",
                       found="none", fix="re-run october_setup (the env step makes the env again)")
    path = sites[0] / PTH_NAME
    path.write_text(pth_text(facts), encoding="utf-8")
    return path


def _under(path: str | None, roots: Sequence[str]) -> bool:
    return bool(path) and any(Path(path).resolve().is_relative_to(Path(r).resolve()) for r in roots)


def guard_problems(env: Path, expected: Mapping[str, Any], facts: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(check, expected, found, fix) for every way the env shadows or replaced the system torch ``expected``
    (its record); ``facts``: the guard probe's ``torch`` entry (``dists``: [{version, site}], ``import``)."""
    version, sites = str(expected.get("version")), site_dirs(expected)
    dists = list(facts.get("dists") or [])
    env_sites = [str(p) for p in env.glob("lib/python*/site-packages")]
    fix = ("something installed torch into the stack env: re-run october_setup (the env step makes the env again "
           "on the system interpreter); keep torch out of the forks' dependencies (the recipe's constraint pins it)")
    problems: list[tuple[str, str, str, str]] = []
    own = [d for d in dists if _under(d.get("site"), env_sites)]
    if own:
        problems.append(("torch", f"no torch distribution in {env} (torch {version} comes from the system)",
                         "; ".join(f"torch {d.get('version')} in {d.get('site')}" for d in own), fix))
    if len(dists) != 1 or str(dists[0].get("version")) not in same_build(version):
        problems.append(("torch", f"exactly one torch, {version}, visible in the stack env",
                         ", ".join(f"torch {d.get('version')} in {d.get('site')}" for d in dists) or "no torch", fix))
    origin = (facts.get("import") or {}).get("origin")
    if not _under(origin, sites) or _under(origin, env_sites):
        problems.append(("import torch", f"`import torch` to load from the system site directories "
                         f"{', '.join(sites)}", f"it resolves to {origin or 'nothing'}", fix))
    return problems


def record(facts: Mapping[str, Any]) -> dict[str, Any]:
    """What the lock and receipt say about a site-provided torch."""
    return {"source": "system", "version": facts.get("version"), "cuda": facts.get("cuda"),
            "path": str(Path(str(facts.get("file"))).parent) if facts.get("file") else None,
            "dist_version": facts.get("dist_version"),
            "python": facts.get("python_path"), "python_version": facts.get("python"),
            "site_packages": site_dirs(facts)}


def site_distributions(sites: Sequence[str]) -> dict[str, str]:
    """canonical name -> version of every distribution in the given site directories (no process started)."""
    from .dists import dists_in

    out: dict[str, str] = {}
    for d in dists_in(sites):
        out.setdefault(d.name, d.version)
    return out


def write_excludes(path: Path, system: Mapping[str, str], needed: Sequence[str], carried: set[str] | None) -> Path:
    """The ``uv pip install --excludes`` file for an env on the system interpreter: torch and every distribution
    the interpreter has, since uv does not see a venv's system site packages (astral-sh/uv#7358) and would fetch
    a torch of its own.  Not excluded: a requirement installed here, and what the kit carries (``carried``; None:
    an index serves everything, so only torch is excluded)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    keep = {str(canonicalize_name(Requirement(r).name)) for r in needed} | set(carried or ())
    names = sorted(({"torch"} | (set(system) if carried is not None else set())) - keep)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
    return path


def unmet(requirements: Sequence[str], have: Mapping[str, str]) -> list[str]:
    """The requirements the system interpreter's distributions do not already satisfy."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    out: list[str] = []
    for line in requirements:
        req = Requirement(line)
        got = have.get(str(canonicalize_name(req.name)))
        try:
            ok = got is not None and req.specifier.contains(Version(got), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            out.append(line)
    return out


def require_usable(recipe: Recipe, facts: Mapping[str, Any], python: str, python_ok: bool) -> None:
    """The system interpreter's torch is the recipe's (:func:`check`) and its Python too (``python_ok``)."""
    ok, expected, found, fix = check(recipe, facts)
    if not ok:
        raise EnvError("the system interpreter's torch is not the recipe's", expected=expected, found=found, fix=fix)
    if not python_ok:
        raise EnvError("the system interpreter has the wrong Python", expected=f"Python {recipe.python} (recipe "
                       "python.version)", found=f"Python {facts.get('python')} at {python}",
                       fix="point --system-python at an interpreter of the recipe's Python version")


def require_seen(env: Path, facts: Mapping[str, Any], seen: Mapping[str, Any], log_path: Path) -> None:
    """The stack env's own interpreter imports the system torch (``seen``: its probe's facts)."""
    problems = guard_problems(env, facts, {
        "dists": [{"version": seen.get("dist_version"), "site": seen.get("dist_site")}] if seen.get("dist_site") else [],
        "import": {"origin": seen.get("file")}})
    if seen.get("error") or seen.get("version") != facts.get("version") or problems:
        raise EnvError("the stack env does not see the system torch", expected=f"torch {facts.get('version')} from "
                       f"{', '.join(site_dirs(facts))}", found=str(seen.get("error") or
                       (problems[0][2] if problems else f"torch {seen.get('version')}")),
                       fix="check that the interpreter's site directories are readable; report this with "
                           f"{log_path}")


def env_problem(env: Path, system_python: str | None, rec: Mapping[str, Any]) -> str | None:
    """Why the env no longer takes the recorded system torch ``rec`` from ``system_python``, else None (no
    process started: no-op re-runs stay fast)."""
    if rec.get("python") != system_python:
        return "the system interpreter changed"
    for sp in env.glob("lib/python*/site-packages"):
        if any(sp.glob("torch-*.dist-info")) or (sp / "torch").exists():
            return f"torch was installed into {sp} (it must come from the system)"
        if not (sp / PTH_NAME).is_file():
            return f"{sp / PTH_NAME} is missing"
    where = rec.get("path")
    version = rec.get("version")
    if not where or not (Path(where) / "__init__.py").is_file():
        return f"the system torch at {where} is gone"
    sites = [Path(d) for d in rec.get("site_packages") or []]
    dist = rec.get("dist_version") or version
    if dist and not any((d / f"torch-{dist}.dist-info").is_dir() for d in sites):
        return f"torch {version} is no longer installed in the system site directories"
    return None


def kit_packages(wheels: Path) -> set[str]:
    """The distributions a kit (or a find-links directory) carries a wheel of (canonical names)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    out: set[str] = set()
    for w in wheels.glob("*.whl"):
        try:
            out.add(str(parse_wheel_filename(w.name)[0]))
        except InvalidWheelFilename:
            continue
    return out
