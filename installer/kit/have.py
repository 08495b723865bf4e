"""``october_setup kit --have FILE``: what the target machine already has, so the kit need not carry it.

A kit for a site image (torch preinstalled) leaves out every wheel whose distribution the target has at
the same version.  FILE is ``pip list`` or ``pip freeze`` output of the target interpreter; a line in
neither form is an error naming it, since a misread listing would silently leave out what the target lacks.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..core.errors import EnvError, UsageError, one_line

_FREEZE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*===?\s*(\S+)$")
_COLUMNS = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s+(\S+)(?:\s+\S.*)?$")     # pip list: name version [location]
_DIRECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s+@\s+\S+")
_HEADER = re.compile(r"^(Package\s+Version\b.*|[-\s]+)$")


def read_have(path: Path) -> dict[str, str]:
    """canonical distribution name -> version, from a ``pip list`` / ``pip freeze`` listing."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--have {path} cannot be read", expected="a readable text file (pip list or pip freeze "
                         "output of the target's interpreter)", found=f"{type(exc).__name__}: {exc}",
                         fix="write it on the target with `PYTHON -m pip list > FILE` and pass that file") from None
    have: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or _HEADER.match(line) or _DIRECT.match(line):
            continue
        m = _FREEZE.match(line) or _COLUMNS.match(line)
        version = m.group(2) if m else ""
        try:
            Version(version)
        except InvalidVersion:
            m = None
        if m is None:
            raise UsageError(f"--have {path}: line {n} is not a distribution and its version",
                             expected="`name==version` (pip freeze) or `name  version` (pip list) lines",
                             found=repr(one_line(line)),
                             fix="pass the unedited output of `PYTHON -m pip list` or `pip freeze` on the target")
        have[str(canonicalize_name(m.group(1)))] = version
    if not have:
        raise UsageError(f"--have {path} lists no distribution", expected="the target interpreter's distributions",
                         found="an empty listing", fix="write it with `PYTHON -m pip list > FILE` on the target")
    return have


def has(have: Mapping[str, str], package: str, version: str) -> bool:
    """Whether the target has ``package`` at exactly ``version`` (versions compared as PEP 440 versions)."""
    got = have.get(str(canonicalize_name(package)))
    if got is None:
        return False
    try:
        return Version(got) == Version(version)
    except InvalidVersion:
        return got == version


def require_left_out_present(kit_root: Path, left_out: list[Mapping[str, str]], system: Mapping[str, str],
                             python: str) -> None:
    """Every wheel a ``--have`` kit left out must be in ``system`` (a listing of another interpreter would
    leave the stack without them, found only at import time); checked before anything is installed."""
    missing = [f"{d['package']}=={d['version']} (found {system.get(str(canonicalize_name(d['package']))) or 'none'})"
               for d in left_out if not has(system, d["package"], d["version"])]
    if missing:
        raise EnvError(f"the kit {kit_root} left out {len(missing)} wheel(s) the interpreter {python} does not have",
                       expected="every distribution the kit's --have listing named, at that version, in the "
                                "system interpreter", found="; ".join(missing[:8]) + ("; ..." if len(missing) > 8 else ""),
                       fix=f"make the kit again with --have from this interpreter (`{shlex.quote(str(python))} -m pip list > FILE`), "
                           "or point --system-python at the interpreter the listing came from")
