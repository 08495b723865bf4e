"""What each setup step hands to the steps after it: one frozen dataclass per step.

A result is saved in the step's done-marker (``STACK/.state/<step>.json``, key
``outputs``) by ``to_json`` and read back by ``from_json``, which refuses anything
it does not recognise (:mod:`october.installer.steps.markerjson`): the step is then not done.  ``chain_json`` is the part of a result that later
steps may depend on: the engine chains every later step's fingerprint on it, so
a step that runs again and produces the same result leaves later steps cached,
and one that produces a different result re-runs them.  Values that change on
every run without meaning anything to a later step (free disk space, a file's
mtime, whether a JIT module came from a cache) stay out of it.

Later steps read these types through ``StepContext.result`` / ``StepContext.need``.
This module imports nothing of the engine or of the steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from . import markerjson as mj

JSON = Any


class WholeChained:
    """A result whose whole ``to_json`` later steps may depend on: its ``chain_json``."""

    def to_json(self) -> dict[str, JSON]:
        raise NotImplementedError

    def chain_json(self) -> JSON:
        return self.to_json()


# ------------------------------------------------------------------------ preflight


@dataclass(frozen=True)
class PreflightResult:
    """The machine's facts (``MachineFacts`` as JSON, plus ``system_torch`` for a site-provided
    torch), the receipt's machine summary, every check's verdict, what ``--skip-preflight``
    skipped, and size/mtime of each probed program (for ``verify``)."""

    step: ClassVar[str] = "preflight"
    facts: Mapping[str, JSON]
    machine: Mapping[str, JSON]
    checks: tuple[Mapping[str, JSON], ...]
    skipped: tuple[str, ...]
    tools: Mapping[str, JSON]

    def tool(self, name: str) -> Mapping[str, JSON]:
        fact = self.facts.get(name)
        return fact if isinstance(fact, Mapping) else {}

    @property
    def nvcc_path(self) -> str | None:
        path = self.tool("nvcc").get("path")
        return str(path) if path else None

    @property
    def nvcc_version(self) -> str | None:
        v = self.tool("nvcc").get("version")
        return str(v) if v else None

    @property
    def gpus(self) -> tuple[Mapping[str, JSON], ...]:
        gpus = self.facts.get("gpus") or []
        return tuple(g for g in gpus if isinstance(g, Mapping))

    def to_json(self) -> dict[str, JSON]:
        return {"facts": dict(self.facts), "machine": dict(self.machine), "checks": [dict(c) for c in self.checks],
                "skipped": list(self.skipped), "tools": dict(self.tools)}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "PreflightResult":
        return cls(facts=mj.obj(d, "facts"), machine=mj.obj(d, "machine"), checks=mj.objs(d, "checks"),
                   skipped=mj.texts(d, "skipped"), tools=mj.obj(d, "tools"))

    def chain_json(self) -> JSON:
        # what later steps read are the facts; the verdicts and the skip list are the receipt's
        # (its own inputs), and free disk space changes on every probe
        return {k: v for k, v in self.facts.items() if k != "disk_free_bytes"}


# ---------------------------------------------------------------------------- fetch


@dataclass(frozen=True)
class ForkRecord:
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
        out: dict[str, JSON] = {"path": self.path, "url": self.url, "upstream": self.upstream, "pin": self.pin,
                                "requested": self.requested, "branch": self.branch, "commit": self.commit,
                                "submodules": dict(self.submodules)}
        if self.submodule_paths is not None:
            out["submodule_paths"] = list(self.submodule_paths)
        if self.sparse:
            out["sparse"] = {k: list(v) for k, v in self.sparse.items()}
        return {**out, "dirty_allowed": self.dirty_allowed, "dirty": self.dirty}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "ForkRecord":
        if not isinstance(d, Mapping):
            raise mj.MalformedResult("a fork record is not an object")
        return cls(path=mj.text(d, "path"), url=mj.text(d, "url"), upstream=mj.opt_text(d, "upstream"),
                   pin=mj.text(d, "pin"), requested=mj.opt_text(d, "requested"), branch=mj.opt_text(d, "branch"),
                   commit=mj.text(d, "commit"),
                   submodules=mj.text_map(d, "submodules", required=False),
                   submodule_paths=mj.texts(d, "submodule_paths") if "submodule_paths" in d else None,
                   dirty_allowed=mj.flag(d, "dirty_allowed"), dirty=mj.flag(d, "dirty"),
                   sparse=_sparse_map(mj.obj(d, "sparse", required=False)))


def _sparse_map(m: Mapping[str, JSON]) -> dict[str, tuple[str, ...]]:
    return {str(k): mj.texts(m, str(k)) for k in m}


@dataclass(frozen=True)
class FetchResult(WholeChained):
    step: ClassVar[str] = "fetch"
    forks: Mapping[str, ForkRecord]             # fork name -> its checkout

    def to_json(self) -> dict[str, JSON]:
        return {"forks": {name: rec.to_json() for name, rec in self.forks.items()}}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "FetchResult":
        return cls(forks={str(name): ForkRecord.from_json(rec) for name, rec in mj.obj(d, "forks").items()})


# ------------------------------------------------------------------------------ env


@dataclass(frozen=True)
class EnvResult(WholeChained):
    """The stack env: its interpreter, torch (``torch_source`` "system" with ``system_torch``, the
    interpreter's own torch, for a site-provided torch), and ``stack_env`` (STACK/stack-env.json:
    path, activate, sha256, env)."""

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

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"path": self.path, "python": self.python, "python_version": self.python_version,
                                "torch": self.torch}
        if self.torch_source is not None:
            out.update({"torch_cuda": self.torch_cuda, "torch_source": self.torch_source,
                        "system_torch": dict(self.system_torch or {})})
        if self.built_from is not None:
            out["built_from"] = self.built_from
        return {**out, "site_packages": list(self.site_packages), "stack_env": dict(self.stack_env)}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "EnvResult":
        return cls(path=mj.text(d, "path"), python=mj.text(d, "python"),
                   python_version=mj.opt_text(d, "python_version"), torch=mj.opt_text(d, "torch"),
                   site_packages=mj.texts(d, "site_packages"),
                   stack_env=mj.obj(d, "stack_env"), torch_cuda=mj.opt_text(d, "torch_cuda"),
                   torch_source=mj.opt_text(d, "torch_source"), system_torch=mj.opt_obj(d, "system_torch"),
                   built_from=mj.opt_text(d, "built_from"))


# ---------------------------------------------------------------------------- wheel


@dataclass(frozen=True)
class WheelResult:
    """The verified base wheel in ``STACK/wheels``: ``wheel_sha256`` is the one name of its hash
    from the wheel step through install, lock and receipt.  ``trust`` is "pinned" | "locked" |
    "tofu"; ``checks`` what was verified; ``wheel_tags`` WHEEL's Tag lines; ``retag`` an accepted
    linux -> manylinux retag; ``extensions`` the compiled extension modules (module, path);
    ``source_equivalence`` the compiled-source comparison with the fork, or None."""

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

    def to_json(self) -> dict[str, JSON]:
        return {"path": self.path, "filename": self.filename, "url": self.url, "wheel_sha256": self.wheel_sha256,
                "size": self.size, "mtime_ns": self.mtime_ns, "trust": self.trust,
                "source_commit": self.source_commit, "checks": list(self.checks),
                "wheel_tags": list(self.wheel_tags), "retag": [dict(r) for r in self.retag],
                "extensions": [dict(e) for e in self.extensions],
                "source_equivalence": dict(self.source_equivalence) if self.source_equivalence is not None else None}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "WheelResult":
        return cls(path=mj.text(d, "path"), filename=mj.text(d, "filename"), url=mj.text(d, "url"),
                   wheel_sha256=mj.text(d, "wheel_sha256"), size=mj.integer(d, "size"),
                   mtime_ns=mj.integer(d, "mtime_ns"), trust=mj.text(d, "trust"),
                   source_commit=mj.opt_text(d, "source_commit"), checks=mj.texts(d, "checks"),
                   wheel_tags=mj.texts(d, "wheel_tags", required=False),
                   retag=mj.objs(d, "retag", required=False), extensions=mj.objs(d, "extensions", required=False),
                   source_equivalence=mj.opt_obj(d, "source_equivalence"))

    def chain_json(self) -> JSON:
        return {k: v for k, v in self.to_json().items() if k != "mtime_ns"}   # a re-placed file, same bytes


@dataclass(frozen=True)
class NoWheel(WholeChained):
    """The wheel step's result for a recipe without ``[wheel]``."""

    step: ClassVar[str] = "wheel"
    skipped: str

    def to_json(self) -> dict[str, JSON]:
        return {"skipped": self.skipped}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "NoWheel":
        return cls(skipped=mj.text(d, "skipped"))


