"""Receipts: JSON documents with a format version, validated against ``receipts/*.schema.json``
and written atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import jsonschema

from october.installer.core.atomic import write_json_atomic
from october.installer.core.errors import ReceiptError
from october.installer.core.resources import schema_path


def load_schema(name: str) -> dict[str, Any]:
    return json.loads(schema_path(name).read_text(encoding="utf-8"))


def validate(name: str, doc: Mapping[str, Any], *, where: str = "receipt") -> None:
    validator = jsonschema.Draft202012Validator(load_schema(name))
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        key = "/".join(str(p) for p in first.path) or "<top>"
        raise ReceiptError(f"the {where} does not match receipts/{name}.schema.json ({len(errors)} problem(s))",
                           expected=f"a valid value at '{key}'", found=first.message,
                           fix="this is a bug in october: report it with the stack's logs/")


def write_receipt(name: str, path: Path, doc: Mapping[str, Any]) -> None:
    """Validate first, then write atomically: an invalid receipt is never written."""
    validate(name, doc, where=str(path))
    write_json_atomic(path, dict(doc))
