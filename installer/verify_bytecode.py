"""Bytecode Python would run instead of its source (``current verify``): a ``__pycache__/*.pyc`` in the env
or a fork clone whose header Python accepts for its ``.py`` (the source's mtime and size, or a hash-based
pyc it does not check, or one whose source hash matches) is loaded without the source being read, so a
forged one runs other code under a file whose bytes verify (and git) hold to be right.  Each one Python
would load is compared with what its source compiles to, in the stack's own Python (the bytecode format is
its version's); one that differs is named.  Bytecode Python would not load (another version's, a stale one)
is compiled again from its source when imported, so it is not read.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

# runs in the stack's Python (-I -S: nothing of the stack is imported); stdin: [[pyc, source], ...];
# stdout: [[pyc, why], ...] for each that Python would load and that is not its source's code
SCRIPT = r"""
import importlib.util, json, marshal, os, sys
out = []
for pyc, src in json.load(sys.stdin):
    try:
        data = open(pyc, "rb").read()
        source = open(src, "rb").read()
        st = os.stat(src)
    except OSError:
        continue
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        continue                                  # another version's: Python compiles the source again
    flags = int.from_bytes(data[4:8], "little")
    if flags & 1:                                 # hash-based: checked ones must match the source's hash
        if flags & 2 and data[8:16] != importlib.util.source_hash(source):
            continue
    elif (int.from_bytes(data[8:12], "little") != int(st.st_mtime) & 0xFFFFFFFF
          or int.from_bytes(data[12:16], "little") != st.st_size & 0xFFFFFFFF):
        continue                                  # stale: Python compiles the source again
    name = os.path.basename(pyc)
    opt = int(name.split(".opt-")[1].split(".")[0]) if ".opt-" in name else 0
    try:
        loaded = marshal.loads(data[16:])
    except Exception as exc:
        out.append([pyc, "unreadable bytecode (%s)" % type(exc).__name__])
        continue
    try:
        compiled = compile(source, src, "exec", dont_inherit=True, optimize=opt)
    except Exception:
        compiled = None
    if loaded != compiled:
        out.append([pyc, "not the code of " + os.path.basename(src)])
json.dump(out, sys.stdout)
"""


def candidates(roots: Iterable[Path]) -> list[tuple[Path, Path]]:
    """(pyc, its source) for every ``__pycache__/<name>.<tag>[.opt-N].pyc`` under ``roots`` whose ``<name>.py``
    exists (git directories passed over)."""
    out: list[tuple[Path, Path]] = []
    for root in roots:
        for top, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = [d for d in dirs if d != ".git"]
            here = Path(top)
            if here.name != "__pycache__":
                continue
            for name in files:
                if name.endswith(".pyc"):
                    source = here.parent / f"{name.split('.', 1)[0]}.py"
                    if source.is_file():
                        out.append((here / name, source))
    return sorted(out)


def forged(python: Path, pairs: list[tuple[Path, Path]], workers: int | None = None) -> list[tuple[Path, str]] | str:
    """(pyc, why) for each pyc the stack's Python would load that is not its source's code; a str: the stack's
    Python could not say (why).  The pairs are compared in up to ``workers`` processes (the CPU count)."""
    if not pairs:
        return []
    n = max(1, min(workers or os.cpu_count() or 1, 16, len(pairs) // 200 + 1))
    with ThreadPoolExecutor(max_workers=n) as pool:
        parts = list(pool.map(lambda i: _compare(python, pairs[i::n]), range(n)))
    problems = [p for p in parts if isinstance(p, str)]
    return problems[0] if problems else sorted(f for part in parts if not isinstance(part, str) for f in part)


def _compare(python: Path, pairs: list[tuple[Path, Path]]) -> list[tuple[Path, str]] | str:
    try:
        done = subprocess.run([str(python), "-I", "-S", "-B", "-c", SCRIPT],
                              input=json.dumps([[str(p), str(s)] for p, s in pairs]),
                              capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{python} could not run ({exc})"
    try:
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, list):
        tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"{python} could not compare them ({tail})"
    return [(Path(p), str(why)) for p, why in found]
