#!/bin/bash
# Two builds of the tool side by side on one host: second stacks from the same cache, alternating
# old/new, so the host's drift (git and disk times vary run to run) falls on both, after
# one uncounted stack per build (its own built-stack entry; on a fresh machine the cache's mirrors and JIT).
# Prints each stack's wall time and step seconds, then the medians per build.
#   OLD=DIR NEW=WHEELS_DIR KIT=DIR ROUNDS=3 bash bench/h200_second_pair.sh
#   (NEW from bench/h200_tool_wheels.sh; OLD: only the older build's october wheel, `uv build --wheel -o OLD`)
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python; CACHE=/tmp/october-cache
now() { date +%s.%N; }
since() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN { printf "%.3f", a - b }'; }
for b in old new; do      # the same dependencies (NEW's wheels); OLD holds only the older october wheel
  rm -rf /tmp/boot-$b /tmp/toolenv-$b
  "$SYS" -m pip install -q --no-index --no-deps --target /tmp/boot-$b "$NEW"/uv-*.whl || exit 1
  /tmp/boot-$b/bin/uv venv -q /tmp/toolenv-$b --python "$SYS" || exit 1
  /tmp/boot-$b/bin/uv pip install -q --compile-bytecode --python /tmp/toolenv-$b/bin/python --no-index \
    --find-links "$NEW" -r "$NEW/req-slim.txt" || exit 1
  [ $b = new ] || /tmp/boot-$b/bin/uv pip install -q --compile-bytecode --python /tmp/toolenv-$b/bin/python \
    --no-index --no-deps --reinstall "$OLD"/october-*.whl || exit 1
  # from /tmp: in the checkout, `python -c` would import the checkout's october/ before the installed one
  echo "$b: $(cd /tmp && /tmp/toolenv-$b/bin/python -c 'import october.installer.git.clonecheck as c; print(c.__file__, "submodule_heads" if hasattr(c, "submodule_heads") else "git submodule status")')"
done
# one stack per build first, not counted: a build's first stack makes the built-stack entry of that build
# (the entry is keyed by the tool too) and, on a fresh machine, the cache's mirrors and JIT
for b in old new; do S=/tmp/pair-$b-0; rm -rf $S; t=$(now)
  /tmp/toolenv-$b/bin/october_setup $S --recipe flashinfer-pr3812 --kit "$KIT" --system-python "$SYS" \
    --cache-dir "$CACHE" > /tmp/pair.log 2>&1; echo "warm-up $b rc=$? in $(since $t) s"; done
rm -f /tmp/pair-lines
for r in $(seq 1 "${ROUNDS:-3}"); do
  order=$([ $((r % 2)) = 1 ] && echo "old new" || echo "new old")
  for b in $order; do
    S=/tmp/pair-$b-$r; rm -rf $S; t=$(now)
    /tmp/toolenv-$b/bin/october_setup $S --recipe flashinfer-pr3812 --kit "$KIT" --system-python "$SYS" \
      --cache-dir "$CACHE" > /tmp/pair.log 2>&1; rc=$?; w=$(since $t)
    steps=$($SYS -c "import json,sys; print(' '.join(f\"{s['name']}={s['seconds']:.2f}\" for s in json.load(open(sys.argv[1]))['steps']))" $S/receipts/setup.json 2>/dev/null)
    echo "PAIR $b round $r rc=$rc wall=$w $steps" | tee -a /tmp/pair-lines; [ $rc = 0 ] || tail -20 /tmp/pair.log
  done
done
for b in old new; do      # medians per build: wall, fetch
  for k in wall fetch; do
    grep "^PAIR $b " /tmp/pair-lines | tr ' ' '\n' | grep "^$k=" | cut -d= -f2 | sort -n \
      | awk -v b=$b -v k=$k '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "MEDIAN %s %s = %.3f s (of %d)\n", b, k, m, NR }'
  done
done
