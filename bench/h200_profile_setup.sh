#!/bin/bash
# Issue 20 on the lent H200: where a cold FlashInfer-only setup and a second stack from the same cache spend
# their time.  Each setup runs under cProfile (the tool's own process) and every command it starts is timed
# in STACK/logs/<step>.log; both land in OUT/profile.tgz, and the top of each profile is printed.
#   WHEELS=DIR KIT=DIR OUT=DIR bash bench/h200_profile_setup.sh      (WHEELS from bench/h200_tool_wheels.sh)
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python
S1=/tmp/pst1; S2=/tmp/pst2; CACHE=/tmp/october-pcache; P=/tmp/prof
rm -rf /tmp/boot /tmp/toolenv $S1 $S2 $CACHE $P; mkdir -p $P
. "$(dirname "$0")/h200_tool_install.sh"
KIT=$(realpath "$KIT")      # from /tmp (below): `python -m` from the repository root would run the checkout's tool
setup() { (cd /tmp && $B/python -m cProfile -o "$2" -m october.installer.october_setup "$1" --recipe flashinfer-pr3812 --kit "$KIT" --system-python "$SYS" --cache-dir "$CACHE"); }
top() { $B/python -c "import pstats,sys; s=pstats.Stats(sys.argv[1]); s.sort_stats(sys.argv[2]).print_stats(int(sys.argv[3]))" "$@" | grep -E "^ +[0-9]" | cut -c1-180; }
for s in 1 2; do
  S=/tmp/pst$s; t=$(now); setup $S $P/setup$s.prof > $P/setup$s.log 2>&1; echo "setup $S rc=$? in $(since $t) s (under cProfile)"
  $SYS -c "import json,sys; [print(f\"  {s['name']:<10} {s['status']:<7} {s['seconds']:8.2f} s\") for s in json.load(open(sys.argv[1]))['steps']]" $S/receipts/setup.json
  echo "-- cumulative"; top $P/setup$s.prof cumulative 45; echo "-- tottime"; top $P/setup$s.prof tottime 25
  mkdir -p $P/st$s && cp -r $S/logs $P/st$s/
done
tar czf $OUT/profile.tgz -C $P .
