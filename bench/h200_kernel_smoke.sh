#!/usr/bin/env bash
# The kernel-level smoke on a GPU with the real FlashInfer 2f3f0f6d source, timed (issue 8, item 7).
#
#   bench/h200_kernel_smoke.sh DEV OUT
#
# DEV holds the two real-fork tars (../shared/real-forks) and the apache-tvm-ffi cp312 wheel; OUT gets
# receipts and timings.  Steps: clone FlashInfer 2f3f0f6d + 3rdparty/cccl from the tars (git URL
# rewriting), make the flashinfer/data links and _build_meta.py its build backend would make, run the
# jit builder (october.checks.jit_build: decode K bf16/V e4m3 + bf16 fa2 prefill) into a fresh
# workspace, then `python -m october.checks.smoke` promised level kernel, then each planted fault on a copy of the
# built workspace.  PY defaults to the H200 image's Python.
set -uo pipefail
DEV=$(realpath "$1"); OUT=$(realpath "$2"); REPO=$(pwd); PY=${PY:-/opt/torch/.venv/bin/python}
W=${W:-/tmp/k8w}; rm -rf "$W"; mkdir -p "$W/mirror" "$OUT"
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
T0=$(now)
for t in "$DEV"/*.tar; do tar -xf "$t" -C "$W/mirror"; done
RW="url.file://$W/mirror/github.com/.insteadOf=https://github.com/"
git -c "$RW" clone -q "$W/mirror/github.com/flashinfer-ai/flashinfer.git" "$W/fi"
git -C "$W/fi" -c "$RW" -c protocol.file.allow=always submodule update -q --init 3rdparty/cccl
mkdir -p "$W/fi/flashinfer/data"
for d in csrc include; do ln -s "$W/fi/$d" "$W/fi/flashinfer/data/$d"; done
for d in cccl cutlass spdlog; do ln -s "$W/fi/3rdparty/$d" "$W/fi/flashinfer/data/$d"; done
printf '__version__ = "%s"\n__git_version__ = "%s"\n' "$(cat "$W/fi/version.txt")" \
  "$(git -C "$W/fi" rev-parse HEAD)" > "$W/fi/flashinfer/_build_meta.py"
"$PY" -m zipfile -e "$DEV"/apache_tvm_ffi-*.whl "$W/site"      # a wheel is a zip: unpacked, not installed
T1=$(now)
export PYTHONPATH="$REPO:$W/fi:$W/site" FLASHINFER_WORKSPACE_BASE="$W/stack/jit" FLASHINFER_CUDA_ARCH_LIST=9.0 \
  FLASHINFER_DISABLE_VERSION_CHECK=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda-13.0} MAX_JOBS=${MAX_JOBS:-16} \
  PYTHONUNBUFFERED=1
export PATH="$CUDA_HOME/bin:$PATH"
mkdir -p "$W/stack/jit"
cat > "$W/req.json" <<JSON
{"modules": [{"id": "m0", "kind": "decode", "q": "bf16", "k": "bf16", "v": "e4m3", "o": "bf16", "head_dim": 128, "posenc": 0, "backend": "fa2"},
             {"id": "m1", "kind": "prefill", "q": "bf16", "k": "bf16", "v": "bf16", "o": "bf16", "head_dim": 128, "posenc": 0, "backend": "fa2"}],
 "result": "$OUT/jit-result.json"}
JSON
(cd "$W/stack/jit" && "$PY" -P -s -m october.checks.jit_build "$W/req.json"); echo "jit rc $?"
T2=$(now)
"$PY" - "$OUT/jit-result.json" "$W/stack-info.json" "$REPO/recipes/20260702.toml" <<'PYEOF'
import hashlib, json, sys
r = json.load(open(sys.argv[1]))
json.dump({"recipe": {"name": "20260702", "sha256": hashlib.sha256(open(sys.argv[3], "rb").read()).hexdigest()},
           "lock_sha256": None, "forks": {"flashinfer": "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"},
           "setup_receipt": None, "promised_level": "kernel", "asym_prefill": False,
           "smoke": {"prompt_tokens": 8192, "max_new_tokens": 128},
           "jit": [{"uri": m["uri"], "sha256": m["sha256"]} for m in r["modules"]]}, open(sys.argv[2], "w"))
for m in r["modules"]:
    print("jit module", m["uri"], m["sha256"], "cached" if m["cached"] else "built")
PYEOF
cp -a "$W/stack/jit" "$W/jit-pristine"
"$PY" -m october.checks.smoke --device cuda --stack-info "$W/stack-info.json" --output "$OUT/pass"; echo "smoke rc $?"
T3=$(now)
echo "TIMES setup $(sub $T1 $T0) jit $(sub $T2 $T1) smoke $(sub $T3 $T2) jit+smoke $(sub $T3 $T1)"
[ "${FAULTS:-1}" = 0 ] && exit 0
for f in ${FAULT_LIST:-out_x0 v_scale_1 v_stored_2x k8v8 upcast_v no_flashinfer out_x1_01 sm_scale_x1_02}; do
  rm -rf "$W/stack/jit"; cp -a "$W/jit-pristine" "$W/stack/jit"
  "$PY" -m tests.fixtures.kernel_faults $f --device cuda --stack-info "$W/stack-info.json" --output "$OUT/fault-$f" \
    > "$OUT/fault-$f.log" 2>&1; echo "fault $f rc $?"; sed -n 1,8p "$OUT/fault-$f.log"
  [ $f = upcast_v ] && cp -a "$W/stack/jit" "$W/jit-upcast"
done
# a stale module of another dtype: the symmetric bf16 decode library (built by the upcast run) under the K16/V8 name
rm -rf "$W/stack/jit"; cp -a "$W/jit-pristine" "$W/stack/jit"
ASYM=$(cd "$W/stack/jit" && ls -d .cache/flashinfer/*/*/cached_ops/batch_decode_*dtype_k_bf16_dtype_v_e4m3*)
SYM=$(cd "$W/jit-upcast" && ls -d .cache/flashinfer/*/*/cached_ops/batch_decode_*dtype_kv_bf16* | head -1)
if [ -n "$SYM" ]; then
  cp "$W/jit-upcast/$SYM/$(basename "$SYM").so" "$W/stack/jit/$ASYM/$(basename "$ASYM").so"
  "$PY" -m october.checks.smoke --device cuda --stack-info "$W/stack-info.json" --output "$OUT/fault-stale_module" \
    > "$OUT/fault-stale_module.log" 2>&1; echo "fault stale_module rc $?"; sed -n 1,8p "$OUT/fault-stale_module.log"
fi
T4=$(now)
echo "TIMES faults $(sub $T4 $T3)"
