"""Facts about a stack venv read from its files (no process started), the recipe's Python rule, and the
``--locked`` install of every index package from its locked file."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import CommandFailed, EnvError, LockError
from ..core.redact import redact_url
from ..core.runner import Runner

if TYPE_CHECKING:
    from .uvcmd import StackUv


def site_packages(env: Path) -> list[str]:
    return sorted(str(p) for p in env.glob("lib/python*/site-packages"))


def pyvenv_version(env: Path) -> str | None:
    try:
        text = (env / "pyvenv.cfg").read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    m = re.search(r"^version(?:_info)?\s*=\s*([0-9][^\s]*)", text, re.M)
    return m.group(1) if m else None


def dist_info_present(env: Path, name: str, version: str) -> bool:
    return any((sp / f"{name}-{version}.dist-info").is_dir() for sp in env.glob("lib/python*/site-packages"))


def python_matches(recipe_python: str, got: str | None) -> bool:
    """"3.12" accepts any 3.12.x (a system interpreter's patch level is the site's); "3.12.11" is exact."""
    return got is not None and (got == recipe_python or got.startswith(recipe_python + "."))


def require_python(recipe_python: str, got: str | None) -> None:
    """The venv just made has the recipe's Python (``got``: its pyvenv.cfg version)."""
    if not python_matches(recipe_python, got):
        raise EnvError("the stack env has the wrong Python", expected=f"Python {recipe_python} (recipe python.version)",
                       found=f"Python {got}", fix=f"install Python {recipe_python} (e.g. `uv python install {recipe_python}`) and re-run")


def require_torch(env: Path, version: str, index_url: str | None) -> None:
    """The pinned torch is what the env holds after installing it (``torch==2.10.0`` also takes a local build
    such as ``2.10.0+cu128``: PEP 440; the recipe must then pin that build by its full version)."""
    if dist_info_present(env, "torch", version):
        return
    held = sorted(info.name[len("torch-"):-len(".dist-info")] for site in env.glob("lib/python*/site-packages")
                  for info in site.glob("torch-*.dist-info"))
    where = f"the torch index ({redact_url(index_url)})" if index_url else "the recipe's [sources]"
    local = [v for v in held if v.partition("+")[0] == version and "+" in v]
    raise EnvError("torch is not the pinned build after installing it",
                   expected=f"torch {version}", found=f"torch {', '.join(held)}" if held else "no torch",
                   fix=(f"pin the build the sources serve: [torch] version = \"{local[0]}\" in the recipe (a pin "
                        "without its local tag takes any build of that version)") if local
                   else f"check that {where} serves torch {version}")


