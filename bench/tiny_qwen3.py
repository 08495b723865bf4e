"""Make a tiny Qwen3-architecture model with random weights, offline, for the engine level.

    python bench/tiny_qwen3.py OUT_DIR [--layers 2] [--seed 0] [--fixtures DIR] [--recipe-from BASE.toml --recipe-out R.toml]

Runs in any Python with torch, transformers (>= 4.51, Qwen3) and tokenizers: the H200 image's
``/opt/torch/.venv`` has all three.  Nothing is downloaded: the tokenizer is a byte-level BPE with no
merges (every byte one token, plus Qwen's chat specials), built here and saved as ``tokenizer.json``;
the weights are drawn from ``--seed``.  The shape is the one the recipes' JIT modules are built for:
head dim 128 for Q, K and V, 4 query heads over 2 KV heads (GQA group 2), bfloat16.

With ``--fixtures DIR`` it also calibrates the V scales the engine level needs (per layer, amax of
``v_proj``'s output over text other than the harness prompts, / 448: the e4m3 range) into
``DIR/local__tiny-qwen3.kv_scales.json``.  With ``--recipe-from BASE.toml --recipe-out R.toml`` it writes a
recipe that is BASE with ``[models.fp16]`` replaced by this model: repo ``local/tiny-qwen3``, a revision
that is the sha1 of the file list and hashes (a local copy has no hub commit), every file's sha256 pinned
and the shape from its config.json.  The directory is then handed to the tool like any model a site keeps
on shared storage:

    current download --recipe R.toml --format fp16 --model-dir OUT_DIR --output MANIFEST_DIR

which checks every file against those pins in place and writes the same manifest a hub download gets
(issue 18, deliverable 3).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
REPO = "local/tiny-qwen3"
CALIBRATION = ("Rivers carry sediment from mountains to the sea, building deltas over thousands of years. "
               "A compiler turns source text into machine code; a linker joins the pieces. 0123456789 "
               "Quarterly revenue rose while costs fell, and the board approved a dividend. ") * 8
VOCAB = 512          # 256 bytes + the specials, padded to a multiple of 64
HEAD_DIM = 128


def byte_tokenizer():  # -> transformers.PreTrainedTokenizerFast
    """Every byte its own token (GPT-2's byte-to-unicode table), no merges: no training, no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   model_max_length=32768)


def make(out: Path, layers: int, seed: int) -> dict[str, object]:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = byte_tokenizer()
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=HEAD_DIM,
                      max_position_embeddings=32768, rope_theta=1_000_000.0, tie_word_embeddings=True,
                      bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, torch_dtype="bfloat16")
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    written = json.loads((out / "config.json").read_text(encoding="utf-8"))
    if int(written.get("head_dim", 0)) != HEAD_DIM or written.get("architectures") != ["Qwen3ForCausalLM"]:
        raise SystemExit(f"error: {out}/config.json: expected Qwen3ForCausalLM with head_dim {HEAD_DIM}, "
                         f"found {written.get('architectures')} head_dim {written.get('head_dim')}.\n"
                         "  -> use transformers >= 4.51 (Qwen3)")
    return {"dir": str(out), "layers": layers, "seed": seed, "vocab": VOCAB, "head_dim": HEAD_DIM,
            "files": sorted(p.name for p in out.iterdir()),
            "parameters": sum(p.numel() for p in model.parameters()),
            "v_scales": calibrate(model, tok)}


def calibrate(model, tok) -> list[float]:  # noqa: ANN001 (transformers types)
    """Per layer: amax of v_proj's output over CALIBRATION, / 448 (float8_e4m3fn's largest value)."""
    import torch

    amax: dict[int, float] = {}
    hooks = []
    for i, layer in enumerate(model.model.layers):
        def hook(_m, _inp, out, i=i) -> None:  # noqa: ANN001
            amax[i] = max(amax.get(i, 0.0), float(out.detach().float().abs().max()))
        hooks.append(layer.self_attn.v_proj.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.tensor([tok.encode(CALIBRATION)]))
    for h in hooks:
        h.remove()
    return [amax[i] / 448.0 for i in range(len(model.model.layers))]


def pins(out: Path) -> tuple[dict[str, str], str]:
    """Every file's sha256, and the local revision: sha1 over the sorted ``name sha256`` lines."""
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir()) if p.is_file()}
    revision = hashlib.sha1("".join(f"{n} {h}\n" for n, h in files.items()).encode()).hexdigest()
    return files, revision


