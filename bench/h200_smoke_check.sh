#!/bin/bash
# The README's smoke on the real FlashInfer-only stack (tool from wheels, stack from a kit, the image's torch),
# then the GPU tier of the engine stand-in where the image has pytest: the receipt's passed/proves and every
# check's status and summary, as the installed tool wrote them.
#   WHEELS=DIR KIT=DIR OUT=DIR bash bench/h200_smoke_check.sh      (WHEELS from bench/h200_tool_wheels.sh)
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python
S1=/tmp/st1; CACHE=/tmp/october-cache
rm -rf $S1 $CACHE
. "$(dirname "$0")/h200_tool_install.sh"
t=$(now); $B/october_setup $S1 --recipe flashinfer-pr3812 --kit "$KIT" --system-python "$SYS" --cache-dir "$CACHE" \
  > $OUT/setup1.log 2>&1; echo "setup rc=$? in $(since $t) s"
t=$(now); $B/current smoke --install $S1 --output /tmp/smoke1 > $OUT/smoke1.log 2>&1; echo "smoke rc=$? in $(since $t) s"
cat $OUT/smoke1.log; cp /tmp/smoke1/receipt.json $OUT/smoke.json
$SYS -c "import json,sys; d=json.load(open(sys.argv[1])); print('passed', d['passed'], 'proves', d['proves'], 'level', d['level']); [print(' ', c['name'], c['status'], '|', c['summary'][:150]) for c in d['checks']]" $OUT/smoke.json
if $SYS -c "import pytest" 2>/dev/null; then $SYS -m pytest -q -p no:cacheprovider -m gpu tests/test_checks_engine_fake.py 2>&1 | tail -5
else echo "no pytest in the image: GPU tier not run"; fi
