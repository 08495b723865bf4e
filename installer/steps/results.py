"""What each setup step hands to the steps after it: one frozen dataclass per step.

A result is saved in the step's done-marker (``STACK/.state/<step>.json``, key ``outputs``) by ``to_json``
and read back by ``from_json``, which refuses anything it does not recognise (the step is then not done).
``chain_json`` is the part later steps depend on (their fingerprints chain on it): values that change on
every run without meaning anything to a later step (free disk, a file's mtime) stay out of it.  This module
imports nothing of the engine or of the steps.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping, TypeVar

from . import markerjson as mj

JSON = Any
R = TypeVar("R", bound="Record")


def _json(value: Any) -> JSON:
    """A field's value as JSON: a record by its ``to_json``, tuples as lists, mappings as dicts."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    return value


def _text_lists(m: Mapping[str, JSON]) -> dict[str, tuple[str, ...]]:
    return {str(name): mj.texts(m, str(name)) for name in m}


def _text_maps(m: Mapping[str, JSON]) -> dict[str, Mapping[str, str]]:
    return {str(name): mj.text_map(m, str(name)) for name in m}


# a field's annotation -> its reader (the marker's dict, the key, whether the key is required: a field
# with a default may be absent); bool fields are read by mj.flag with their default
READERS: dict[str, Callable[[Mapping[str, JSON], str, bool], JSON]] = {
    "str": lambda d, k, _: mj.text(d, k),
    "str | None": lambda d, k, _: mj.opt_text(d, k),
    "int": lambda d, k, _: mj.integer(d, k),
    "Mapping[str, JSON]": lambda d, k, required: mj.obj(d, k, required=required),
    "Mapping[str, JSON] | None": lambda d, k, _: mj.opt_obj(d, k),
    "Mapping[str, str]": lambda d, k, required: mj.text_map(d, k, required=required),
    "Mapping[str, str] | None": lambda d, k, _: mj.text_map(d, k) if d.get(k) is not None else None,
    "tuple[str, ...]": lambda d, k, required: mj.texts(d, k, required=required),
    "tuple[str, ...] | None": lambda d, k, _: mj.texts(d, k) if k in d else None,
    "tuple[Mapping[str, JSON], ...]": lambda d, k, required: mj.objs(d, k, required=required),
    "Mapping[str, tuple[str, ...]]": lambda d, k, required: _text_lists(mj.obj(d, k, required=required)),
    "Mapping[str, Mapping[str, str]] | None": lambda d, k, _: _text_maps(mj.obj(d, k)) if k in d else None,
    "Mapping[str, ForkRecord]": lambda d, k, _: {
        str(name): ForkRecord.from_json(rec) for name, rec in mj.obj(d, k).items()},
    "tuple[InstalledFork, ...]": lambda d, k, _: tuple(InstalledFork.from_json(f) for f in mj.objs(d, k)),
}