def wheel_result_from_json(d: Mapping[str, JSON]) -> WheelResult | NoWheel:
    return NoWheel.from_json(d) if isinstance(d, Mapping) and "skipped" in d else WheelResult.from_json(d)


# -------------------------------------------------------------------------- install


@dataclass(frozen=True)
class InstalledFork:
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

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "path": self.path, "commit": self.commit, "mode": self.mode, "dist": self.dist,
                "version": self.version, "editable": self.editable, "args": list(self.args), "env": dict(self.env)}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "InstalledFork":
        return cls(name=mj.text(d, "name"), path=mj.text(d, "path"), commit=mj.text(d, "commit"),
                   mode=mj.text(d, "mode"), dist=mj.opt_text(d, "dist"), version=mj.opt_text(d, "version"),
                   editable=mj.flag(d, "editable", True), args=mj.texts(d, "args", required=False),
                   env=mj.text_map(d, "env", required=False))


@dataclass(frozen=True)
class InstallResult(WholeChained):
    """What the install step left in the env and what its guards found.  ``wheel_path`` /
    ``wheel_sha256``: the base wheel the precompiled install used (hashed again at use)."""

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

    def to_json(self) -> dict[str, JSON]:
        return {"nested_installs": dict(self.nested_installs), "consistency": dict(self.consistency),
                "imports_with_stack_env": dict(self.imports_with_stack_env), "order": list(self.order),
                "forks": [f.to_json() for f in self.forks], "torch": self.torch,
                "wheel_path": self.wheel_path, "wheel_sha256": self.wheel_sha256,
                "vllm_base_commit": self.vllm_base_commit, "vllm_base_commit_source": self.vllm_base_commit_source,
                "vllm_base_commit_detail": self.vllm_base_commit_detail, "checks": dict(self.checks)}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "InstallResult":
        return cls(forks=tuple(InstalledFork.from_json(f) for f in mj.objs(d, "forks")), order=mj.texts(d, "order"),
                   torch=mj.text(d, "torch"), checks=mj.text_map(d, "checks"),
                   nested_installs=mj.obj(d, "nested_installs", required=False),
                   consistency=mj.obj(d, "consistency", required=False),
                   imports_with_stack_env=mj.text_map(d, "imports_with_stack_env", required=False),
                   wheel_path=mj.opt_text(d, "wheel_path"), wheel_sha256=mj.opt_text(d, "wheel_sha256"),
                   vllm_base_commit=mj.opt_text(d, "vllm_base_commit"),
                   vllm_base_commit_source=mj.opt_text(d, "vllm_base_commit_source"),
                   vllm_base_commit_detail=mj.opt_text(d, "vllm_base_commit_detail"))


