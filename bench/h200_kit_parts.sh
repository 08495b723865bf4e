#!/bin/bash
# A kit too big for one device call (64 MiB each) goes over in parts, one or two per call, into /tmp of a warm
# machine, each checked by sha256 on arrival; the last call joins them, checks the whole tar and unpacks it.
#   split (here):   bash bench/h200_kit_parts.sh split KIT_DIR PARTS_DIR      (55 MiB parts, SHA256SUMS, TAR.sha256)
#   take (device):  bash bench/h200_kit_parts.sh take PARTS_DIR               (copies what this call carried)
#   join (device):  bash bench/h200_kit_parts.sh join PARTS_DIR DEST          (DEST/<kit name>)
set -euo pipefail
STORE=/tmp/kitparts
case "$1" in
  split)
    rm -rf "$3"; mkdir -p "$3"
    tar -cf - -C "$(dirname "$2")" "$(basename "$2")" | split -b 55M - "$3/kit.tar.part-"
    (cd "$3" && sha256sum kit.tar.part-* > SHA256SUMS && cat kit.tar.part-* | sha256sum | cut -d' ' -f1 > TAR.sha256)
    ls -la "$3" ;;
  take)
    mkdir -p "$STORE"; cp "$2"/SHA256SUMS "$2"/TAR.sha256 "$STORE"/
    for p in "$2"/kit.tar.part-*; do cp "$p" "$STORE"/; done
    (cd "$STORE" && sha256sum -c --ignore-missing --quiet SHA256SUMS) && echo "parts here: $(ls $STORE | grep -c part-) of $(wc -l < $STORE/SHA256SUMS)" ;;
  join)
    (cd "$STORE" && sha256sum -c --quiet SHA256SUMS)
    got=$(cat "$STORE"/kit.tar.part-* | sha256sum | cut -d' ' -f1)
    [ "$got" = "$(cat "$STORE"/TAR.sha256)" ] || { echo "kit tar sha256 $got, expected $(cat "$STORE"/TAR.sha256)"; exit 1; }
    mkdir -p "$3"; cat "$STORE"/kit.tar.part-* | tar -xf - -C "$3"; echo "kit unpacked in $3 (tar sha256 $got)" ;;
  *) echo "usage: $0 split|take|join ..."; exit 2 ;;
esac
