"""The ``current`` commands: doctor, verify, env, recipes, download, smoke.

Each looks at the machine or at one stack (``--install STACK``); ``--json`` prints the
machine-readable form of a report.  Thin on purpose: parse options, call one function, and let
:func:`~october.installer.cli_common.guarded` turn an error into a message and its exit code.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Optional

import typer

from october.installer.cli_common import (
    RECIPE_HELP,
    ModelFormat,
    SmokeLevel,
    cache_dir_option,
    current_app,
    guarded,
    quiet_option,
    recipe_option,
    split_skips,
)
from october.installer.core.errors import OctoberError
from october.installer.core.paths import default_cache_dir
from october.installer.core.ui import ConsoleReporter


def doctor_table(results: list[Any]) -> list[str]:
    """The checks as an aligned table: CHECK, STATUS, DETAIL."""
    width = max([len("CHECK")] + [len(r.name) for r in results])
    lines = [f"{'CHECK':{width}}  {'STATUS':7}  DETAIL"]
    lines += [f"{r.name:{width}}  {r.status:7}  {r.detail}" for r in results]
    return lines


@current_app.command()
def doctor(
    recipe: str = recipe_option(),
    install: Path = typer.Option(Path("."), "--install", metavar="STACK",
                                 help="Where the stack lives or will live (for the disk check)."),
    skip_preflight: list[str] = typer.Option([], "--skip-preflight", metavar="CHECK",
                                             help="Skip one check by name (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the checks and machine facts as JSON."),
    system_python: Optional[Path] = typer.Option(None, "--system-python", metavar="PYTHON", help="Check the torch of this interpreter too."),
) -> None:
    """Run the preflight checks alone and print them as a table; exit 1 when one fails."""
    ui = ConsoleReporter()

    def go() -> int:
        from october.installer.core.runner import Runner
        from october.installer.recipe import load_recipe
        from october.installer.steps.env.systorch import with_system_torch
        from october.installer.steps.preflight import doctor as run_doctor
        from october.installer.steps.preflight import facts_json

        rec = with_system_torch(load_recipe(recipe), system_python)
        with tempfile.TemporaryDirectory(prefix="october-doctor-") as logs:
            results, facts = run_doctor(rec, install.resolve(), split_skips(skip_preflight), Runner(Path(logs)))
        failed = sum(r.status == "failed" for r in results)
        if as_json:
            print(json.dumps({"recipe": {"name": rec.name, "sha256": rec.sha256}, "passed": failed == 0,
                              "checks": [{"name": r.name, "status": r.status, "detail": r.detail,
                                          "expected": r.expected, "found": r.found, "fix": r.fix} for r in results],
                              "facts": facts_json(facts)}, indent=2))
        else:
            print("\n".join(doctor_table(results)))
            print(f"{len(results) - failed} of {len(results)} checks passed" if failed else "all checks passed")
        return 1 if failed else 0

    raise typer.Exit(guarded(go, ui))


@current_app.command()
def verify(
    install: Path = typer.Option(..., "--install", metavar="STACK", help="The stack directory made by october_setup."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Re-check a stack against its lock and receipts, offline: fork commits and trees, every
    installed distribution and file, torch, the base wheel, the JIT libraries. Exit 0, or 13
    with every difference listed."""
    ui = ConsoleReporter()

    def go() -> int:
        from october.installer.verify import format_report, verify_stack

        bar = None if as_json else (lambda done, total: ui.transfer("hashing installed files", done, total, "B"))
        report = verify_stack(install, hashed=bar)
        if as_json:
            print(json.dumps(report.as_json(), indent=2))
            return 0 if report.ok else report.error().exit_code
        for line in format_report(report):
            print(line)
        if not report.ok:
            raise report.error()
        return 0

    raise typer.Exit(guarded(go, ui))


