"""The download manifest: build it, validate it against receipts/download.schema.json, write it.

``current smoke`` reads it back with :func:`load_manifest` to find the model.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from ...checks.contract import MANIFEST_FORMAT_VERSION, MANIFEST_KIND, ContractError, parse_manifest, read_json_object
from .. import __version__
from ..core.atomic import write_json_atomic
from ..core.errors import DISK_FULL_FIX, DiskFullError, ReceiptError
from ..core.fscause import as_disk_full
from ..core.resources import schema_path
from ..core.schemas import validate
from .plan import DownloadPlan
from .verify import VerifiedFile

SCHEMA_PATH = schema_path("download")


def build_manifest(plan: DownloadPlan, *, resolved_revision: str, files: Sequence[VerifiedFile],
                   scales: dict[str, Any] | None, endpoint: str, created_at: str | None = None) -> dict[str, Any]:
    return {
        "format_version": MANIFEST_FORMAT_VERSION,
        "kind": MANIFEST_KIND,
        "recipe": {"name": plan.recipe_name, "sha256": plan.recipe_sha256, "path": str(plan.recipe_path)},
        "selection": plan.selection,
        "repo": plan.repo,
        "revision": plan.revision,
        "resolved_revision": resolved_revision,
        "patterns": list(plan.patterns),
        "local_path": str(plan.local_dir),
        "endpoint": endpoint,
        "offline": plan.offline,
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256, "verified_against": f.source}
                  for f in sorted(files, key=lambda f: f.path)],
        "tool": {"name": "october", "version": __version__},
        "created_at": created_at or datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "scales": scales,
    }


def validate_manifest(obj: Any, *, source: str = "download manifest") -> None:
    """The schema (:func:`october.installer.core.schemas.validate`), then the rule the checks apply too
    (:func:`october.checks.contract.parse_manifest`); a ReceiptError naming what is wrong."""
    fix = "re-run `current download` to write a fresh manifest"
    validate("download", obj, where=source, fix=fix)
    try:
        parse_manifest(obj, source.removeprefix("download manifest").strip() or "(to be written)")
    except ContractError as exc:
        raise ReceiptError(exc.what, expected=exc.expected, found=exc.found, fix=fix) from None


MIN_SECRET_IN_MANIFEST = 8       # an HF token is 37 characters; a password in a URL is masked by its form


def write_manifest(path: Path, obj: dict[str, Any], *, secrets: Iterable[str] = ()) -> None:
    """Validate, make sure no secret is in it, then write atomically (a full disk names the manifest, not a path
    the OSError does not carry or an internal temp file)."""
    validate_manifest(obj)
    text = json.dumps(obj, indent=2, sort_keys=True)
    for s in secrets:
        # shorter than any real token: a placeholder (HF_TOKEN=false, null, a year) that a manifest's own words or
        # numbers contain (the logs still mask it); refusing it failed every download after all its bytes came
        if s and len(s) >= MIN_SECRET_IN_MANIFEST and s in text:
            raise ReceiptError("refusing to write a manifest that contains a secret",
                               expected="no token in the manifest", found="a token value",
                               fix="report this: a token leaked into a recorded field")
    try:
        write_json_atomic(path, obj)
    except OSError as exc:
        if as_disk_full(exc) is None:
            raise
        raise DiskFullError(f"cannot write the download manifest {path}", expected="free space on its filesystem",
                            found=exc.strerror or "ENOSPC", fix=DISK_FULL_FIX) from None


def load_manifest(path: Path) -> dict[str, Any]:
    """Read and validate a manifest written by `current download` (for `current smoke`)."""
    try:
        obj = read_json_object(path, "download manifest")
    except ContractError as exc:
        raise ReceiptError(exc.what, expected="a JSON object written by `current download --output`",
                           found=exc.found,
                           fix="run `current download --format <awq|fp16> --output FILE.json` first") from None
    validate_manifest(obj, source=f"download manifest {path}")
    return obj
