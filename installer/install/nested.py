"""The nested-install guard: a fork's build backend installs nothing by itself.

FlashInfer's ``build_backend.py`` runs ``uv pip install`` (falling back to ``python -m pip``) while it is built,
past the recipe's sources, the torch constraint and ``--locked``.  So the fork installs run with
``STACK/.state/build-guard`` first on ``PATH``: its ``uv``, ``pip`` and ``pip3`` log their arguments to
``$OCTOBER_NESTED_LOG`` and refuse, and ``PIP_NO_INDEX=1`` stops ``python -m pip``.  Each attempt is then judged
against the fork's ``[forks.nested_installs]``: a package declared not needed is recorded, anything else fails.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..core.atomic import write_text_atomic

GUARDED = ("uv", "pip", "pip3")
REFUSED_EXIT = 3
LOG_VAR = "OCTOBER_NESTED_LOG"
SEP = "\x1f"            # unit separator between argv items in the log (args never contain it)

SCRIPT = """#!/bin/sh
# october nested-install guard: a build backend may not install packages by itself.
# Records the attempt for the install step, then refuses.
if [ -n "${OCTOBER_NESTED_LOG:-}" ]; then
  { printf '%s' "$(basename "$0")"; for a in "$@"; do printf '\\037%s' "$a"; done; printf '\\n'; } >> "$OCTOBER_NESTED_LOG"
fi
echo "october: refused nested '$(basename "$0") $*' (a fork's build may not install packages; the recipe's sources do)" >&2
exit 3
"""

# Options of `uv pip install` / `pip install` that take a value (the value is not a requirement).
_VALUED = {"--python", "-p", "--index-url", "-i", "--extra-index-url", "--find-links", "-f", "--constraint", "-c",
           "--override", "--target", "--prefix", "--requirement", "-r", "--editable", "-e", "--cache-dir",
           "--python-version", "--python-platform", "--index-strategy", "--keyring-provider", "--link-mode",
           "--reinstall-package", "--upgrade-package", "-P", "--no-binary", "--only-binary", "--config-settings",
           "-C", "--exclude-newer", "--resolution", "--prerelease", "--default-index", "--index", "--root"}


@dataclass(frozen=True)
class Attempt:
    tool: str
    args: tuple[str, ...]

    @property
    def packages(self) -> tuple[str, ...]:
        """Canonical names of the requirements the attempt asked for."""
        out: list[str] = []
        args = enumerate(self.args)
        for i, a in args:
            if a in _VALUED:
                next(args, None)            # its value is not a requirement
            elif not a.startswith("-") and not (i < 2 and a in ("pip", "install")):
                try:
                    out.append(str(canonicalize_name(Requirement(a).name)))
                except InvalidRequirement:
                    pass
        return tuple(dict.fromkeys(out))

    @property
    def command(self) -> str:
        return shlex.join([self.tool, *self.args])


@dataclass(frozen=True)
class Verdict:
    attempts: tuple[Attempt, ...]
    refused_declared: Mapping[str, str]          # package -> why the recipe says it is not needed
    undeclared: tuple[str, ...]                  # packages attempted that the recipe does not declare
    unparsed: tuple[str, ...]                    # attempts that named no package we could read

    def as_json(self) -> dict[str, object]:
        return {"attempts": [a.command for a in self.attempts], "refused": dict(self.refused_declared),
                "undeclared": list(self.undeclared), "unparsed": list(self.unparsed)}


def install_guard(directory: Path) -> Path:
    """Write the guard scripts (idempotent); return the directory to put first on ``PATH``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in GUARDED:
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != SCRIPT:
            write_text_atomic(path, SCRIPT)
        path.chmod(0o755)
    return directory


def guard_env(directory: Path, log: Path, base_path: str) -> dict[str, str]:
    return {"PATH": f"{directory}{os.pathsep}{base_path}" if base_path else str(directory), LOG_VAR: str(log),
            "PIP_NO_INDEX": "1", "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def shadowing(env_bin: Path) -> list[Path]:
    """A ``uv`` in the target env's ``bin`` (uv puts it before our ``PATH``) would bypass the guard; a ``pip``
    there would not (``PIP_NO_INDEX=1`` leaves it nothing to fetch from)."""
    return [env_bin / "uv"] if (env_bin / "uv").exists() else []


def read_attempts(log: Path) -> list[Attempt]:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    rows = [line.split(SEP) for line in text.splitlines() if line.strip()]
    return [Attempt(tool, tuple(args)) for tool, *args in rows]


def judge(attempts: Sequence[Attempt], declared: Mapping[str, str]) -> Verdict:
    unique = tuple(dict.fromkeys(attempts))        # a backend hook may run twice (metadata, then build)
    names = [n for a in unique for n in a.packages]
    return Verdict(unique, {n: declared[n] for n in names if n in declared},
                   tuple(dict.fromkeys(n for n in names if n not in declared)),
                   tuple(a.command for a in unique if not a.packages))
