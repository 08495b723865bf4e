"""Receipts: JSON documents validated against ``receipts/*.schema.json`` (:func:`validate`, the one
schema check for every document the tool writes or reads back) and written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import jsonschema

from . import jsonread
from .atomic import write_json_atomic
from .errors import ReceiptError
from .resources import schema_path

BUG = "this is a bug in october: report it with the stack's logs/"
SHOWN = 3           # problems named in the message (the count says how many there are)


def load_schema(name: str) -> dict[str, Any]:
    return jsonread.loads(schema_path(name).read_text(encoding="utf-8"))


def validate(name: str, doc: Any, *, where: str = "receipt", fix: str = BUG) -> None:
    """Raise ReceiptError naming the first problems (by location) when ``doc`` does not match
    ``receipts/<name>.schema.json`` (formats such as date-time checked where a checker is installed)."""
    validator = jsonschema.Draft202012Validator(load_schema(name),
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        shown = "; ".join(f"at '{'/'.join(str(p) for p in e.absolute_path) or '<top>'}': {e.message}"
                          for e in errors[:SHOWN])
        more = f" (and {len(errors) - SHOWN} more)" if len(errors) > SHOWN else ""
        raise ReceiptError(f"the {where} does not match receipts/{name}.schema.json ({len(errors)} problem(s))",
                           expected="a document valid against the schema", found=shown + more, fix=fix)


def write_receipt(name: str, path: Path, doc: Mapping[str, Any]) -> None:
    """Validate first, then write atomically: an invalid receipt is never written."""
    validate(name, doc, where=str(path))
    write_json_atomic(path, dict(doc))
