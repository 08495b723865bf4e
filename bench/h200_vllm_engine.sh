#!/bin/bash
# Issue 18 on the lent H200: upstream vLLM 0.24.0 (from its sdist) + FlashInfer PR #3812 on the image's torch,
# built by october_setup from a kit made for this image (`october_setup kit --recipe vllm-0.24.0-pr3812
# --system-torch --have <the image's pip list>`), then the engine level on the real engine with the tiny
# Qwen3 (bench/tiny_qwen3.py, made here by the image's transformers).  Upstream vLLM cannot store K16/V8:
# the verdict must be passed: false, physical K16/V8 naming the refusal, nothing crashing.
#   KIT=DIR B=TOOL_BIN_DIR OUT=DIR bash bench/h200_vllm_engine.sh     (after bench/h200_trust_speed.sh's tool install)
set -u
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python; S=/tmp/vst; C=/tmp/vcache
rm -rf $S $C
now() { date +%s.%N; }; since() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }
t=$(now); $B/october_setup $S --recipe vllm-0.24.0-pr3812 --kit "$KIT" --system-python $SYS --cache-dir $C > $OUT/vsetup.log 2>&1
echo "october_setup (vLLM recipe, kit) rc=$? in $(since $t) s"; tail -12 $OUT/vsetup.log
$SYS -c "import json,sys; [print(f\"  {s['name']:<10} {s['status']:<7} {s['seconds']:8.2f} s\") for s in json.load(open(sys.argv[1]))['steps']]" $S/receipts/setup.json 2>/dev/null
B=$B OUT=$OUT bash bench/h200_tiny_model.sh
t=$(now); $B/current smoke --install $S --level engine --recipe /tmp/tqr/tiny.toml --manifest $OUT/tiny/fp16-download.json \
  --fixtures /tmp/tqf --output $OUT/engine > $OUT/engine.log 2>&1; echo "current smoke --level engine rc=$? in $(since $t) s (1 = not passed)"
tail -14 $OUT/engine.log
$SYS -c "import json,sys; r=json.load(open(sys.argv[1])); print('passed:', r['passed']); [print(' ', c['name'], c['status'], c['summary'][:300]) for c in r['checks']]" $OUT/engine/receipt.json
for l in env install jit; do cp $S/logs/$l.log $OUT/v-$l.log 2>/dev/null; done
