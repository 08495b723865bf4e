#!/bin/bash
# The FlashInfer-only stack on the lent H200, offline, from a kit (issue 10 item 5).  Run from the
# repository root with the tool's cp312 wheels in $WHEELS and the kit in $KIT; writes $OUT.
#   WHEELS=DIR KIT=DIR OUT=DIR bash bench/h200_flashinfer_stack.sh
# Steps: tool env from wheels; october_setup (every step, no preflight skip, torch from the image's
# /opt/torch/.venv); current smoke --level kernel; no-op re-run; a corrupted .so refused by smoke and
# rebuilt by october_setup; a second stack from the shared JIT cache, and its smoke.
set -u
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python
R=$PWD; S1=/tmp/st1; S2=/tmp/st2; CACHE=/tmp/october-cache
rm -rf /tmp/boot /tmp/toolenv $S1 $S2 $CACHE
steps() { python3 - "$1" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
for s in r["steps"]:
    print(f"  {s['name']:<10} {s['status']:<7} {s['seconds']:8.2f} s")
P
}
. "$(dirname "$0")/h200_tool_install.sh"
T=/tmp/toolenv/bin/python
# from /tmp: `python -m` puts the working directory first on sys.path, and from the repository root it would run
# the checkout's copy of the tool (its receipt then names the checkout's commit), not the installed one.  The
# recipe names no model: its smoke is the kernel level, with no --format (`current smoke` refuses one).
KIT=$(realpath "$KIT")
setup() { (cd /tmp && $T -m october.installer.october_setup "$1" --recipe flashinfer-pr3812 --kit "$KIT" --system-python "$SYS" --cache-dir "$CACHE"); }
smoke() { (cd /tmp && $T -m october smoke --install "$1" --level kernel --recipe flashinfer-pr3812 --output "$2"); }
keep() { cp "$1" "$OUT/$2"; }   # at most 8 files come back

echo "== 0. machine"; grep MemTotal /proc/meminfo; df -h /tmp | tail -1; command -v uv || echo "no uv on the image"
echo "== 1. october_setup $S1 (kit, system torch)"; t=$(now); setup $S1; rc=$?; echo "setup rc=$rc in $(since $t) s"; steps $S1/receipts/setup.json
[ $rc = 0 ] || { tail -50 $S1/logs/*.log; exit 1; }
keep $S1/receipts/setup.json setup.json; keep $S1/pylock.toml pylock.toml
echo "== 2. current smoke --level kernel"; t=$(now); smoke $S1 /tmp/smoke1; echo "smoke rc=$? in $(since $t) s"
keep /tmp/smoke1/receipt.json smoke.json
echo "== 3. no-op re-run"; t=$(now); setup $S1 >/dev/null; echo "noop rc=$? in $(since $t) s"; steps $S1/receipts/setup.json
t=$(now); (cd /tmp && $T -m october.installer.october_setup --help >/dev/null); echo "tool start alone (--help): $(since $t) s"
echo "== 4. corrupted .so"
SO=$(python3 -c "import json;print(json.load(open('$S1/.state/jit.json'))['outputs']['modules'][0]['path'])")
python3 - "$SO" <<'P'
import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0xFF; open(p, "wb").write(bytes(b))
P
smoke $S1 /tmp/smoke-corrupt; echo "smoke on corrupted rc=$? (12 = refused)"
t=$(now); setup $S1 >/dev/null; echo "re-run after corruption rc=$? in $(since $t) s"; steps $S1/receipts/setup.json
python3 -c "import json;m=json.load(open('$S1/.state/jit.json'))['outputs'];print('discarded', m['discarded']);print([(x['source'], x['sha256'][:12]) for x in m['modules']])"
echo "== 5. second stack $S2, same cache"; t=$(now); setup $S2 >/dev/null; echo "setup2 rc=$? in $(since $t) s"; steps $S2/receipts/setup.json
python3 -c "import json;m=json.load(open('$S2/.state/jit.json'))['outputs'];print([(x['source'], x['sha256'][:12]) for x in m['modules']], m['shared_cache']['restored'])"
t=$(now); smoke $S2 /tmp/smoke2; echo "smoke2 rc=$? in $(since $t) s"
keep /tmp/smoke2/receipt.json smoke2.json; keep $S2/receipts/setup.json setup2.json; keep $S1/receipts/setup.json setup-repaired.json
