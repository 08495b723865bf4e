#!/bin/bash
# Issue 20's cold FlashInfer-only setup, the tool before and after a change, on one host in one run (the cold
# time moves 37-50 s from host to host, mostly the JIT's longest translation unit, so runs on different days
# do not compare).  Each run: a new stack and a new cache, from the kit, the image's torch; the order
# alternates each round (before, after; then after, before) so the page cache warms neither side alone.
#   WHEELS=DIR BEFORE=DIR KIT=DIR OUT=DIR [ROUNDS=2] [COMPILE_SITE=1] bash bench/h200_cold_ab.sh
# COMPILE_SITE=1: first compile the image torch's site-packages as `pip install` leaves it (the image's, made by
# uv, has no bytecode): the case pyenv/sitebytecode.py is for.
# WHEELS from bench/h200_tool_wheels.sh (the tool now); BEFORE holds the october wheel of the commit before
# (`git worktree add /tmp/b REV && (cd /tmp/b && uv build --wheel -o BEFORE)`).
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python
ROUNDS=${ROUNDS:-2}
if [ "${COMPILE_SITE:-0}" = 1 ]; then
  "$SYS" -m compileall -q -j 0 "$("$SYS" -I -c 'import site; print(site.getsitepackages()[0])')" > /dev/null 2>&1
  echo "site-packages of $SYS compiled (as pip install leaves it)"
fi
. "$(dirname "$0")/h200_tool_install.sh"                 # /tmp/toolenv: the tool now
rm -rf /tmp/toolbefore
/tmp/boot/bin/uv venv -q /tmp/toolbefore --python "$SYS" || exit 1
grep -v '^october$' "$WHEELS/req-slim.txt" > /tmp/req-deps.txt
/tmp/boot/bin/uv pip install -q --compile-bytecode --python /tmp/toolbefore/bin/python --no-index --find-links "$WHEELS" \
  -r /tmp/req-deps.txt "$(ls "$BEFORE"/october-*.whl)" || exit 1
cold() {   # cold TOOL_BIN NAME: a new stack and cache; prints "NAME total env install jit"
  rm -rf /tmp/ab-stack /tmp/ab-cache
  local t; t=$(now)
  "$1/october_setup" /tmp/ab-stack --recipe flashinfer-pr3812 --kit "$KIT" --system-python "$SYS" \
    --cache-dir /tmp/ab-cache > "$OUT/ab-$2-$3.log" 2>&1 || { echo "$2 failed"; tail -20 "$OUT/ab-$2-$3.log"; exit 1; }
  local total; total=$(since "$t")
  cp /tmp/ab-stack/logs/env.log "$OUT/ab-$2-$3.env.log"
  grep -A1 "torch_facts.py\$\|torch_facts.py'\?$" /tmp/ab-stack/logs/env.log | grep -o "exit 0 after [0-9.]*s" | tail -1 | sed "s/^/  $2: the env step's torch probe: /" >&2
  "$SYS" -c "import json,sys; s={x['name']: x['seconds'] for x in json.load(open('/tmp/ab-stack/receipts/setup.json'))['steps']}; \
print(sys.argv[1], sys.argv[2], s['env'], s['install'], s['jit'])" "$2" "$total"
}
: > /tmp/ab.rows
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for side in $order; do
    bin=/tmp/toolenv/bin; [ "$side" = before ] && bin=/tmp/toolbefore/bin
    cold "$bin" "$side" "$r" | tee -a /tmp/ab.rows
  done
done
"$SYS" - <<'PY'
import statistics
rows = [l.split() for l in open("/tmp/ab.rows") if l.strip()]
med = {side: [statistics.median(float(r[i]) for r in rows if r[0] == side) for i in (1, 2, 3, 4)]
       for side in ("before", "after")}
print(f"{'median of ' + str(len(rows) // 2):<16}{'total s':>9}{'env s':>8}{'install s':>11}{'jit s':>8}")
for side, (t, e, i, j) in med.items():
    print(f"{side:<16}{t:9.2f}{e:8.2f}{i:11.2f}{j:8.2f}")
print(f"RATIO before/after, cold total = {med['before'][0] / med['after'][0]:.3f}; env step = "
      f"{med['before'][1] / med['after'][1]:.2f}x; cold goal < 45 s: {'met' if med['after'][0] < 45 else 'NOT met'}")
PY
