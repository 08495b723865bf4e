"""``forks.toml`` (the forks october knows, with named pins) and a recipe's ``[[forks]]`` entries."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..core.errors import RecipeError
from ..core.ids import FULL_SHA
from .install import parse_build_env, parse_nested_installs
from .tomlcheck import MAX_ITEMS, MAX_KEY, MAX_URL, Table, check_format, describe, read_toml

# names that become file or directory names (recipe -> locks/<name>.pylock.toml, fork -> STACK/src/<name>)
SAFE_NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SHA_PREFIX = re.compile(r"^[0-9a-f]{7,39}$")
class ForkMode(StrEnum):
    """How a recipe's fork is installed (``mode = "..."`` in its ``[[forks]]`` entry)."""

    EDITABLE = "editable"                   # an editable install, built as its build backend says
    VLLM_PRECOMPILED = "vllm-precompiled"   # vLLM's editable install over the recipe's verified base wheel
    FLASHINFER = "flashinfer"               # FlashInfer's editable install, whose kernels the jit step builds


@dataclass(frozen=True)
class ModeTraits:
    """What a fork's install mode means to every step: the one table every other place reads
    (:data:`FORK_MODES`), so a new mode is one row here plus the code of what it does new."""

    promise: str | None = None          # the smoke level a stack with such a fork promises
    base_wheel: bool = False            # built over the verified vLLM base wheel (VLLM_USE_PRECOMPILED): the
                                        # wheel step verifies it, a kit carries it, its upstream base is fetched
    own_deps: bool = True               # installed with its dependencies (else --no-deps, after the others)
    jit_checkout: bool = False          # the checkout the jit step builds from and whose AOT directory it fills
    import_check: bool = False          # ``import <fork name>`` after install must load this checkout
    replaces_dist: str | None = None    # the index distribution the fork's install replaces (lock check)


FORK_MODES: Mapping[ForkMode, ModeTraits] = MappingProxyType({
    ForkMode.EDITABLE: ModeTraits(),
    ForkMode.VLLM_PRECOMPILED: ModeTraits(promise="engine", base_wheel=True),
    ForkMode.FLASHINFER: ModeTraits(promise="kernel", own_deps=False, jit_checkout=True, import_check=True,
                                    replaces_dist="flashinfer-python"),
})
INSTALL_MODES = tuple(m.value for m in ForkMode)


def traits_of(mode: str) -> ModeTraits:
    """The traits of a recorded mode (an install result's); one this tool does not know has none."""
    try:
        return FORK_MODES[ForkMode(mode)]
    except ValueError:
        return ModeTraits()

# What a stack promises the smoke (`current smoke`), in ascending order, and what says so: a fork's install
# mode, its name, or the distribution it installed as.  One rule for the setup receipt that writes the
# promise and the smoke that reads it (:func:`promise_of`).
PROMISE_LEVELS = ("kernel", "engine")
_PROMISE_BY = {"mode": {m.value: t.promise for m, t in FORK_MODES.items() if t.promise},
               "name": {"vllm": "engine", "flashinfer": "kernel"},
               "dist": {"vllm": "engine", "flashinfer-python": "kernel"}}


def promise_of(forks: "list[Mapping[str, Any]] | tuple[Mapping[str, Any], ...]") -> str | None:
    """The highest level any fork's ``mode``, ``name`` or ``dist`` gives (None: nothing to check).  Taking
    the highest means no one piece of evidence can lower the promise: a vLLM fork in mode ``editable``
    under another name is still the engine when it installed the ``vllm`` distribution."""
    from packaging.utils import canonicalize_name

    return highest({_PROMISE_BY[key].get(str(canonicalize_name(str(f.get(key) or ""))) if key == "dist"
                                         else str(f.get(key) or "").lower()) for f in forks for key in _PROMISE_BY})


def highest(levels: "set[Any]") -> str | None:
    """The highest of ``levels`` that is a promise level (None: none is)."""
    found = [lv for lv in PROMISE_LEVELS if lv in levels]
    return found[-1] if found else None


