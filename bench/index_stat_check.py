"""Benchmark helper (not a test): how many of a git clone's index entries no longer match their file's
stat data (each one is hashed again by every ``git status`` a no-op runs, since no-op checks never
rewrite the index), and whether this filesystem keeps sub-second timestamps.

    python bench/index_stat_check.py CLONE [CLONE ...]
"""

from __future__ import annotations

import os
import subprocess
import sys


def mismatched(clone: str) -> tuple[int, int, list[str]]:
    out = subprocess.run(["git", "-C", clone, "ls-files", "--debug"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    bad: list[str] = []
    total, name, ctime, mtime = 0, "", "", ""
    for ln in out:
        if not ln.startswith("  "):
            name = ln
            continue
        key, _, rest = ln.strip().partition(" ")
        if key == "ctime:":
            ctime = rest.strip()
        elif key == "mtime:":
            mtime = rest.strip()
        elif key == "size:":
            path = os.path.join(clone, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            total += 1
            st = os.lstat(path)
            c, m = (int(a) * 10**9 + int(b) for a, b in (ctime.split(":"), mtime.split(":")))
            size = int(rest.split()[0])
            if (st.st_ctime_ns, st.st_mtime_ns, st.st_size) != (c, m, size):
                bad.append(name)
    return total, len(bad), bad[:5]


def main(argv: list[str]) -> int:
    for clone in argv:
        total, n, first = mismatched(clone)
        sample = os.lstat(os.path.join(clone, ".git")).st_mtime_ns
        print(f"{clone}: {n} of {total} index entries differ from the file's stat data {first}; "
              f"sub-second timestamps: {'yes' if sample % 10**9 else 'no (or a whole second)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
