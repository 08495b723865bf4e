"""``python -m october.checks.smoke``: run the smoke checks in the stack env and write receipt.json.

The level that runs is the one the stack promises (``--promised-level``, or
``promised_level`` in ``--stack-info``: ``engine`` when the stack has the vLLM
fork, ``kernel`` when it has FlashInfer only), never one chosen by what
imports.  A lower level runs only when named with ``--level``; its receipt says
what it ``proves`` (``harness`` or ``kernel``) and its ``passed`` is false.  A run whose checks did
not all run and pass ``proves`` ``nothing``, whatever its level.

``--diagnostic-cache bf16|fp8_e4m3|both`` (engine level only) runs every engine check on a symmetric
cache instead of K16/V8 (:mod:`october.checks.engine.diagnostic`): it proves the harness on a real engine,
never the stack, so its receipt is never passed; ``--plant-fault`` (diagnostic only, for benches) plants
one of :data:`october.checks.engine.planted_faults.FAULTS` into the engine.

Exit status: 0 when the receipt says ``passed``, 1 when it does not (always for a diagnostic: whether the
harness agreed is the receipt's ``diagnostic.harness_ok``), 2 on a usage error (nothing is written then).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from . import results as res
from . import workspace
from .contract import COMPUTE_DTYPES, DIAGNOSTIC_CACHES, FORMATS, LEVELS, NOTHING, PROMISES
from .engine.planted_faults import FAULTS
from .inputs import (
    MIN_PROMPT_TOKENS,
    InputError,
    Manifest,
    ScaleChoice,
    TokenProtocol,
    load_manifest,
    load_stack_info,
    one_line,
    reference_scales,
    token_protocol,
)
from .receipt import build_receipt, write_receipt
from .scales import fixtures_dir


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m october.checks.smoke", description=__doc__)
    p.add_argument("--level", choices=LEVELS, default=None,
                   help="default: the level the stack promises (a lower one only proves the harness or kernel)")
    p.add_argument("--promised-level", choices=PROMISES, default=None,
                   help="the level the stack promises (default: promised_level in --stack-info)")
    p.add_argument("--format", choices=FORMATS, default=None)
    p.add_argument("--manifest", type=Path, default=None, help="download manifest JSON")
    p.add_argument("--fixtures", type=Path, default=None,
                   help="calibrated scales directory (default: $KNLP_KV_FIXTURES)")
    p.add_argument("--stack-info", type=Path, default=None,
                   help="JSON with recipe name/sha256, lock sha256 and fork commits")
    p.add_argument("--output", type=Path, required=True, help="directory for receipt.json")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--token-counts", type=_token_counts, default=None, metavar="PROMPT,NEW",
                   help="kernel and engine levels: the longest context and the new tokens instead of the "
                        "recipe's [smoke] prompt_tokens,max_new_tokens from --stack-info (default 8192,128); "
                        "recorded in the receipt as an override")
    p.add_argument("--diagnostic-cache", choices=DIAGNOSTIC_CACHES, default=None,
                   help="engine level: run every engine check on this symmetric cache instead of K16/V8 (both: bf16, "
                        "then fp8_e4m3); proves the harness on a real engine, never passes")
    p.add_argument("--plant-fault", choices=FAULTS, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _token_counts(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PROMPT,NEW (two integers), found {text!r}") from None
    if a < 2 or b < 1:
        raise argparse.ArgumentTypeError(f"expected at least 2 prompt and 1 new token, found {text!r}")
    return a, b


def resolve_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: expected a CUDA device, found none "
                         f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}).\n"
                         "  -> run on a GPU machine, or use --device cpu")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def run_reference(device: torch.device, seed: int, manifest: Manifest | None,
                  fixtures: Path | None) -> tuple[list[res.CheckResult], ScaleChoice]:
    from .reference.backend import ReferenceBackend
    from .reference.tiny_decoder import calibrate_v_scales
    from .reference.checks import SuiteConfig, make_prompts, run_reference_suite

    backend = ReferenceBackend(seed=seed, device=device)
    calib_prompt = make_prompts(backend.cfg.vocab, [48], seed + 100)[0]
    choice = reference_scales(manifest, fixtures, backend.cfg.layers,
                              lambda: calibrate_v_scales(backend.model, calib_prompt))
    results = run_reference_suite(backend, choice.v_scales, choice.source, SuiteConfig(seed=seed))
    if choice.error is not None:
        results = [res.CheckResult("calibrated_scales", res.FAILED, one_line(choice.error),
                                   {"error": choice.error, "path": choice.path})
                   if r.name == "calibrated_scales" else r for r in results]
    return results, choice


def kernel_compute_dtype(selection: dict[str, Any] | None, notes: list[str]) -> str:
    """The dtype the kernel level computes in: the selection's compute dtype (what the engine runs,
    and what the jit step built the modules for), else bfloat16 with a note saying so."""
    compute = (selection or {}).get("compute_dtype")
    if compute is None:
        notes.append("no selection compute dtype in the stack info: the kernel level ran in bfloat16")
        return "bfloat16"
    if compute not in COMPUTE_DTYPES:
        raise InputError(f"stack info: expected the selection's compute_dtype in {tuple(COMPUTE_DTYPES)}, found "
                         f"{compute!r}.\n  -> pass the file `current smoke` writes")
    return str(compute)


def _level(args: argparse.Namespace, stack: dict[str, Any]) -> tuple[str, str | None]:
    """The level to run and the stack's promise: the promise from --stack-info, or --promised-level for a run
    without it (never both, never another), and a level no higher than it."""
    given = stack.get("promised_level")
    if args.promised_level and given is not None and args.promised_level != given:
        raise InputError(f"--promised-level {args.promised_level}: expected the stack's own promise, found "
                         f"promised_level {given!r} in {args.stack_info}.\n"
                         "  -> leave --promised-level out (it is only for a run without --stack-info)")
    promised = args.promised_level or given
    if promised is not None and promised not in PROMISES:
        raise InputError(f"stack info: expected promised_level in {PROMISES}, found {promised!r}.\n"
                         "  -> pass the file `current smoke` writes, or --promised-level")
    if args.level is None and promised is None:
        raise InputError("no level: expected --level or the stack's promise (--promised-level, or promised_level "
                         "in --stack-info), found neither.\n  -> run through `current smoke`, or pass --level")
    level = str(args.level or promised)
    if promised is not None and LEVELS.index(level) > LEVELS.index(promised):
        raise InputError(f"--level {level}: the stack promises only {promised}.\n"
                         f"  -> leave --level out, or pass --level {promised} or lower")
    return level, promised


def _no_stack_verdict(args: argparse.Namespace, stack: dict[str, Any], level: str,
                      tokens: TokenProtocol) -> list[str]:
    """Why this run, whatever its checks say, is no verdict on the stack (each one a reason in the receipt)."""
    overridden = [f"token counts {tokens.source}: the stack's own protocol did not run, so this is no stack verdict"] \
        if args.token_counts is not None else []
    chosen = stack.get("choices", {}).get("recipe") if isinstance(stack.get("choices"), dict) else None
    if isinstance(chosen, dict) and chosen.get("source") == "option" and "stack_says" in chosen:
        overridden.append(f"--recipe {chosen.get('value')}: the stack was set up from {chosen.get('stack_says')}, so "
                          "the selection, modules and pins checked are another recipe's: this is no stack verdict")
    if args.stack_info is None and level != "reference":
        overridden.append("no --stack-info: the run is tied to no stack (no setup receipt, no JIT record to hold "
                          "the loaded modules to), so this is no stack verdict; run it through `current smoke`")
    if level != "reference" and tokens.prompt_tokens < MIN_PROMPT_TOKENS:
        overridden.append(f"the protocol's longest context is {tokens.prompt_tokens} tokens ({tokens.source}), expected "
                          f">= {MIN_PROMPT_TOKENS}: too short for the oracles to see a 2% softmax-scale error, so "
                          "this is no stack verdict")
    return overridden


def _require_engine_options(args: argparse.Namespace, level: str, manifest: Manifest | None) -> None:
    if args.diagnostic_cache and level != "engine":
        raise InputError(f"--diagnostic-cache: expected the engine level, found level {level}.\n"
                         "  -> pass --level engine, or leave --diagnostic-cache out")
    if args.plant_fault and not args.diagnostic_cache:
        raise InputError("--plant-fault: a fault is planted only into a diagnostic run, found no --diagnostic-cache."
                         "\n  -> add --diagnostic-cache bf16|fp8_e4m3|both")
    if level == "engine" and manifest is None:
        raise InputError("--level engine: expected a download manifest (--manifest), found none.\n"
                         "  -> run `current download` first and pass its output")


def _run_level(args: argparse.Namespace, level: str, device: torch.device, manifest: Manifest | None,
               fixtures: Path, stack: dict[str, Any], tokens: TokenProtocol, ws_base: Path | None,
               watch: workspace.Watch | None,
               notes: list[str]) -> tuple[list[Any], ScaleChoice | None, dict[str, Any], dict[str, Any] | None]:
    """The level's checks -> (results, the scales chosen, the receipt's extra facts, the diagnostic's report)."""
    selection = stack.get("selection") if isinstance(stack.get("selection"), dict) else None
    extra: dict[str, Any] = {}
    diagnostic: dict[str, Any] | None = None
    if level == "reference":
        results, choice = run_reference(device, args.seed, manifest, fixtures)
        if device.type != "cuda":
            notes.append("reference level on a CPU: CUDA-only checks are skipped, so passed is false")
    elif level == "kernel":
        # runs on a CPU too (the CUDA-graph check is then skipped): a missing fork is
        # reported as unsupported wherever it happens
        from .kernel.checks import KernelConfig, run_kernel_level
        jit = stack.get("jit")
        cfg = KernelConfig(prompt_tokens=tokens.prompt_tokens, max_new_tokens=tokens.max_new_tokens,
                           compute_dtype=kernel_compute_dtype(selection, notes),
                           asym_prefill=bool(stack.get("asym_prefill")),
                           jit_record={str(m["uri"]): str(m["sha256"]) for m in jit} if isinstance(jit, list) else None)
        results, choice = run_kernel_level(device, args.seed, manifest, fixtures, cfg)
        if device.type != "cuda":
            notes.append("kernel level on a CPU: CUDA-only checks are skipped, so passed is false")
    elif args.diagnostic_cache:
        from .engine.diagnostic import run_diagnostic
        assert manifest is not None
        results, choice, diagnostic = run_diagnostic(manifest, fixtures, args.seed, device, selection, tokens,
                                                     args.diagnostic_cache, args.plant_fault, ws_base)
        extra["engine"] = diagnostic["per_cache"][diagnostic["caches"][-1]]["engine"]
        if device.type != "cuda":
            notes.append("engine diagnostic on a CPU: CUDA-only checks are skipped, so the harness cannot agree")
    else:
        # runs on a CPU too, like the kernel level (the CUDA-graph check is then skipped)
        from .engine.driver import run_engine_level
        assert manifest is not None
        engine_facts: dict[str, Any] = {}
        results, choice = run_engine_level(manifest, fixtures, args.seed, device, selection,
                                           tokens, engine_facts, watch)
        extra["engine"] = engine_facts
        if device.type != "cuda":
            notes.append("engine level on a CPU: CUDA-only checks are skipped, so passed is false")
    return results, choice, extra, diagnostic