def torch_cuda(version_py: Path) -> str | None:
    """``cuda`` of torch's generated ``version.py`` (read, not run); "unreadable" when it cannot be read."""
    import ast

    try:
        tree = ast.parse(version_py.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return "unreadable"
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "cuda" and isinstance(node.value, ast.Constant):
            return None if node.value.value is None else str(node.value.value)
    return None


def uv_venv_files(run: Callable[[list[str]], object], python: str) -> dict[str, str]:
    """What ``uv venv`` itself writes into a new venv on ``python`` (relative path -> sha256), made in a throwaway
    folder by ``run``: uv 0.12 writes ``_virtualenv.pth`` and ``_virtualenv.py``, which no RECORD owns."""
    import tempfile

    from ..core.hashing import sha256_file
    from .uvcmd import uv_exe

    with tempfile.TemporaryDirectory(prefix="october-venv-scaffold-") as tmp:
        venv = Path(tmp) / "env"
        run([uv_exe(), "venv", "--quiet", "--python", python, str(venv)])
        return {p.relative_to(venv).as_posix(): sha256_file(p) for p in venv.rglob("*")
                if p.is_file() and not p.is_symlink()}


# What uv 0.12 writes into each venv's site-packages beside the files RECORDs own, by sha256: the same bytes from
# uv 0.12.11, 0.12.17 and 0.12.24 (PyPI's wheels, `uv venv --python 3.11`); uv 0.13 writes neither.  A stack set
# up before the install step recorded them (``venv_files``) and verified by a tool whose uv is 0.13 holds them to these.
UV_012_SITE_FILES = {
    "_virtualenv.pth": "69ac3d8f27e679c81b94ab30b3b56e9cd138219b1ba94a1fa3606d5a76a1433d",
    "_virtualenv.py": "cfb3db86aaa53bb62b5ff764970bec2d71c9228590a0ebec57f6ec926cc0bf1a",
}


def earlier_uv_files(env: Path) -> dict[str, str]:
    """:data:`UV_012_SITE_FILES` in each of ``env``'s site-packages, as :func:`uv_venv_files` names them."""
    return {f"{site.relative_to(env).as_posix()}/{name}": digest
            for site in env.glob("lib/python*/site-packages") for name, digest in UV_012_SITE_FILES.items()}


def uv_own(env: Path, files: Sequence[Path], own: Mapping[str, str]) -> dict[str, str]:
    """Of ``files`` in ``env`` (none a RECORD owns), those that are byte for byte what ``uv venv`` writes itself
    (``own``: :func:`uv_venv_files`): relative path -> sha256.  A link or an unreadable file is none of them."""
    from ..core.hashing import sha256_or_none

    return {rel: want for p in files if (want := own.get(rel := p.relative_to(env).as_posix())) is not None
            and want == sha256_or_none(p)}


def same_cuda_major(built: object, wanted: str) -> bool:
    """Does a torch built for CUDA ``built`` run JIT kernels built with the ``wanted`` toolkit ([cuda] version)?
    The same major does (CUDA's minor version compatibility): PyPI's cu128 torch under [cuda] 12.9."""
    return isinstance(built, str) and built.partition(".")[0] == wanted.partition(".")[0]


def require_torch_cuda(env: Path, version: str, cuda: str | None) -> None:
    """The env's torch is built for the CUDA major of the recipe's ``[cuda]`` (its JIT kernels are built with
    that toolkit): PyPI's torch 2.10.0 is the CUDA 12.8 build, which a [cuda] 12.9 stack runs; a 12.6 or a
    CPU build under [cuda] 13.0 does not.  A torch without ``version.py`` (none a real wheel lacks) says nothing."""
    if cuda is None:
        return
    found = [v for site in env.glob("lib/python*/site-packages") for v in [site / "torch" / "version.py"] if v.is_file()]
    if not found:
        return
    built = torch_cuda(found[0])
    if same_cuda_major(built, cuda):
        return
    raise EnvError("torch is built for another CUDA than the recipe's [cuda]",
                   expected=f"torch {version} built for CUDA {cuda.partition('.')[0]}.x ([cuda] version = \"{cuda}\": "
                            "the JIT kernels are built with that toolkit)",
                   found=f"a build for CUDA {built}" if built is not None else "a CPU build (no CUDA)",
                   fix=f"pin a torch build for CUDA {cuda.partition('.')[0]}.x in [torch] (its version's +cuXYZ tag, or the "
                       "index that serves it), or set [cuda] to the CUDA toolkit that torch was built for")


def locked_lines(packages: Mapping[str, str], hashes: Mapping[str, Sequence[str]], lock: Path) -> list[str]:
    """``--locked``: a hash-pinned requirement line per locked index package; every one must have a hash."""
    lines = [f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in hashes[name])
             for name, version in sorted(packages.items()) if hashes.get(name)]
    missing = sorted(n for n in packages if not hashes.get(n))
    if missing:
        raise LockError(f"the lock {lock} gives no file hash for {', '.join(missing)}",
                        expected="a sha256 for every locked wheel", found="entries without hashes",
                        fix="re-create the lock with october_setup (without --locked)")
    return lines


def install_locked(uv: "StackUv", runner: Runner, step: str, requirements: Path, lock: Path) -> None:
    """Every locked file from ``requirements`` (see :func:`locked_lines`), hashes enforced, no
    dependencies: uv refuses any other bytes."""
    try:
        uv.pip_install(runner, step, ["--require-hashes", "--no-deps", "-r", str(requirements)], torch_index=True)
    except CommandFailed as exc:
        raise LockError(f"the files the recipe's sources serve do not match the lock {lock}",
                        expected="every locked package at its locked version and sha256",
                        found=refusal(exc.tail),
                        fix=f"restore the sources the lock was made from, or re-lock deliberately (the stack's env "
                            "was made anew for this lock and is not complete: a re-run without --locked, with the "
                            f"options it was set up with, makes it again); log: {exc.log_path}") from None


HASH_MISMATCH = re.compile(r"Hash mismatch for `(?P<what>[^`]+)`\s*Expected:\s*(?P<want>(?:\S+:[0-9a-f]+\s*)+?)"
                           r"\s*Computed:\s*(?P<got>\S+:[0-9a-f]+)")


def refusal(tail: str) -> str:
    """What uv refused, from its output: a hash mismatch as package, the lock's hash and the served one; else
    uv's own last line."""
    if m := HASH_MISMATCH.search(tail):
        want = " or ".join(m["want"].split())
        return f"{m['what']}: the lock has {want}, the sources serve a file with {m['got']}"
    lines = tail.strip().splitlines()
    return f"uv refused ({lines[-1].strip() if lines else 'see log'})"


# what `uv venv --python X` says when it has no such Python and cannot fetch one (uv 0.12-0.13)
NO_PYTHON = ("No interpreter found", "No download found for request", "Failed to inspect Python interpreter",
             "Failed to download", "not found in managed installations")


def missing_python(output: str) -> str | None:
    """uv's ``error:`` line when ``uv venv`` failed for want of the Python asked for, else None (a permission,
    a path that is a file: other failures, whose own message stands)."""
    for line in output.splitlines():
        text = line.strip()
        if text.startswith("error:") and any(p in text for p in NO_PYTHON):
            return text
        if text.startswith("cause: Failed to download") and "cpython-" in text:     # a managed Python, offline
            return text
    return None
