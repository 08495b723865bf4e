"""Replace machine paths in receipts and locks with placeholders before committing them as examples.

    python bench/scrub_paths.py OUT_DIR FILE... -- OLD=NEW ...

Each OLD=NEW pair is applied to every file's text (longest OLD first); the result is written under
OUT_DIR with the same file name.  JSON files are re-read after scrubbing to prove they still parse.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    sep = argv.index("--")
    out, files, pairs = Path(argv[0]), argv[1:sep], [p.split("=", 1) for p in argv[sep + 1:]]
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        text = Path(f).read_text(encoding="utf-8")
        for old, new in sorted(pairs, key=lambda p: -len(p[0])):
            text = text.replace(old, new)
        target = out / Path(f).name
        target.write_text(text, encoding="utf-8")
        if target.suffix == ".json":
            json.loads(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
