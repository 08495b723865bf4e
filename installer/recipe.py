"""Recipes and forks as data: TOML files loaded into frozen, validated objects.

Key-by-key validation lives in :mod:`october.installer.tomlcheck`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from october.installer.core.errors import RecipeError, RecipeNotFound
from october.installer.core.hashing import sha256_file
from october.installer.steps.install.policy import InstallPolicy, parse_build_env, parse_install, parse_nested_installs
from october.installer.steps.jit.derive import (COMPUTE_DTYPES, DEFAULT_ROUTES, ROUTES, V_FORMATS, DeriveError, ModelShape,
                                  ModuleKey, derive_modules)
from october.installer.core.resources import DATA_ROOT
from october.installer.tomlcheck import Table, check_format, describe, read_toml, version_key

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
# names that become file or directory names (recipe -> locks/<name>.pylock.toml, fork -> STACK/src/<name>)
SAFE_NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SHA_PREFIX = re.compile(r"^[0-9a-f]{7,39}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
ARCH_ITEM = re.compile(r"^\d+\.\d+[a-z]?(\+PTX)?$")
INSTALL_MODES = ("editable", "vllm-precompiled", "flashinfer")
JIT_KINDS = ("decode", "prefill")
JIT_DTYPES = ("f16", "bf16", "e4m3", "e5m2")
MODEL_FORMATS = ("awq", "fp16")
PROJECT_ROOT = DATA_ROOT  # recipes/, forks.toml, receipts/, locks/: see october.installer.core.resources


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Pin:
    """A commit: a full 40-hex id, or a prefix that must be resolved on ``branch``."""

    name: str
    commit: str
    branch: str | None = None
    fetch_from: str = "fork"   # "upstream": the commit lives in the upstream repo (e.g. a PR head)

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
    mode: str = "editable"
    deps: bool = True
    build_isolation: bool = True
    submodules: bool = True
    build_env: Mapping[str, str] = field(default_factory=dict)        # [forks.build_env]
    nested_installs: Mapping[str, str] = field(default_factory=dict)  # [forks.nested_installs]: name -> why
    # Which submodules (paths relative to the fork, top level) are fetched; None: all of them.
    # ``submodules = ["3rdparty/cccl"]`` in the recipe's fork entry; each selected one brings its own
    # nested submodules.
    submodule_paths: tuple[str, ...] | None = None

    def wants_submodule(self, path: str) -> bool:
        """Whether the submodule at ``path`` (relative to the fork) is fetched."""
        if not self.submodules:
            return False
        if self.submodule_paths is None:
            return True
        return any(path == p or path.startswith(p + "/") for p in self.submodule_paths)

    @property
    def fetch_url(self) -> str:
        """Where the pinned commit is fetched from: the fork, or its upstream for pins that say so."""
        if self.pin.fetch_from == "upstream" and self.upstream:
            return self.upstream
        return self.url


@dataclass(frozen=True)
class Sources:
    """Where uv finds packages. Real recipes use indexes; fixtures use a local dir."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False


TORCH_SOURCES = ("index", "system")


@dataclass(frozen=True)
class TorchPin:
    version: str            # exact, with local build tag when the index has one: "2.10.0+cu128"
    index_url: str | None = None
    source: str = "index"   # "system": torch comes from a given interpreter (see october.installer.steps.env.systorch)
    allow_system: bool = False          # an index recipe that may also take torch from --system-python
    system_python: str | None = None    # the interpreter, set from --system-python (never from the recipe file)

    @property
    def from_system(self) -> bool:
        return self.source == "system"

    @property
    def requirement(self) -> str:
        return f"torch=={self.version}"


@dataclass(frozen=True)
class CudaPin:
    version: str            # toolkit major.minor nvcc must report, e.g. "12.9"
    arch_list: str          # FLASHINFER_CUDA_ARCH_LIST, e.g. "9.0"
    variant: str            # wheel CUDA variant, e.g. "cu129"


# What vLLM's build compiles into the base wheel's .so files: csrc/ (every kernel and binding,
# plus the generators it runs), CMakeLists.txt (targets, flags, arch lists) and cmake/ (helpers,
# and the external projects -- vllm-flash-attn, FlashMLA, CUTLASS, ... -- pinned by GIT_TAG).
# setup.py only drives CMake (and in precompiled mode copies files out of the wheel).
DEFAULT_COMPILED_SOURCES = ("csrc", "CMakeLists.txt", "cmake")


