"""Kit size of each shipped recipe, computed rather than downloaded (a full kit is several GB).

    uv run python bench/kit_size.py [--real-forks DIR] [--json OUT]

For each recipes/*.toml it adds up what ``october_setup kit`` would write:

- wheels: from the committed ``locks/<recipe>.pylock.toml`` when there is one, else from
  ``uv pip compile`` (PyPI, Python of the recipe, x86_64 manylinux_2_35) of what the env gets:
  torch (PyPI's build of the pinned version: the PyTorch index is not reachable here), the
  build requirements and the base wheel's ``name==version`` (its dependencies are the vLLM fork's,
  which installs with deps on the same base).  The files are chosen by the kit's own selection
  (:func:`october.installer.kit.wheels.pick`) and summed from the sizes the lock records.
- base wheel: its Content-Length (HEAD on the recipe URL).
- git: measured by building the kit's repositories with the kit's own code from
  ``../shared/real-forks`` where a copy of the pinned commit exists (FlashInfer 2f3f0f6d + CCCL);
  "n/a" where no copy is reachable (the vLLM forks, the older FlashInfer pin).

Prints one table; ``--json`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from october.installer.core.envoverlay import environ_overlay  # noqa: E402
from october.installer.core.runner import Runner  # noqa: E402
from october.installer.kit.gitcopy import KitRepos  # noqa: E402
from october.installer.kit.wheels import WheelWant, from_lock, torch_from_system  # noqa: E402
from october.installer.recipe import Recipe, load_recipe  # noqa: E402
from october.installer.pyenv.uvcmd import uv_exe  # noqa: E402

MB = 1e6


def _sizes(lock: Path) -> dict[str, int]:
    import tomllib

    out: dict[str, int] = {}
    with open(lock, "rb") as fh:
        for p in tomllib.load(fh).get("packages", []):
            for f in (p.get("wheels") or []) + ([p["sdist"]] if p.get("sdist") else []):
                name = f.get("name") or str(f.get("url", "")).rsplit("/", 1)[-1]
                if f.get("size") is not None:
                    out[name] = int(f["size"])
    return out


def wheel_lock(recipe: Recipe, work: Path) -> tuple[Path, str]:
    committed = ROOT / "locks" / f"{recipe.name}.pylock.toml"
    if committed.is_file():
        return committed, f"committed lock {committed.relative_to(ROOT)}"
    torch = recipe.torch.version.split("+", 1)[0]
    reqs = ([] if torch_from_system(recipe) else [f"torch=={torch}"]) + list(recipe.build_requirements)
    if recipe.wheel is not None:
        reqs.append(f"{recipe.wheel.name}=={recipe.wheel.version}")
    if not reqs:
        empty = work / f"pylock.{recipe.name.replace('.', '_')}-empty.toml"
        empty.write_text('lock-version = "1.0"\ncreated-by = "bench"\npackages = []\n')
        return empty, "nothing to resolve"
    req = work / f"{recipe.name}.in"
    req.write_text("\n".join(reqs) + "\n")
    out = work / f"pylock.{recipe.name.replace('.', '_')}.toml"
    subprocess.run([uv_exe(), "pip", "compile", str(req), "--no-header", "--quiet", "--python-version", recipe.python,
                    "--python-platform", "x86_64-manylinux_2_35", "-o", str(out)], check=True)
    return out, f"uv pip compile ({', '.join(reqs)}) on PyPI"


def base_size(recipe: Recipe) -> int | None:
    if recipe.wheel is None:
        return None
    r = httpx.head(recipe.wheel.url, follow_redirects=True, timeout=60)
    r.raise_for_status()
    return int(r.headers["content-length"])


def repo_sizes(recipe: Recipe, forks_dir: Path | None, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if forks_dir is None:
        return {f.name: "n/a (no --real-forks)" for f in recipe.forks}
    mirror = work / "mirror"
    if not mirror.exists():
        for tar in sorted(forks_dir.glob("*.tar")):
            with tarfile.open(tar) as tf:
                tf.extractall(mirror, filter="data")
    fi = mirror / "github.com" / "flashinfer-ai" / "flashinfer.git"
    env = {"GIT_CONFIG_COUNT": "2",
           "GIT_CONFIG_KEY_0": f"url.{fi.as_uri()}.insteadOf", "GIT_CONFIG_VALUE_0": "https://github.com/mcgrof/flashinfer.git",
           "GIT_CONFIG_KEY_1": f"url.{(mirror / 'github.com').as_uri()}/.insteadOf", "GIT_CONFIG_VALUE_1": "https://github.com/"}
    with environ_overlay(env):
        for fork in recipe.forks:
            kit = work / f"kit-{recipe.name}-{fork.name}"
            try:
                KitRepos(Runner(work / "logs"), "kit", work / "cache", kit, lambda _: None).add_fork(fork)
            except Exception as exc:  # noqa: BLE001 - a bench reports what it cannot measure
                out[fork.name] = f"n/a ({type(exc).__name__}: no reachable copy of the pin)"
                continue
            out[fork.name] = sum(p.stat().st_size for p in kit.rglob("*") if p.is_file())
    return out


def measure(recipe: Recipe, forks_dir: Path | None, work: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    lock, how = wheel_lock(recipe, work)
    # the base wheel is counted once, as itself (the compile above names it as name==version)
    wants: list[WheelWant] = from_lock(lock, recipe, skip=[recipe.wheel.name] if recipe.wheel else [])
    sizes = _sizes(lock)
    missing = [w.filename for w in wants if w.filename not in sizes]
    wheel_bytes = {w.filename: sizes.get(w.filename, 0) for w in wants}
    torch_bytes = sum(b for f, b in wheel_bytes.items() if f.startswith("torch-"))
    cuda_bytes = sum(b for f, b in wheel_bytes.items()
                     if f.startswith(("nvidia_", "triton-", "cuda_", "cuda-")))
    base = base_size(recipe)
    repos = repo_sizes(recipe, forks_dir, work)
    measured_repos = sum(v for v in repos.values() if isinstance(v, int))
    total = sum(wheel_bytes.values()) + (base or 0) + measured_repos
    largest = max(list(wheel_bytes.items()) + ([(recipe.wheel.filename, base)] if recipe.wheel and base else []),
                  key=lambda kv: kv[1])
    return {"recipe": recipe.name, "wheels_from": how, "wheels": len(wants), "wheel_bytes": sum(wheel_bytes.values()),
            "torch_bytes": torch_bytes, "cuda_runtime_bytes": cuda_bytes, "base_wheel_bytes": base,
            "repos": repos, "total_bytes": total, "total_without_torch_bytes": total - torch_bytes,
            "largest_file": {"name": largest[0], "bytes": largest[1]}, "sizes_missing": missing,
            "seconds": round(time.perf_counter() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real-forks", type=Path, default=Path("/work/shared/real-forks"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("recipes", nargs="*")
    args = ap.parse_args()
    names = args.recipes or sorted(p.stem for p in (ROOT / "recipes").glob("*.toml"))
    forks_dir = args.real_forks if args.real_forks and args.real_forks.is_dir() else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="kit-size-") as tmp:
        for name in names:
            rows.append(measure(load_recipe(name), forks_dir, Path(tmp)))
    for r in rows:
        repos = ", ".join(f"{k} {v / MB:.1f} MB" if isinstance(v, int) else f"{k} {v}" for k, v in r["repos"].items())
        print(f"{r['recipe']}: {r['total_bytes'] / MB:,.0f} MB total = {r['wheels']} wheels {r['wheel_bytes'] / MB:,.0f} MB "
              f"(torch {r['torch_bytes'] / MB:,.0f} MB, nvidia/triton/cuda {r['cuda_runtime_bytes'] / MB:,.0f} MB) + base wheel "
              f"{(r['base_wheel_bytes'] or 0) / MB:,.0f} MB + git [{repos}]; without torch "
              f"{r['total_without_torch_bytes'] / MB:,.0f} MB; largest file {r['largest_file']['name']} "
              f"{r['largest_file']['bytes'] / MB:,.0f} MB; wheels from {r['wheels_from']}"
              + (f"; {len(r['sizes_missing'])} sizes unknown" if r['sizes_missing'] else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
