"""Benchmark (not a test): where the JIT builder's time goes, phase by phase, in a set-up stack's own env.

Runs what ``october.checks.jit_build`` runs (the same functions), each phase timed, in a new FlashInfer
workspace so every module is built again: the interpreter's start, ``import torch``, ``import flashinfer``,
the fork check, the specs' generation and the parallel ninja builds (each module's own end).  The JIT step's
cold time on the H200 (issue 20: a cold FlashInfer-only stack under 45 s) is this builder's.

    STACK/env/bin/python -X pycache_prefix=/tmp/jp -P -s bench/jit_phases.py --stack STACK [--arch 9.0a]

Prints one line per phase with seconds since the interpreter started; nothing is written in the stack.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

T0 = time.perf_counter()
EPOCH0 = time.time()            # the shell's `date +%s.%N` before the start, less this: the interpreter's start


def mark(what: str) -> None:
    print(f"{time.perf_counter() - T0:8.2f} s  {what}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--stack", type=Path, required=True)
    ap.add_argument("--arch", default="9.0a", help="FLASHINFER_CUDA_ARCH_LIST")
    ap.add_argument("--tool", type=Path, default=Path(__file__).resolve().parents[1],
                    help="a checkout holding october/ (for october.checks.jit_build)")
    args = ap.parse_args()
    launched = os.environ.get("JIT_PHASES_LAUNCHED")      # `date +%s.%N` just before the interpreter started
    if launched:
        print(f"{EPOCH0 - float(launched):8.2f} s  interpreter start (before the first line)")
    work = Path(tempfile.mkdtemp(prefix="jit-phases-"))
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(work)
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = args.arch
    sys.path.insert(0, str(args.tool))
    from october.checks import jit_build  # stdlib only

    used = json.loads((args.stack / ".state" / "recipe-used.json").read_text())
    mark(f"start (recipe {used.get('path', '?')})")
    import torch  # noqa: F401
    mark(f"import torch {torch.__version__}")
    import flashinfer
    mark(f"import flashinfer {flashinfer.__version__}")
    import tomllib

    recipe = tomllib.loads(Path(used["path"]).read_text())
    modules = [{"id": f"m{i}", "kind": m["kind"], "q": m["q"], "k": m["k"], "v": m["v"], "o": m["o"],
                "head_dim": m["head_dim"], "posenc": m.get("posenc", 0), "backend": m.get("backend", "fa2")}
               for i, m in enumerate(recipe["jit"]["modules"])]
    problem = jit_build.asymmetric_problem(flashinfer, modules)
    mark(f"fork check: {problem or 'asymmetric'}")

    class Progress(jit_build.ModuleProgress):
        def built(self, uri: str) -> None:
            super().built(uri)
            mark(f"built {uri[:70]}")

    built = jit_build.build_with_flashinfer(flashinfer, modules, Progress(len(modules), out=open(os.devnull, "w")))
    mark(f"all {len(built)} module(s) built in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