# ------------------------------------------------------------------------------ jit


@dataclass(frozen=True)
class JitResult:
    """The built modules in ``STACK/jit``: each module record has ``uri``, ``path``, ``sha256``
    (the library's), the request fields, ``cached``/``source`` (where it came from this time) and
    ``aot_path`` where it was placed for FlashInfer's loader."""

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

    def to_json(self) -> dict[str, JSON]:
        return {"workspace": self.workspace, "arch_list": self.arch_list, "modules": [dict(m) for m in self.modules],
                "cached": self.cached, "builder": self.builder, "flashinfer_version": self.flashinfer_version,
                "discarded": [dict(x) for x in self.discarded],
                "shared_cache": dict(self.shared_cache) if self.shared_cache is not None else None}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "JitResult":
        modules = mj.objs(d, "modules")
        for m in modules:
            for key in ("uri", "path", "sha256"):
                mj.text(m, key)
        return cls(workspace=mj.text(d, "workspace"), arch_list=mj.text(d, "arch_list"), modules=modules,
                   cached=mj.flag(d, "cached"), builder=mj.text(d, "builder"),
                   flashinfer_version=mj.opt_text(d, "flashinfer_version"),
                   discarded=mj.objs(d, "discarded", required=False), shared_cache=mj.opt_obj(d, "shared_cache"))

    def chain_json(self) -> JSON:
        # where each module came from this time (workspace, shared cache, a fresh build) is not
        # something a later step depends on: the library's path and hash are
        keep = ("uri", "path", "sha256", "aot_path")
        return {"workspace": self.workspace, "arch_list": self.arch_list, "builder": self.builder,
                "flashinfer_version": self.flashinfer_version,
                "modules": [{k: m.get(k) for k in keep} for m in self.modules]}


# ----------------------------------------------------------------------- lock, receipt


@dataclass(frozen=True)
class LockResult(WholeChained):
    step: ClassVar[str] = "lock"
    path: str
    sha256: str                                 # of STACK/pylock.toml
    packages: int

    def to_json(self) -> dict[str, JSON]:
        return {"path": self.path, "sha256": self.sha256, "packages": self.packages}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "LockResult":
        return cls(path=mj.text(d, "path"), sha256=mj.text(d, "sha256"), packages=mj.integer(d, "packages"))


@dataclass(frozen=True)
class ReceiptResult(WholeChained):
    step: ClassVar[str] = "receipt"
    path: str
    sha256: str                                 # of STACK/receipts/setup.json

    def to_json(self) -> dict[str, JSON]:
        return {"path": self.path, "sha256": self.sha256}

    @classmethod
    def from_json(cls, d: Mapping[str, JSON]) -> "ReceiptResult":
        return cls(path=mj.text(d, "path"), sha256=mj.text(d, "sha256"))
