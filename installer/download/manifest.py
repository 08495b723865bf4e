"""The download manifest: build it, validate it against receipts/download.schema.json, write it.

``current smoke`` reads it back with :func:`load_manifest` to find the model.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from october.installer import __version__
from october.installer.core.atomic import write_json_atomic
from october.installer.download.plan import DownloadPlan
from october.installer.download.verify import VerifiedFile
from october.installer.core.errors import ReceiptError
from october.installer.core.resources import schema_path

FORMAT_VERSION = 1
KIND = "october-download-manifest"
SCHEMA_PATH = schema_path("download")


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_manifest(plan: DownloadPlan, *, resolved_revision: str, files: Sequence[VerifiedFile],
                   scales: dict[str, Any] | None, endpoint: str, created_at: str | None = None) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "kind": KIND,
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
        "created_at": created_at or now_utc(),
        "scales": scales,
    }


def validate_manifest(obj: Any, *, source: str = "download manifest") -> None:
    """Raise ReceiptError listing every schema violation (not just the first)."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(load_schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"    - {'/'.join(str(p) for p in e.absolute_path) or '<top>'}: {e.message}" for e in errors[:20]]
        raise ReceiptError(f"{source} does not match {SCHEMA_PATH.name}",
                           expected="a manifest valid against the schema",
                           found=f"{len(errors)} problem(s):\n" + "\n".join(lines),
                           fix="re-run `current download` to write a fresh manifest")
    if obj.get("resolved_revision", obj["revision"]) != obj["revision"]:
        raise ReceiptError(f"{source}: resolved revision differs from the pinned one",
                           expected=obj["revision"], found=obj["resolved_revision"],
                           fix="re-run `current download`")


def write_manifest(path: Path, obj: dict[str, Any], *, secrets: Iterable[str] = ()) -> None:
    """Validate, make sure no secret is in it, then write atomically."""
    validate_manifest(obj)
    text = json.dumps(obj, indent=2, sort_keys=True)
    for s in secrets:
        if s and len(s) >= 4 and s in text:
            raise ReceiptError("refusing to write a manifest that contains a secret",
                               expected="no token in the manifest", found="a token value",
                               fix="report this: a token leaked into a recorded field")
    write_json_atomic(path, obj)


def load_manifest(path: Path) -> dict[str, Any]:
    """Read and validate a manifest written by `current download` (for `current smoke`)."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReceiptError(f"download manifest {path} does not exist", expected="a file written by "
                           "`current download --output`", found="nothing",
                           fix="run `current download --format <awq|fp16> --output FILE.json` first") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReceiptError(f"download manifest {path} is not JSON", expected="JSON", found=str(exc),
                           fix="re-run `current download`") from None
    validate_manifest(obj, source=f"download manifest {path}")
    return obj