@dataclass(frozen=True)
class SdistSource:
    """A released source distribution a fork's pin is made from (a pin ``{sdist = URL, ...}`` in forks.toml).

    The fetch step downloads it (checked against ``sha256``) and commits its files, as upstream's
    git would track them, into a local git repository tagged ``v<version>``
    (:mod:`october.installer.git.sdist`); that commit is deterministic, so the pin names it."""

    url: str
    sha256: str
    version: str

    @property
    def filename(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Pin:
    """A commit: a full 40-hex id, or a prefix that must be resolved on ``branch``."""

    name: str
    commit: str
    branch: str | None = None
    fetch_from: str = "fork"   # "upstream": the commit lives in the upstream repo (e.g. a PR head)
    sdist: SdistSource | None = None   # the fork is made from this sdist; ``commit`` is what that makes

    @property
    def is_prefix(self) -> bool:
        return len(self.commit) < 40


@dataclass(frozen=True)
class Fork:
    name: str
    url: str
    upstream: str | None
    pins: Mapping[str, Pin]


@dataclass(frozen=True)
class ForkUse:
    """A fork as a recipe uses it: which pin, and how it is installed."""

    name: str
    url: str
    upstream: str | None
    pin: Pin
    mode: ForkMode = ForkMode.EDITABLE
    deps: bool = True
    build_isolation: bool = True
    submodules: bool = True
    build_env: Mapping[str, str] = field(default_factory=dict)        # [forks.build_env]
    nested_installs: Mapping[str, str] = field(default_factory=dict)  # [forks.nested_installs]: name -> why
    # Which submodules (paths relative to the fork, top level) are fetched; None: all of them.
    # ``submodules = ["3rdparty/cccl"]`` in the recipe's fork entry; each selected one brings its own
    # nested submodules.
    submodule_paths: tuple[str, ...] | None = None
    # Submodules checked out sparse: path -> the directories (relative to the submodule) it keeps.
    # ``sparse = { "3rdparty/cutlass" = ["include", "tools/util/include"] }``: the submodule is
    # fetched without the blobs outside those directories (a partial clone) and checked out in git's
    # cone mode, so a submodule commit whose copies lack an unused file (a PNG under ``media/``)
    # still checks out, and only the headers the build reads are carried.  Nested submodules of a
    # sparse one are not fetched.
    sparse: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def traits(self) -> ModeTraits:
        """What this fork's install mode means (:data:`FORK_MODES`)."""
        return FORK_MODES[ForkMode(self.mode)]

    def wants_submodule(self, path: str) -> bool:
        """Whether the submodule at ``path`` (relative to the fork) is fetched."""
        if not self.submodules:
            return False
        if self.submodule_paths is None:
            return True
        return any(path == p or path.startswith(p + "/") for p in self.submodule_paths)

    @property
    def fetch_url(self) -> str:
        """Where the pinned commit is fetched from: the fork, or its upstream for pins that say so (an
        sdist-made fork: the sdist's URL, which keys its mirror)."""
        if self.pin.sdist is not None:
            return self.pin.sdist.url
        if self.pin.fetch_from == "upstream" and self.upstream:
            return self.upstream
        return self.url


# ------------------------------------------------------------------------- forks.toml


def load_forks(path: Path) -> dict[str, Fork]:
    top = Table(path, read_toml(path), "")
    check_format(top)
    forks_t = top.table("forks")
    assert forks_t is not None
    top.done()
    forks: dict[str, Fork] = {}
    for name in forks_t.data:
        if not SAFE_NAME.match(name):
            raise forks_t.err(name, "a plain fork name: letters, digits, '.', '_' or '-' (it names the "
                              "clone directory STACK/src/<name>)", name)
        forks[name] = _parse_fork(forks_t, name)
    forks_t.done()
    return forks


def _parse_fork(forks_t: Table, name: str) -> Fork:
    ft = forks_t.table(name)
    assert ft is not None
    url = ft.get("url", str, what="a git URL", max_len=MAX_URL)
    upstream = ft.get("upstream", str, required=False, max_len=MAX_URL)
    pins_t = ft.table("pins")
    assert pins_t is not None
    ft.done()
    pins: dict[str, Pin] = {}
    for pin_name in pins_t.data:
        pins[pin_name] = parse_pin(pins_t, pin_name, pins_t.get(pin_name, (str, dict), what="a 40-hex commit id "
                                                                 "or a table {prefix, branch}"))
    for pin in pins.values():
        if pin.fetch_from == "upstream" and not upstream:
            raise RecipeError(forks_t.file, f"forks.{name}.pins.{pin.name}.fetch_from",
                              expected=f"an 'upstream' URL for fork '{name}'", found="no upstream key")
    return Fork(name=name, url=url, upstream=upstream, pins=pins)


SHA256 = re.compile(r"^[0-9a-f]{64}$")
VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!-]{0,63}$")