@dataclass(frozen=True)
class BaseWheel:
    url: str
    filename: str
    name: str
    version: str
    sha256: str | None      # None: trust on first use, recorded in the lock
    cuda_variant: str | None = None
    cudart_major: str | None = None
    requires_torch: str | None = None
    compiled_sources: tuple[str, ...] = DEFAULT_COMPILED_SOURCES   # compared at wheel and fork commits


@dataclass(frozen=True)
class PreflightLimits:
    os: str = "Linux"
    arch: str = "x86_64"
    min_ram_gb: float = 0.0
    min_disk_gb: float = 0.0
    min_compute_capability: str | None = None
    uv: str | None = None   # a specifier, e.g. ">=0.8.17"
    need_compiler: bool = True


@dataclass(frozen=True)
class JitModule:
    kind: str               # decode | prefill
    q: str
    k: str
    v: str
    o: str
    head_dim: int
    posenc: int = 0
    backend: str = "fa2"
    route: str = ""         # the serving route it was derived for ("" when only hand-listed)

    @property
    def uri(self) -> str:
        return self.key.uri

    @property
    def key(self) -> ModuleKey:
        return ModuleKey(self.kind, self.q, self.k, self.v, self.o, self.head_dim, self.posenc, self.backend,
                         route=self.route)


@dataclass(frozen=True)
class ModelSelection:
    format: str
    repo: str
    revision: str
    patterns: tuple[str, ...]
    sha256: Mapping[str, str] = field(default_factory=dict)
    compute_dtype: str | None = None        # vLLM --dtype the engine runs with (float16 | bfloat16)
    v_format: str = "fp8_e4m3"              # the V cache dtype; K is the compute dtype (K16)
    shape: ModelShape | None = None         # from config.json at the pinned revision
    jit_modules: tuple[str, ...] = ()       # URIs derived for this selection


@dataclass(frozen=True)
class SmokeConfig:
    level: str | None = None
    prompt_tokens: int = 8192
    max_new_tokens: int = 128
    seed: int = 0


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    sha256: str
    description: str
    python: str
    torch: TorchPin
    build_requirements: tuple[str, ...]
    sources: Sources
    forks: tuple[ForkUse, ...]
    cuda: CudaPin | None
    wheel: BaseWheel | None
    preflight: PreflightLimits
    jit: tuple[JitModule, ...]
    models: Mapping[str, ModelSelection]
    smoke: SmokeConfig
    raw: Mapping[str, Any]
    jit_builder: str | None = None  # module run as `python -m` in the stack env; None: the FlashInfer builder
    install: InstallPolicy = field(default_factory=InstallPolicy)  # [install]: supply, exceptions
    jit_routes: tuple[str, ...] = DEFAULT_ROUTES

    def fork(self, name: str) -> ForkUse:
        for f in self.forks:
            if f.name == name:
                return f
        raise KeyError(name)

    def section(self, key: str) -> Any:
        return self.raw.get(key)


# -------------------------------------------------------------------------- forks


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
        ft = forks_t.table(name)
        assert ft is not None
        url = ft.get("url", str, what="a git URL")
        upstream = ft.get("upstream", str, required=False)
        pins_t = ft.table("pins")
        assert pins_t is not None
        ft.done()
        pins: dict[str, Pin] = {}
        for pin_name, value in pins_t.data.items():
            pins_t.seen.add(pin_name)
            pins[pin_name] = _parse_pin(pins_t, pin_name, value)
        for pin in pins.values():
            if pin.fetch_from == "upstream" and not upstream:
                raise RecipeError(path, f"forks.{name}.pins.{pin.name}.fetch_from",
                                  expected=f"an 'upstream' URL for fork '{name}'", found="no upstream key")
        forks[name] = Fork(name=name, url=url, upstream=upstream, pins=pins)
    forks_t.done()
    return forks


