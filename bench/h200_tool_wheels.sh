#!/bin/bash
# The tool's own cp312 wheels for an offline machine (the lent H200): the october wheel, uv, and every
# dependency of the tool (not the test group), plus req-slim.txt naming them; bench/h200_flashinfer_stack.sh
# installs the tool from these with --no-index.
#   bash bench/h200_tool_wheels.sh OUT_DIR
set -euo pipefail
W=$(realpath -m "$1"); rm -rf "$W"; mkdir -p "$W"
uv build -q --wheel -o "$W"
uv export -q --no-dev --no-hashes --no-annotate --no-header --no-emit-project --format requirements-txt > "$W/req.txt"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$W" -r "$W/req.txt"
{ cat "$W/req.txt"; ls "$W"/october-*.whl | xargs -n1 basename | sed 's/-.*//'; } > "$W/req-slim.txt"
rm "$W/req.txt"
du -sh "$W"