def parse_sdist_pin(t: Table, name: str, value: Any) -> Pin:
    """``{sdist = "https://.../vllm-0.24.0.tar.gz", sha256 = ..., version = "0.24.0", commit = <40 hex>}``:
    ``commit`` is the commit materialising that sdist makes (deterministic; checked at fetch)."""
    if not isinstance(value, dict):
        raise t.err(name, "a table {sdist = URL, sha256 = ..., version = ..., commit = ...}", value)
    pt = Table(t.file, value, t._k(name))
    pt.get("source", str, required=False)
    url = pt.get("sdist", str, what="the https URL of the source distribution (.tar.gz)")
    sha = pt.get("sha256", str, what="the sdist's sha256 (64 lowercase hex)")
    version = pt.get("version", str, what="the release version, e.g. 0.24.0 (the clone is tagged v<version>)")
    commit = pt.get("commit", str, what="the 40-hex commit materialising the sdist makes")
    pt.done()
    if not url.startswith("https://") or not url.endswith(".tar.gz") or "/" not in url[len("https://"):]:
        raise pt.err("sdist", "an https URL of a .tar.gz source distribution", url)
    if not SHA256.match(sha):
        raise pt.err("sha256", "64 lowercase hex characters", sha)
    if not VERSION.match(version):
        raise pt.err("version", "a release version such as 0.24.0", version)
    if not FULL_SHA.match(commit):
        raise pt.err("commit", "a 40-character lowercase hex commit id", commit)
    return Pin(name=name, commit=commit, sdist=SdistSource(url=url, sha256=sha, version=version))


def parse_pin(t: Table, name: str, value: Any) -> Pin:
    """``name = "<40 hex>"``, or a table ``{commit = ...}`` / ``{prefix = ..., branch = ...}`` /
    ``{sdist = ..., sha256 = ..., version = ..., commit = ...}``."""
    if isinstance(value, str):
        if not FULL_SHA.match(value):
            raise t.err(name, "a 40-character lowercase hex commit id "
                        "(or a table {prefix = ..., branch = ...})", value)
        return Pin(name=name, commit=value)
    if isinstance(value, dict):
        if "sdist" in value:
            return parse_sdist_pin(t, name, value)
        return _parse_pin_table(Table(t.file, value, t._k(name)), name)
    raise t.err(name, "a 40-hex commit id or a table {prefix, branch}", value)


def _parse_pin_table(pt: Table, name: str) -> Pin:
    pt.get("source", str, required=False)
    fetch_from = pt.get("fetch_from", str, required=False, default="fork")
    if fetch_from not in ("fork", "upstream"):
        raise pt.err("fetch_from", "'fork' or 'upstream'", fetch_from)
    if "commit" in pt.data:
        commit = pt.get("commit", str)
        pt.done()
        if not FULL_SHA.match(commit):
            raise pt.err("commit", "a 40-character lowercase hex commit id", commit)
        return Pin(name=name, commit=commit, fetch_from=fetch_from)
    prefix = pt.get("prefix", str, what="a lowercase hex commit prefix (7-39 chars), or commit = <40 hex>")
    branch = pt.get("branch", str, what="the branch the prefix is resolved on", max_len=MAX_KEY)
    pt.done()
    if not SHA_PREFIX.match(prefix):
        raise pt.err("prefix", "a lowercase hex commit prefix of 7 to 39 characters", prefix)
    if not branch.strip():
        raise pt.err("branch", "a non-empty branch name", branch)
    return Pin(name=name, commit=prefix, branch=branch, fetch_from=fetch_from)


# ------------------------------------------------------------------- recipe [[forks]]


def parse_fork_uses(top: Table, known: Mapping[str, Fork], forks_file: str) -> tuple[ForkUse, ...]:
    """The recipe's ``[[forks]]``: at least one, each a fork of ``forks_file`` at one of its pins, at most once."""
    top.seen.add("forks")
    entries = top.data.get("forks")
    if not isinstance(entries, list) or not entries:
        raise RecipeError(top.file, "forks", expected="an array of tables [[forks]] with at least one fork",
                          found=describe(entries) if "forks" in top.data else "the key is missing")
    uses = tuple(_parse_fork_use(Table(top.file, entry, f"forks[{i}]"), known, forks_file)
                 for i, entry in enumerate(entries))
    names = [u.name for u in uses]
    if len(set(names)) != len(names):
        raise RecipeError(top.file, "forks", expected="each fork at most once", found=f"{names}")
    return uses


