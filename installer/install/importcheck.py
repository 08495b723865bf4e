"""``import <fork>`` in the stack env with the stack environment, as jit, smoke and serving run it (a FlashInfer
fork over an index ``flashinfer-cubin`` of another version imports only with its version check disabled)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.errors import InstallError
from ..core.runner import Runner


def check_imports(runner: Runner, step: str, python: Path, python_args: Sequence[str], names: Sequence[str],
                  env: Mapping[str, str], env_file: Path) -> dict[str, str]:
    """Each of ``names`` imported by ``python`` (``-I``) under ``env``; -> name -> its ``__version__``."""
    out: dict[str, str] = {}
    for name in names:
        code = f"import {name}; print('OCTOBER_IMPORT', {name}.__version__)"
        done = runner.run([str(python), *python_args, "-I", "-c", code], step=step, env=env, check=False)
        line = next((ln for ln in done.output.splitlines() if ln.startswith("OCTOBER_IMPORT ")), None)
        if done.returncode != 0 or line is None:
            last = (done.output.strip().splitlines() or ["no output"])[-1]
            raise InstallError(f"`import {name}` fails in the stack env with the stack's environment",
                               expected=f"`import {name}` to work with {env_file} applied",
                               found=f"exit code {done.returncode}: {last[:400]}",
                               fix=f"read {runner.log_path(step)}; a missing module means the fork "
                                   "needs a runtime package: supply it through the recipe's [install] supply")
        out[name] = line.split(" ", 1)[1].strip()
    return out
