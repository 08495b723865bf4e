"""Benchmark helper (not a test): how many of a git clone's index entries git must hash again on every
``git status`` a no-op runs (no-op checks never rewrite the index): those whose stat data no longer
matches the file, and the "racily clean" ones, whose mtime is not older than the index itself; and
whether this filesystem keeps sub-second timestamps.

    python bench/index_stat_check.py CLONE [CLONE ...]
"""

from __future__ import annotations

import os
import subprocess
import sys


def mismatched(clone: str) -> tuple[int, int, list[str], int]:
    out = subprocess.run(["git", "-C", clone, "ls-files", "--debug"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    git_dir = subprocess.run(["git", "-C", clone, "rev-parse", "--absolute-git-dir"], capture_output=True,
                             text=True, check=True).stdout.strip()
    index_ns = os.stat(os.path.join(git_dir, "index")).st_mtime_ns
    bad: list[str] = []
    total, racy, name, ctime, mtime = 0, 0, "", "", ""
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
            racy += m >= index_ns
    return total, len(bad), bad[:5], racy


def main(argv: list[str]) -> int:
    for clone in argv:
        total, n, first, racy = mismatched(clone)
        sample = os.lstat(os.path.join(clone, ".git")).st_mtime_ns
        print(f"{clone}: {n} of {total} index entries differ from the file's stat data {first}, {racy} racily clean; "
              f"sub-second timestamps: {'yes' if sample % 10**9 else 'no (or a whole second)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
