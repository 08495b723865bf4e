"""One fork's ``uv pip install`` into the stack env behind the nested-install guard (:mod:`.nested`), and what
its failure means; :func:`install_forks` installs the plan's forks in order, each one's tracked files checked
unchanged by its install (:mod:`.overwritten`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import CommandFailed, InstallError
from ..core.runner import Runner
from . import nested, overwritten
from .plan import ForkSource, UvInstall

if TYPE_CHECKING:
    from ..pyenv.uvcmd import StackUv


def install_fork(uv: "StackUv", runner: Runner, step: str, inv: UvInstall, *, guard: Path, log: Path,
                 env_bin: Path, declared: Mapping[str, str], torch_version: str) -> nested.Verdict:
    """``uv pip install`` of ``inv`` with ``guard`` first on PATH (attempts logged to ``log``); -> the verdict on
    what the fork's build tried to install by itself (something the recipe does not declare fails)."""
    shadow = nested.shadowing(env_bin)
    if shadow:
        raise InstallError("the stack env holds its own package installer, which a fork's build would use "
                           "instead of the guard", expected=f"no uv in {env_bin}", found=", ".join(str(p) for p in shadow),
                           fix="remove the package that installs it from the recipe's requirements, or "
                               "re-run october_setup (the env step makes a fresh env)")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    env = {**inv.env_dict, **nested.guard_env(guard, log, os.environ.get("PATH", ""))}
    try:
        uv.pip_install(runner, step, inv.args, extra_env=env)
    except CommandFailed as exc:
        raise install_failed(inv.fork, torch_version, exc) from exc
    verdict = nested.judge(nested.read_attempts(log), declared)
    if verdict.undeclared or verdict.unparsed:
        what = ", ".join(verdict.undeclared) or "; ".join(verdict.unparsed)
        raise InstallError(
            f"the build of fork '{inv.fork}' tried to install packages by itself (refused): {what}",
            expected="a build that installs nothing outside the recipe's sources, or each such package "
                     f"declared in the recipe's [forks.nested_installs] of '{inv.fork}'",
            found="\n    " + "\n    ".join(a.command for a in verdict.attempts),
            fix=f"set the fork's build knobs in [forks.build_env] (e.g. BUILD_NVEP = \"0\") so it does not, "
                "supply what it needs through [install] supply, or declare why the stack does not need it "
                f"in [forks.nested_installs]; log: {runner.log_path(step)}")
    return verdict


def install_forks(uv: "StackUv", runner: Runner, step: str, installs: Sequence[UvInstall],
                  sources: Mapping[str, ForkSource], *, state: Path, env_bin: Path, torch_version: str,
                  info: Callable[[str], None], detail: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Each of ``installs`` in order with :func:`install_fork` (attempts logged to ``state/nested/<fork>.log``),
    its tracked files checked unchanged; -> fork -> the verdict's JSON."""
    guard = nested.install_guard(state / "build-guard")
    out: dict[str, dict[str, Any]] = {}
    for inv in installs:
        src = sources[inv.fork]
        info(f"installing fork {inv.fork} ({inv.why})")
        before = overwritten.snapshot(runner, step, src.path)
        verdict = install_fork(uv, runner, step, inv, guard=guard, log=state / "nested" / f"{inv.fork}.log",
                               env_bin=env_bin, declared=src.use.nested_installs, torch_version=torch_version)
        for name, why in verdict.refused_declared.items():
            detail(f"{inv.fork}: its build asked for {name}; refused, not needed ({why})")
        out[inv.fork] = verdict.as_json()
        overwritten.check(runner, step, inv.fork, src.path, before)
    return out


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([A-Za-z0-9_.]+)'")
_TORCH_SPEC = re.compile(r"\btorch(\[[^\]]*\])?\s*(==|>=|<=|!=|~=|<|>)\s*\d")


def install_failed(fork: str, torch: str, exc: CommandFailed) -> InstallError:
    """The error of a failed fork install: a build module missing, torch moved, or uv's own last lines."""
    lines = [ln for ln in exc.tail.rstrip().splitlines() if not ln.startswith("Using Python")][-12:]
    said = "\n".join("    | " + ln for ln in lines)
    # a resolver line about a torch version (e.g. "depends on torch==2.11.0"), not any line that
    # merely contains "torch" (a build error under a path named torch/ is not a torch conflict)
    moves_torch = any(_TORCH_SPEC.search(ln) for ln in lines)
    # the last ModuleNotFoundError: uv's output also carries warnings such as torch's "No module named 'numpy'"
    missing = next((m.group(1) for ln in reversed(exc.tail.splitlines()) if (m := _NO_MODULE.search(ln))), None)
    if missing and not moves_torch:
        # e.g. vLLM 0.24.0's setup.py imports setuptools_rust; with --no-build-isolation the env must hold it
        return InstallError(f"the build of fork '{fork}' needs the module '{missing}', which the stack env lacks",
                            expected=f"'{missing}' installed before the fork is built (--no-build-isolation)",
                            found=f"uv exit code {exc.returncode}: No module named '{missing}'",
                            fix=f"add its package (e.g. {missing.split('.')[0].replace('_', '-')}) to the recipe's "
                                f"[build] requirements; full log: {exc.log_path}")
    what = (f"installing fork '{fork}' would move torch away from the pinned {torch}" if moves_torch
            else f"installing fork '{fork}' failed")
    return InstallError(what, expected=f"the fork to install with torch held at torch=={torch} (recipe [torch]) "
                        "and every dependency resolvable", found=f"uv exit code {exc.returncode}:\n{said}\n",
                        fix=(f"the fork or a dependency needs a torch other than {torch}: pick a recipe whose "
                             "torch matches the fork" if moves_torch else "read uv's message above")
                        + f"; full log: {exc.log_path}")
