#!/bin/bash
# Issues 20 and 22 on the lent H200: the FlashInfer-only stack from a kit with the image's torch, as a new
# user runs it (tool from wheels with its bytecode compiled, as the README's `uv tool install --compile-bytecode`, PYTHONDONTWRITEBYTECODE=1 as in many containers).  Times the cold setup,
# the no-op re-runs and a second stack from the same cache; runs `current verify` on the real stack
# (must pass), then plants a .pth + module in the env and a zero-byte AOT library (must be named, exit 13).
#   WHEELS=DIR KIT=DIR OUT=DIR bash bench/h200_trust_speed.sh      (WHEELS from bench/h200_tool_wheels.sh)
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python
S1=/tmp/st1; S2=/tmp/st2; CACHE=/tmp/october-cache
rm -rf /tmp/boot /tmp/toolenv /tmp/toolenv2 $S1 $S2 $CACHE
. "$(dirname "$0")/h200_tool_install.sh"
setup() { $B/october_setup "$1" --recipe flashinfer-pr3812 --kit "$KIT" --system-python "$SYS" --cache-dir "$CACHE"; }
steps() { $SYS -c "import json,sys; [print(f\"  {s['name']:<10} {s['status']:<7} {s['seconds']:8.2f} s\") for s in json.load(open(sys.argv[1]))['steps']]" "$1"; }
echo "== 1. cold setup $S1"; t=$(now); setup $S1 > $OUT/setup1.log 2>&1; rc=$?; C1=$(since $t); echo "setup rc=$rc in $C1 s"; steps $S1/receipts/setup.json
[ $rc = 0 ] || { tail -40 $OUT/setup1.log; tail -30 $S1/logs/*.log; exit 1; }
cp $S1/receipts/setup.json $OUT/setup.json      # the cold run's receipt, as the installed tool wrote it
grep -a -h "built-stack cache\|held to an index wheel" $S1/logs/install.log | cut -c1-300    # stored, or why not
echo "== 2. smoke (the README's command)"; t=$(now); $B/current smoke --install $S1 --output /tmp/smoke1 > $OUT/smoke1.log 2>&1; echo "smoke rc=$? in $(since $t) s"; tail -9 $OUT/smoke1.log
cp /tmp/smoke1/receipt.json $OUT/smoke.json
echo "== 3. no-op re-runs"; for i in 1 2 3 4 5; do t=$(now); setup $S1 > /tmp/noop.log 2>&1; echo "noop $i rc=$? in $(since $t) s"; done; tail -3 /tmp/noop.log
t=$(now); $B/october_setup --help > /dev/null; echo "october_setup --help: $(since $t) s"
echo "== 3b. no-op diagnostics"; $SYS bench/index_stat_check.py $S1/src/flashinfer $S1/src/flashinfer/3rdparty/cccl
# from /tmp: `python -m` puts the working directory first on sys.path, and from the repository root it
# would run the checkout's copy of the tool (another tool copy: steps judged again, the receipt rewritten)
KIT_ABS=$(realpath "$KIT"); (cd /tmp && $B/python -m cProfile -s tottime -m october.installer.october_setup $S1 --recipe flashinfer-pr3812 --kit "$KIT_ABS" --system-python "$SYS" --cache-dir "$CACHE") 2>&1 | grep -E "^ +[0-9]" | head -12 | cut -c1-150
echo "== 4. current verify on the real stack"; t=$(now); $B/current verify --install $S1 > /tmp/verify-clean.log 2>&1; echo "verify rc=$? in $(since $t) s"; tail -6 /tmp/verify-clean.log
SITE=$(ls -d $S1/env/lib/python3*/site-packages); AOT=$(ls $S1/src/flashinfer/flashinfer/data/aot/*/*.so | head -1)
echo "import sys" > $SITE/zz_planted.py; echo "import zz_planted" > $SITE/zz.pth
cp -p "$AOT" /tmp/aot.keep; : > "$AOT"
echo "== 5. verify with a planted .pth + module and a zero-byte AOT library ($(basename $AOT))"
$B/current verify --install $S1 > /tmp/verify-planted.log 2>&1; echo "verify planted rc=$? (13 = named)"; grep -n "zz\|aot\|\.so" /tmp/verify-planted.log | head -8
rm $SITE/zz.pth $SITE/zz_planted.py; cp -p /tmp/aot.keep "$AOT"
$B/current verify --install $S1 > /dev/null 2>&1; echo "verify after removing the plants rc=$?"
echo "== 5b. an edit git status is told not to see (skip-worktree in the fork, assume-unchanged in cccl)"
FI=$S1/src/flashinfer; CCL=$FI/3rdparty/cccl; F1=$(git -C $FI ls-files | grep -m1 '\.py$'); F2=$(git -C $CCL ls-files -t | grep -m1 '^H .*\.h$' | cut -c3-)   # one checked out (CCCL is sparse)
cp -p "$FI/$F1" /tmp/f1.keep; cp -p "$CCL/$F2" /tmp/f2.keep
git -C $FI update-index --skip-worktree "$F1"; echo "# planted" >> "$FI/$F1"
git -C $CCL update-index --assume-unchanged "$F2"; echo "// planted" >> "$CCL/$F2"
echo "git status lines: $(git -C $FI status --porcelain | wc -l)"
$B/current verify --install $S1 > /tmp/verify-hidden.log 2>&1; echo "verify hidden rc=$? (13 = named)"; grep -n "skip-worktree\|assume-unchanged" /tmp/verify-hidden.log | head -3 | cut -c1-220
t=$(now); setup $S1 > /tmp/noop-hidden.log 2>&1; echo "re-run with the hidden edits rc=$? in $(since $t) s"; grep -m2 "skip-worktree\|assume-unchanged" /tmp/noop-hidden.log | cut -c1-220
git -C $FI update-index --no-skip-worktree "$F1"; git -C $CCL update-index --no-assume-unchanged "$F2"; cp -p /tmp/f1.keep "$FI/$F1"; cp -p /tmp/f2.keep "$CCL/$F2"
$B/current verify --install $S1 > /dev/null 2>&1; echo "verify after undoing rc=$?"
for i in 1 2 3; do t=$(now); setup $S1 > /tmp/noop.log 2>&1; echo "noop after undoing $i rc=$? in $(since $t) s"; done
echo "== 5c. a distribution removed by hand (uv pip uninstall), then a plain re-run: put back, never locked"
SITE=$(ls -d $S1/env/lib/python3*/site-packages); GONE=$(ls -d $SITE/*.dist-info | grep -v -i flashinfer | head -1 | xargs basename | sed 's/-[^-]*\.dist-info$//')
LOCK_SHA=$(sha256sum $S1/pylock.toml | cut -d' ' -f1)
[ -n "$GONE" ] && /tmp/boot/bin/uv pip uninstall -q --python $S1/env/bin/python "$GONE"; echo "uninstalled ${GONE:-nothing (no distribution of its own)}: rc=$?"
$B/current verify --install $S1 > /tmp/verify-gone.log 2>&1; echo "verify rc=$? (13 = named)"; grep -m1 -i "$GONE" /tmp/verify-gone.log | cut -c1-200
t=$(now); setup $S1 > /tmp/rerun-gone.log 2>&1; echo "plain re-run rc=$? in $(since $t) s"; grep "==> env\|==> install\|==> lock" /tmp/rerun-gone.log | cut -c1-200
[ "$(sha256sum $S1/pylock.toml | cut -d' ' -f1)" = "$LOCK_SHA" ] && echo "lock unchanged" || echo "LOCK CHANGED"
ls -d $SITE/*.dist-info | grep -q -i "/$GONE-" && echo "$GONE is back" || echo "$GONE STILL MISSING"
$B/current verify --install $S1 > /dev/null 2>&1; echo "verify after the re-run rc=$?"
for i in 1 2; do t=$(now); setup $S1 > /tmp/noop.log 2>&1; echo "noop after the re-run $i rc=$? in $(since $t) s"; done
echo "== 6. second stacks $S2, /tmp/st3, /tmp/st4, same cache (three samples: the git and disk times vary run to run)"
C2S=""
for S in $S2 /tmp/st3 /tmp/st4; do rm -rf $S; t=$(now); setup $S > /tmp/setup2.log 2>&1; rc=$?; C=$(since $t); C2S="$C2S $C"
  echo "second stack $S rc=$rc in $C s"; steps $S/receipts/setup.json; [ $rc = 0 ] || tail -20 /tmp/setup2.log; done
C2=$(echo $C2S | tr ' ' '\n' | sort -n | sed -n 2p)      # the median of three
for i in 1 2 3; do t=$(now); setup $S2 > /dev/null 2>&1; echo "noop2 $i rc=$? in $(since $t) s"; done
$SYS bench/index_stat_check.py $S2/src/flashinfer $S2/src/flashinfer/3rdparty/cccl
$B/current verify --install $S2 > /dev/null 2>&1; echo "verify S2 rc=$?"
for c in $C2S; do awk -v a=$C1 -v b=$c 'BEGIN { printf "ratio cold/second sample = %.2f\n", a / b }'; done
awk -v a=$C1 -v b=$C2 'BEGIN { printf "RATIO cold/second (median of 3) = %.2f (goal >= 10); cold %.1f s (goal < 45 s on the H200)\n", a / b, a }'
cp $S1/logs/preflight.log $OUT/preflight.log
echo "== 6b. a second install of the same tool (its own venv, files copied: its own uv), same cache"
/tmp/boot/bin/uv venv -q /tmp/toolenv2 --python "$SYS" && /tmp/boot/bin/uv pip install -q --compile-bytecode --link-mode copy \
  --python /tmp/toolenv2/bin/python --no-index --find-links "$WHEELS" -r "$WHEELS/req-slim.txt" || exit 1
rm -rf /tmp/st5; t=$(now); /tmp/toolenv2/bin/october_setup /tmp/st5 --recipe flashinfer-pr3812 --kit "$KIT" --system-python "$SYS" \
  --cache-dir "$CACHE" > /tmp/setup5.log 2>&1; rc=$?; C5=$(since $t); echo "second install's stack /tmp/st5 rc=$rc in $C5 s"; steps /tmp/st5/receipts/setup.json
$SYS -c "import json; b = json.load(open('/tmp/st5/.state/env.json'))['outputs'].get('built_from'); print('took the built-stack entry:', 'yes ' + b[:12] if b else 'NO')"
awk -v a=$C1 -v b=$C5 'BEGIN { printf "ratio cold/second install'"'"'s stack = %.2f\n", a / b }'
/tmp/toolenv2/bin/current verify --install /tmp/st5 > /dev/null 2>&1; echo "verify st5 (second install) rc=$?"
echo "== 6c. a second stack's fetch, command by command"; grep -aE "^[$] |^# exit" $S2/logs/fetch.log | cut -c1-160
echo "== 7. where the time goes (files in OUT: st{1,2}-STEP.timings, ninja.log)"
mkdir -p /tmp/timings; for s in 1 2; do for l in preflight fetch env install jit lock; do grep -aE "^[$] |^# exit" /tmp/st$s/logs/$l.log > /tmp/timings/st$s-$l.timings 2>/dev/null; done; done
find $S1/jit -name .ninja_log | while read -r f; do echo "## $f"; cat "$f"; done > /tmp/timings/ninja.log
tar czf $OUT/timings.tgz -C /tmp/timings . ; rm -rf /tmp/timings
stat -f -c "filesystem of /tmp: %T" /tmp; nproc
t=$(now); $SYS -c "import torch" ; echo "warm torch import: $(since $t) s"
t=$(now); $SYS -c "import torch; torch.zeros(1, device='cuda')" ; echo "warm torch import + CUDA init: $(since $t) s"
