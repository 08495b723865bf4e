"""Command line: ``october_setup`` and ``current`` (doctor, download, smoke).

Thin on purpose: parse options into a frozen options object, call one function,
turn an :class:`OctoberError` into a message and its exit code.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, TypeVar

import typer
from platformdirs import user_cache_dir

from installer.errors import FileSystemError, OctoberError
from installer.ui import ConsoleReporter

T = TypeVar("T")

setup_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Provision a pinned K16/V8 vLLM + FlashInfer stack from a recipe.")
current_app = typer.Typer(add_completion=False, no_args_is_help=True,
                          help="Check the machine, download pinned models, and prove a stack does K16/V8.")


def default_cache_dir() -> Path:
    return Path(os.environ.get("OCTOBER_CACHE_DIR") or user_cache_dir("october"))


def guarded(fn: Callable[[], T], ui: ConsoleReporter) -> T:
    """Run ``fn``; an OctoberError becomes a printed message and its exit code."""
    try:
        return fn()
    except OctoberError as exc:
        ui.error(exc.title, exc.message)
        raise typer.Exit(exc.exit_code) from None
    except OSError as exc:  # anything a step did not map: still a message, never a traceback
        err = FileSystemError.from_os_error(exc)
        ui.error(err.title, err.message)
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt:
        ui.error("interrupted", "stopped by the user; re-run the same command to resume")
        raise typer.Exit(130) from None


@setup_app.command()
def october_setup(
    stack: Path = typer.Argument(..., help="Directory to provision (created if missing)."),
    recipe: str = typer.Option("current", "--recipe", "-r", help="Recipe name in recipes/ or a path to a .toml."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Shared cache (git mirrors, wheels, uv)."),
    allow_dirty: bool = typer.Option(False, "--allow-dirty", help="Accept modified fork trees (recorded)."),
    skip_preflight: list[str] = typer.Option([], "--skip-preflight", help="Skip one preflight check by name (repeatable)."),
    locked: bool = typer.Option(False, "--locked", help="Install exactly what a lock says; fail on any difference."),
    lock_file: Optional[Path] = typer.Option(None, "--lock-file", help="Lock for --locked (default: locks/<recipe>.pylock.toml, else STACK/pylock.toml)."),
    kit: Optional[Path] = typer.Option(None, "--kit", help="Install offline from a kit made by `october_setup kit` (no other network access)."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Echo every command's output."),
    system_python: Optional[Path] = typer.Option(None, "--system-python", help="Take torch from this interpreter (its site packages stay visible; the recipe must allow it)."),
) -> None:
    """Provision STACK from a recipe. Safe to interrupt and re-run: finished steps are skipped.
    (`october_setup kit --recipe R DIR` writes an offline kit instead; see `october_setup kit --help`;
    `october_setup fleet` provisions every node of a Ray cluster; see `october_setup fleet --help`.)"""
    ui = ConsoleReporter(quiet=quiet, verbose=verbose)

    def go() -> None:
        from installer.pipeline import SetupOptions
        from installer.recipe import load_recipe
        from installer.setup import resolve_locked, run_setup

        from installer.systorch import with_system_torch

        rec = with_system_torch(load_recipe(recipe), system_python)
        skips = tuple(s for item in skip_preflight for s in item.split(",") if s)
        cache = (cache_dir or default_cache_dir()).resolve()
        used_kit = None
        if kit is not None:
            from installer.kit.use import kit_recipe, open_kit, seed_cache

            used_kit = open_kit(kit, rec)          # verified against its manifest before anything runs
            seed_cache(used_kit, rec, cache)
            ui.info(f"offline: installing from the kit {used_kit.root}")
        opts = SetupOptions(stack=stack.resolve(), recipe=kit_recipe(rec, used_kit) if used_kit else rec,
                            cache_dir=cache, allow_dirty=allow_dirty, skip_preflight=skips,
                            locked=resolve_locked(rec, stack.resolve(), locked, lock_file), quiet=quiet, verbose=verbose,
                            kit=used_kit)
        with offline_env(used_kit.git_config() if used_kit else None):
            result = run_setup(opts, ui, echo_commands=verbose)
        ran = sum(1 for r in result.records if r.status == "ran")
        if not quiet:
            print(f"stack ready: {result.paths.root} ({ran} step(s) ran, {len(result.records) - ran} cached)")
            print(f"  lock:    {result.paths.pylock}")
            print(f"  receipt: {result.paths.setup_receipt}")

    guarded(go, ui)


@contextmanager
def offline_env(git_config: dict[str, str] | None) -> Iterator[None]:
    """For a kit install: every child git reads the kit's URLs from the kit and may use only local
    files; uv runs offline.  Restored afterwards (the CLI may run in-process in tests)."""
    if git_config is None:
        yield
        return
    extra = {**git_config, "UV_OFFLINE": "1"}
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


kit_app = typer.Typer(add_completion=False, no_args_is_help=True,
                      help="Write an offline kit for one recipe (forks, submodules, wheels, manifest).")


@kit_app.command()
def make_kit_cmd(
    out: Path = typer.Argument(..., help="Directory for the kit (new, empty, or an earlier kit to refresh)."),
    recipe: str = typer.Option("current", "--recipe", "-r", help="Recipe name in recipes/ or a path to a .toml."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Shared cache (git mirrors, wheels)."),
    lock_file: Optional[Path] = typer.Option(None, "--lock-file", help="Lock whose wheels go into the kit (default: locks/<recipe>.pylock.toml, else uv pip compile)."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    system_torch: bool = typer.Option(False, "--system-torch", help="Leave torch out: the stack takes it from --system-python on the target (the recipe must allow it)."),
) -> None:
    """Write DIR: each fork at its pin with the recipe's submodules, the base wheel, the env's wheels, kit.json."""
    ui = ConsoleReporter(quiet=quiet)

    def go() -> None:
        from installer.kit.make import KitOptions, make_kit
        from installer.recipe import load_recipe

        from installer.systorch import mark_system

        rec = load_recipe(recipe)
        opts = KitOptions(recipe=mark_system(rec) if system_torch else rec, out=out.resolve(),
                          cache_dir=(cache_dir or default_cache_dir()).resolve(),
                          lock=lock_file.resolve() if lock_file else None)
        manifest = make_kit(opts, say=ui.detail)
        if not quiet:
            import json

            doc = json.loads(manifest.read_text(encoding="utf-8"))
            print(f"kit ready: {opts.out} ({len(doc['repos'])} repositories, {len(doc['wheels'])} wheels"
                  f"{' + base wheel' if doc['base_wheel'] else ''}, {doc['size_bytes'] / 1e6:.1f} MB)")
            print(f"  install offline: october_setup STACK --recipe {recipe} --kit {opts.out}")

    guarded(go, ui)


fleet_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Provision and prove one stack on every node of a Ray cluster, from one kit.")


@fleet_app.command()
def fleet_cmd(
    stack: str = typer.Argument(..., help="Stack path on each node; may hold {name}, {host}, {node_id}."),
    address: str = typer.Option(..., "--address", help="Ray cluster address (host:port, or auto)."),
    kit: Path = typer.Option(..., "--kit", help="The kit (made by `october_setup kit`); a path every node sees, unless --ship-kit."),
    recipe: str = typer.Option("current", "--recipe", "-r", help="Recipe name in recipes/ or a path every node sees."),
    receipt: Path = typer.Option(Path("fleet-receipt.json"), "--receipt", help="Fleet receipt; an earlier one here is resumed from."),
    lock_file: Optional[Path] = typer.Option(None, "--lock-file", help="The lock every node installs with --locked (sent with the task)."),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help="Cache dir on each node (same placeholders as STACK)."),
    select: str = typer.Option("all", "--select", help="all: every alive node; gpu: the nodes with GPUs."),
    node: list[str] = typer.Option([], "--node", help="Only this node: id (or 8+ char prefix), hostname or october-node label (repeatable)."),
    ship_kit: bool = typer.Option(False, "--ship-kit", help="The nodes share no path: send the kit through Ray, verified on arrival."),
    ship_dir: Optional[str] = typer.Option(None, "--ship-dir", help="Where a shipped kit lands on each node (default /tmp/october-fleet-kit-<sha>)."),
    max_parallel: int = typer.Option(8, "--max-parallel", help="Nodes installing at once."),
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds per node for setup and smoke together."),
    smoke: bool = typer.Option(True, "--smoke/--no-smoke", help="Run `current smoke` on each node (without it the fleet cannot pass)."),
    smoke_format: str = typer.Option("fp16", "--smoke-format", help="awq or fp16, for current smoke."),
    smoke_level: Optional[str] = typer.Option(None, "--smoke-level", help="Default: the level the stack promises."),
    smoke_arg: list[str] = typer.Option([], "--smoke-arg", help="Passed on to current smoke (repeatable, e.g. --smoke-arg=--fixtures=/d)."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """One task per node, pinned to it: `october_setup STACK --recipe R --kit KIT --locked`, then `current smoke`.
    Writes a fleet receipt; re-running resumes only the nodes that did not finish.  Needs Ray (`uv sync --extra fleet`)."""
    ui = ConsoleReporter(quiet=quiet)

    def go() -> int:
        from installer.fleet.plan import FleetOptions
        from installer.fleet.run import run_fleet

        opts = FleetOptions(address=address, recipe=recipe, kit=kit.resolve(), stack=stack, receipt=receipt.resolve(),
                            cache_dir=cache_dir, lock_file=lock_file.resolve() if lock_file else None, select=select,
                            nodes=tuple(node), ship_kit=ship_kit, ship_dir=ship_dir, max_parallel=max_parallel,
                            timeout_s=timeout, smoke=smoke, smoke_format=smoke_format, smoke_level=smoke_level,
                            smoke_args=tuple(smoke_arg))
        return run_fleet(opts, say=(lambda s: None) if quiet else print)

    code = guarded(go, ui)
    raise typer.Exit(code)


def setup_main(argv: list[str] | None = None) -> int:
    """Console script ``october_setup`` (and ``python -m installer.october_setup``):
    ``october_setup kit ...`` writes a kit; ``october_setup fleet ...`` provisions a Ray cluster;
    anything else provisions a stack."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["kit"]:
        kit_app(args=args[1:], prog_name="october_setup kit")
    elif args[:1] == ["fleet"]:
        fleet_app(args=args[1:], prog_name="october_setup fleet")
    else:
        setup_app(args=args, prog_name="october_setup")
    return 0


