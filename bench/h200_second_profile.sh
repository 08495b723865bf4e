#!/bin/bash
# Issue 20 on the lent H200: where a second stack's time goes, for this tool and (BASE=DIR holding another
# october wheel) an earlier one, in one call.  Each round: the tool from wheels (as bench/h200_trust_speed.sh),
# a cold FlashInfer-only stack from a kit in a new cache, three second stacks timed, a fourth under cProfile
# (cumulative, the tool's own functions).  Then git's racy-clean cost on a fresh checkout of the cached cccl
# pin: `git status` right after the checkout read-only (as a look runs it) or writing, and after a tick.
#   WHEELS=DIR KIT=DIR OUT=DIR [BASE=DIR] bash bench/h200_second_profile.sh   (WHEELS from bench/h200_tool_wheels.sh)
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python
CACHE=/tmp/october-cache
KIT_ABS=$(realpath "$KIT"); HERE=$(cd "$(dirname "$0")" && pwd)
steps() { $SYS -c "import json,sys; print('  ' + ', '.join(f\"{s['name']} {s['seconds']:.2f}\" for s in json.load(open(sys.argv[1]))['steps'] if s['status'] == 'ran'))" "$1"; }
round() {   # LABEL WHEELDIR PROFILE(yes|no)
  local label=$1; local WHEELS=$2
  rm -rf /tmp/st1 /tmp/st2 /tmp/st3 /tmp/st4 /tmp/st5 $CACHE
  . "$HERE/h200_tool_install.sh"
  setup() { (cd /tmp && $B/october_setup "$1" --recipe flashinfer-pr3812 --kit "$KIT_ABS" --system-python "$SYS" --cache-dir "$CACHE"); }
  echo "==== round $label ($(sha256sum $WHEELS/october-*.whl | cut -c1-12))"
  t=$(now); setup /tmp/st1 > $OUT/setup1-$label.log 2>&1; rc=$?; C1=$(since $t); echo "cold /tmp/st1 rc=$rc in $C1 s"; steps /tmp/st1/receipts/setup.json
  [ $rc = 0 ] || { tail -30 $OUT/setup1-$label.log; return 1; }
  local all=""
  for S in /tmp/st2 /tmp/st3 /tmp/st4; do t=$(now); setup $S > /tmp/s.log 2>&1; rc=$?; c=$(since $t); all="$all $c"; echo "second $S rc=$rc in $c s"; steps $S/receipts/setup.json; done
  local med=$(echo $all | tr ' ' '\n' | sort -n | sed -n 2p)
  awk -v a=$C1 -v b=$med -v l=$label 'BEGIN { printf "RATIO %s cold/second (median of 3) = %.2f (cold %.1f s, second %.3f s)\n", l, a / b, a, b }'
  for i in 1 2 3; do t=$(now); setup /tmp/st2 > /dev/null 2>&1; echo "noop st2 rc=$? in $(since $t) s"; done
  echo "== /tmp/st2 fetch and install commands"; grep -aE "^[$] |^# exit" /tmp/st2/logs/fetch.log /tmp/st2/logs/install.log | paste - - | awk -F'# exit' '{print $2 "  " substr($1, 1, 150)}'
  [ "$3" = yes ] || return 0
  echo "== /tmp/st5 under cProfile"
  (cd /tmp && $B/python -m cProfile -o /tmp/st5.prof -m october.installer.october_setup /tmp/st5 --recipe flashinfer-pr3812 --kit "$KIT_ABS" --system-python "$SYS" --cache-dir "$CACHE" > /tmp/s5.log 2>&1); echo "rc=$?"
  $B/python - <<'PY' 2>&1 | cut -c1-190
import pstats, io
s = io.StringIO(); p = pstats.Stats("/tmp/st5.prof", stream=s); p.sort_stats("cumulative").print_stats(r"october|subprocess.py:.*\(run\)|_find_and_load\b", 60); print(s.getvalue())
PY
}
[ -n "${BASE:-}" ] && { mkdir -p /tmp/wheels-base; cp "$WHEELS"/* /tmp/wheels-base/; rm -f /tmp/wheels-base/october-*.whl; cp "$BASE"/october-*.whl /tmp/wheels-base/; round base /tmp/wheels-base no; }
round new "$WHEELS" yes
echo "== racy-clean cost of a fresh cccl checkout"
M=$(ls -d $CACHE/git/*cccl.git | head -1); P=$(git -C "$M" for-each-ref --format='%(objectname)' refs/october/pins | head -1)
for mode in read write sleep read write sleep; do rm -rf /tmp/co; git -c protocol.file.allow=always clone -q --no-checkout "file://$M" /tmp/co 2>/dev/null
  git -C /tmp/co fetch -q --no-tags --depth 1 "file://$M" "$P"
  git -C /tmp/co -c checkout.workers=0 -c advice.detachedHead=false checkout -q --detach "$P"
  [ $mode = sleep ] && sleep 0.3
  t=$(now); if [ $mode = read ]; then GIT_OPTIONAL_LOCKS=0 git -C /tmp/co status --porcelain >/dev/null; else git -C /tmp/co status --porcelain >/dev/null; fi; a=$(since $t)
  t=$(now); GIT_OPTIONAL_LOCKS=0 git -C /tmp/co status --porcelain >/dev/null; b=$(since $t)
  t=$(now); GIT_OPTIONAL_LOCKS=0 git -C /tmp/co status --porcelain >/dev/null; c=$(since $t)
  echo "$mode: first status $a s, then $b s, then $c s"; done
git --version; nproc; stat -f -c "filesystem of /tmp: %T" /tmp
