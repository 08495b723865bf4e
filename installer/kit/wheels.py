"""The wheel half of a kit: which files an install of the recipe needs, and getting them.

The list comes from the committed lock ``locks/<recipe>.pylock.toml`` when there is one (the
files the stack env is locked to, with their sha256), else from ``uv pip compile`` of what the
install puts into the env (torch, the build requirements, the base wheel's and the forks'
dependencies), written as a PEP 751 lock so every file comes with its URL and hash.  Forks built
with build isolation also need their ``[build-system] requires``.  Torch is left out when the
recipe says the system provides it (:func:`torch_from_system`).  Of each package only the files
that install on the target (the recipe's CPython on Linux of the recipe's arch) are taken.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import unquote, urlsplit

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..core.errors import CommandFailed, KitError
from ..core.hashing import sha256_file
from ..core.redact import redact_url
from ..core.runner import Runner
from ..lock.pylock import read_lock
from ..pyenv.uvcmd import recipe_source_args, uv_exe
from ..recipe import Recipe
from ..wheels.download import download_wheel

GLIBC = (2, 35)        # the newest glibc a kit's wheels may need (manylinux_2_35: Ubuntu 22.04, RHEL 10)


@dataclass(frozen=True)
class WheelWant:
    package: str
    filename: str
    url: str               # http(s) or file:// where it is fetched from at kit time
    sha256: str | None
    role: str              # "base" | "lock" | "build"


def torch_from_system(recipe: Recipe) -> bool:
    """Whether torch comes from the system interpreter, not from the stack's sources (then the kit
    carries no torch wheel): the recipe's ``[torch] source = "system"`` (or ``--system-torch``)."""
    return recipe.torch.from_system


def target_tags(recipe: Recipe) -> list[Tag]:
    """Tags the stack's CPython installs on Linux/<arch> with glibc up to :data:`GLIBC`, best first:
    the interpreter's own ABI before abi3 before pure, and for each the oldest glibc first (the
    most portable file)."""
    major, minor = (int(x) for x in recipe.python.split(".")[:2])
    arch = recipe.preflight.arch or "x86_64"
    platforms = [f"linux_{arch}", f"manylinux1_{arch}", f"manylinux2010_{arch}", f"manylinux2014_{arch}"]
    platforms = platforms[1:] + [f"manylinux_{GLIBC[0]}_{m}_{arch}" for m in range(5, GLIBC[1] + 1)] + platforms[:1]
    abi = f"cp{major}{minor}"
    tags = list(cpython_tags((major, minor), abis=[abi, "abi3", "none"], platforms=platforms))
    tags += [t for t in compatible_tags((major, minor), interpreter=abi, platforms=platforms) if t not in tags]
    return tags


def _filename(entry: Mapping[str, Any]) -> str:
    name = entry.get("name")
    if isinstance(name, str) and name:
        return name
    where = str(entry.get("url") or entry.get("path") or "")
    return unquote(urlsplit(where).path.rsplit("/", 1)[-1]) if where else ""


def _source(entry: Mapping[str, Any], base: Path) -> str:
    if entry.get("url"):
        return str(entry["url"])
    p = Path(str(entry.get("path", "")))
    return (p if p.is_absolute() else (base / p)).resolve().as_uri()


def pick(package: Mapping[str, Any], tags: Sequence[Tag], base: Path, role: str) -> list[WheelWant]:
    """The one file of a pylock package the target installs: its best wheel by ``tags`` order, else
    its sdist; a package that is a directory, a VCS checkout or a local archive (a fork) gives none."""
    name = str(canonicalize_name(str(package.get("name", ""))))
    rank = {t: i for i, t in enumerate(tags)}
    best: tuple[int, Mapping[str, Any]] | None = None
    for wheel in package.get("wheels") or []:
        try:
            _, _, _, wtags = parse_wheel_filename(_filename(wheel))
        except InvalidWheelFilename:
            continue
        score = min((rank[t] for t in wtags if t in rank), default=None)
        if score is not None and (best is None or score < best[0]):
            best = (score, wheel)
    if (f := best[1] if best is not None else package.get("sdist")):     # the best wheel, else the sdist
        return [WheelWant(name, _filename(f), _source(f, base), (f.get("hashes") or {}).get("sha256"), role)]
    if package.get("wheels"):
        raise KitError(f"no file of {name} {package.get('version')} installs on the kit's target",
                       expected=f"a wheel for the recipe's CPython on Linux (glibc <= {GLIBC[0]}.{GLIBC[1]})",
                       found=", ".join(_filename(w) for w in package["wheels"])[:300],
                       fix="check the recipe's python version and the lock's packages")
    return []


