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

from ..core.cachekey import without_key
from ..core.cpus import available_cpus

# runs in the stack's Python (-I -S: nothing of the stack is imported); stdin: [[pyc, source], ...];
# stdout: [[pyc, why], ...] for each that Python would load and that is not its source's code
SCRIPT = r"""
import importlib.util, json, marshal, os, sys
tag, out = sys.implementation.cache_tag, []
for pyc, src in json.load(sys.stdin):
    try:
        parts = os.path.basename(pyc)[:-4].split(".")
        if len(parts) not in (2, 3) or parts[1] != tag or (len(parts) == 3 and parts[2] not in ("opt-1", "opt-2")):
            continue                              # a name Python never loads for this source
        opt = int(parts[2][4:]) if len(parts) == 3 else 0
        data = open(pyc, "rb").read()
        source = open(src, "rb").read()
        st = os.stat(src)
    except (OSError, ValueError):
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
    try:
        loaded = marshal.loads(data[16:])
    except Exception as exc:
        out.append([pyc, "unreadable bytecode (%s)" % type(exc).__name__])
        continue
    try:        # under the name Python imported it by (a linked folder, a relative path): only tracebacks read it
        name = loaded.co_filename if isinstance(getattr(loaded, "co_filename", None), str) else src
        compiled = compile(source, name, "exec", dont_inherit=True, optimize=opt)
    except Exception:
        compiled = None
    # the bytes as import writes them, else the code objects (NaN constants are never equal as objects)
    if compiled is not None and marshal.dumps(compiled) == data[16:]:
        continue
    if loaded != compiled:
        out.append([pyc, "not the code of " + os.path.basename(src)])
json.dump(out, sys.stdout)
"""


def candidates(roots: Iterable[Path]) -> list[tuple[Path, Path]]:
    """(pyc, its source) for every ``__pycache__/*.pyc`` under ``roots`` whose source ``<name>.py`` exists, a
    ``__pycache__`` that is a link to a folder included (Python reads through it); git directories passed over."""
    out: list[tuple[Path, Path]] = []
    for root in roots:
        for top, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = [d for d in dirs if d != ".git"]
            here = Path(top)
            if here.name == "__pycache__":
                out += _pairs(here, files)
            elif "__pycache__" in dirs and (here / "__pycache__").is_symlink():
                linked = here / "__pycache__"
                try:
                    out += _pairs(linked, [f.name for f in linked.iterdir() if f.is_file()])
                except OSError:
                    continue
    return sorted(set(out))


def source_of(pyc: Path) -> Path:
    """The ``<name>.py`` that ``__pycache__/<name>.<tag>[.opt-N].pyc`` is the bytecode of (beside its folder)."""
    return pyc.parent.parent / f"{pyc.name.split('.', 1)[0]}.py"


def _pairs(cache: Path, files: Iterable[str]) -> list[tuple[Path, Path]]:
    pycs = [cache / name for name in files if name.endswith(".pyc")]
    return [(pyc, source_of(pyc)) for pyc in pycs if source_of(pyc).is_file()]


def forged(python: Path, pairs: list[tuple[Path, Path]], workers: int | None = None) -> list[tuple[Path, str]] | str:
    """(pyc, why) for each pyc the stack's Python would load that is not its source's code; a str: the stack's
    Python could not say (why).  The pairs are compared in up to ``workers`` processes (the CPU count); one
    that differs is compared again as Python writes bytecode under ``-X no_debug_ranges`` (no column table)."""
    if not pairs:
        return []
    n = max(1, min(workers or available_cpus(), 16, len(pairs) // 200 + 1))
    with ThreadPoolExecutor(max_workers=n) as pool:
        parts = list(pool.map(lambda i: _compare(python, pairs[i::n]), range(n)))
    problems = [p for p in parts if isinstance(p, str)]
    if problems:
        return problems[0]
    found = sorted(f for part in parts if not isinstance(part, str) for f in part)
    other = [f for f in found if f[1].startswith("not the code of")]
    if other:
        source = dict(pairs)
        again = _compare(python, [(p, source[p]) for p, _ in other], ("-X", "no_debug_ranges"))
        if isinstance(again, str):
            return again
        still = {p for p, _ in again}
        found = [f for f in found if not f[1].startswith("not the code of") or f[0] in still]
    return found


def _compare(python: Path, pairs: list[tuple[Path, Path]], flags: tuple[str, ...] = ()) -> list[tuple[Path, str]] | str:
    try:
        done = subprocess.run([str(python), "-I", "-S", "-B", *flags, "-c", SCRIPT],
                              input=json.dumps([[str(p), str(s)] for p, s in pairs]),
                              capture_output=True, text=True, timeout=900, check=False, env=without_key())
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