def _parse_fork_use(ft: Table, known: Mapping[str, Fork], forks_file: str) -> ForkUse:
    fname = ft.get("name", str, max_len=MAX_KEY)
    if fname not in known:
        raise ft.err("name", f"a fork defined in {forks_file} ({', '.join(sorted(known))})", fname)
    fork = known[fname]
    pin_name = ft.get("pin", str, max_len=MAX_KEY)
    if pin_name not in fork.pins:
        raise ft.err("pin", f"a pin of fork '{fname}' in {forks_file} "
                     f"({', '.join(sorted(fork.pins)) or 'none'})", pin_name)
    mode = ft.get("mode", str, required=False, default="editable")
    if mode not in INSTALL_MODES:
        raise ft.err("mode", f"one of {', '.join(INSTALL_MODES)}", mode)
    pin = fork.pins[pin_name]
    use = ForkUse(name=fname, url=pin.sdist.url if pin.sdist else fork.url, upstream=fork.upstream, pin=pin,
                  mode=ForkMode(mode), deps=ft.get("deps", bool, required=False, default=True),
                  build_isolation=ft.get("build_isolation", bool, required=False, default=True),
                  build_env=parse_build_env(ft), nested_installs=parse_nested_installs(ft),
                  **_submodule_selection(ft))
    sparse = _sparse_selection(ft, use.submodule_paths)
    if sparse:
        use = replace(use, sparse=sparse)
    ft.done()
    return use


def _submodule_selection(ft: Table) -> dict[str, Any]:
    """``submodules = true|false`` (all or none) or a list of submodule paths (only those)."""
    value = ft.get("submodules", (bool, list), required=False, default=True,
                   what="true, false, or a list of submodule paths such as [\"3rdparty/cccl\"]")
    if isinstance(value, bool):
        return {"submodules": value}
    paths = ft.str_list("submodules")
    cleaned = []
    for i, p in enumerate(paths):
        norm = p.strip().strip("/")
        if not norm or norm.startswith("..") or "/../" in f"/{norm}/" or p.startswith("/"):
            raise RecipeError(ft.file, f"{ft._k('submodules')}[{i}]",
                              expected="a submodule path relative to the fork, e.g. \"3rdparty/cccl\"",
                              found=describe(p))
        cleaned.append(norm)
    if len(set(cleaned)) != len(cleaned):
        raise ft.err("submodules", "each submodule path at most once", paths)
    return {"submodules": bool(cleaned), "submodule_paths": tuple(cleaned)}


def _clean_relpath(p: str) -> str | None:
    norm = p.strip().strip("/")
    if not norm or p.startswith("/") or "\\" in norm or any(part in ("", ".", "..") for part in norm.split("/")):
        return None
    return norm


def _sparse_selection(ft: Table, selected: tuple[str, ...] | None) -> dict[str, tuple[str, ...]]:
    """``sparse = { "<submodule path>" = ["<dir>", ...] }``: each key a submodule the entry selects by
    name in ``submodules = [...]``, each value the directories kept (relative to the submodule)."""
    raw = ft.get("sparse", dict, required=False, default={},
                 what='a table such as { "3rdparty/cutlass" = ["include", "tools/util/include"] }')
    out: dict[str, tuple[str, ...]] = {}
    for key, dirs in raw.items():
        where = f"{ft._k('sparse')}.{key}"
        sub = _clean_relpath(str(key))
        if sub is None or selected is None or sub not in selected:
            raise RecipeError(ft.file, where,
                              expected="a submodule path that the entry's submodules = [...] lists"
                                       + (f" ({', '.join(selected)})" if selected else
                                          " (list the submodules by path first)"),
                              found=describe(key))
        if not isinstance(dirs, list) or not dirs or len(dirs) > MAX_ITEMS \
                or not all(isinstance(d, str) and len(d) <= MAX_KEY for d in dirs):
            raise RecipeError(ft.file, where, expected="a non-empty list of directories, e.g. [\"include\"]",
                              found=describe(dirs))
        cleaned = []
        for i, d in enumerate(dirs):
            norm = _clean_relpath(d)
            if norm is None:
                raise RecipeError(ft.file, f"{where}[{i}]",
                                  expected="a directory relative to the submodule, e.g. \"include\"", found=describe(d))
            cleaned.append(norm)
        twice = sorted({d for d in cleaned if cleaned.count(d) > 1})
        if twice:
            raise RecipeError(ft.file, where, expected="each directory at most once",
                              found=", ".join(f"'{d}' twice" for d in twice))
        out[sub] = tuple(cleaned)
    return out