def from_lock(lock: Path, recipe: Recipe, *, skip: Iterable[str] = ()) -> list[WheelWant]:
    """Every file the committed lock's index packages need on the target (forks excluded)."""
    return wants_in(read_lock(lock), lock.parent, recipe, skip=skip)


def wants_in(doc: Mapping[str, Any], base: Path, recipe: Recipe, *, skip: Iterable[str] = ()) -> list[WheelWant]:
    """:func:`from_lock` of a lock already read (``base``: the directory its relative paths start from)."""
    tags = target_tags(recipe)
    skipped = {str(canonicalize_name(s)) for s in skip}
    wants: list[WheelWant] = []
    for package in doc.get("packages", []):
        if str(canonicalize_name(str(package.get("name", "")))) in skipped:
            continue
        if package.get("vcs") or package.get("directory") or package.get("archive"):
            continue
        wants += pick(package, tags, base, "lock")
    return wants


HAVE_TRIES = 8      # resolutions tried with the target's versions, each without the ones the last one clashed on


def torch_constraint(recipe: Recipe) -> str:
    """The torch the kit's resolution holds the other packages to.  A system torch is left out of the
    kit, and any build of it satisfies its public version (``2.11.0+cu130`` satisfies ``==2.11.0``), so
    the kit resolves on the recipe's own index: the local build (``+cu130``) exists only on the PyTorch
    index, and vLLM 0.24.0's ``torch==2.11.0`` met ``torch==2.11.0+cu130`` there (issue 18: a kit for
    recipes/vllm-0.24.0-pr3812.toml failed "no version of torch==2.11.0+cu130" on PyPI)."""
    if recipe.torch.from_system:
        try:
            return f"torch=={Version(recipe.torch.version).public}"
        except InvalidVersion:
            pass
    return recipe.torch.requirement


