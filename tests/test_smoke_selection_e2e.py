"""`current smoke` end to end at engine level: the stack's recipe selection reaches the engine, and a
derived module the jit step did not build fails the JIT check, named with the command that builds it.

The engine is the stand-in vLLM (``tests/fixtures/fake_vllm``; the real fork cannot be installed
here) on the tiny model of ``test_checks_engine_fake.py``; the recipe is ``current`` with its
``fp16`` selection pointed at that tiny model (its shape, and ``[smoke]`` counts it can run on a CPU).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from october.installer.pyenv import stackenv
from october.installer.smoke.launch import SmokeOptions, load_receipt, run_smoke
from tests.test_checks_engine_fake import FAKE, MODEL_CONFIG, REPO, REVISION, make_inputs, prebuild

ROOT = Path(__file__).resolve().parent.parent


def _recipe(tmp: Path) -> Path:
    text = (ROOT / "recipes" / "current.toml").read_text()
    text = re.sub(r'\[models\.fp16\]\nrepo = "[^"]+"\nrevision = "[0-9a-f]+"',
                  f'[models.fp16]\nrepo = "{REPO}"\nrevision = "{REVISION}"', text)
    cfg = MODEL_CONFIG
    start = text.index("[models.fp16.config]")
    end = text.index("[smoke]")
    text = (text[:start] + "[models.fp16.config]\n"
            f"num_attention_heads = {cfg['num_attention_heads']}\nnum_key_value_heads = {cfg['num_key_value_heads']}\n"
            f"head_dim = {cfg['head_dim']}\nnum_hidden_layers = {cfg['num_hidden_layers']}\n"
            'source = "tests/test_checks_engine_fake.py MODEL_CONFIG"\n\n' + text[end:])
    text = text.replace("prompt_tokens = 8192\nmax_new_tokens = 128", "prompt_tokens = 96\nmax_new_tokens = 12")
    path = tmp / "tiny.toml"
    path.write_text(text)
    return path


def test_current_smoke_names_the_module_the_jit_step_did_not_build(tmp_path: Path) -> None:
    from october.installer.recipe import load_recipe
    recipe = _recipe(tmp_path)
    sel = load_recipe(str(recipe)).models["fp16"]
    decode, prefill = sel.jit_modules
    stack = tmp_path / "stack"
    (stack / "receipts").mkdir(parents=True)
    # the stack env: this interpreter with the stand-in vLLM on its path (the stack's runtime
    # environment drops the caller's PYTHONPATH, as it must for a real stack)
    (stack / "env" / "bin").mkdir(parents=True)
    (stack / "env" / "bin" / "python").write_text(
        f'#!/bin/sh\nPYTHONPATH="{FAKE}:$PYTHONPATH" exec {sys.executable} "$@"\n')
    (stack / "env" / "bin" / "python").chmod(0o755)
    (stack / "receipts" / "setup.json").write_text(json.dumps({"recipe": {"name": "current", "path": str(recipe), "sha256": None},
                                                               "forks": [{"name": "vllm", "commit": "7" * 40}, {"name": "flashinfer", "commit": "2" * 40}]}))
    stackenv.write(stack, stackenv.runtime_env(stack, "9.0", None))
    prebuild(stack / "jit", [prefill])                       # the decode module was never built
    manifest, fixtures, _ = make_inputs(tmp_path / "in")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_") and k != "FAKE_VLLM_FAULT"}
    env["PYTHONPATH"] = str(FAKE)
    out = tmp_path / "out"
    opts = SmokeOptions(install=stack, format="fp16", output=out, level="engine", fixtures=fixtures,
                        manifest=manifest, device="cpu")
    assert run_smoke(opts, cwd=tmp_path, echo=lambda s: None, base_env=env) == 1
    receipt = load_receipt(out / "receipt.json")
    jit = next(c for c in receipt["checks"] if c["name"] == "jit_complete")
    assert jit["status"] == "failed" and jit["measured"]["missing"] == [decode]
    assert f"module {decode} is not pre-built in {stack / 'jit'}" in jit["summary"]
    assert f"run `october_setup {stack} --recipe {recipe}`" in jit["summary"]
    engine = receipt["engine"]
    assert engine["compute_dtype"] == "float16" and engine["k_cache_dtype_found"] == "torch.float16"
    assert (engine["prompt_tokens"], engine["max_new_tokens"], engine["tokens_from"]) == (96, 12, "recipe [smoke]")
    assert engine["jit_workspace"] == str(stack / "jit")
    physical = next(c for c in receipt["checks"] if c["name"] == "physical_k16v8")
    assert physical["status"] == "passed" and physical["limits"]["k_dtype"] == "torch.float16"