def write_scales(fixtures: Path, revision: str, v_scales: list[float]) -> Path:
    """The scales file ``october.checks.scales`` reads (format_version 1), for REPO at ``revision``."""
    fixtures.mkdir(parents=True, exist_ok=True)
    path = fixtures / f"{REPO.replace('/', '__')}.kv_scales.json"
    path.write_text(json.dumps({
        "format_version": 1, "kind": "october-kv-scales", "model": {"repo": REPO, "revision": revision},
        "num_layers": len(v_scales), "v_scales": v_scales, "k_scales": None,
        "method": {"statistic": "amax / 448", "calibration_tokens": len(CALIBRATION.encode()),
                   "dataset": "bench/tiny_qwen3.py CALIBRATION (not the harness prompts)",
                   "dtype": "float8_e4m3fn"}}, indent=2) + "\n", encoding="utf-8")
    return path


def write_recipe(base: Path, dest: Path, out: Path, files: dict[str, str], revision: str) -> None:
    """BASE with its [models.*] tables replaced by this model as [models.fp16]."""
    text = base.read_text(encoding="utf-8")
    start = re.search(r"^\[models\.", text, re.MULTILINE)
    end = re.search(r"^\[(?!models\.)", text[start.end():], re.MULTILINE) if start else None
    if start is None:
        raise SystemExit(f"error: {base}: expected [models.*] tables to replace, found none.\n"
                         "  -> pass a recipe with a [models.fp16] table (recipes/vllm-0.24.0-pr3812.toml)")
    tail = text[start.end() + end.start():] if end else ""
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    section = (f'[models.fp16]\nrepo = "{REPO}"\nrevision = "{revision}"\n'
               f"patterns = [{', '.join(json.dumps(n) for n in files)}]\n"
               '# a tiny random-weight Qwen3 made by bench/tiny_qwen3.py; bfloat16 like its weights\n'
               'compute_dtype = "bfloat16"\nv_format = "fp8_e4m3"\n\n[models.fp16.sha256]\n'
               + "".join(f'"{n}" = "{h}"\n' for n, h in files.items())
               + "\n[models.fp16.config]\n"
               f"num_attention_heads = {cfg['num_attention_heads']}\n"
               f"num_key_value_heads = {cfg['num_key_value_heads']}\nhead_dim = {cfg['head_dim']}\n"
               f"num_hidden_layers = {cfg['num_hidden_layers']}\n"
               f'source = "config.json of the local model {REPO}@{revision} (bench/tiny_qwen3.py)"\n\n')
    head = text[:start.start()]
    head = re.sub(r'^name = "([^"]+)"', r'name = "\1-tiny"', head, count=1, flags=re.MULTILINE)
    if not re.search(r"^forks_file\s*=", head, re.MULTILINE):   # the base's forks.toml, wherever R.toml lands
        forks = (base.parent / "forks.toml") if (base.parent / "forks.toml").is_file() else \
            (base.parent.parent / "forks.toml")
        head = re.sub(r"^(name = .*)$", lambda m: f"{m.group(1)}\nforks_file = {json.dumps(str(forks.resolve()))}",
                      head, count=1, flags=re.MULTILINE)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(head + section + tail, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixtures", type=Path, help="write the calibrated V scales here")
    ap.add_argument("--recipe-from", type=Path, help="a recipe .toml whose [models.*] this model replaces")
    ap.add_argument("--recipe-out", type=Path, help="where the derived recipe goes (with --recipe-from)")
    a = ap.parse_args(argv)
    if (a.recipe_from is None) != (a.recipe_out is None):
        print("error: --recipe-from and --recipe-out go together: expected both or neither, found one.\n"
              "  -> pass both", file=sys.stderr)
        return 2
    if a.out.exists() and any(a.out.iterdir()):
        print(f"error: {a.out} is not empty: expected a new or empty directory.\n  -> choose another OUT_DIR",
              file=sys.stderr)
        return 2
    try:
        info = make(a.out, a.layers, a.seed)
    except ImportError as exc:
        print(f"error: expected torch, transformers and tokenizers in {sys.executable}, found {exc}.\n"
              "  -> run it with a Python that has them (the H200 image's /opt/torch/.venv/bin/python)",
              file=sys.stderr)
        return 2
    files, revision = pins(a.out)
    info["revision"] = revision
    if a.fixtures is not None:
        info["scales"] = str(write_scales(a.fixtures, revision, info["v_scales"]))
    if a.recipe_from is not None:
        write_recipe(a.recipe_from, a.recipe_out, a.out, files, revision)
        info["recipe"] = str(a.recipe_out)
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
