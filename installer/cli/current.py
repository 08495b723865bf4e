"""The ``current`` app and its commands: doctor, verify, env, recipes, download, smoke (thin, as in
:mod:`.cli`: parse options, call one function, :func:`~.cli_common.guarded` maps errors to exit codes)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Optional

import typer

from .common import (
    RECIPE_HELP,
    DiagnosticCache,
    ModelFormat,
    SmokeLevel,
    cache_dir_option,
    command,
    dir_option,
    file_option,
    guarded,
    json_option,
    locale_readable,
    new_app,
    print_json,
    quiet_option,
    recipe_option,
    reporter,
    split_skips,
    verbose_option,
    version_option,
)
from ..core.errors import OctoberError
from ..core.paths import default_cache_dir

current_app = new_app("Check the machine, download pinned models, and prove a stack does K16/V8.")


@current_app.callback()
def _current_options(version: bool = version_option("current")) -> None:
    """Check the machine, download pinned models, and prove a stack does K16/V8."""


def doctor_table(results: list[Any]) -> list[str]:
    """The checks as an aligned table: CHECK, STATUS, DETAIL."""
    width = max([len("CHECK")] + [len(r.name) for r in results])
    return ([f"{'CHECK':{width}}  {'STATUS':7}  DETAIL"]
            + [f"{r.name:{width}}  {r.status:7}  {r.detail}" for r in results])


@command(current_app)
def doctor(
    recipe: str = recipe_option(),
    install: Path = typer.Option(Path("."), "--install", metavar="STACK",
                                 help="Where the stack lives or will live (for the disk check)."),
    skip_preflight: list[str] = typer.Option([], "--skip-preflight", metavar="CHECK",
                                             help="Skip one check by name (repeatable)."),
    as_json: bool = json_option("the checks and machine facts"),
    system_python: Optional[Path] = typer.Option(None, "--system-python", metavar="PYTHON", help="Check the torch of this interpreter too."),
    quiet: bool = quiet_option(),
    verbose: bool = verbose_option(),
) -> None:
    """Run the preflight checks alone and print them as a table; exit 1 when one fails."""
    ui = reporter(quiet, verbose)

    def go() -> int:
        from ..core.runner import Runner
        from ..machine import doctor as run_doctor
        from ..machine import facts_json
        from ..pyenv.systorch import with_system_torch
        from ..recipe import load_recipe

        rec = with_system_torch(load_recipe(recipe), system_python)
        with tempfile.TemporaryDirectory(prefix="october-doctor-") as logs:
            results, facts = run_doctor(rec, install.resolve(), split_skips(skip_preflight), Runner(Path(logs)))
        failed = sum(r.status == "failed" for r in results)
        if as_json:
            print_json("doctor", {"recipe": {"name": rec.name, "sha256": rec.sha256}, "passed": failed == 0,
                                  "checks": [{"name": r.name, "status": r.status, "detail": r.detail,
                                              "expected": r.expected, "found": r.found, "fix": r.fix} for r in results],
                                  "facts": facts_json(facts)})
        else:
            print("\n".join(doctor_table(results)))
            passed, aside = sum(r.status == "passed" for r in results), sum(r.status == "skipped" for r in results)
            print((f"{passed} of {len(results)} checks passed" if failed else "all checks passed")
                  + (f" ({aside} skipped or not checked)" if aside else ""))
        return 1 if failed else 0

    raise typer.Exit(guarded(go, ui, json_command="current doctor" if as_json else None))


def install_option(install: Path) -> Path:
    """``--install STACK`` of a command that reads a stack (verify, smoke): an existing directory; a file
    or nothing there is exit 19, said as such, with the command that makes a stack."""
    return locale_readable("--install", dir_option(
        "--install", install, must_exist=True,
        fix="pass the stack directory that `october_setup STACK --recipe NAME` made to --install"))


@command(current_app)
def verify(
    install: Path = typer.Option(..., "--install", metavar="STACK", help="The stack directory made by october_setup."),
    as_json: bool = json_option("the report"),
    quiet: bool = quiet_option(),
    verbose: bool = verbose_option("Name each group of checks as it starts."),
) -> None:
    """Re-check a stack against its lock and receipts, offline: fork commits and trees, every
    installed distribution and file, torch, the base wheel, the JIT libraries. Exit 0, or 13
    with every difference listed."""
    ui = reporter(quiet, verbose)

    def go() -> int:
        from ..verify.report import format_report
        from ..verify.stack import verify_stack

        stack = install_option(install)
        bar = lambda done, total: ui.transfer("hashing installed files", done, total, "B")  # noqa: E731
        report = verify_stack(stack, progress=ui.detail, hashed=bar)
        if as_json:
            print_json("verify", {**report.as_json(), "exit_code": 0 if report.ok else report.error().exit_code})
            return 0 if report.ok else report.error().exit_code
        for line in format_report(report):
            print(line)
        if not report.ok:
            raise report.error()
        return 0

    raise typer.Exit(guarded(go, ui, json_command="current verify" if as_json else None))


@command(current_app, "env")
def env_cmd(
    install: Optional[Path] = typer.Option(None, "--install", metavar="STACK",
                                           help="Also report this stack (recipe, lock, forks, torch)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", "-r", metavar="NAME", help=RECIPE_HELP),
    as_json: bool = json_option("the report"),
    quiet: bool = quiet_option(),
    verbose: bool = verbose_option(),
) -> None:
    """An environment report for bug reports: GPU, driver, CUDA, torch, fork commits, recipe,
    lock hash. Holds no secrets (token variables show as set / not set)."""
    ui = reporter(quiet, verbose)

    def go() -> None:
        from ..core.runner import Runner
        from .envreport import collect, format_text
        from ..recipe import load_recipe

        stack = dir_option("--install", install, must_exist=True) if install is not None else None
        if recipe is not None:
            load_recipe(recipe)        # an unknown or invalid recipe is refused (exit 3), not reported as fine
        with tempfile.TemporaryDirectory(prefix="october-env-") as logs:
            report = collect(stack, recipe, Runner(Path(logs)))
        if as_json:
            print_json("env", report)
        else:
            print("\n".join(format_text(report)))

    guarded(go, ui, json_command="current env" if as_json else None)


@command(current_app, "recipes")
def recipes_cmd(
    as_json: bool = json_option("the list"),
    quiet: bool = quiet_option(),
    verbose: bool = verbose_option(),
) -> None:
    """List the shipped recipes, one line each (name, then description)."""
    ui = reporter(quiet, verbose)

    def go() -> None:
        from ..core.resources import shipped_recipes
        from ..recipe import load_recipe

        paths = shipped_recipes()
        width = max((len(p.stem) for p in paths), default=0)
        rows = []
        for path in paths:
            try:
                rec = load_recipe(str(path))
                rows.append({"name": rec.name, "description": rec.description, "models": sorted(rec.models),
                             "error": None})
            except OctoberError as exc:
                rows.append({"name": path.stem, "description": None, "models": [], "error": exc.what})
        if as_json:
            print_json("recipes", {"recipes": rows})
            return
        for row in rows:
            text = f"INVALID: {row['error']}" if row["error"] else row["description"] or "(no description)"
            print(f"{row['name']:{width}}  {text}")

    guarded(go, ui, json_command="current recipes" if as_json else None)


@command(current_app)
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
    verbose: bool = verbose_option(),
    as_json: bool = json_option("where the manifest went"),
) -> None:
    """Download the recipe's pinned model and write a verified manifest."""
    ui = reporter(quiet, verbose)

    def go() -> None:
        from ..download import DownloadOptions, run_download
        from ..recipe import load_recipe

        out = (dir_option("--output", output.parent) / output.name if output.suffix == ".json"
               else dir_option("--output", output))
        cache = dir_option("--cache-dir", cache_dir or default_cache_dir())
        local = dir_option("--local-dir", local_dir) if local_dir else None
        opts = DownloadOptions(recipe=load_recipe(recipe), format=format.value, output=out, local_dir=local,
                               cache_dir=cache, offline=offline,
                               fixtures=fixtures.resolve() if fixtures else None, quiet=quiet or as_json,
                               model_dir=model_dir.resolve() if model_dir else None)
        path = run_download(opts, bars=lambda label, done, total: ui.transfer(label, done, total, "B"))
        if as_json:
            print_json("result", {"command": "current download", "ok": True, "exit_code": 0,
                                  "result": {"manifest": str(path), "format": format.value}})
        elif not quiet:
            print(f"manifest written: {path}")

    guarded(go, ui, json_command="current download" if as_json else None)


