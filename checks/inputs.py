"""What the smoke run is given: the download manifest, stack facts, calibrated scales.

Standard library only (plus the scales module).  Problems a user can fix raise
:class:`InputError` with what was expected, what was found and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .contract import ContractError, Manifest, parse_manifest, read_json_object
from .scales import ScalesInvalid, check_model, load_scales, scales_path


class InputError(Exception):
    """A usage problem: exit status 2."""


def _read_json(path: Path, what: str, fix: str) -> dict[str, Any]:
    try:
        return read_json_object(path, what)
    except ContractError as exc:
        raise InputError(f"{exc}.\n  -> {fix}") from None


def load_manifest(path: Path) -> Manifest:
    """The download manifest, by the contract's rule (:func:`october.checks.contract.parse_manifest`)."""
    fix = "run `current download --format awq|fp16 --output FILE` and pass that file"
    data = _read_json(path, "download manifest", fix)
    try:
        return parse_manifest(data, path)
    except ContractError as exc:
        raise InputError(f"{exc}.\n  -> {fix}") from None


def load_stack_info(path: Path) -> dict[str, Any]:
    data = _read_json(path, "stack info", "pass the file `current smoke` writes, or leave it out")
    info = {"recipe": data.get("recipe"), "lock_sha256": data.get("lock_sha256"),
            "forks": data.get("forks") or {}, "setup_receipt": data.get("setup_receipt")}
    if isinstance(data.get("selection"), dict):      # the recipe selection: dtypes, JIT modules, [smoke]
        info["selection"] = data["selection"]
    # what the stack promises and what its jit step built (from its setup receipt), when given
    for key in ("promised_level", "jit", "smoke", "asym_prefill", "choices", "tool_code"):
        if key in data:
            info[key] = data[key]
    return info


DEFAULT_TOKENS = (8192, 128)         # the seed's protocol: longest context, new tokens
# The shortest longest-context a stack verdict may rest on.  The oracles judge a 2% softmax-scale error by
# the slope of the output against the reference (bound 1 +- 0.004), and that slope grows with the context:
# on the kernel level's decode lengths (seed 0, random K/V at K_STD) 1.0035 at 16 tokens and 1.0038 at 32
# pass the bound; 1.0048 at 48, 1.0068 at 256 and 1.0089 at 1,024 fail it (/tmp/review-a/slope.py, session 8).
MIN_PROMPT_TOKENS = 256


@dataclass(frozen=True)
class TokenProtocol:
    """How long the longest context and the generation are, and where those counts came from."""

    prompt_tokens: int
    max_new_tokens: int
    source: str

    def as_json(self) -> dict[str, int | str]:
        return {"prompt_tokens": self.prompt_tokens, "max_new_tokens": self.max_new_tokens, "source": self.source}


def token_protocol(stack: dict[str, Any], override: tuple[int, int] | None = None) -> TokenProtocol:
    """The one rule for every level: ``--token-counts`` (recorded as an override), else the recipe's
    ``[smoke]`` (``smoke`` in the stack info `current smoke` writes), else the seed's 8,192 + 128."""
    found = stack.get("smoke")
    smoke: dict[str, Any] = found if isinstance(found, dict) else {}
    recipe = (int(smoke["prompt_tokens"]), int(smoke["max_new_tokens"])) \
        if smoke.get("prompt_tokens") and smoke.get("max_new_tokens") else None
    if override is not None:
        theirs = f"not the recipe's {recipe[0]} + {recipe[1]}" if recipe else \
            f"no recipe [smoke] given; the default is {DEFAULT_TOKENS[0]} + {DEFAULT_TOKENS[1]}"
        return TokenProtocol(override[0], override[1],
                             f"override --token-counts {override[0]},{override[1]} ({theirs})")
    if recipe is not None:
        return TokenProtocol(recipe[0], recipe[1], "recipe [smoke]")
    return TokenProtocol(DEFAULT_TOKENS[0], DEFAULT_TOKENS[1], "default (the seed's 8,192 + 128 protocol)")


@dataclass(frozen=True)
class ScaleChoice:
    """The V scales a run loads, where they came from, and any problem found on the way."""

    v_scales: tuple[float, ...]
    source: str
    path: str | None = None
    note: str | None = None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "v_scales": list(self.v_scales),
                "note": self.note, "error": self.error}


def reference_scales(manifest: Manifest | None, fixtures: Path | None, num_layers: int,
                     calibrate: Callable[[], Sequence[float]]) -> ScaleChoice:
    """Scales for the tiny reference model.

    A fixtures file for the manifest's model is always validated (format, repo,
    revision).  Its scales are used when its layer count equals the tiny model's;
    otherwise (a real model has tens of layers, the tiny one two) the tiny model
    is calibrated the same way (amax/448) and the receipt says so.  A file made
    for another model is an error that fails the calibrated-scales check.
    """
    calibrated = tuple(float(x) for x in calibrate())
    own = "tiny reference model, amax/448 over a calibration prompt"
    if manifest is None or fixtures is None:
        missing = "no download manifest" if manifest is None else "no fixtures directory"
        return ScaleChoice(calibrated, "calibrated", note=f"{missing}: {own}")
    path = scales_path(fixtures, manifest.repo)
    if not path.is_file():
        return ScaleChoice(calibrated, "calibrated", str(path),
                           note=f"no scales file at {path}: {own}")
    try:
        found = load_scales(path)
        check_model(found, manifest.repo, manifest.revision)
    except ScalesInvalid as exc:
        return ScaleChoice(calibrated, "calibrated", str(path), error=str(exc))
    if found.num_layers == num_layers:
        return ScaleChoice(found.v_scales, "fixtures", str(path),
                           note=f"validated for {found.repo}@{found.revision}")
    return ScaleChoice(calibrated, "calibrated", str(path),
                       note=f"{path} validated for {found.repo}@{found.revision} "
                            f"({found.num_layers} layers); the tiny model has {num_layers}: {own}")


def one_line(message: str) -> str:
    """An error (``what: expected X, found Y.\\n  -> fix``) as one line for a check's summary: the fix kept."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def engine_scales(manifest: Manifest, fixtures: Path | None, num_layers: int | None) -> ScaleChoice:
    """Scales for the real model: the fixtures file must exist and match it exactly."""
    if fixtures is None:
        name = scales_path(Path("DIR"), manifest.repo).name
        return ScaleChoice((), "missing", error="expected calibrated scales in --fixtures or "
                           "$KNLP_KV_FIXTURES, found neither.\n  -> pass --fixtures DIR (or set "
                           f"$KNLP_KV_FIXTURES=DIR), DIR holding {name}: the V scales calibrated for "
                           f"{manifest.repo}@{manifest.revision}")
    path = scales_path(fixtures, manifest.repo)
    try:
        found = load_scales(path)
        check_model(found, manifest.repo, manifest.revision, num_layers)
    except ScalesInvalid as exc:
        return ScaleChoice((), "fixtures", str(path), error=str(exc))
    return ScaleChoice(found.v_scales, "fixtures", str(path),
                       note=f"validated for {found.repo}@{found.revision}")
