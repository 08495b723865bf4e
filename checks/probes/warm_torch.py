"""Warm a site torch for its first import in a new stack env: ``PYTHON -X pycache_prefix=P -I warm_torch.py DIR [JOBS]``.

``DIR`` is the site torch's package.  Asks the kernel to read its shared libraries (``DIR/lib`` and the
``nvidia/*/lib`` folders beside it) ahead (``posix_fadvise`` WILLNEED: it returns at once, the reading goes on
in the kernel), then compiles every ``.py`` under ``DIR`` that has no bytecode of its own beside it into the
pycache prefix ``P``, in ``JOBS`` processes (default: the CPUs).  The env step's probe then imports torch from
bytecode this same run compiled (Python checks each file against its source, and compiles again what does not
match) instead of compiling a thousand modules one by one.  Prints one line ``OCTOBER_WARM {json}``: what it
did.  Never imported by the tool; stdlib only.
"""

import json
import os
import py_compile
import sys
import time

MARK = "OCTOBER_WARM "


def libraries(top):
    site = os.path.dirname(top)
    dirs = [os.path.join(top, "lib")]
    nvidia = os.path.join(site, "nvidia")
    if os.path.isdir(nvidia):
        dirs += [os.path.join(nvidia, name, "lib") for name in sorted(os.listdir(nvidia))]
    return [os.path.join(d, f) for d in dirs if os.path.isdir(d) for f in sorted(os.listdir(d)) if ".so" in f]


def read_ahead(paths):
    """-> bytes asked for; a file that cannot be opened is left to the import."""
    asked = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            asked += os.fstat(fd).st_size
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except (OSError, AttributeError):
            pass
        finally:
            os.close(fd)
    return asked


def sources(top, tag):
    """Every ``.py`` under ``top`` without its own ``__pycache__/NAME.TAG.pyc`` (a site that ships bytecode
    offers it to the prefix by other means)."""
    out = []
    for root, dirs, files in os.walk(top):
        own = set(os.listdir(os.path.join(root, "__pycache__"))) if "__pycache__" in dirs else set()
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out += [os.path.join(root, f) for f in files if f.endswith(".py") and f"{f[:-3]}.{tag}.pyc" not in own]
    return out


def compile_one(path):
    try:
        py_compile.compile(path, doraise=True)
        return 1
    except Exception:  # noqa: BLE001 - the import compiles it again, or says what is wrong with it
        return 0


def main():
    top = sys.argv[1]
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else len(os.sched_getaffinity(0))
    start = time.perf_counter()
    asked = read_ahead(libraries(top))
    todo = sources(top, sys.implementation.cache_tag) if sys.pycache_prefix and sys.implementation.cache_tag else []
    compiled = 0
    if todo:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max(1, jobs), mp_context=multiprocessing.get_context("fork")) as pool:
            compiled = sum(pool.map(compile_one, todo, chunksize=16))
    out = {"read_ahead_bytes": asked, "sources": len(todo), "compiled": compiled,
           "seconds": round(time.perf_counter() - start, 3)}
    sys.stdout.write(MARK + json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
