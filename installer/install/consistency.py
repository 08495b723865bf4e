"""Is the finished stack env consistent?  Every installed distribution's requirements (read from its
``METADATA``, no process started) checked against what is installed, markers evaluated for the stack's Python;
an ``extra`` requirement counts when some distribution asks for that extra.  :func:`judge` splits the conflicts
into those the recipe's ``[[install.exceptions]]`` declare and the rest.  Not ``uv pip check``: it skips extras
and reads only the env's own site-packages, so a site-provided torch is "not installed" and a triton it pins is
missed (tests/test_consistency_vs_uv.py fails when a uv release catches up).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..pyenv.venv import pyvenv_version as env_python_version
from ..recipe.install import DeclaredException
from ..pyenv.dists import dists_in, site_packages


@dataclass(frozen=True)
class Dist:
    name: str                       # canonical
    version: str
    requires: tuple[str, ...]       # Requires-Dist lines as written


@dataclass(frozen=True)
class Conflict:
    package: str                    # the requirer (canonical)
    version: str
    requirement: str                # as written in its METADATA
    requires: str                   # canonical name of the required distribution
    found: str | None               # installed version, None when absent

    def describe(self) -> str:
        got = f"{self.requires} {self.found} is installed" if self.found else f"{self.requires} is not installed"
        return f"{self.package} {self.version} requires {self.requirement}, but {got}"


@dataclass(frozen=True)
class Judgement:
    declared: tuple[tuple[Conflict, DeclaredException], ...]
    undeclared: tuple[Conflict, ...]
    unused: tuple[DeclaredException, ...]     # declared, but the env does not show that conflict

    def as_json(self) -> dict[str, object]:
        return {"declared": [{"package": c.package, "version": c.version, "requirement": c.requirement,
                              "found": c.found, "why": e.why} for c, e in self.declared],
                "undeclared": [c.describe() for c in self.undeclared],
                "unused_declarations": [{"package": e.package, "requires": e.requires} for e in self.unused]}


def installed(env: Path) -> list[Dist]:
    return installed_in(site_packages(env))


def installed_in(sites: Sequence[Path]) -> list[Dist]:
    """Every ``*.dist-info`` of the given site directories, with its ``Requires-Dist``."""
    return [Dist(d.name, d.version, d.requires) for d in dists_in(sites, strict=True)]


def marker_environment(python_version: str) -> dict[str, str]:
    return {**{k: str(v) for k, v in default_environment().items()}, "python_full_version": python_version,
            "python_version": ".".join(python_version.split(".")[:2]), "implementation_version": python_version}


# PEP 508's name as packaging's tokenizer reads it (packaging._tokenizer's IDENTIFIER), after leading blanks
_NAME = re.compile(r"\s*(\b[a-zA-Z0-9][a-zA-Z0-9._-]*\b)")


def requirement_name(line: str) -> str | None:
    """The canonical name a ``Requires-Dist`` line names, read without parsing the rest (None: no name; such a
    line does not parse either)."""
    m = _NAME.match(line)
    return str(canonicalize_name(m.group(1))) if m else None


def _parse(line: str) -> Requirement | None:
    try:
        return Requirement(line)
    except InvalidRequirement:
        return None


def _active(req: Requirement, env: Mapping[str, str], extras: Iterable[str]) -> bool:
    return req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in ("", *extras))


def conflicts(dists: Sequence[Dist], python_version: str, provided: Sequence[Dist] = (),
              markers: Mapping[str, str] | None = None) -> list[Conflict]:
    """Unmet requirements of ``dists``; ``provided`` (a site-provided interpreter's distributions) can meet them.
    A provided distribution's own requirements count only where the env changed what they see: one naming a
    distribution the env shadows, or one an env distribution turned on by asking for an extra.  ``markers``: the
    marker environment the stack's own Python reported (``checks/probes/install_facts.py``), over this tool's
    with ``python_version``: the tool may run on another interpreter than the stack's."""
    env = {**marker_environment(python_version), **{str(k): str(v) for k, v in (markers or {}).items()}}
    have = {d.name: d for d in (*provided, *dists)}
    wanted_extras: dict[str, set[str]] = {}
    parsed: dict[str, list[tuple[str, Requirement]]] = {}
    for d in dists:
        reqs = [(line, r) for line in d.requires if (r := _parse(line)) is not None]
        parsed[d.name] = reqs
        for _line, r in reqs:
            if r.extras and _active(r, env, ()):
                wanted_extras.setdefault(str(canonicalize_name(r.name)), set()).update(r.extras)
    shadowed = {d.name for d in dists}
    subjects = list(dists)
    for p in provided:
        if p.name in shadowed:
            continue
        asked = wanted_extras.get(p.name, set())
        # without an extra asked of it, only a line naming a shadowed distribution can count: the name is read
        # first (parsing the thousands of lines of an image's system distributions is slow)
        lines = p.requires if asked else [ln for ln in p.requires if requirement_name(ln) in shadowed]
        reqs = [(line, r) for line in lines if (r := _parse(line)) is not None
                and (str(canonicalize_name(r.name)) in shadowed
                     or (asked and not _active(r, env, ()) and _active(r, env, asked)))]
        if reqs:
            parsed[p.name] = reqs
            subjects.append(p)
    out: list[Conflict] = []
    for d in subjects:
        extras = sorted(wanted_extras.get(d.name, ()))
        for line, r in parsed[d.name]:
            if not _active(r, env, extras):
                continue
            name = str(canonicalize_name(r.name))
            dep = have.get(name)
            try:
                ok = dep is not None and r.specifier.contains(Version(dep.version), prereleases=True)
            except InvalidVersion:
                ok = False
            if not ok:
                out.append(Conflict(d.name, d.version, line, name, dep.version if dep else None))
    return sorted(out, key=lambda c: (c.package, c.requires))


def judge(found: Sequence[Conflict], declared: Sequence[DeclaredException]) -> Judgement:
    by_pair = {(e.package, e.requires): e for e in declared}
    matched = tuple((c, by_pair[c.package, c.requires]) for c in found if (c.package, c.requires) in by_pair)
    used = {(c.package, c.requires) for c, _e in matched}
    return Judgement(matched, tuple(c for c in found if (c.package, c.requires) not in by_pair),
                     tuple(e for pair, e in by_pair.items() if pair not in used))


def require_consistent(env: Path, python_version: str, provided: Sequence[Dist],
                       declared: Sequence[DeclaredException], markers: Mapping[str, str] | None = None) -> Judgement:
    """Every installed requirement in ``env`` met (by it or by ``provided``) but the ``declared`` exceptions;
    -> the judgement, else :class:`InstallError` (``python_version``: when the env's pyvenv.cfg names none;
    ``markers``: the stack Python's own marker environment, which decides where given, :func:`conflicts`)."""
    from ..core.errors import InstallError

    found = conflicts(installed(env), env_python_version(env) or python_version, provided, markers)
    judged = judge(found, declared)
    if judged.undeclared:
        lines = "\n".join(f"  - {c.describe()}" for c in judged.undeclared)
        raise InstallError(f"the stack env is inconsistent: {len(judged.undeclared)} requirement(s) unmet "
                           f"that the recipe does not declare:\n{lines}",
                           expected="every installed distribution's requirements met, or the conflict declared "
                                    "in the recipe's [[install.exceptions]] with the reason",
                           found=f"{len(judged.undeclared)} undeclared, {len(judged.declared)} declared",
                           fix="supply the missing package through [install] supply (it must resolve with "
                               "the pinned torch), or declare the conflict if it is intended")
    return judged
