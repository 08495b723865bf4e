"""Benchmark (not a test): the real-tier install of upstream vLLM made from its sdist, per version (issue 18).

For vLLM 0.24.0 (recipe ``vllm-0.24.0-pr3812``, its vLLM fork alone) and 0.18.0
(``tests/fixtures/recipes/vllm-0.18.0-sdist.toml``), on a fresh stack each run, the steps as
``tests/test_vllm_sdist_real.py`` runs them, each timed:

* ``fetch``    the sdist (cached) materialised as the fork's repository (cached after the first run), mirror, clone;
* ``env``      Python 3.12, PyPI's torch, the build requirements and requirements/common.txt (uv cache warm);
* ``wheel``    the base wheel (cached) verified, and proved the sdist's release file by file;
* ``install``  the precompiled editable install (real setup.py, real uv, no network) and every guard.

    uv run --group test python bench/vllm_sdist_install.py [--versions 0.24.0 0.18.0] [--repeat 1]

Caches: ``$OCTOBER_REAL_CACHE`` or ``~/.cache/october-real-tier`` (the real tier's); the first run downloads the
sdists, wheels and packages into it.  The machine is shared: the best of ``--repeat`` runs is printed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from october.installer.steps.fetch import FetchStep  # noqa: E402
from october.installer.steps.install import InstallStep  # noqa: E402
from october.installer.steps.wheel import WheelStep  # noqa: E402
from tests.conftest import real_cache_dir  # noqa: E402
from tests.fixtures import stack_forks as sf  # noqa: E402
from tests.test_install_real import _python312  # noqa: E402
from tests.test_vllm_sdist_real import _make_env, _recipe  # noqa: E402


def one(version: str, work: Path) -> dict[str, float]:
    python = _python312()
    probe = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], capture_output=True,
                           text=True, check=True).stdout.strip()
    recipe = _recipe(version, probe, "https://pypi.org/simple")
    stack = work / f"stack-{version}"
    ctx = sf.context(stack, recipe, real_cache_dir())
    times: dict[str, float] = {}
    t = time.monotonic()
    fetch = FetchStep().run(ctx)
    times["fetch"] = time.monotonic() - t
    ctx.done["fetch"] = sf.record(fetch)
    t = time.monotonic()
    _make_env(stack, recipe, Path(fetch.forks["vllm"].path))
    times["env"] = time.monotonic() - t
    t = time.monotonic()
    ctx.done["wheel"] = sf.record(WheelStep().run(ctx))
    times["wheel"] = time.monotonic() - t
    t = time.monotonic()
    InstallStep().run(ctx)
    times["install"] = time.monotonic() - t
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", nargs="+", default=["0.24.0", "0.18.0"])
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    for version in args.versions:
        runs = []
        for _ in range(args.repeat):
            work = Path(tempfile.mkdtemp(prefix="october-sdist-bench-"))
            try:
                runs.append(one(version, work))
            finally:
                shutil.rmtree(work, ignore_errors=True)
        best = {k: min(r[k] for r in runs) for k in runs[0]}
        print(f"vLLM {version}: " + "  ".join(f"{k} {v:.1f} s" for k, v in best.items())
              + f"  (best of {len(runs)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
