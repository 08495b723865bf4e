# Sourced by the bench/h200_*.sh scripts: the tool installed into /tmp/toolenv from the offline wheels of
# bench/h200_tool_wheels.sh ($WHEELS) on the interpreter $SYS, as the README says (`--compile-bytecode`),
# and the timing helpers now / since.
now() { date +%s.%N; }
since() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN { printf "%.3f", a - b }'; }
rm -rf /tmp/boot /tmp/toolenv
"$SYS" -m pip install -q --no-index --no-deps --target /tmp/boot "$WHEELS"/uv-*.whl || exit 1
/tmp/boot/bin/uv venv -q /tmp/toolenv --python "$SYS" || exit 1
/tmp/boot/bin/uv pip install -q --compile-bytecode --python /tmp/toolenv/bin/python --no-index --find-links "$WHEELS" \
  -r "$WHEELS/req-slim.txt" || exit 1
B=/tmp/toolenv/bin