@current_app.command()
def doctor(
    recipe: str = typer.Option("current", "--recipe", "-r"),
    stack: Path = typer.Option(Path("."), "--stack", help="Where the stack will live (for the disk check)."),
    skip_preflight: list[str] = typer.Option([], "--skip-preflight"),
    system_python: Optional[Path] = typer.Option(None, "--system-python", help="Check the torch of this interpreter too."),
) -> None:
    """Run the preflight checks alone and print them as a table."""
    ui = ConsoleReporter()

    def go() -> int:
        from installer.preflight import doctor as run_doctor
        from installer.recipe import load_recipe
        from installer.runner import Runner
        import tempfile

        from installer.systorch import with_system_torch

        rec = with_system_torch(load_recipe(recipe), system_python)
        skips = tuple(s for item in skip_preflight for s in item.split(",") if s)
        with tempfile.TemporaryDirectory(prefix="october-doctor-") as logs:
            results, _facts = run_doctor(rec, stack.resolve(), skips, Runner(Path(logs)))
        failed = 0
        for r in results:
            status = getattr(r, "status", None) or ("passed" if r.ok else "failed")
            failed += status == "failed"
            print(f"{status:8} {r.name:10} {r.detail}")
        print(f"{len(results) - failed} of {len(results)} checks passed" if failed else "all checks passed")
        return 1 if failed else 0

    code = guarded(go, ui)
    raise typer.Exit(code)


