"""`current smoke`: run ``python -m october.checks.smoke`` in the stack env and check its receipt.

The tool env never imports torch: it plans a command (pure), runs it with the stack's own runtime
environment (:mod:`october.installer.pyenv.stackenv`) and the log in the output directory, then validates
``OUTPUT/receipt.json``.  The level the stack promises (its setup receipt: ``engine`` with the vLLM fork,
``kernel`` with FlashInfer only) runs unless a lower one is named.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ...checks.contract import (DIAGNOSTIC_AGREED_EXIT, DIAGNOSTIC_CACHES, ENGINE_FAULTS, FORMATS, LEVELS,
                               SMOKE_RECEIPT_FILENAME)
from ...checks.results import format_table
from ..core import jsonread
from ..core.atomic import write_json_atomic
from ..core.errors import ReceiptError, SmokeError, StateError, UsageError
from ..core.paths import StackPaths, default_cache_dir
from ..core.resources import IMPORT_ROOT, stack_code_root
from ..core.runner import Runner
from ..core.schemas import validate
from ..download.plan import fixtures_dir
from ..pyenv import stackenv
from . import choices
from .manifest import check_manifest, check_model, check_model_files, resolve_manifest
from .mutex import SmokeMutex, output_lock
from .selection import selection_info
from .stackinfo import stack_info

REPO_ROOT = IMPORT_ROOT  # holds the `october` package in a checkout (installed: see stack_code_root)
STEP = "smoke"


@dataclass(frozen=True)
class SmokeOptions:
    """What `current smoke` was asked to do."""

    install: Path                   # the STACK directory made by october_setup
    format: str | None              # awq | fp16; None: the stack's (installer/smoke/choices.py)
    output: Path                    # receipt.json, stack-info.json and smoke.log go here
    level: str | None = None        # None: the level the stack promises (a lower one proves less)
    fixtures: Path | None = None    # calibrated scales dir (default: $KNLP_KV_FIXTURES)
    manifest: Path | None = None    # default: ./<format>-download.json
    recipe: str | None = None       # None: the recipe the setup receipt names
    device: str = "auto"
    seed: int = 0
    diagnostic_cache: str | None = None   # bf16 | fp8_e4m3 | both: the engine checks on a symmetric cache
    plant_fault: str | None = None        # a diagnostic only: one of ENGINE_FAULTS planted into the engine


@dataclass(frozen=True)
class SmokePlan:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)      # set over the caller's environment
    drop: tuple[str, ...] = ()                                # removed from it (stackenv.DROP)
    cwd: Path = REPO_ROOT
    receipt: Path = Path(SMOKE_RECEIPT_FILENAME)
    logs_dir: Path = Path(".")


def stack_python(install: Path) -> Path:
    py = install / "env" / "bin" / "python"
    if not py.exists():
        from ..verify.fix import not_a_stack

        raise SmokeError(f"the stack at {install} has no Python environment",
                         expected=f"an executable {py}", found="nothing", fix=not_a_stack(StackPaths(install)))
    return py


def check_choices(opts: SmokeOptions) -> None:
    """Usage errors first, before anything is looked at or written."""
    if opts.format is not None and opts.format not in FORMATS:
        raise UsageError("unknown model format", expected=" or ".join(FORMATS), found=repr(opts.format),
                         fix="pass --format awq or --format fp16")
    if opts.level is not None and opts.level not in LEVELS:
        raise UsageError("unknown smoke level", expected=", ".join(LEVELS), found=repr(opts.level),
                         fix="pass --level reference, kernel or engine, or leave it out")
    if opts.diagnostic_cache is not None and opts.diagnostic_cache not in DIAGNOSTIC_CACHES:
        raise UsageError("unknown diagnostic cache", expected=", ".join(DIAGNOSTIC_CACHES),
                         found=repr(opts.diagnostic_cache), fix="pass --diagnostic-cache bf16, fp8_e4m3 or both")
    if opts.diagnostic_cache is not None and opts.level not in (None, "engine"):
        raise UsageError("--diagnostic-cache runs the engine checks", expected="--level engine (or no --level on "
                         "a stack that promises the engine level)", found=f"--level {opts.level}",
                         fix="leave --level out, or leave --diagnostic-cache out")
    if opts.plant_fault is not None and (opts.diagnostic_cache is None or opts.plant_fault not in ENGINE_FAULTS):
        raise UsageError("a fault is planted only into a diagnostic run, and only a known one",
                         expected=f"--diagnostic-cache with --plant-fault {' or '.join(ENGINE_FAULTS)}",
                         found=f"--plant-fault {opts.plant_fault}"
                         + ("" if opts.diagnostic_cache else " without --diagnostic-cache"),
                         fix="add --diagnostic-cache bf16|fp8_e4m3|both, or leave --plant-fault out")
    if opts.output.exists() and not opts.output.is_dir():
        raise UsageError(f"--output {opts.output} is a file", expected="a directory for receipt.json (made if missing)",
                         found="a file", fix="pass a directory path to --output")


def plan_smoke(opts: SmokeOptions, python: Path, manifest: Path | None, info_path: Path,
               base_env: Mapping[str, str], stack_env: Mapping[str, str] | None = None,
               code_root: Path = REPO_ROOT) -> SmokePlan:
    """The command and environment; pure.  ``stack_env`` (:func:`october.installer.pyenv.stackenv.load`) is laid
    over ``base_env``; ``code_root`` holds the ``checks`` package (put on the stack env's PYTHONPATH)."""
    check_choices(opts)
    argv = [str(python), "-m", "october.checks.smoke", *(["--format", opts.format] if opts.format else []),
            "--output", str(opts.output), "--stack-info", str(info_path),
            "--device", opts.device, "--seed", str(opts.seed)]
    for flag, value in (("--level", opts.level), ("--manifest", manifest), ("--fixtures", opts.fixtures),
                        ("--diagnostic-cache", opts.diagnostic_cache), ("--plant-fault", opts.plant_fault)):
        if value is not None:
            argv += [flag, str(value)]
    old = base_env.get("PYTHONPATH")
    env: dict[str, str] = {}
    drop: tuple[str, ...] = ()
    if stack_env is not None:
        applied = stackenv.apply(stack_env, base_env)
        env = {k: v for k, v in applied.items() if base_env.get(k) != v}
        drop = tuple(k for k in base_env if k not in applied)
        old = None                  # the stack's environment drops the caller's PYTHONPATH
    env.update({"PYTHONPATH": str(code_root) + (f":{old}" if old else ""), "PYTHONNOUSERSITE": "1"})
    return SmokePlan(drop=drop, argv=tuple(argv), env=env, cwd=code_root, receipt=opts.output / SMOKE_RECEIPT_FILENAME,
                     logs_dir=opts.output)


def load_receipt(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ReceiptError("the smoke run wrote no receipt", expected=f"{path}", found="nothing",
                           fix=f"read {path.parent / (STEP + '.log')}")
    try:
        data = jsonread.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReceiptError("the smoke receipt is not JSON", expected="JSON", found=str(exc),
                           fix="re-run current smoke") from None
    validate("smoke", data, where=f"smoke receipt {path}",
             fix="the stack's checks package and this tool disagree: re-run from one checkout")
    return data


def run_smoke(opts: SmokeOptions, *, cwd: Path | None = None, echo: Callable[[str], None] = print,
              base_env: Mapping[str, str] | None = None, ui: Any = None) -> int:
    """Run the checks; 0 only when the receipt says passed, 1 when a check did not pass."""
    import os
    env = dict(os.environ if base_env is None else base_env)
    old = opts.output / SMOKE_RECEIPT_FILENAME
    earlier = [p for p in (old, old.with_name(REJECTED)) if os.path.lexists(p) and not p.is_dir()]
    if not earlier:                 # no earlier receipt to remove: a usage error or no stack writes nothing
        check_choices(opts)
        stack_python(opts.install)
    opts.output.mkdir(parents=True, exist_ok=True)
    # one smoke per output directory, stack and GPU (exit 5 naming the holder); the output's first: two runs into
    # one --output read each other's stack-info.json and receipt
    with output_lock(opts.output):
        # the last run's receipts go before anything can refuse this one: a usage error (2), no stack env (17), a
        # stack changed since, a model file, the JIT, a busy stack or GPU (5); a refused run leaves no receipt
        # that says it passed, and no rejected one of an earlier run to be taken for this run's
        for path in earlier:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        check_choices(opts)
        python = stack_python(opts.install)
        with SmokeMutex(opts.install, opts.device, env):
            return _checked_run(opts, python, cwd, echo, env, ui)


def _checked_run(opts: SmokeOptions, python: Path, cwd: Path | None, echo: Callable[[str], None],
                 env: dict[str, str], ui: Any) -> int:
    """What the stack is (refused when it changed since setup), what this run chooses, then the run."""
    refuse_untrusted_jit(opts.install)
    info = stack_info(opts.install, opts.recipe)
    opts, info["choices"] = choices.resolve(opts, info["promised_level"], cwd or Path.cwd())
    if opts.diagnostic_cache is not None and (opts.level or info["promised_level"]) != "engine":
        raise UsageError("--diagnostic-cache runs the engine checks", expected="a stack that promises the "
                         "engine level (the vLLM fork)", found=f"level {opts.level or info['promised_level']}",
                         fix="leave --diagnostic-cache out: this stack has no engine to diagnose")
    runtime = trusted_runtime_env(opts.install)
    return _run_smoke(opts, python, cwd, echo, env, info, runtime, ui)


def _run_smoke(opts: SmokeOptions, python: Path, cwd: Path | None, echo: Callable[[str], None],
               env: dict[str, str], info: dict[str, Any], runtime: dict[str, str], ui: Any = None) -> int:
    # a --fixtures / $KNLP_KV_FIXTURES that points nowhere is refused; one that is there goes to the checks as
    # an absolute --fixtures (they run in the code root: a relative $KNLP_KV_FIXTURES named another directory)
    opts = replace(opts, fixtures=fixtures_dir(opts.fixtures, env))
    manifest = resolve_manifest(opts, cwd or Path.cwd(), info["promised_level"])
    if manifest is not None:
        check_manifest(manifest, opts.format, opts.install, opts.recipe)
    opts.output.mkdir(parents=True, exist_ok=True)
    info_path = opts.output / "stack-info.json"
    info["selection"] = selection_info(opts.install, opts.recipe, opts.format) if opts.format else None
    if manifest is not None and info["selection"]:
        check_model(manifest, info["selection"])
    if manifest is not None and (opts.level or info["promised_level"]) == "engine":    # the one level that loads it
        check_model_files(manifest, opts, ui)
    write_json_atomic(info_path, info)
    plan = plan_smoke(opts, python, manifest, info_path, env, runtime, stack_code_root(default_cache_dir(env)))
    if plan.receipt.exists():
        plan.receipt.unlink()
    if ui is not None:
        ui.task_start(STEP, f"level {opts.level or info['promised_level']}, "
                            f"format {opts.format or 'none (no model)'}, recipe {opts.recipe}")
    echo_line = None if ui is None else ui.detail if ui.verbose else ui.progress
    done = Runner(plan.logs_dir, echo=echo_line).run(plan.argv, step=STEP, cwd=plan.cwd,
                                                     env={k: v for k, v in env.items() if k not in plan.drop},
                                                     extra_env=plan.env, check=False)
    if done.returncode not in (0, 1) or not plan.receipt.is_file():
        set_aside(plan.receipt)          # what a run that then crashed wrote is not this run's verdict
        if ui is not None:
            ui.task_done(STEP, f"did not finish (exit {done.returncode}) after {done.seconds:.1f}s")
        # the last line says what ended it (an exception's message); the traceback stays in the log
        last = next((ln.strip() for ln in reversed(done.output.splitlines()) if ln.strip()), "no output")
        raise SmokeError(f"`python -m october.checks.smoke` in {opts.install / 'env'} did not run",
                         expected="exit code 0 (passed) or 1 (a check failed)",
                         found=f"exit code {done.returncode}: {last}",
                         fix=f"read {Runner(plan.logs_dir).log_path(STEP)} (the whole output, its traceback included)")
    try:
        receipt = load_receipt(plan.receipt)
        this_run(receipt, info, opts.level or info["promised_level"], plan.receipt)
    except ReceiptError:
        set_aside(plan.receipt)          # a receipt this command does not stand behind is not left as receipt.json
        raise
    if ui is not None:
        ui.task_done(STEP, f"{'passed' if receipt['passed'] else 'NOT passed'} in {done.seconds:.1f}s")
    echo(format_table(receipt["checks"], receipt["passed"]))
    for reason in receipt["reasons"]:
        echo(f"  - {reason}")
    echo(f"receipt: {plan.receipt}")
    diagnostic = receipt.get("diagnostic")
    if isinstance(diagnostic, Mapping):
        echo(f"diagnostic ({', '.join(diagnostic['caches'])} cache, never a stack verdict): the harness "
             + (f"agreed with the engine on every cache: exit {DIAGNOSTIC_AGREED_EXIT}" if diagnostic["harness_ok"]
                else "did not agree with the engine (see the checks above): exit 1")
             + (f"; planted fault {diagnostic['fault']['name']} "
                f"{'caught' if diagnostic['fault_caught'] else 'NOT caught'}" if diagnostic.get("fault") else ""))
    if receipt["passed"] != (done.returncode == 0):
        set_aside(plan.receipt)
        raise ReceiptError("the smoke exit code and receipt disagree",
                           expected=f"passed={done.returncode == 0}", found=f"passed={receipt['passed']}",
                           fix="re-run current smoke")
    return exit_code(receipt)


REJECTED = "receipt.rejected.json"
# what the checks copy from the stack info this command wrote into the receipt's "stack"
STACK_FIELDS = ("setup_receipt", "lock_sha256", "forks", "promised_level", "jit", "recipe")


def set_aside(receipt: Path) -> None:
    """``receipt.json`` -> ``receipt.rejected.json`` beside it (kept to read, never taken for a verdict)."""
    import os

    if os.path.lexists(receipt) and not receipt.is_dir():
        os.replace(receipt, receipt.with_name(REJECTED))


def this_run(receipt: Mapping[str, Any], info: Mapping[str, Any], level: str, path: Path) -> None:
    """The receipt speaks for this run: the stack this command described (its setup receipt, lock, forks,
    promise, JIT modules, recipe) at the level it asked for; another run's receipt is a ReceiptError."""
    stack = receipt.get("stack") if isinstance(receipt.get("stack"), Mapping) else {}
    off = [k for k in STACK_FIELDS if stack.get(k) != info.get(k)]
    if receipt.get("level") != level:
        off.append("level")
    if off:
        said = "; ".join(f"{k} {str(receipt.get(k) if k == 'level' else stack.get(k))[:80]}" for k in off)
        raise ReceiptError(f"the smoke receipt {path} is not this run's",
                           expected=f"the stack {info.get('setup_receipt')} at level {level}",
                           found=f"other {', '.join(off)}: {said}",
                           fix="run one `current smoke` per --output directory at a time, and re-run")


def exit_code(receipt: Mapping[str, Any]) -> int:
    """0 only for a stack verdict that passed; a diagnostic (never passed) exits DIAGNOSTIC_AGREED_EXIT (21)
    when every engine check passed on every symmetric cache asked for, 1 when one did not."""
    diagnostic = receipt.get("diagnostic")
    if isinstance(diagnostic, Mapping):
        return DIAGNOSTIC_AGREED_EXIT if diagnostic.get("harness_ok") is True else 1
    return 0 if receipt["passed"] else 1


def trusted_runtime_env(install: Path) -> dict[str, str]:
    """The stack's runtime environment (:func:`october.installer.pyenv.stackenv.load`), refused unless
    stack-env.json is as the env step wrote it (the sha256 its marker records; where the marker is gone, the
    setup receipt's): the checks run with it, so an edited one (another JIT workspace, arch list or toolkit)
    would prove something else than the stack.  A missing file is load's error; no record, nothing to compare."""
    from ..engine import read_marker

    rec = stackenv.recorded((read_marker(StackPaths(install).marker("env")) or {}).get("outputs"), None)
    if rec is None:
        try:
            rec = stackenv.recorded(None, jsonread.loads((install / "receipts" / "setup.json").read_text(encoding="utf-8")))
        except (OSError, ValueError):
            rec = None          # stack_info has refused a missing or unreadable receipt already
    changed = stackenv.changed_files(install, rec, activate=False) if rec is not None else []
    if changed and changed[0].found is not None:
        c = changed[0]
        raise SmokeError("the stack's runtime environment was changed since october_setup wrote it",
                         expected=f"{c.path} with {c.expected_text()}", found=c.found_text(),
                         fix=f"run `current verify --install {install}`; it names the re-run that writes it again")
    try:
        return stackenv.load(install)
    except StateError as exc:       # gone or damaged: the stack's own command writes it again
        from ..verify.fix import rewrite_stack_env, setup_receipt

        paths = StackPaths(install)
        raise StateError(exc.what, expected=exc.expected, found=exc.found,
                         fix=rewrite_stack_env(paths, setup_receipt(paths))) from None


def refuse_untrusted_jit(install: Path) -> None:
    """Never run the checks on JIT libraries whose bytes are not what the jit step recorded."""
    from ..core.errors import UntrustedJitError
    from ..jit.integrity import MANIFEST, report
    from ..verify.fix import rebuild_jit

    if not (install / "jit" / MANIFEST).is_file():
        return      # no jit step recorded anything here: the checks' own JIT check judges the workspace
    got = report(install / "jit")
    if got["ok"]:
        return
    found = "; ".join([f"{u['path']}: {u['reason']}" for u in got["untrusted"]]
                      + [f"{m}: recorded, missing" for m in got["missing"]])
    raise UntrustedJitError("the stack's JIT libraries are not the ones october_setup built", expected="every "
                            f"library under {install / 'jit'} byte-for-byte as the jit step recorded it", found=found,
                            fix=rebuild_jit(StackPaths(install)))
