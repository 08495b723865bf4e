"""A site torch's own bytecode, and its interpreter's, offered to this run's pycache prefix.

Every stack-env Python the run starts to import torch runs with ``-X pycache_prefix=STACK/.state/pycache``
(:meth:`october.installer.core.paths.StackPaths.pycache_args`), so no run executes bytecode an earlier run
left in the stack.  Python then looks for bytecode in that prefix only, never beside the source, so the env
step's probe compiled again a site torch that ships its ``__pycache__`` (``pip install`` compiles it),
standard library and all.  :func:`seed` links the compiled modules of the site torch's package and of the
interpreter's standard library into the prefix, at the paths Python looks for them.  Python checks each
against its source (mtime and size) as it does beside the source; a stale one is compiled again and
replaces the link, never its target.  Only directories outside the stack are seeded: their bytecode is
the site's, as trusted as its sources and libraries, and is what a plain ``import torch`` there runs.

Measured on the H200 (``receipts/examples/h200-s20/``): with the site torch compiled as pip leaves it, the
probe's import 4.52 s -> 2.48 s (``bench/h200_site_bytecode.py``) and a cold setup 49.8 s -> 45.4 s
(``bench/h200_cold_ab.sh``, same host); the image's own torch, installed without bytecode, gains only the
standard library's (import 3.85 s -> 3.49 s, no change to the cold setup).
"""

from __future__ import annotations

import os
from pathlib import Path

LEFT_OUT = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "tkinter", "turtledemo",
                      "lib2to3", "ensurepip"})        # under the standard library: not what torch imports


def roots(torch_init: Path, stdlib: str | None) -> list[Path]:
    """The site torch's package (``torch_init`` is its ``__init__.py``, as its interpreter imports it) and the
    interpreter's standard library (``sysconfig.get_path("stdlib")`` there), when it is known."""
    return [torch_init.parent, *([Path(stdlib)] if stdlib else [])]


def seed(dirs: list[Path], cache_tag: str | None, prefix: Path, stack: Path) -> list[int]:
    """Link the ``*.CACHE_TAG.pyc`` (``sys.implementation.cache_tag`` of the interpreter that imports them,
    e.g. ``cpython-312``) of every ``__pycache__`` under each of ``dirs`` into ``prefix``; -> how many, for
    each.  Nothing from inside ``stack`` (a root inside it, or the stack inside a root), a root that is not
    there, another cache tag, or anything when the interpreter caches no bytecode (no tag).  It only saves
    time: a link that cannot be made (no symlinks there, no space, no permission) ends the seeding and the
    import compiles the rest, as it did before."""
    counts = [0] * len(dirs)
    if not cache_tag:
        return counts
    tag = f".{cache_tag}.pyc"
    own = stack.resolve()
    try:
        for i, top in enumerate(dirs):
            if not top.is_absolute() or not top.is_dir() or top.resolve().is_relative_to(own):
                continue
            holds_stack = own.is_relative_to(top.resolve())
            for dirpath, subdirs, files in os.walk(top):
                subdirs[:] = [d for d in subdirs if d not in LEFT_OUT
                              and not (holds_stack and Path(dirpath, d).resolve().is_relative_to(own))]
                if os.path.basename(dirpath) == "__pycache__":
                    counts[i] += _link(dirpath, [f for f in files if f.endswith(tag) and f.count(".") == 2], prefix)
    except OSError:
        pass
    return counts


def _link(pycache: str, names: list[str], prefix: Path) -> int:
    """``name.TAG.pyc`` (no opt-N) where cache_from_source looks under a prefix: PREFIX + the source's
    directory as imported (its leading separator dropped) + the name."""
    if not names:
        return 0
    dest = prefix / os.path.dirname(pycache).lstrip(os.sep)
    dest.mkdir(parents=True, exist_ok=True)
    linked = 0
    for name in names:
        try:
            os.symlink(os.path.join(pycache, name), dest / name)
            linked += 1
        except FileExistsError:
            pass
    return linked