def compile_wants(runner: Runner, step: str, recipe: Recipe, work: Path, requirements: Sequence[str],
                  role: str, *, skip: Iterable[str] = (), extra_env: Mapping[str, str] | None = None,
                  have: Mapping[str, str] | None = None) -> list[WheelWant]:
    """``uv pip compile`` of ``requirements`` for the target, as a PEP 751 lock; its files.  ``have``
    (``--have``: what the target's interpreter holds) is tried first as constraints, so the resolution
    keeps the target's versions where they fit -- as the env step's install on that interpreter does --
    and the kit need not carry another version of them; when they do not all fit, the resolution is
    made without them (the target then upgrades those, from the kit)."""
    if not requirements:
        return []
    held = {n: v for n, v in have.items() if n != "torch"} if have else {}
    for _ in range(HAVE_TRIES if held else 0):
        pins = work / "have-constraints.txt"
        work.mkdir(parents=True, exist_ok=True)
        pins.write_text("".join(f"{n}=={v}\n" for n, v in sorted(held.items())), encoding="utf-8")
        try:
            return _compile(runner, step, recipe, work, requirements, role, skip, extra_env, [pins], raw=True)
        except CommandFailed as exc:
            # uv names the packages of the conflict; the target's version of those does not fit
            clash = {n for n in held if re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", exc.tail, re.I)}
            runner.note(step, f"# the target's versions do not all fit the {role} requirements"
                              f" ({', '.join(sorted(clash)) or 'no package named'}): "
                              + ("resolving without those" if clash else "resolving without any"))
            if not clash:
                break
            held = {n: v for n, v in held.items() if n not in clash}
    return _compile(runner, step, recipe, work, requirements, role, skip, extra_env, [])


def _compile(runner: Runner, step: str, recipe: Recipe, work: Path, requirements: Sequence[str], role: str,
             skip: Iterable[str], extra_env: Mapping[str, str] | None, constraints: list[Path],
             raw: bool = False) -> list[WheelWant]:
    work.mkdir(parents=True, exist_ok=True)
    req = work / f"{role}.in"
    req.write_text("".join(f"{r}\n" for r in requirements), encoding="utf-8")
    out = work / f"pylock.{role}.toml"
    constraint = work / "torch-constraint.txt"
    constraint.write_text(torch_constraint(recipe) + "\n", encoding="utf-8")
    arch = recipe.preflight.arch or "x86_64"
    argv = [uv_exe(), "pip", "compile", str(req), "--no-header", "--quiet", "--python-version", recipe.python,
            "--python-platform", f"{arch}-manylinux_{GLIBC[0]}_{GLIBC[1]}", "--constraint", str(constraint),
            *(a for c in constraints for a in ("--constraint", str(c))),
            *recipe_source_args(recipe, torch_index=not recipe.torch.from_system), "-o", str(out)]
    try:
        runner.run(argv, step=step, env={**_uv_env(work), **(extra_env or {})})
    except CommandFailed as exc:
        if raw:
            raise
        raise KitError(f"uv could not resolve the recipe's {role} requirements for the kit",
                       expected="a resolution from the recipe's sources",
                       found=(exc.tail.strip().splitlines() or ["no output"])[-1],
                       fix=f"check the recipe's [sources] and your network; full log: {exc.log_path}") from None
    return [WheelWant(w.package, w.filename, w.url, w.sha256, role) for w in from_lock(out, recipe, skip=skip)]


def _uv_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    env.setdefault("UV_CACHE_DIR", str(work / "uv-cache"))
    return env


def source_urls(recipe: Recipe) -> list[str]:
    """The recipe's package source URLs (index, extra indexes, the torch index, find-links), as written: with
    any credentials they carry (uv uses them; the lock records the wheels' URLs without)."""
    s = recipe.sources
    return [u for u in (s.index_url, *s.extra_index_urls, recipe.torch.index_url, *s.find_links) if u]


def with_credentials(url: str, sources: Sequence[str]) -> str:
    """``url`` with the ``user:password@`` of the first source on its scheme, host and port that has one (a
    wheel the lock names by its URL without them), else ``url`` unchanged."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        return url
    for source in sources:
        theirs = urlsplit(source)
        if (theirs.username or theirs.password) and (theirs.scheme, theirs.hostname, theirs.port) == \
                (parts.scheme, parts.hostname, parts.port):
            userinfo = theirs.netloc.rpartition("@")[0]
            return parts._replace(netloc=f"{userinfo}@{parts.netloc}").geturl()
    return url


def fetch(want: WheelWant, cache_dir: Path, dest_dir: Path, sources: Sequence[str] = ()) -> Path:
    """Put ``want`` into ``dest_dir`` with its sha256 checked (downloads go through the shared,
    content-addressed wheel cache; local files are copied); ``sources``: the recipe's source URLs, whose
    credentials a download from their host takes (:func:`with_credentials`)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / want.filename
    parts = urlsplit(want.url)
    if parts.scheme in ("http", "https"):
        src = download_wheel(with_credentials(want.url, sources), want.filename, cache_dir, sha256=want.sha256).path
    elif parts.scheme == "file":
        src = Path(unquote(parts.path))
        if not src.is_file():
            raise KitError(f"the file for {want.package} is missing", expected=f"{src}", found="no such file",
                           fix="check the recipe's find-links directory, or make the lock again")
    else:
        raise KitError(f"cannot fetch {want.filename}", expected="an http(s) or file URL",
                       found=redact_url(want.url), fix="check the lock's URLs")
    digest = sha256_file(src)
    if want.sha256 and digest != want.sha256:
        raise KitError(f"{want.filename} is not the file the lock names", expected=f"sha256 {want.sha256}",
                       found=f"sha256 {digest}", fix=f"check the source {redact_url(want.url)} and the lock")
    if not (dest.exists() and sha256_file(dest) == digest):
        place(src, dest)
    return dest


def place(src: Path, dest: Path) -> None:
    """``src`` at ``dest``, hard-linked where the file system allows, else copied; whole or not at all."""
    tmp = dest.with_name(f".{dest.name}.partial")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)