def _say(receipt: dict[str, Any], path: Path, level: str, promised: str | None, device: torch.device,
         diagnostic: dict[str, Any] | None, plant_fault: str | None) -> None:
    print(res.format_table(receipt["checks"], receipt["passed"]))
    for reason in receipt["reasons"]:
        print(f"  - {reason}")
    claim = f"proves the {receipt['proves']}" if receipt["proves"] != NOTHING else \
        f"proves nothing (it can prove the {res.proves(level, promised)} only when every check runs and passes; " \
        "see the reasons above)"
    print(f"level {level} on {device} {claim}; "
          f"{receipt['timings']['total_seconds']:.2f}s; receipt: {path}")
    if diagnostic is not None:
        print(f"diagnostic ({', '.join(diagnostic['caches'])}): the harness "
              f"{'agreed' if diagnostic['harness_ok'] else 'did not agree'} with the engine"
              + (f"; planted fault {plant_fault} {'caught' if diagnostic['fault_caught'] else 'NOT caught'}"
                 if plant_fault else ""))


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    device = resolve_device(args.device)
    manifest = load_manifest(args.manifest) if args.manifest else None
    if manifest and args.format and manifest.selection != args.format:
        raise InputError(f"--format {args.format}: expected a manifest for {args.format!r}, found "
                         f"selection {manifest.selection!r} in {manifest.path}.\n"
                         f"  -> pass the {args.format} download manifest")
    stack: dict[str, Any] = load_stack_info(args.stack_info) if args.stack_info else \
        {"recipe": None, "lock_sha256": None, "forks": {}, "setup_receipt": None}
    fixtures = fixtures_dir(args.fixtures)
    notes: list[str] = []
    level, promised = _level(args, stack)
    if level != promised:
        notes.append(f"level {level} was named; it proves at most the {res.proves(level, promised)}, never the stack")
    tokens = token_protocol(stack, args.token_counts)
    overridden = _no_stack_verdict(args, stack, level, tokens)
    selection = stack.get("selection") if isinstance(stack.get("selection"), dict) else None
    _require_engine_options(args, level, manifest)
    # the one watch over the JIT workspace (none at the reference level: no FlashInfer there)
    ws_base = workspace.base(selection)
    if args.diagnostic_cache:           # never the stack's verified workspace: a copy of it in the output
        from .engine.diagnostic import own_workspace
        ws_base = own_workspace(ws_base, args.output)
    watch = workspace.Watch.start(ws_base) if level != "reference" else None
    setup = time.monotonic() - started
    results, choice, extra, diagnostic = _run_level(args, level, device, manifest, fixtures, stack, tokens, ws_base,
                                                    watch, notes)
    watched, problems = watch.finish() if watch is not None else (None, [])
    if level == "engine":
        problems = []               # the engine level's JIT check (jit_complete) judges the same watch
    receipt = build_receipt(
        level=level, promised_level=promised, problems=problems + overridden,
        extra={"protocol": tokens.as_json(), "jit_workspace": watched} | extra,
        device=device, seed=args.seed, stack=stack,
        selection=manifest.selection if manifest else args.format,
        model=manifest.as_json() if manifest else None,
        scales=choice.as_json() if choice else {"source": "none", "path": None, "v_scales": [],
                                                "note": None, "error": None},
        results=results, notes=notes, diagnostic=diagnostic,
        timings={"setup_seconds": setup, "checks_seconds": sum(r.seconds for r in results),
                 "total_seconds": time.monotonic() - started})
    path = write_receipt(args.output, receipt)
    _say(receipt, path, level, promised, device, diagnostic, args.plant_fault)
    return 0 if receipt["passed"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except InputError as exc:
        print(f"smoke: usage error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