def _parse_pin(t: Table, name: str, value: Any) -> Pin:
    if isinstance(value, str):
        if not FULL_SHA.match(value):
            raise t.err(name, "a 40-character lowercase hex commit id "
                        "(or a table {prefix = ..., branch = ...})", value)
        return Pin(name=name, commit=value)
    if isinstance(value, dict):
        pt = Table(t.file, value, t._k(name))
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
        branch = pt.get("branch", str, what="the branch the prefix is resolved on")
        pt.done()
        if not SHA_PREFIX.match(prefix):
            raise pt.err("prefix", "a lowercase hex commit prefix of 7 to 39 characters", prefix)
        if not branch.strip():
            raise pt.err("branch", "a non-empty branch name", branch)
        return Pin(name=name, commit=prefix, branch=branch, fetch_from=fetch_from)
    raise t.err(name, "a 40-hex commit id or a table {prefix, branch}", value)


# ------------------------------------------------------------------------- recipe


def resolve_recipe_path(name_or_path: str, root: Path = PROJECT_ROOT) -> Path:
    """``current`` -> ``<root>/recipes/current.toml``; a path ending in .toml is used as is."""
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        return Path(name_or_path).expanduser().resolve()
    return root / "recipes" / f"{name_or_path}.toml"


def load_recipe(name_or_path: str, root: Path = PROJECT_ROOT) -> Recipe:
    path = resolve_recipe_path(name_or_path, root)
    if not path.exists():
        available = sorted(p.stem for p in (root / "recipes").glob("*.toml"))
        raise RecipeNotFound(name_or_path, path, available=available)
    raw = read_toml(path)
    top = Table(path, raw, "")
    check_format(top)
    name = top.get("name", str)
    if not SAFE_NAME.match(name):
        raise top.err("name", "a plain name: letters, digits, '.', '_' or '-', starting with a letter or "
                      "digit, at most 64 characters (it names files: locks/<name>.pylock.toml)", name)
    description = top.get("description", str, required=False, default="")
    forks_file = top.get("forks_file", str, required=False, default=None)
    forks_path = (path.parent / forks_file).resolve() if forks_file else root / "forks.toml"
    known_forks = load_forks(forks_path)

    py = top.table("python")
    assert py is not None
    python = version_key(py, "version")
    py.done()

    tt = top.table("torch")
    assert tt is not None
    torch = TorchPin(version=version_key(tt, "version") or "", index_url=tt.get("index", str, required=False),
                     source=tt.get("source", str, required=False, default="index"),
                     allow_system=tt.get("allow_system", bool, required=False, default=False))
    if torch.index_url is not None and not re.match(r"^(https?|file)://", torch.index_url):
        raise tt.err("index", "an https:// (or file://) package index URL", torch.index_url)
    if torch.source not in TORCH_SOURCES:
        raise tt.err("source", "'index' (install the pinned torch) or 'system' (torch from --system-python)",
                     torch.source)
    tt.done()

    bt = top.table("build", required=False)
    build_reqs: tuple[str, ...] = ()
    if bt is not None:
        build_reqs = bt.str_list("requirements")
        bt.done()

    st = top.table("sources", required=False)
    sources = Sources()
    if st is not None:
        sources = Sources(index_url=st.get("index_url", str, required=False),
                          extra_index_urls=st.str_list("extra_index_urls", required=False),
                          find_links=tuple(_local_or_url(path, x) for x in st.str_list("find_links", required=False)),
                          no_index=st.get("no_index", bool, required=False, default=False))
        st.done()

    top.seen.add("forks")
    fork_list = raw.get("forks")
    if not isinstance(fork_list, list) or not fork_list:
        raise RecipeError(path, "forks", expected="an array of tables [[forks]] with at least one fork",
                          found=describe(fork_list) if "forks" in raw else "the key is missing")
    uses: list[ForkUse] = []
    for i, entry in enumerate(fork_list):
        ft = Table(path, entry, f"forks[{i}]")
        fname = ft.get("name", str)
        if fname not in known_forks:
            raise ft.err("name", f"a fork defined in {forks_path.name} ({', '.join(sorted(known_forks))})", fname)
        fork = known_forks[fname]
        pin_name = ft.get("pin", str)
        if pin_name not in fork.pins:
            raise ft.err("pin", f"a pin of fork '{fname}' in {forks_path.name} "
                         f"({', '.join(sorted(fork.pins)) or 'none'})", pin_name)
        mode = ft.get("mode", str, required=False, default="editable")
        if mode not in INSTALL_MODES:
            raise ft.err("mode", f"one of {', '.join(INSTALL_MODES)}", mode)
        uses.append(ForkUse(name=fname, url=fork.url, upstream=fork.upstream, pin=fork.pins[pin_name],
                            mode=mode, deps=ft.get("deps", bool, required=False, default=True),
                            build_isolation=ft.get("build_isolation", bool, required=False, default=True),
                            build_env=parse_build_env(ft), nested_installs=parse_nested_installs(ft),
                            **_submodule_selection(ft)))
        ft.done()
    names = [u.name for u in uses]
    if len(set(names)) != len(names):
        raise RecipeError(path, "forks", expected="each fork at most once", found=f"{names}")

    ct = top.table("cuda", required=False)
    cuda = None
    if ct is not None:
        cver = ct.get("version", str, what="a CUDA major.minor such as '12.9'")
        if not re.match(r"^\d+\.\d+$", cver):
            raise ct.err("version", "a CUDA major.minor such as '12.9'", cver)
        cuda = CudaPin(version=cver, arch_list=ct.get("arch_list", str), variant=ct.get("variant", str))
        ct.done()
        items = [x for x in re.split(r"[\s;,]+", cuda.arch_list.strip()) if x]
        if not items or not all(ARCH_ITEM.match(x) for x in items):
            raise ct.err("arch_list", "compute capabilities such as '9.0' or '8.9 9.0a'", cuda.arch_list)
        if not re.match(r"^cu\d{3}$", cuda.variant):
            raise ct.err("variant", "a CUDA wheel variant such as 'cu129' or 'cu130'", cuda.variant)

    wt = top.table("wheel", required=False)
    wheel = None
    if wt is not None:
        sha = wt.get("sha256", str, required=False)
        if sha is not None and not SHA256.match(sha):
            raise wt.err("sha256", "64 lowercase hex characters", sha)
        url = wt.get("url", str)
        if not re.match(r"^(https?|file)://", url):
            raise wt.err("url", "an https://, http:// or file:// URL", url)
        fname = wt.get("filename", str)
        if "/" in fname or "\\" in fname or fname.startswith("."):
            raise wt.err("filename", "a plain wheel file name (it names STACK/wheels/<filename>)", fname)
        try:
            parse_wheel_filename(fname)
        except InvalidWheelFilename:
            raise wt.err("filename", "a wheel filename such as 'vllm-0.18.0-cp38-abi3-manylinux_2_31_x86_64.whl'",
                         fname) from None
        req_torch = wt.get("requires_torch", str, required=False)
        if req_torch is not None:
            try:
                Version(req_torch)
            except InvalidVersion:
                raise wt.err("requires_torch", "a torch version such as '2.10.0'", req_torch) from None
        compiled = wt.get("compiled_sources", list, required=False)
        if compiled is not None:
            if not compiled or not all(isinstance(p, str) and p and not p.startswith("/") and "\\" not in p
                                       and ".." not in p.split("/") and p == p.strip("/") for p in compiled):
                raise wt.err("compiled_sources", "a non-empty list of relative paths in the fork such as "
                             "['csrc', 'CMakeLists.txt', 'cmake']", compiled)
        wheel = BaseWheel(url=url, filename=fname,
                          name=wt.get("name", str), version=version_key(wt, "version") or "",
                          sha256=sha, cuda_variant=wt.get("cuda_variant", str, required=False),
                          cudart_major=wt.get("cudart_major", str, required=False),
                          requires_torch=req_torch,
                          compiled_sources=tuple(compiled) if compiled is not None else DEFAULT_COMPILED_SOURCES)
        wt.done()

    pt = top.table("preflight", required=False)
    preflight = PreflightLimits()
    if pt is not None:
        uvspec = pt.get("uv", str, required=False)
        if uvspec is not None:
            try:
                SpecifierSet(uvspec)
            except InvalidSpecifier:
                raise pt.err("uv", "a version specifier such as '>=0.8.17'", uvspec) from None
        preflight = PreflightLimits(
            os=pt.get("os", str, required=False, default="Linux"),
            arch=pt.get("arch", str, required=False, default="x86_64"),
            min_ram_gb=pt.get("min_ram_gb", float, required=False, default=0.0),
            min_disk_gb=pt.get("min_disk_gb", float, required=False, default=0.0),
            min_compute_capability=pt.get("min_compute_capability", str, required=False),
            uv=uvspec,
            need_compiler=pt.get("need_compiler", bool, required=False, default=True))
        mcc = preflight.min_compute_capability
        if mcc is not None and not re.match(r"^\d+\.\d+$", mcc):
            raise pt.err("min_compute_capability", "a compute capability major.minor such as '8.9'", mcc)
        for key in ("min_ram_gb", "min_disk_gb"):
            if getattr(preflight, key) < 0:
                raise pt.err(key, "a number >= 0", getattr(preflight, key))
        pt.done()

    jt = top.table("jit", required=False)
    jit: list[JitModule] = []
    jit_builder: str | None = None
    jit_routes: tuple[str, ...] = DEFAULT_ROUTES
    if jt is not None:
        mods = jt.get("modules", list, required=False, what="an array of tables [[jit.modules]]") or []
        jit_builder = jt.get("builder", str, required=False, what="a Python module name")
        jit_routes = jt.str_list("routes", required=False) or DEFAULT_ROUTES
        bad = [r for r in jit_routes if r not in ROUTES]
        if bad or "decode" not in jit_routes or len(set(jit_routes)) != len(jit_routes):
            raise jt.err("routes", f"distinct routes from {', '.join(ROUTES)}, including decode", list(jit_routes))
        if jit_builder is not None and not re.match(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$", jit_builder):
            raise jt.err("builder", "a dotted Python module name", jit_builder)
        jt.done()
        for i, m in enumerate(mods):
            mt = Table(path, m, f"jit.modules[{i}]")
            kind = mt.get("kind", str)
            if kind not in JIT_KINDS:
                raise mt.err("kind", f"one of {', '.join(JIT_KINDS)}", kind)
            dts = {}
            for d in ("q", "k", "v", "o"):
                dts[d] = mt.get(d, str)
                if dts[d] not in JIT_DTYPES:
                    raise mt.err(d, f"one of {', '.join(JIT_DTYPES)}", dts[d])
            head_dim = mt.get("head_dim", int)
            if head_dim not in (64, 128, 256):
                raise mt.err("head_dim", "64, 128 or 256 (FlashInfer rejects > 256)", head_dim)
            posenc = mt.get("posenc", int, required=False, default=0)
            if posenc not in (0, 1, 2):
                raise mt.err("posenc", "0 (none), 1 (rope llama) or 2 (alibi)", posenc)
            jit.append(JitModule(kind=kind, head_dim=head_dim, posenc=posenc,
                                 backend=mt.get("backend", str, required=False, default="fa2"), **dts))
            mt.done()

    mt_all = top.table("models", required=False)
    models: dict[str, ModelSelection] = {}
    if mt_all is not None:
        for fmt in list(mt_all.data):
            if fmt not in MODEL_FORMATS:
                raise mt_all.err(fmt, f"a model format ({', '.join(MODEL_FORMATS)})", fmt)
            sel = mt_all.table(fmt)
            assert sel is not None
            rev = sel.get("revision", str, what="a 40-hex hub revision")
            if not FULL_SHA.match(rev):
                raise sel.err("revision", "a 40-character lowercase hex revision", rev)
            hashes_t = sel.table("sha256", required=False)
            hashes: dict[str, str] = {}
            if hashes_t is not None:
                for fname, h in hashes_t.data.items():
                    hashes_t.seen.add(fname)
                    if not isinstance(h, str) or not SHA256.match(h):
                        raise hashes_t.err(fname, "64 lowercase hex characters", h)
                    hashes[fname] = h
            compute = sel.get("compute_dtype", str, required=jt is not None,
                              what=f"the dtype the engine computes in ({', '.join(COMPUTE_DTYPES)})")
            if compute is not None and compute not in COMPUTE_DTYPES:
                raise sel.err("compute_dtype", f"one of {', '.join(COMPUTE_DTYPES)}", compute)
            v_format = sel.get("v_format", str, required=False, default="fp8_e4m3")
            if v_format not in V_FORMATS:
                raise sel.err("v_format", f"one of {', '.join(V_FORMATS)}", v_format)
            shape = _model_shape(sel, required=jt is not None)
            models[fmt] = ModelSelection(format=fmt, repo=sel.get("repo", str, what="'org/name'"),
                                         revision=rev, patterns=sel.str_list("patterns"), sha256=hashes,
                                         compute_dtype=compute, v_format=v_format, shape=shape)
            if "/" not in models[fmt].repo:
                raise sel.err("repo", "a hub repository 'org/name'", models[fmt].repo)
            sel.done()
        mt_all.done()

    smt = top.table("smoke", required=False)
    smoke = SmokeConfig()
    if smt is not None:
        level = smt.get("level", str, required=False)
        if level is not None and level not in ("kernel", "engine", "reference"):
            raise smt.err("level", "one of kernel, engine, reference", level)
        smoke = SmokeConfig(level=level,
                            prompt_tokens=smt.get("prompt_tokens", int, required=False, default=8192),
                            max_new_tokens=smt.get("max_new_tokens", int, required=False, default=128),
                            seed=smt.get("seed", int, required=False, default=0))
        for key in ("prompt_tokens", "max_new_tokens"):
            if getattr(smoke, key) <= 0:
                raise smt.err(key, "a positive number of tokens", getattr(smoke, key))
        smt.done()

    install = parse_install(top)
    top.done()
    if jt is not None:
        jit, models = _derive_jit(path, jit, models, jit_routes)
    return Recipe(name=name, path=path, sha256=sha256_file(path), description=description,
                  python=python or "", torch=torch, build_requirements=build_reqs, sources=sources,
                  forks=tuple(uses), cuda=cuda, wheel=wheel, preflight=preflight, jit=tuple(jit),
                  models=models, smoke=smoke, raw=raw, jit_builder=jit_builder, install=install,
                  jit_routes=jit_routes)


SHAPE_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers")


def _model_shape(sel: Table, required: bool) -> ModelShape | None:
    """``[models.X.config]``: the attention shape from the model's config.json, with its source."""
    ct = sel.table("config", required=required)
    if ct is None:
        return None
    values = {k: ct.get(k, int, what="a positive integer from the model's config.json") for k in SHAPE_KEYS}
    source = ct.get("source", str, what="where the values were read (repo, revision, file)")
    ct.done()
    for k, v in values.items():
        if v <= 0:
            raise ct.err(k, "a positive integer", v)
    return ModelShape(source=source, **values)


def _derive_jit(path: Path, listed: list[JitModule], models: dict[str, ModelSelection],
                routes: tuple[str, ...]) -> tuple[list[JitModule], dict[str, ModelSelection]]:
    """Derived modules first, then hand-listed extras; a hand-list that misses a derived module is an error."""
    out: dict[str, JitModule] = {}
    by_sel: dict[str, ModelSelection] = {}
    for fmt, sel in models.items():
        assert sel.compute_dtype is not None and sel.shape is not None
        try:
            keys = derive_modules(sel.shape, sel.compute_dtype, sel.v_format, routes)
        except DeriveError as exc:
            raise RecipeError(path, f"models.{fmt}", expected="a selection FlashInfer can serve",
                              found=str(exc)) from None
        for key in keys:
            out.setdefault(key.uri, JitModule(kind=key.kind, q=key.q, k=key.k, v=key.v, o=key.o,
                                              head_dim=key.head_dim, posenc=key.posenc, backend=key.backend,
                                              route=key.route))
        by_sel[fmt] = replace(sel, jit_modules=tuple(k.uri for k in keys))
    listed_uris = {m.uri for m in listed}
    missing = [u for u in out if listed and u not in listed_uris]
    if missing:
        raise RecipeError(path, "jit.modules", expected="every module derived from the model selections "
                          "(the list may add modules, never leave one out)",
                          found=f"{len(missing)} derived module(s) not listed: {', '.join(missing)}",
                          fix=f"add them to [[jit.modules]] in {path}, or remove the hand-written list")
    for m in listed:
        out.setdefault(m.uri, m)
    return list(out.values()), by_sel


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
                              found=repr(p))
        cleaned.append(norm)
    if len(set(cleaned)) != len(cleaned):
        raise ft.err("submodules", "each submodule path at most once", paths)
    return {"submodules": bool(cleaned), "submodule_paths": tuple(cleaned)}


def _local_or_url(recipe_path: Path, value: str) -> str:
    if "://" in value:
        return value
    return str((recipe_path.parent / value).resolve())