@command(current_app)
def smoke(
    install: Path = typer.Option(..., "--install", metavar="STACK", help="The stack directory made by october_setup."),
    format: Optional[ModelFormat] = typer.Option(None, "--format", "-f",
                                                 help="Which of the recipe's models (default: the recipe's only one, "
                                                      "none for a FlashInfer-only recipe, or the one whose "
                                                      "<format>-download.json is here)."),
    output: Path = typer.Option(..., "--output", "-o", metavar="DIR", help="Directory for receipt.json (made if missing)."),
    level: Optional[SmokeLevel] = typer.Option(None, "--level",
                                               help="What to exercise (default: the level the stack promises in its setup receipt; a lower level proves less and never passes as a stack verdict)."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", metavar="FILE",
                                            help="Download manifest (default: ./<format>-download.json)."),
    fixtures: Optional[Path] = typer.Option(None, "--fixtures", metavar="DIR",
                                            help="Calibrated scales dir (default $KNLP_KV_FIXTURES)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", "-r", metavar="NAME",
                                         help="Recipe for the model selection (default: the one the setup receipt names)."),
    diagnostic_cache: Optional[DiagnosticCache] = typer.Option(
        None, "--diagnostic-cache",
        help="Engine level: run every engine check on a symmetric cache the engine can store instead of K16/V8 "
             "(bf16: kv_cache_dtype='auto', fp8_e4m3: K and V e4m3; both: bf16 then fp8_e4m3). Proves the harness "
             "on a real engine, never the stack: passed is always false; exit 21 when every check passed on every "
             "cache (the harness agrees with the engine), 1 when one did not."),
    plant_fault: Optional[str] = typer.Option(None, "--plant-fault", hidden=True,
                                              help="Diagnostic only (benches): attn_output_zero, v_read_scale_2x, "
                                                   "attn_output_x1_01 or softmax_scale_x1_02."),
    quiet: bool = quiet_option(),
    verbose: bool = verbose_option("Echo the checks' output as they run."),
    as_json: bool = json_option("the verdict and where the receipt is"),
) -> None:
    """Prove on this machine that the stack really does K16/V8; exit 0 only when receipt.json says passed.
    What is left out comes from the stack: its recipe and promised level from STACK/receipts/setup.json,
    the format from that recipe's models (receipt.json records each choice and any override).
    With --diagnostic-cache the engine checks run on a symmetric cache: exit 21 means the diagnostic
    finished and the harness agreed with the engine on every cache, 1 that it did not."""
    ui = reporter(quiet, verbose)

    def go() -> int:
        from ..smoke.launch import SmokeOptions, load_receipt, run_smoke

        out = dir_option("--output", output)
        manifest_file = file_option("--manifest", manifest) if manifest else None
        opts = SmokeOptions(install=install_option(install), format=format.value if format else None,
                            output=out, level=level.value if level else None,
                            fixtures=fixtures.resolve() if fixtures else None,
                            manifest=manifest_file, recipe=recipe,
                            diagnostic_cache=diagnostic_cache.value if diagnostic_cache else None,
                            plant_fault=plant_fault)
        say = (lambda _line: None) if quiet or as_json else print
        code = run_smoke(opts, echo=say, ui=ui)
        if as_json:
            receipt = load_receipt(opts.output / "receipt.json")
            diagnostic = receipt.get("diagnostic")
            print_json("result", {"command": "current smoke", "ok": code == 0, "exit_code": code, "result": {
                "receipt": str(opts.output / "receipt.json"), "passed": receipt["passed"], "proves": receipt["proves"],
                "level": receipt["level"], "choices": receipt["stack"].get("choices"),
                "diagnostic": None if diagnostic is None else {
                    "caches": diagnostic["caches"], "harness_ok": diagnostic["harness_ok"],
                    "fault": (diagnostic["fault"] or {}).get("name"), "fault_caught": diagnostic["fault_caught"]}}})
        return code

    raise typer.Exit(guarded(go, ui, json_command="current smoke" if as_json else None))
