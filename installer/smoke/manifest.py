"""The model a smoke run loads: the download manifest it names (or the one beside it for the format), written by
`current download` for that format and the model the recipe pins, and every file of it hashed again."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..core import jsonread
from ..core.errors import ReceiptError, SmokeError, UsageError
from ..download.plan import default_manifest_name
from . import choices

if TYPE_CHECKING:
    from .launch import SmokeOptions


def resolve_manifest(opts: SmokeOptions, cwd: Path, promised: str | None = None) -> Path | None:
    """The manifest to pass, or None where the level that will run can do without one."""
    if opts.manifest is not None:
        if not opts.manifest.is_file():
            download = choices.download_command(opts.install, opts.recipe, opts.format or "awq", opts.manifest)
            raise SmokeError("the download manifest does not exist", expected=f"a file {opts.manifest}",
                             found="nothing", fix=f"run `{download}`")
        return opts.manifest
    path = cwd / default_manifest_name(opts.format) if opts.format else None
    if path is not None and path.is_file():
        return path
    if (opts.level or promised) in ("reference", "kernel"):
        return None
    fmt = opts.format or "awq"
    raise SmokeError("no download manifest for the smoke run", expected=f"{cwd / default_manifest_name(fmt)}",
                     found="nothing", fix=f"run `{choices.download_command(opts.install, opts.recipe, fmt, '.')}` "
                     "first, pass --manifest, or use --level kernel")


def check_manifest(path: Path, fmt: str | None, install: Path = Path("."), recipe: str | None = None) -> None:
    """The manifest must be one ``current download`` wrote for this ``--format`` (caught before the stack
    env starts)."""
    from ..download.manifest import load_manifest

    redo = (f"run `{choices.download_command(install, recipe, fmt or 'awq', path)}` to write a fresh one, or pass "
            "another --manifest")
    try:
        data = load_manifest(path)
    except ReceiptError as exc:
        raise ReceiptError(f"the download manifest {path} is not one `current download` wrote",
                           expected="a manifest valid against receipts/download.schema.json",
                           found=f"{exc.what}: {exc.found}" if exc.found else exc.what, fix=redo) from None
    if fmt is not None and data.get("selection") != fmt:
        raise UsageError(f"the download manifest {path} is for another model format",
                         expected=f"a manifest of the {fmt} model", found=f"selection {data.get('selection')!r}",
                         fix=f"pass --format {data.get('selection')}, or {redo}")


def check_model(path: Path, selection: Mapping[str, Any]) -> None:
    """The manifest's model must be the one the recipe pins for this format (repository and revision)."""
    data = jsonread.loads(path.read_text(encoding="utf-8"))
    want = (selection.get("repo"), selection.get("revision"))
    got = (data.get("repo"), data.get("revision"))
    if None not in want and got != want:
        raise UsageError(f"the download manifest {path} is for another model than the recipe pins",
                         expected=f"{want[0]} at revision {want[1]} (recipe {selection.get('recipe')}, "
                                  f"format {selection.get('format')})",
                         found=f"{got[0]} at revision {got[1]}",
                         fix=f"run `current download --format {selection.get('format')} --recipe "
                             f"{shlex.quote(str(selection.get('recipe')))} --output {shlex.quote(str(path))}`, or pass the manifest of that model")


def check_model_files(path: Path, opts: SmokeOptions, ui: Any = None) -> None:
    """The model the engine will load is, file by file, what its download verified (hashed again: a file
    changed since, or one the manifest does not list beside them, is refused before the engine starts);
    ``ui``: its bytes hashed shown as a progress bar (a model is gigabytes)."""
    from ..download.copycheck import check_copy
    from ..download.manifest import load_manifest

    redo = f"run `{choices.download_command(opts.install, opts.recipe, opts.format or 'awq', path)}` to fetch it again"
    manifest = load_manifest(path)
    if ui is not None:
        ui.task_start("model", f"hashing the {len(manifest['files'])} file(s) of {manifest['repo']} in "
                               f"{manifest['local_path']} again (what the engine loads is what the download verified)")
    check_copy(manifest, redo=redo, path=path,
               hashed=(lambda done, total: ui.transfer("model sha256", done, total, "B")) if ui is not None else None)
    if ui is not None:
        ui.task_done("model", "every file as its download verified it")
