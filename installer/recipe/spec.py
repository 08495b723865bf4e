"""The recipe and forks.toml as typed models (pydantic v2: strict types, unknown keys refused, frozen).

Every key's type, bound and rule is declared here once; the same models publish the JSON Schema
(:mod:`.schema`).  A rule's expected text travels with it (:mod:`.rules`), so
:func:`.explain.recipe_error` turns pydantic's first
error into a :class:`~october.installer.core.errors.RecipeError` (file, dotted key, expected, found).
Imported only when a recipe is validated (:func:`october.installer.recipe.tomlcheck.validated`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version
from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from ...checks.contract import COMPUTE_DTYPES, FORMATS, LEVELS
from ..core.ids import FULL_SHA, SHA256
from .cuda import parse_arch_list
from .forks import INSTALL_MODES, ForkMode
from .install import ENV_NAME, RESERVED_ENV
from .jitmodules import DEFAULT_ROUTES, DTYPES, HEAD_DIMS, KINDS, ROUTES, V_FORMATS
from .tomlcheck import FORMAT_VERSION, MAX_ITEMS, MAX_KEY, MAX_KEYS, describe
from .wheel import DEFAULT_COMPILED_SOURCES
from .rules import Refused, finite_range, int_range, keyed, matches, once, one_of, parses, rule
from .types import (DIST_NAME, GB_BOUNDS, HEX64, MAX_TOKENS, MODULE_NAME, NOT_BLANK, SAFE_NAME, SAFE_NAME_PUBLISHED,
                    SDIST_VERSION, SHA_PREFIX, SHAPE_MAX, VERSION_START, ForkName, FullSha, GitUrl, IndexUrl, Int, Key,
                    Section, Sha256, Str, StrList, Table, Url, Version440, desc, relpath)


class _PinBase(Section):
    source: Str | None = None
    fetch_from: Annotated[Literal["fork", "upstream"], desc("'fork' or 'upstream'")] = "fork"


class PinCommit(_PinBase):
    commit: FullSha


class PinPrefix(_PinBase):
    prefix: Annotated[Str, desc("a lowercase hex commit prefix (7-39 chars), or commit = <40 hex>"),
                      matches(SHA_PREFIX, "a lowercase hex commit prefix of 7 to 39 characters")]
    branch: Annotated[Key, desc("the branch the prefix is resolved on"), rule(str.strip, "a non-empty branch name", pattern=NOT_BLANK)]


class PinSdist(Section):
    source: Str | None = None
    sdist: Annotated[Str, desc("the https URL of the source distribution (.tar.gz)"),
                     rule(lambda u: u.startswith("https://") and u.endswith(".tar.gz") and "/" in u[8:],
                          "an https URL of a .tar.gz source distribution", pattern=r"^https://[\s\S]*/[\s\S]*\.tar\.gz$")]
    sha256: Annotated[Str, desc("the sdist's sha256 (64 lowercase hex)"), matches(SHA256, HEX64)]
    version: Annotated[Str, desc("the release version, e.g. 0.24.0 (the clone is tagged v<version>)"),
                       matches(SDIST_VERSION, "a release version such as 0.24.0")]
    commit: Annotated[Str, desc("the 40-hex commit materialising the sdist makes"),
                      matches(FULL_SHA, "a 40-character lowercase hex commit id")]


def _pin_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "=id"
    if isinstance(value, dict):
        return "=sdist" if "sdist" in value else "=commit" if "commit" in value else "=prefix"
    return None


PinId = Annotated[Str, matches(FULL_SHA, "a 40-character lowercase hex commit id "
                                         "(or a table {prefix = ..., branch = ...})")]
PinValue = Annotated[Annotated[PinId, Tag("=id")] | Annotated[PinCommit, Tag("=commit")]
                     | Annotated[PinPrefix, Tag("=prefix")] | Annotated[PinSdist, Tag("=sdist")],
                     Discriminator(_pin_kind), desc("a 40-hex commit id or a table {prefix, branch}")]


class ForkSpec(Section):
    url: Annotated[GitUrl, desc("a git URL")]
    upstream: GitUrl | None = None
    pins: Table(PinValue)


class ForksFile(Section):
    format_version: Annotated[int, desc(f"format_version = {FORMAT_VERSION}"),
                              one_of((FORMAT_VERSION,), f"{FORMAT_VERSION} (this tool's recipe format)")]
    forks: Annotated[dict[ForkName, ForkSpec], Field(max_length=MAX_KEYS)]

    @model_validator(mode="after")
    def _upstream_pins(self) -> ForksFile:
        for fork, spec in self.forks.items():
            for name, pin in spec.pins.items():
                if isinstance(pin, _PinBase) and pin.fetch_from == "upstream" and not spec.upstream:
                    raise Refused(f"an 'upstream' URL for fork '{fork}'", "no upstream key",
                                  at=f"forks.{fork}.pins.{name}.fetch_from")
        return self


class PythonSpec(Section):
    version: Version440


class TorchSpec(Section):
    version: Version440
    index: IndexUrl | None = None
    source: Annotated[Literal["index", "system"],
                      desc("'index' (install the pinned torch) or 'system' (torch from --system-python)")] = "index"
    allow_system: bool = False


class BuildSpec(Section):
    requirements: StrList


class SourcesSpec(Section):
    index_url: Url | None = None
    extra_index_urls: Annotated[list[Url], Field(max_length=MAX_ITEMS)] = []
    find_links: Annotated[list[Url], Field(max_length=MAX_ITEMS)] = []
    no_index: bool = False

    @model_validator(mode="after")
    def _no_index_alone(self) -> SourcesSpec:
        # uv takes --no-index over every index: the ones named would be ignored without a word
        if self.no_index and (self.index_url or self.extra_index_urls):
            raise Refused("no index_url or extra_index_urls beside no_index = true (uv would ignore them)",
                          "both", at="no_index")
        return self


SubmodulePath = Annotated[Str, rule(lambda p: bool(p.strip().strip("/")) and not p.strip().strip("/").startswith("..")
                                    and "/../" not in f"/{p.strip().strip('/')}/" and not p.startswith("/"),
                                    'a submodule path relative to the fork, e.g. "3rdparty/cccl"', pattern=r"^[^/]")]
SubmoduleList = Annotated[list[SubmodulePath], Field(max_length=MAX_ITEMS),
                          once("each submodule path at most once")]
SparseDirs = Annotated[list[Annotated[Key, rule(relpath, 'a directory relative to the submodule, e.g. "include"',
                                                pattern=r"^[^/\\]")]],
                       Field(min_length=1, max_length=MAX_ITEMS,
                             description='a non-empty list of directories, e.g. ["include"]'),
                       once("each directory at most once")]
DistName = Annotated[Key, matches(DIST_NAME, "a distribution name such as 'flashinfer-python'", key=True)]
EnvName = Annotated[Key, rule(lambda k: ENV_NAME.match(k) is not None and k not in RESERVED_ENV,
                              "an environment variable name the tool does not set itself "
                              f"(not {', '.join(RESERVED_ENV)})",
                              **keyed(ENV_NAME.pattern), **{"not": {"enum": list(RESERVED_ENV)}})]
Reason = Annotated[Str, desc("the reason the stack does not need it, as a non-empty string"),
                   rule(str.strip, "the reason the stack does not need it, as a non-empty string", pattern=NOT_BLANK)]


def _submodules_kind(value: Any) -> str | None:
    return "=all" if isinstance(value, bool) else "=paths" if isinstance(value, list) else None


class ForkUseSpec(Section):
    name: Key
    pin: Key
    mode: Annotated[Literal[INSTALL_MODES],  # type: ignore[valid-type]
                    desc(f"one of {', '.join(INSTALL_MODES)}")] = ForkMode.EDITABLE.value
    deps: bool = True
    build_isolation: bool = True
    build_env: Table(Annotated[Str, desc('a string value (quote numbers: BUILD_NVEP = "0")')], key=EnvName) = {}
    nested_installs: Table(Reason, key=DistName) = {}
    submodules: Annotated[Annotated[bool, Tag("=all")] | Annotated[SubmoduleList, Tag("=paths")],
                          Discriminator(_submodules_kind),
                          desc('true, false, or a list of submodule paths such as ["3rdparty/cccl"]')] = True
    sparse: Table(SparseDirs, 'a table such as { "3rdparty/cutlass" = ["include", "tools/util/include"] }') = {}

    @model_validator(mode="after")
    def _sparse_selected(self) -> ForkUseSpec:
        selected = [p.strip().strip("/") for p in self.submodules] if isinstance(self.submodules, list) else None
        for key in self.sparse:
            sub = key.strip().strip("/") if relpath(key) else None
            if sub is None or selected is None or sub not in selected:
                raise Refused("a submodule path that the entry's submodules = [...] lists"
                              + (f" ({', '.join(selected)})" if selected else " (list the submodules by path first)"),
                              describe(key), at=f"sparse.{key}")
        for key, dirs in self.sparse.items():
            kept = [d.strip().strip("/") for d in dirs]
            nested = [f"'{inner}' inside '{outer}'" for inner in kept for outer in kept if inner.startswith(outer + "/")]
            if nested:      # git's cone keeps the outer one whole and writes no line for the inner one
                raise Refused("directories none of which lies inside another (the outer one is kept whole)",
                              "; ".join(nested), at=f"sparse.{key}")
        return self


class CudaSpec(Section):
    version: Annotated[Str, desc("a CUDA major.minor such as '12.9'"),
                       matches(re.compile(r"^\d+\.\d+$"), "a CUDA major.minor such as '12.9'")]
    arch_list: Annotated[Str, parses(parse_arch_list, "compute capabilities such as '9.0' or '8.9 9.0a'",
                                     pattern=r"[0-9]")]
    variant: Annotated[Str, matches(re.compile(r"^cu\d{3}$"), "a CUDA wheel variant such as 'cu129' or 'cu130'")]


def _wheel_filename(name: str) -> str:
    if "/" in name or "\\" in name or name.startswith("."):
        raise Refused("a plain wheel file name (it names STACK/wheels/<filename>)")
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename:
        raise Refused("a wheel filename such as 'vllm-0.18.0-cp38-abi3-manylinux_2_31_x86_64.whl'") from None
    return name


class WheelSpec(Section):
    sha256: Sha256 | None = None
    url: Annotated[Url, matches(re.compile(r"^(https?|file)://"), "an https://, http:// or file:// URL")]
    filename: Annotated[str, Field(max_length=255), AfterValidator(_wheel_filename),
                        Field(json_schema_extra={"pattern": r"^[^./\\][^/\\]*\.whl$"})]
    name: Str
    version: Version440
    cuda_variant: Str | None = None
    cudart_major: Str | None = None
    requires_torch: Annotated[Str, parses(Version, "a torch version such as '2.10.0'", pattern=VERSION_START)] | None = None
    compiled_sources: Annotated[StrList, rule(
        lambda ps: bool(ps) and all(p and not p.startswith("/") and "\\" not in p and ".." not in p.split("/")
                                    and p == p.strip("/") for p in ps),
        "a non-empty list of relative paths in the fork such as ['csrc', 'CMakeLists.txt', 'cmake']",
        minItems=1, items={"pattern": r"^[^/\\]([^\\]*[^/\\])?$"})] = list(DEFAULT_COMPILED_SOURCES)


GB = Annotated[float, finite_range(*GB_BOUNDS)]


class PreflightSpec(Section):
    uv: Annotated[Str, parses(SpecifierSet, "a version specifier such as '>=0.12.11'")] | None = None
    os: Str = "Linux"
    arch: Str = "x86_64"
    min_ram_gb: GB = 0.0
    min_disk_gb: GB = 0.0
    min_compute_capability: Annotated[Str, matches(
        re.compile(r"^\d+\.\d+$"), "a compute capability major.minor such as '8.9'")] | None = None
    need_compiler: bool = True


class JitModuleSpec(Section):
    kind: Annotated[Str, one_of(KINDS)]
    q: Annotated[Str, one_of(DTYPES)]
    k: Annotated[Str, one_of(DTYPES)]
    v: Annotated[Str, one_of(DTYPES)]
    o: Annotated[Str, one_of(DTYPES)]
    head_dim: Annotated[Int, one_of(HEAD_DIMS, "64, 128 or 256 (FlashInfer rejects > 256)")]
    posenc: Annotated[Int, one_of((0, 1, 2), "0 (none), 1 (rope llama) or 2 (alibi)")] = 0
    backend: Str = "fa2"


class JitSpec(Section):
    modules: Annotated[list[JitModuleSpec],
                       Field(max_length=MAX_ITEMS, description="an array of tables [[jit.modules]]")] = []
    builder: Annotated[Str, desc("a Python module name"),
                       matches(MODULE_NAME, "a dotted Python module name")] | None = None
    routes: Annotated[StrList, rule(                # an empty list: the default routes
        lambda rs: not rs or (all(r in ROUTES for r in rs) and "decode" in rs and len(set(rs)) == len(rs)),
        f"distinct routes from {', '.join(ROUTES)}, including decode",
        items={"enum": list(ROUTES)}, uniqueItems=True,
        anyOf=[{"maxItems": 0}, {"contains": {"const": "decode"}}])] = list(DEFAULT_ROUTES)


ShapeInt = Annotated[Int, desc("a positive integer from the model's config.json"),
                     rule(lambda v: v > 0, "a positive integer", minimum=1),
                     rule(lambda v: v <= SHAPE_MAX, f"at most {SHAPE_MAX}", maximum=SHAPE_MAX)]


class ModelConfigSpec(Section):
    num_attention_heads: ShapeInt
    num_key_value_heads: ShapeInt
    head_dim: ShapeInt
    num_hidden_layers: ShapeInt
    source: Annotated[Str, desc("where the values were read (repo, revision, file)")]


COMPUTE_TEXT = f"the dtype the engine computes in ({', '.join(COMPUTE_DTYPES)})"


class ModelSpec(Section):
    revision: Annotated[Str, desc("a 40-hex hub revision"),
                        matches(FULL_SHA, "a 40-character lowercase hex revision")]
    sha256: Table(Sha256) = {}
    compute_dtype: Annotated[Str, desc(COMPUTE_TEXT), one_of(COMPUTE_DTYPES)] | None = None
    v_format: Annotated[Str, one_of(V_FORMATS)] = "fp8_e4m3"
    config: ModelConfigSpec | None = None
    repo: Annotated[str, Field(max_length=MAX_KEY * 2, description="'org/name'"),
                    rule(lambda r: "/" in r, "a hub repository 'org/name'", pattern="/")]
    patterns: StrList


ModelFormat = Annotated[str, one_of(FORMATS, f"a model format ({', '.join(FORMATS)})")]
Tokens = Annotated[Int, rule(lambda v: v > 0, "a positive number of tokens", minimum=1),
                   rule(lambda v: v <= MAX_TOKENS, f"at most {MAX_TOKENS} tokens", maximum=MAX_TOKENS)]


class SmokeSpec(Section):
    level: Annotated[Str, one_of(LEVELS, "one of kernel, engine, reference")] | None = None
    prompt_tokens: Tokens = 8192
    max_new_tokens: Tokens = 128
    seed: Annotated[int, int_range(0, 2**32 - 1)] = 0


class ExceptionSpec(Section):
    package: Annotated[Str, matches(DIST_NAME, "a distribution name such as 'flashinfer-python'")]
    requires: Annotated[Str, matches(DIST_NAME, "a distribution name such as 'flashinfer-python'")]
    why: Annotated[Str, rule(str.strip, "the reason this requirement is left unmet", pattern=NOT_BLANK)]


class InstallSpec(Section):
    supply: Annotated[list[Annotated[Str, parses(Requirement, "a requirement such as 'nccl4py>=0.3.1'")]],
                      Field(max_length=MAX_ITEMS)] = []
    exceptions: Annotated[list[ExceptionSpec], Field(max_length=MAX_ITEMS,
                                                     description="an array of tables [[install.exceptions]]")] = []

    @field_validator("exceptions")
    @classmethod
    def _pairs_once(cls, value: list[ExceptionSpec]) -> list[ExceptionSpec]:
        pairs = [(str(canonicalize_name(e.package)), str(canonicalize_name(e.requires))) for e in value]
        if len(set(pairs)) != len(pairs):
            raise Refused("each (package, requires) pair at most once", str(pairs))
        return value


class RecipeFile(Section):
    """A recipe file (``recipes/<name>.toml``); its keys in the order they are checked."""

    model_config = ConfigDict(title="october recipe")

    format_version: Annotated[int, desc(f"format_version = {FORMAT_VERSION}"),
                              one_of((FORMAT_VERSION,), f"{FORMAT_VERSION} (this tool's recipe format)")]
    name: Annotated[Str, matches(SAFE_NAME, "a plain name: letters, digits, '.', '_' or '-', starting with a letter "
                                 "or digit, at most 64 characters (it names files: locks/<name>.pylock.toml)",
                                 SAFE_NAME_PUBLISHED)]
    description: Str = ""
    forks_file: Annotated[Str, desc("a string: the path of forks.toml, relative to the recipe")] | None = None
    python: PythonSpec
    torch: TorchSpec
    build: BuildSpec | None = None
    sources: SourcesSpec | None = None
    forks: Annotated[list[ForkUseSpec], Field(min_length=1, max_length=MAX_ITEMS,
                                              description="an array of tables [[forks]] with at least one fork")]
    cuda: CudaSpec | None = None
    wheel: WheelSpec | None = None
    preflight: PreflightSpec | None = None
    jit: JitSpec | None = None
    models: Annotated[dict[ModelFormat, ModelSpec], Field(max_length=MAX_KEYS)] = {}
    smoke: SmokeSpec | None = None
    install: InstallSpec | None = None

    @model_validator(mode="after")
    def _jit_needs_shapes(self) -> RecipeFile:
        for fmt, sel in self.models.items() if self.jit is not None else ():
            if sel.compute_dtype is None:
                raise Refused(COMPUTE_TEXT, "the key is missing", at=f"models.{fmt}.compute_dtype")
            if sel.config is None:
                raise Refused("a table", "the key is missing", at=f"models.{fmt}.config")
        names = [f.name for f in self.forks]
        if len(set(names)) != len(names):
            raise Refused("each fork at most once", str(names), at="forks")
        return self
