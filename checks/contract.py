"""The contract between the tool and the checks: every fact both interpreters read, defined once.

The tool (``installer/``) runs in its own environment; the checks (``checks/``) run inside the
stack's (``STACK/env``: stdlib + torch + the forks).  They meet in files: the download manifest
the tool writes and the checks read, the stack-info file, and the smoke receipt the checks write
and the tool validates.  What those files may hold (levels, model formats, check names and
statuses, what a level proves, format versions and kinds), how the manifest is parsed, and how a
file is written atomically live here.  Standard library only, so both sides import this module
(the tool as ``october.checks.contract``); the JSON Schemas in ``receipts/`` spell the same values and a
test holds them to these.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

# ------------------------------------------------------------------ levels, formats, proofs

LEVELS = ("reference", "kernel", "engine")      # lowest to highest
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")        # a full git commit id (or hub revision): 40 lowercase hex
SHA256 = re.compile(r"^[0-9a-f]{64}$")          # a sha256 digest: 64 lowercase hex
FORMATS = ("awq", "fp16")                       # the model formats a recipe selects (`--format`)
COMPUTE_DTYPES = {"float16": "f16", "bfloat16": "bf16"}     # a selection's compute dtype -> FlashInfer's name
# what a run at each level can prove on its own (``proves`` below: ``stack`` only at the promised level)
PROVES = {"reference": "harness", "kernel": "kernel", "engine": "stack"}
NOTHING = "nothing"                             # what a run proves when its checks did not all run and pass
PROOFS = ("harness", "kernel", "stack", NOTHING)
PROMISES = ("kernel", "engine")                 # what a stack may promise: reference proves only our own code


def proves(level: str, promised: str | None) -> str:
    """What a run at ``level`` proves about a stack that promises ``promised``.

    ``stack`` only when the level is the one the stack promises (kernel for a
    FlashInfer-only stack, engine with the vLLM fork); otherwise ``harness``
    (reference: our own torch code) or ``kernel`` (the FlashInfer fork alone): an engine run with no promise
    given (no ``--promised-level``, no ``--stack-info``) is tied to no stack, so it proves the kernel only.
    """
    if PROVES[level] == "harness":          # whatever is promised: a stack never promises reference
        return "harness"
    if promised is not None and level == promised:
        return "stack"
    return "kernel"


def proved(level: str, promised: str | None, checks_ok: bool, verdict_ok: bool) -> str:
    """What a run that has happened proves: the receipt's ``proves``, never more than ran and agreed.

    :func:`proves` (what the level can prove) only when every check ran and passed (``checks_ok``: none
    failed, skipped or unsupported); ``stack`` also needs the stack verdict (``verdict_ok``: the promised
    level with the stack's own protocol and no run-level problem, i.e. the receipt's ``passed``).
    Otherwise ``nothing``: an engine stack whose checks were all unsupported proved nothing about it.
    """
    can = proves(level, promised)
    if not checks_ok or (can == "stack" and not verdict_ok):
        return NOTHING
    return can


# ------------------------------------------------------------------ checks and their statuses

PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"
UNSUPPORTED = "unsupported"
STATUSES = (PASSED, FAILED, SKIPPED, UNSUPPORTED)

# (name, title as users read it), in the order of the smoke's specification (shared/reference/smoke.md, outside
# this repository); every level runs exactly these.
REQUIRED_CHECKS: tuple[tuple[str, str], ...] = (
    ("physical_k16v8", "physical K16/V8"),
    ("calibrated_scales", "calibrated scales"),
    ("mixed_prefill", "mixed fresh-prefill route"),
    ("decode_graphs", "changing decode graphs"),
    ("clean_memory", "clean memory"),
    ("deterministic_generation", "finite deterministic generation"),
)
CHECK_NAMES = tuple(name for name, _ in REQUIRED_CHECKS)
# Checks a level adds beside the six (the engine level's JIT check); present and not passed fails the receipt.
EXTRA_CHECKS: tuple[tuple[str, str], ...] = (("jit_complete", "JIT modules pre-built"),)
TITLES = dict(REQUIRED_CHECKS + EXTRA_CHECKS)

# An engine-level diagnostic (``--diagnostic-cache``: a symmetric cache, every engine check run for real) is
# never a stack verdict: ``current smoke`` exits DIAGNOSTIC_AGREED_EXIT when every check passed on every
# cache asked for (the harness agrees with the engine), 1 when one did not.
DIAGNOSTIC_CACHES = ("bf16", "fp8_e4m3", "both")
DIAGNOSTIC_AGREED_EXIT = 21
# Faults a diagnostic may plant into the real engine (``--plant-fault``; checks/engine/planted_faults.py).
ENGINE_FAULTS = ("attn_output_zero", "v_read_scale_2x", "attn_output_x1_01", "softmax_scale_x1_02")

# ------------------------------------------------------------------ files the two sides exchange

SMOKE_RECEIPT_FORMAT_VERSION = 2
SMOKE_RECEIPT_KIND = "october-smoke-receipt"
SMOKE_RECEIPT_FILENAME = "receipt.json"
MANIFEST_FORMAT_VERSION = 1
MANIFEST_KIND = "october-download-manifest"


class ContractError(ValueError):
    """A file that breaks the contract: ``what`` it is, what was ``expected``, what was ``found``.
    Each side turns it into its own error with the fix (the checks: exit 2; the tool: a ReceiptError)."""

    def __init__(self, what: str, expected: str, found: str) -> None:
        self.what, self.expected, self.found = what, expected, found
        super().__init__(f"{what}: expected {expected}, found {found}")


def json_loads(text: str | bytes) -> Any:
    """``json.loads(text)``; nesting too deep to decode is a :class:`json.JSONDecodeError` too (json raises
    RecursionError, which slipped past every ``except ValueError``: a planted ``[[[[...`` ended a run with a
    traceback).  The one way both sides read a JSON file (the tool through ``core/jsonread.py``)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to decode", text if isinstance(text, str) else "", 0) from None


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path`` (``what`` names the file in errors)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ContractError(f"{what} {path} does not exist", "an existing JSON file", "nothing") from None
    except OSError as exc:
        raise ContractError(f"{what} {path} cannot be read", "a readable JSON file", str(exc)) from None
    try:
        data = json_loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ContractError(f"{what} {path} is not JSON", "JSON", f"invalid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ContractError(f"{what} {path} is not a JSON object", "a JSON object", type(data).__name__)
    return data


@dataclass(frozen=True)
class Manifest:
    """What the checks need from a download manifest (``receipts/download.schema.json``)."""

    path: str
    selection: str
    repo: str
    revision: str
    local_path: str

    def as_json(self) -> dict[str, Any]:
        return {"manifest": self.path, "selection": self.selection, "repo": self.repo,
                "revision": self.revision, "local_path": self.local_path}


def parse_manifest(data: Mapping[str, Any], path: Path | str) -> Manifest:
    """The manifest rule both sides apply (the tool validates the full schema first): its kind, a
    known model format, the model's repo, pinned revision and local directory, and a resolved
    revision (when recorded) equal to the pinned one."""
    what = f"download manifest {path}"
    if data.get("kind") != MANIFEST_KIND:
        raise ContractError(what, f"kind {MANIFEST_KIND!r}", repr(data.get("kind")))
    fields = {}
    for key in ("selection", "repo", "revision", "local_path"):
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise ContractError(what, f"a string '{key}'", repr(value))
        fields[key] = value
    if fields["selection"] not in FORMATS:
        raise ContractError(what, f"selection one of {', '.join(FORMATS)}", repr(fields["selection"]))
    resolved = data.get("resolved_revision", fields["revision"])
    if resolved != fields["revision"]:
        raise ContractError(f"{what}: the resolved revision differs from the pinned one",
                            f"resolved_revision {fields['revision']}", repr(resolved))
    return Manifest(path=str(path), **fields)


# ------------------------------------------------------------------ atomic writes


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, then replace: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any, *, default: Any = None, allow_nan: bool = True) -> None:
    """``obj`` as indented, key-sorted JSON (``default`` and ``allow_nan`` as in :func:`json.dumps`)."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=default, allow_nan=allow_nan) + "\n")


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file, read in 1 MiB chunks (the tool's hashing and the stack-side JIT builder
    and kernel level all hash modules this one way)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
