"""Ask the kernel to read a site-provided torch's shared libraries into the page cache while the run
goes on (``posix_fadvise(POSIX_FADV_WILLNEED)``: the reads are queued and happen in the background).

On a fresh node the first ``import torch`` (the env step's probe) spends most of its 5-6 s reading
torch's and the CUDA wheels' libraries from disk; warm, the same import takes 1.5-2 s (H200,
``bench/h200_trust_speed.sh``).  Preflight locates the system torch without importing it, so it
knows the files while fetch -- git, a few seconds -- still runs.  Nothing is read into this process
and nothing is decided from it: a filesystem or platform without the call is skipped silently.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping


def torch_libraries(torch_facts: Mapping[str, Any]) -> list[Path]:
    """torch's own ``lib/`` and the ``nvidia/*/lib`` directories beside it (what ``import torch``
    loads), from the located torch's ``__init__.py``."""
    file = torch_facts.get("file")
    if not isinstance(file, str) or not file:
        return []
    torch_dir = Path(file).parent
    dirs = [torch_dir / "lib", *sorted((torch_dir.parent / "nvidia").glob("*/lib"))]
    found: list[Path] = []
    for d in dirs:
        try:
            found += sorted(p for p in d.iterdir() if ".so" in p.name and p.is_file())
        except OSError:
            continue
    return found


def advise(paths: Iterable[Path]) -> int:
    """WILLNEED for each file; -> bytes asked for.  Errors (no such call, a vanished file) are skipped."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is None:
        return 0
    asked = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            asked += os.fstat(fd).st_size
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked


def start(torch_facts: Mapping[str, Any] | None) -> threading.Thread | None:
    """Queue the readahead from a daemon thread (the call itself can wait on a busy disk queue)."""
    if not torch_facts:
        return None
    libs = torch_libraries(torch_facts)
    if not libs:
        return None
    thread = threading.Thread(target=advise, args=(libs,), name="october-readahead", daemon=True)
    thread.start()
    return thread