class Record:
    """A frozen dataclass stored as JSON: every field under its name, read back by its annotation's reader."""

    def to_json(self) -> dict[str, JSON]:
        return {f.name: _json(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls: type[R], d: Mapping[str, JSON]) -> R:
        if not isinstance(d, Mapping):
            raise mj.MalformedResult(f"a {cls.__name__} is not an object")
        values: dict[str, JSON] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            has_default = f.default is not MISSING or f.default_factory is not MISSING
            if f.type == "bool":
                values[f.name] = mj.flag(d, f.name, f.default if f.default is not MISSING else False)
            else:
                values[f.name] = READERS[str(f.type)](d, f.name, not has_default)
        return cls(**values)


class WholeChained(Record):
    """A result whose whole ``to_json`` later steps may depend on: its ``chain_json``."""

    def chain_json(self) -> JSON:
        return self.to_json()


@dataclass(frozen=True)
class PreflightResult(Record):
    """The machine's facts (``MachineFacts`` as JSON, plus ``system_torch`` for a site-provided torch), the
    receipt's machine summary, every check's verdict, what was skipped, and each probed program's stat."""

    step: ClassVar[str] = "preflight"
    facts: Mapping[str, JSON]
    machine: Mapping[str, JSON]
    checks: tuple[Mapping[str, JSON], ...]
    skipped: tuple[str, ...]
    tools: Mapping[str, JSON]

    def tool(self, name: str) -> Mapping[str, JSON]:
        fact = self.facts.get(name)
        return fact if isinstance(fact, Mapping) else {}

    def nvcc(self, key: str) -> str | None:
        """nvcc's ``path`` or ``version`` as the preflight found it."""
        value = self.tool("nvcc").get(key)
        return str(value) if value else None

    @property
    def gpus(self) -> tuple[Mapping[str, JSON], ...]:
        gpus = self.facts.get("gpus") or []
        return tuple(g for g in gpus if isinstance(g, Mapping))

    def chain_json(self) -> JSON:
        # later steps read the facts (the verdicts are the receipt's); free disk changes on every probe; which
        # copy of uv ran is not theirs to read (each tool install has its own): its version line is
        out = dict(self.legacy_chain_json())
        if isinstance(uv := out.get("uv"), Mapping):
            out["uv"] = {k: v for k, v in uv.items() if k not in ("path", "source")}
        return out

    def legacy_chain_json(self) -> dict[str, JSON]:
        """What october chained on before session 25 (uv's path with it): the markers it wrote still match."""
        return {k: v for k, v in self.facts.items() if k != "disk_free_bytes"}


@dataclass(frozen=True)
class ForkRecord(Record):
    """One fork as checked out in ``STACK/src/<name>``."""

    path: str
    url: str                                    # redacted
    upstream: str | None
    pin: str
    requested: str | None
    branch: str | None
    commit: str
    submodules: Mapping[str, str] = field(default_factory=dict)   # path -> commit, as checked out
    submodule_paths: tuple[str, ...] | None = None                # the recipe's selection; None: all
    dirty_allowed: bool = False
    dirty: bool = False
    sparse: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # submodule path -> directories kept

    def to_json(self) -> dict[str, JSON]:
        out = super().to_json()
        if self.submodule_paths is None:
            del out["submodule_paths"]
        if not self.sparse:
            del out["sparse"]
        return out


@dataclass(frozen=True)
class FetchResult(WholeChained):
    step: ClassVar[str] = "fetch"
    forks: Mapping[str, ForkRecord]             # fork name -> its checkout


@dataclass(frozen=True)
class EnvResult(Record):
    """The stack env: its interpreter, torch (``torch_source`` "system" with ``system_torch``, the
    interpreter's own torch, for a site-provided torch), and ``stack_env`` (STACK/stack-env.json and
    STACK/activate: path, activate, sha256, activate_sha256 -- absent from a record older than it -- env)."""

    step: ClassVar[str] = "env"
    path: str
    python: str
    python_version: str | None
    torch: str | None
    site_packages: tuple[str, ...]
    stack_env: Mapping[str, JSON]
    torch_cuda: str | None = None
    torch_source: str | None = None
    system_torch: Mapping[str, JSON] | None = None
    built_from: str | None = None       # the built-stack cache entry the env was copied from (its key)
    scaffold: Mapping[str, str] | None = None   # pyvenv.cfg and bin/python* as left (pyenv/scaffold.py)
    scripts: Mapping[str, str] | None = None    # the activation scripts and lib64 as left (scaffold.scripts)

    def chain_json(self) -> JSON:
        """All of it but activate's sha256 and the scaffold records: activate is made from ``env`` (chained),
        and a record older than either keeps the chain the later steps' markers were made on."""
        out = self.to_json()
        out["stack_env"] = {k: v for k, v in out["stack_env"].items() if k != "activate_sha256"}
        out.pop("scaffold", None)
        out.pop("scripts", None)
        return out

    def to_json(self) -> dict[str, JSON]:
        out = super().to_json()
        if self.torch_source is None:       # an env with its own torch
            del out["torch_cuda"], out["torch_source"], out["system_torch"]
        else:
            out["system_torch"] = dict(self.system_torch or {})
        if self.built_from is None:
            del out["built_from"]
        if self.scaffold is None:
            del out["scaffold"]
        if self.scripts is None:
            del out["scripts"]
        return out


@dataclass(frozen=True)
class WheelResult(Record):
    """The verified base wheel in ``STACK/wheels`` (``wheel_sha256``: its hash's one name through install,
    lock and receipt; ``trust``: "pinned" | "locked" | "tofu"; ``retag``: an accepted linux -> manylinux
    retag; ``source_equivalence``: the compiled-source comparison with the fork, or None)."""

    step: ClassVar[str] = "wheel"
    path: str
    filename: str
    url: str                                    # redacted
    wheel_sha256: str
    size: int
    mtime_ns: int
    trust: str
    source_commit: str | None
    checks: tuple[str, ...]
    wheel_tags: tuple[str, ...] = ()
    retag: tuple[Mapping[str, JSON], ...] = ()
    extensions: tuple[Mapping[str, JSON], ...] = ()
    source_equivalence: Mapping[str, JSON] | None = None

    def chain_json(self) -> JSON:
        return {k: v for k, v in self.to_json().items() if k != "mtime_ns"}   # a re-placed file, same bytes


@dataclass(frozen=True)
class NoWheel(WholeChained):
    """The wheel step's result for a recipe without ``[wheel]``."""

    step: ClassVar[str] = "wheel"
    skipped: str


def wheel_result_from_json(d: Mapping[str, JSON]) -> WheelResult | NoWheel:
    return NoWheel.from_json(d) if isinstance(d, Mapping) and "skipped" in d else WheelResult.from_json(d)


@dataclass(frozen=True)
class InstalledFork(Record):
    """One fork as installed (editable) into the stack env."""

    name: str
    path: str
    commit: str
    mode: str
    dist: str | None = None
    version: str | None = None
    editable: bool = True
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InstallResult(Record):
    """What the install step left in the env and what its guards found.  ``wheel_path`` /
    ``wheel_sha256``: the base wheel the precompiled install used (hashed again at use).  ``build_outputs``:
    fork -> {path in its checkout: ``sha256:<hex>`` | ``link:<target>``}, the files git does not track that
    its install made (:mod:`october.installer.git.buildoutputs`); None in a result of a tool before them.
    ``installed``: every distribution in the env as the install left it (name -> version), and ``settings``: the
    digest of the install fields it installed with; the env step's verify holds the env to both (a ``uv pip
    install`` by hand, a fork's ``deps`` changed); None in a result of a tool before them."""

    step: ClassVar[str] = "install"
    forks: tuple[InstalledFork, ...]
    order: tuple[str, ...]
    torch: str
    checks: Mapping[str, str]
    nested_installs: Mapping[str, JSON] = field(default_factory=dict)
    consistency: Mapping[str, JSON] = field(default_factory=dict)
    imports_with_stack_env: Mapping[str, str] = field(default_factory=dict)
    wheel_path: str | None = None
    wheel_sha256: str | None = None
    vllm_base_commit: str | None = None
    vllm_base_commit_source: str | None = None
    vllm_base_commit_detail: str | None = None
    build_outputs: Mapping[str, Mapping[str, str]] | None = None
    installed: Mapping[str, str] | None = None
    settings: str | None = None             # install.plan.install_settings of the recipe it installed
    pth: Mapping[str, str] | None = None    # every .pth file of the env's site-packages it left -> sha256
    records: Mapping[str, str] | None = None    # every distribution's RECORD as it left it -> sha256
    venv_files: Mapping[str, str] | None = None     # files no RECORD owns that uv's own venv has -> sha256
    site_entries: Mapping[str, str] | None = None   # each top-level entry of site-packages -> dir, file or link

    OWN: ClassVar[tuple[str, ...]] = ("build_outputs", "installed", "settings", "pth", "records",
                                      "venv_files", "site_entries")   # None: before them

    def to_json(self) -> dict[str, JSON]:
        out = super().to_json()
        for key in self.OWN:
            if out[key] is None:
                del out[key]
        return out

    def chain_json(self) -> JSON:
        # no later step reads a checkout's build outputs (the jit step reads its own AOT copies), nor what the
        # env step's verify holds the env to (the lock step lists the env itself)
        return {k: v for k, v in self.to_json().items() if k not in self.OWN}


@dataclass(frozen=True)
class JitResult(Record):
    """The built modules in ``STACK/jit``: each module record has ``uri``, ``path``, ``sha256`` (the
    library's), the request fields, ``cached``/``source`` (where it came from this time) and ``aot_path``."""

    step: ClassVar[str] = "jit"
    workspace: str
    arch_list: str
    modules: tuple[Mapping[str, JSON], ...]
    cached: bool
    builder: str
    flashinfer_version: str | None
    discarded: tuple[Mapping[str, JSON], ...] = ()
    shared_cache: Mapping[str, JSON] | None = None

    @property
    def libraries(self) -> list[dict[str, str]]:
        """``[{uri, sha256}]``: what the lock and the receipt record."""
        return [{"uri": str(m["uri"]), "sha256": str(m["sha256"])} for m in self.modules]

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "JitResult":
        result = super().from_json(d)
        for m in result.modules:
            for key in ("uri", "path", "sha256"):
                mj.text(m, key)
        return result

    def chain_json(self) -> JSON:
        # later steps depend on each library's path and hash, not on where it came from this time
        keep = ("uri", "path", "sha256", "aot_path")
        return {"workspace": self.workspace, "arch_list": self.arch_list, "builder": self.builder,
                "flashinfer_version": self.flashinfer_version,
                "modules": [{k: m.get(k) for k in keep} for m in self.modules]}


@dataclass(frozen=True)
class LockResult(WholeChained):
    step: ClassVar[str] = "lock"
    path: str
    sha256: str                                 # of STACK/pylock.toml
    packages: int


@dataclass(frozen=True)
class ReceiptResult(WholeChained):
    step: ClassVar[str] = "receipt"
    path: str
    sha256: str                                 # of STACK/receipts/setup.json


def _check_readers(records: list[type] | None = None) -> None:
    """Every field of every record (default: all) has a reader: an annotation without one fails at import,
    not as a step that silently re-runs because its marker can never be read back."""
    todo = list(Record.__subclasses__()) if records is None else list(records)
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if dataclasses.is_dataclass(cls):
            missing = [f"{f.name}: {f.type}" for f in fields(cls) if f.type != "bool" and str(f.type) not in READERS]
            if missing:
                raise TypeError(f"{cls.__name__}: no marker reader for {', '.join(missing)}")


_check_readers()
