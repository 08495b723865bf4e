#!/bin/bash
# Issue 20 on the lent GPU machine: this tool against an earlier one (BASE: a folder holding its october wheel),
# second stacks interleaved so the disk's drift hits both alike.  Each tool in its own venv and cache, one cold
# FlashInfer-only stack each from the kit, then second stacks A, B, A, B, A, B; the median of each and the ratio.
#   WHEELS=DIR KIT=DIR BASE=DIR OUT=DIR [KIT_BASE=DIR] bash bench/h200_second_ab.sh
# KIT_BASE: the base tool's kit where its shipped recipe differs from this one's (a kit is made for one recipe).
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python
KIT_ABS=$(realpath "$KIT"); KIT_BASE_ABS=$(realpath "${KIT_BASE:-$KIT}"); HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf /tmp/ab; mkdir -p /tmp/ab/wheels-base; cp "$WHEELS"/* /tmp/ab/wheels-base/; rm -f /tmp/ab/wheels-base/october-*.whl
cp "$BASE"/october-*.whl /tmp/ab/wheels-base/
now() { date +%s.%N; }
since() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN { printf "%.3f", a - b }'; }
"$SYS" -m pip install -q --no-index --no-deps --target /tmp/ab/boot "$WHEELS"/uv-*.whl || exit 1
for t in base new; do W=$([ $t = base ] && echo /tmp/ab/wheels-base || echo "$WHEELS")
  /tmp/ab/boot/bin/uv venv -q /tmp/ab/tool-$t --python "$SYS" || exit 1
  /tmp/ab/boot/bin/uv pip install -q --compile-bytecode --python /tmp/ab/tool-$t/bin/python --no-index --find-links "$W" -r "$W/req-slim.txt" || exit 1
  echo "tool $t: $(sha256sum $W/october-*.whl | cut -c1-12)"; done
setup() { K=$([ $1 = base ] && echo "$KIT_BASE_ABS" || echo "$KIT_ABS")
  (cd /tmp && /tmp/ab/tool-$1/bin/october_setup "$2" --recipe flashinfer-pr3812 --kit "$K" --system-python "$SYS" --cache-dir /tmp/ab/cache-$1); }
steps() { $SYS -c "import json,sys; print('  ' + ', '.join(f\"{s['name']} {s['seconds']:.2f}\" for s in json.load(open(sys.argv[1]))['steps'] if s['status'] == 'ran'))" "$1"; }
for t in base new; do s=$(now); setup $t /tmp/ab/$t-cold > $OUT/cold-$t.log 2>&1; rc=$?; echo "cold $t rc=$rc in $(since $s) s"; steps /tmp/ab/$t-cold/receipts/setup.json; done
declare -A ALL
for i in 1 2 3; do for t in base new; do s=$(now); setup $t /tmp/ab/$t-s$i > /tmp/ab/s.log 2>&1; rc=$?; c=$(since $s); ALL[$t]="${ALL[$t]:-} $c"
  echo "second $t #$i rc=$rc in $c s"; steps /tmp/ab/$t-s$i/receipts/setup.json; done; done
for t in base new; do m=$(echo ${ALL[$t]} | tr ' ' '\n' | sort -n | sed -n 2p); echo "MEDIAN second $t = $m s"; done
for t in base new; do for i in 1 2; do s=$(now); setup $t /tmp/ab/$t-s1 > /dev/null 2>&1; echo "noop $t rc=$? in $(since $s) s"; done; done
for t in base new; do echo "== $t s1 status commands"; grep -ahE "^[$] .* status |^# exit" /tmp/ab/$t-s1/logs/fetch.log /tmp/ab/$t-s1/logs/install.log | grep -A1 " status " | paste - - | cut -c1-40,100-200; done