@current_app.command("env")
def env_cmd(
    install: Optional[Path] = typer.Option(None, "--install", metavar="STACK",
                                           help="Also report this stack (recipe, lock, forks, torch)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", "-r", metavar="NAME", help=RECIPE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """An environment report for bug reports: GPU, driver, CUDA, torch, fork commits, recipe,
    lock hash. Holds no secrets (token variables show as set / not set)."""
    ui = ConsoleReporter()

    def go() -> None:
        from october.installer.core.runner import Runner
        from october.installer.envreport import collect, format_text

        with tempfile.TemporaryDirectory(prefix="october-env-") as logs:
            report = collect(install.resolve() if install else None, recipe, Runner(Path(logs)))
        print(json.dumps(report, indent=2) if as_json else "\n".join(format_text(report)))

    guarded(go, ui)


@current_app.command("recipes")
def recipes_cmd() -> None:
    """List the shipped recipes, one line each (name, then description)."""
    ui = ConsoleReporter()

    def go() -> None:
        from october.installer.core.resources import shipped_recipes
        from october.installer.recipe import load_recipe

        paths = shipped_recipes()
        width = max((len(p.stem) for p in paths), default=0)
        for path in paths:
            try:
                rec = load_recipe(str(path))
                name, text = rec.name, rec.description or "(no description)"
            except OctoberError as exc:
                name, text = path.stem, f"INVALID: {exc.what}"
            print(f"{name:{width}}  {text}")

    guarded(go, ui)


@current_app.command()
def download(
    format: ModelFormat = typer.Option(..., "--format", "-f", help="Which of the recipe's models."),
    output: Path = typer.Option(Path("."), "--output", "-o", metavar="DIR",
                                help="Directory for <format>-download.json (made if missing), or a FILE.json."),
    recipe: str = recipe_option(),
    local_dir: Optional[Path] = typer.Option(None, "--local-dir", metavar="DIR",
                                             help="Where the model files go (default: the cache's models/)."),
    cache_dir: Optional[Path] = cache_dir_option(),
    offline: bool = typer.Option(False, "--offline", help="Re-verify an existing copy without network."),
    fixtures: Optional[Path] = typer.Option(None, "--fixtures", metavar="DIR",
                                            help="Calibrated scales dir (default $KNLP_KV_FIXTURES)."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", metavar="DIR",
                                             help="A local copy (shared storage): checked in place against the "
                                                  "recipe's sha256 pins, no hub, nothing written there."),
    quiet: bool = quiet_option(),
) -> None:
    """Download the recipe's pinned model and write a verified manifest."""
    ui = ConsoleReporter(quiet=quiet)

    def go() -> None:
        from october.installer.download import DownloadOptions, run_download
        from october.installer.recipe import load_recipe

        opts = DownloadOptions(recipe=load_recipe(recipe), format=format.value, output=output.resolve(),
                               local_dir=local_dir.resolve() if local_dir else None,
                               cache_dir=(cache_dir or default_cache_dir()).resolve(), offline=offline,
                               fixtures=fixtures.resolve() if fixtures else None, quiet=quiet,
                               model_dir=model_dir.resolve() if model_dir else None)
        path = run_download(opts, bars=lambda label, done, total: ui.transfer(label, done, total, "B"))
        if not quiet:
            print(f"manifest written: {path}")

    guarded(go, ui)


@current_app.command()
def smoke(
    install: Path = typer.Option(..., "--install", metavar="STACK", help="The stack directory made by october_setup."),
    format: ModelFormat = typer.Option(..., "--format", "-f", help="Which of the recipe's models."),
    output: Path = typer.Option(..., "--output", "-o", metavar="DIR", help="Directory for receipt.json (made if missing)."),
    level: Optional[SmokeLevel] = typer.Option(None, "--level",
                                               help="What to exercise (default: the level the stack promises in its setup receipt; a lower level proves less and never passes as a stack verdict)."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", metavar="FILE",
                                            help="Download manifest (default: ./<format>-download.json)."),
    fixtures: Optional[Path] = typer.Option(None, "--fixtures", metavar="DIR",
                                            help="Calibrated scales dir (default $KNLP_KV_FIXTURES)."),
    recipe: str = recipe_option(),
) -> None:
    """Prove on this machine that the stack really does K16/V8; exit 0 only when receipt.json says passed."""
    ui = ConsoleReporter()

    def go() -> int:
        from october.installer.smoke.launch import SmokeOptions, run_smoke

        opts = SmokeOptions(install=install.resolve(), format=format.value, output=output.resolve(),
                            level=level.value if level else None,
                            fixtures=fixtures.resolve() if fixtures else None,
                            manifest=manifest.resolve() if manifest else None, recipe=recipe)
        return run_smoke(opts)

    raise typer.Exit(guarded(go, ui))