@current_app.command()
def download(
    format: str = typer.Option(..., "--format", "-f", help="awq or fp16"),
    output: Path = typer.Option(..., "--output", "-o", help="Manifest JSON to write."),
    recipe: str = typer.Option("current", "--recipe", "-r"),
    local_dir: Optional[Path] = typer.Option(None, "--local-dir"),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir"),
    offline: bool = typer.Option(False, "--offline", help="Re-verify an existing copy without network."),
    fixtures: Optional[Path] = typer.Option(None, "--fixtures", help="Calibrated scales dir (default $KNLP_KV_FIXTURES)."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Download the recipe's pinned model and write a verified manifest."""
    ui = ConsoleReporter(quiet=quiet)

    def go() -> None:
        from installer.download import DownloadOptions, run_download
        from installer.recipe import load_recipe

        opts = DownloadOptions(recipe=load_recipe(recipe), format=format, output=output.resolve(),
                               local_dir=local_dir.resolve() if local_dir else None,
                               cache_dir=(cache_dir or default_cache_dir()).resolve(), offline=offline,
                               fixtures=fixtures.resolve() if fixtures else None, quiet=quiet)
        path = run_download(opts)
        if not quiet:
            print(f"manifest written: {path}")

    guarded(go, ui)


@current_app.command()
def smoke(
    install: Path = typer.Option(..., "--install", help="The stack directory made by october_setup."),
    format: str = typer.Option(..., "--format", "-f", help="awq or fp16"),
    output: Path = typer.Option(..., "--output", "-o", help="Directory for receipt.json."),
    level: Optional[str] = typer.Option(None, "--level", help="kernel, engine or reference (default: highest supported)."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", help="Download manifest (default: <format>-download.json)."),
    fixtures: Optional[Path] = typer.Option(None, "--fixtures", help="Calibrated scales dir (default $KNLP_KV_FIXTURES)."),
    recipe: str = typer.Option("current", "--recipe", "-r"),
) -> None:
    """Prove on this machine that the stack really does K16/V8; exit 0 only when receipt.json says passed."""
    ui = ConsoleReporter()

    def go() -> int:
        from installer.smoke import SmokeOptions, run_smoke

        opts = SmokeOptions(install=install.resolve(), format=format, output=output.resolve(), level=level,
                            fixtures=fixtures.resolve() if fixtures else None,
                            manifest=manifest.resolve() if manifest else None, recipe=recipe)
        return run_smoke(opts)

    code = guarded(go, ui)
    raise typer.Exit(code)


def main_setup() -> None:  # pragma: no cover - console entry for `python -m installer.october_setup`
    setup_main()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(setup_app())
