#!/bin/bash
# Issue 18 deliverable 3 on the lent H200: the tiny random Qwen3 made offline by the image's own
# transformers (bench/tiny_qwen3.py), its calibrated scales and pinning recipe, then checked in place by
# `current download --model-dir` (the tool from wheels, as bench/h200_trust_speed.sh installs it), and a
# greedy generation of a few tokens on the GPU with transformers to show the weights load and run.
#   B=TOOL_BIN_DIR OUT=DIR bash bench/h200_tiny_model.sh
set -u
SYS=/opt/torch/.venv/bin/python
rm -rf /tmp/tq /tmp/tqf /tmp/tqr
"$SYS" -c "import transformers, tokenizers, torch; print('transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'torch', torch.__version__)"
"$SYS" bench/tiny_qwen3.py /tmp/tq --fixtures /tmp/tqf --recipe-from recipes/vllm-0.24.0-pr3812.toml \
  --recipe-out /tmp/tqr/tiny.toml > "$OUT/tiny-made.json" 2> "$OUT/tiny-made.err"; echo "tiny_qwen3 rc=$?"
"$B/current" download --recipe /tmp/tqr/tiny.toml --format fp16 --model-dir /tmp/tq --output "$OUT/tiny" \
  --fixtures /tmp/tqf > "$OUT/tiny-download.log" 2>&1; echo "current download --model-dir rc=$?"
cp /tmp/tqr/tiny.toml /tmp/tqf/*.json "$OUT/" 2>/dev/null
"$SYS" - <<'PY'
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained("/tmp/tq")
model = AutoModelForCausalLM.from_pretrained("/tmp/tq", dtype=torch.bfloat16).cuda().eval()
ids = tok("The capital of France is", return_tensors="pt").input_ids.cuda()
out = model.generate(ids, max_new_tokens=8, do_sample=False)
print("generated", out.shape[1] - ids.shape[1], "tokens on", torch.cuda.get_device_name(0))
PY
