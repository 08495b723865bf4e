"""What a JIT build asks and what its answer must be: the request each recipe module becomes, the
builder's result read and judged (trust nothing it says: each requested module back once, its
library inside the workspace, hashed here), the modules already verified (in the workspace or the
shared cache), and recording the modules (shared cache, FlashInfer's AOT directory, the workspace
manifest).  The ``jit`` step (``steps/jit.py``) runs the builder and turns these answers into its
result; nothing here knows of steps."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...checks.jit_build import EXIT_NOT_ASYMMETRIC, RESULT_FORMAT
from ..core import jsonread
from ..core.cpus import available_cpus
from ..core.errors import CommandFailed, JitError
from ..core.filetrust import FileTrust
from ..core.hashing import sha256_file
from ..pyenv import stackenv
from .cache import SharedJitCache
from .integrity import Untrusted, aot_path, read_manifest, write_manifest

if TYPE_CHECKING:
    from ..recipe import JitModule


DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV",
               "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST")


def builder_env(root: Path, arch_list: str, code_root: Callable[[], Path], environ: Mapping[str, str]) -> dict[str, str]:
    """The stack's own runtime environment (``root``/stack-env.json, written by the env step) laid over
    ``environ`` (without :data:`DROPPED_ENV`), plus ``PYTHONPATH`` = ``code_root()`` (so the builder
    module is found; asked only once the arch list is the recipe's, ``arch_list``) and ``MAX_JOBS`` (the caller's,
    else the CPUs this process may use: :func:`october.installer.core.cpus.available_cpus`)."""
    stack = stackenv.load(root)
    if stack.get("FLASHINFER_CUDA_ARCH_LIST") != arch_list:
        raise JitError("the stack's runtime environment names other CUDA architectures than the recipe",
                       expected=f"FLASHINFER_CUDA_ARCH_LIST={arch_list} (recipe [cuda] arch_list)",
                       found=f"{stack.get('FLASHINFER_CUDA_ARCH_LIST')!r} in {stackenv.env_file(root)}",
                       fix="re-run october_setup (the env step rewrites the stack environment)")
    env = stackenv.apply(stack, {k: v for k, v in environ.items() if k not in DROPPED_ENV})
    env["PYTHONPATH"] = str(code_root())
    env.setdefault("MAX_JOBS", str(available_cpus()))      # the cgroup quota's, not the host's count
    return env


def write_request(work: Path, requests: list[dict[str, Any]]) -> tuple[Path, Path]:
    """The builder's request file in ``work`` (any earlier result removed); -> (request, result) paths."""
    work.mkdir(parents=True, exist_ok=True)
    request_path, result_path = work / "request.json", work / "result.json"
    result_path.unlink(missing_ok=True)
    request_path.write_text(json.dumps({"modules": requests, "result": str(result_path)}, indent=1),
                            encoding="utf-8")
    return request_path, result_path


def module_request(i: int, m: "JitModule") -> dict[str, Any]:
    return {"id": f"m{i}", **module_fields(m)}


def module_fields(jm: "JitModule") -> dict[str, Any]:
    return {"kind": jm.kind, "q": jm.q, "k": jm.k, "v": jm.v, "o": jm.o, "head_dim": jm.head_dim,
            "posenc": jm.posenc, "backend": jm.backend}


def version_from_paths(workspace: Path, modules: list[dict[str, Any]]) -> str | None:
    """``.cache/flashinfer/<version>/<arch>/cached_ops/...``: the FlashInfer version that built them."""
    for m in modules:
        parts = Path(m["path"]).relative_to(workspace).parts
        if len(parts) > 2 and parts[:2] == (".cache", "flashinfer"):
            return parts[2]
    return None


@dataclass
class JitBuild:
    """What the jit step's preparation found: the modules already verified (``ready``, by shared-cache
    key) and, when some are still to build, the builder's command (``argv`` None: nothing to build)."""

    workspace: Path
    aot: Path | None
    requests: list[dict[str, Any]]
    keys: list[str | None]
    inputs: Mapping[str, Any] | None
    cache: SharedJitCache | None
    ready: dict[str, dict[str, Any]]
    discarded: list[dict[str, str]]
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    result_path: Path | None = None


# ------------------------------------------------------------------ modules already verified


@dataclass(frozen=True)
class ReadyEvent:
    """Something to say about a module found ready: ``refused`` (a shared-cache entry that did not
    verify: the message) or ``restored`` (the module's URI)."""

    kind: str
    text: str


def find_ready(workspace: Path, keys: Sequence[str | None], cache: SharedJitCache | None,
               say: Callable[[ReadyEvent], None]) -> dict[str, dict[str, Any]]:
    """key -> module record for each module already verified in the workspace or restored from the
    shared cache (verified by hash there); ``say`` hears about each as it happens (a refused cache entry,
    a restored module), so nothing said is lost when a later restore fails."""
    ready: dict[str, dict[str, Any]] = {}
    manifest = read_manifest(workspace)       # after the untrusted are discarded: every listed file verifies
    by_key = {rec["key"]: (uri, rec) for uri, rec in manifest.items()
              if rec.get("key") and (workspace / rec["path"]).is_file()}
    for key in keys:
        if key is None or key in ready:
            continue
        if key in by_key:
            uri, rec = by_key[key]
            ready[key] = {"uri": uri, "path": str(workspace / rec["path"]), "sha256": rec["sha256"],
                          "cached": True, "source": "workspace"}
            continue
        if cache is None:
            continue
        found = cache.restore(key, workspace)
        if found.refused:
            say(ReadyEvent("refused", found.refused))
        if found.restored is not None:
            got = found.restored
            ready[key] = {"uri": got.uri, "path": str(workspace / got.lib), "sha256": got.sha256,
                          "cached": True, "source": "shared-cache"}
            say(ReadyEvent("restored", got.uri))
    return ready


# ------------------------------------------------------------------ the builder's answer


def read_result(path: Path, failure: CommandFailed | None) -> dict[str, Any]:
    """The builder's JSON result at ``path`` (``failure``: the builder exited non-zero)."""
    try:
        data = jsonread.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        found = f"{type(exc).__name__} reading {path}"
        if failure is not None:
            found += f"; the builder exited {failure.returncode}:\n{failure.tail}"
        raise JitError("the JIT builder left no result", expected=f"a JSON result in {path}", found=found,
                       fix=f"read the log {failure.log_path if failure else path.parent}") from None
    if not isinstance(data, dict) or data.get("format") != RESULT_FORMAT:
        raise JitError("the JIT builder's result has an unknown format", expected=f"format {RESULT_FORMAT}",
                       found=repr(data.get("format") if isinstance(data, dict) else data)[:100],
                       fix="use a builder from this version of the tool")
    return data


def require_success(result: Mapping[str, Any], failure: CommandFailed | None, log_path: Path,
                    recipe: Path | None = None) -> None:
    """The builder ran and exited 0: raises :class:`JitError` for a problem it reported (the installed
    FlashInfer not the asymmetric fork, a module the fork cannot build, a refused start) or a non-zero exit
    (``log_path``: the step's log; ``recipe``: its file, named when a module it asks for is the problem)."""
    if result.get("problem"):
        said = str(result["problem"])
        if failure is not None and failure.returncode == EXIT_NOT_ASYMMETRIC and said.startswith("the recipe asks"):
            raise JitError("the installed FlashInfer fork cannot build a module the recipe's [jit] asks for",
                           expected="a fork whose wrappers take every module of [[jit.modules]] (and its routes)",
                           found=said,
                           fix=f"leave that module out of [[jit.modules]] in {recipe or 'the recipe'} (or its route), "
                               "or pin a fork commit that has it; the install is not at fault, so a re-run alone "
                               "fails the same way")
        if failure is not None and failure.returncode == EXIT_NOT_ASYMMETRIC:
            raise JitError("the installed FlashInfer is not the asymmetric fork",
                           expected="a BatchDecodeWithPagedKVCacheWrapper.plan that accepts k_data_type/"
                                    "v_data_type, named or forwarded to _plan_impl (checks/flashinfer_asym.py), and an "
                                    "asymmetric paged prefill where the recipe asks for one",
                           found=str(result["problem"]),
                           fix="re-run october_setup so the install step lays the fork over whatever "
                               "replaced it, and check the recipe pins the asymmetric fork commit")
        raise JitError("the JIT builder refused to run", expected="a clean start of the builder",
                       found=str(result["problem"]), fix=f"read {log_path}")
    if failure is not None:
        raise JitError("building the JIT modules failed", expected="the builder to exit 0",
                       found=f"exit code {failure.returncode}; last lines:\n{failure.tail}",
                       fix=f"read the full log {failure.log_path}") from failure


def check_modules(workspace: Path, requests: list[dict[str, Any]], wanted: Sequence["JitModule"],
                  result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every requested module came back once, inside the workspace, with the hash we compute."""
    got: dict[str, list[Mapping[str, Any]]] = {}
    for entry in result.get("modules", []):
        got.setdefault(str(entry.get("id")), []).append(entry)
    problems: list[str] = []
    modules: list[dict[str, Any]] = []
    uris: set[str] = set()
    for req, jm in zip(requests, wanted):
        label = (f"{jm.kind} q={jm.q} k={jm.k} v={jm.v} o={jm.o} head_dim={jm.head_dim} posenc={jm.posenc}")
        entries = got.get(req["id"], [])
        if len(entries) != 1:
            problems.append(f"{label}: {'not produced' if not entries else f'{len(entries)} results'}")
            continue
        e = entries[0]
        uri, path = str(e.get("uri") or ""), Path(str(e.get("path") or ""))
        if not uri or uri in uris:
            problems.append(f"{label}: {'no URI' if not uri else f'URI {uri} given twice'}")
            continue
        uris.add(uri)
        try:
            inside = path.resolve().is_relative_to(workspace.resolve())
        except OSError:
            inside = False
        if not path.is_file() or not inside:
            problems.append(f"{label}: library {path} " + ("is outside the workspace" if path.is_file()
                                                             else "does not exist"))
            continue
        digest = sha256_file(path)
        if e.get("sha256") != digest:
            problems.append(f"{label}: the builder reported sha256 {e.get('sha256')}, the file has {digest}")
            continue
        modules.append({"uri": uri, "path": str(path), "sha256": digest, **module_fields(jm),
                        "cached": bool(e.get("cached"))})
    if problems:
        raise JitError(f"{len(problems)} JIT module(s) missing or wrong:\n"
                       + "\n".join(f"  - {p}" for p in problems),
                       expected=f"{len(requests)} built libraries under {workspace}, one per recipe entry",
                       found=f"{len(modules)} good", fix="read the jit log; a module the builder skipped is "
                       "not built, and the stack cannot serve it")
    return modules


def check_unchanged(modules: list[dict[str, Any]], keys: Sequence[str | None],
                    ready: Mapping[str, Mapping[str, Any]]) -> None:
    """A module found ready before the build keeps its source, and the bytes verified then."""
    for m, k in zip(modules, keys):
        if k in ready:
            m["source"] = ready[k]["source"]
        if m["cached"] and k in ready and m["sha256"] != ready[k]["sha256"]:
            raise JitError(f"JIT module {m['uri']} changed while the builder ran",
                           expected=f"sha256 {ready[k]['sha256']} (verified before the build)",
                           found=f"sha256 {m['sha256']}", fix="re-run october_setup; do not share STACK/jit "
                           "between concurrent runs")


# ------------------------------------------------------------------ recording


def record_modules(build: JitBuild, modules: list[dict[str, Any]], aot: Path | None, trust: FileTrust) -> int:
    """Each module stored in the shared cache (unless it came from there), placed in FlashInfer's AOT
    directory ``aot``, listed in the workspace manifest, and its digest kept for the no-op's verify;
    -> how many were stored in the shared cache."""
    workspace, keys, inputs, cache = build.workspace, build.keys, build.inputs, build.cache
    stored = 0
    for m, k in zip(modules, keys):
        m.setdefault("source", "workspace" if m["cached"] else "built")
        if cache is not None and k is not None and inputs is not None and m["source"] != "shared-cache":
            stored += cache.store(k, inputs, workspace, m["uri"], Path(m["path"]), m["sha256"])
    if aot is not None:
        for m in modules:
            m["aot_path"] = str(place_aot(aot, m["uri"], Path(m["path"]), m["sha256"]))
    records = {m["uri"]: {"path": Path(m["path"]).relative_to(workspace).as_posix(), "sha256": m["sha256"],
                          **({"key": k} if k else {})} for m, k in zip(modules, keys)}
    write_manifest(workspace, records, aot)
    for m in modules:       # what the no-op's verify trusts by stat signature (core/filetrust.py)
        for path in [Path(m["path"])] + ([Path(m["aot_path"])] if m.get("aot_path") else []):
            trust.digest(path, "sha256", sha256_file)
    return stored


def place_aot(aot: Path, uri: str, lib: Path, sha256: str) -> Path:
    """Put the verified library where FlashInfer loads prebuilt modules without running ninja: its
    runtime ninja rebuilds a module whose build files name another stack's paths, so a module reused
    from the shared cache is only reused at runtime from here (measured on the H200)."""
    target = aot_path(aot, uri)
    if aot.parent.is_symlink():         # flashinfer/data: the install's own links live in it, so it is not replaced
        raise JitError(f"FlashInfer's data folder {aot.parent} is a link (to {os.readlink(aot.parent)})",
                       expected="a folder of the checkout (the AOT copies are placed in it)",
                       found="a link: the verified libraries would be written where it points",
                       fix=f"remove the link (`rm {aot.parent}`) and re-run october_setup (the install makes the "
                           "folder again)")
    for part in (aot, target.parent, target):      # a link here: the copy would be written through it, elsewhere
        if part.is_symlink():
            part.unlink()
    if target.is_file() and sha256_file(target) == sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(lib, tmp)
    os.replace(tmp, target)
    got = sha256_file(target)
    if got != sha256:
        raise JitError(f"the AOT copy of {uri} does not match what was verified", expected=f"sha256 {sha256}",
                       found=f"sha256 {got} at {target}", fix="check the disk holding the FlashInfer checkout; "
                       "re-run october_setup")
    return target


def checkout_aot_dir(checkout: Path) -> Path:
    """FlashInfer's own rule for a checkout's AOT directory (``<package>/data/aot``; ``flashinfer/data/``
    is ignored by the fork's git, so the checkout stays clean)."""
    return checkout / "flashinfer" / "data" / "aot"


# ------------------------------------------------------------------ discarded, not yet recorded


def pending_discards(path: Path, bad: Sequence[Untrusted]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The discards no jit result has recorded yet (kept at ``path``) and those of ``bad`` added to them,
    written back before anything is removed (recorded by the run that finishes the step);
    -> (earlier, every)."""
    earlier = read_discards(path)
    now = [{"path": str(b.path), "reason": b.reason} for b in bad]
    every = earlier + [d for d in now if d not in earlier]
    if now:
        write_discards(path, every)
    return earlier, every


def read_discards(path: Path) -> list[dict[str, str]]:
    try:
        got = jsonread.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    items = got.get("discarded") if isinstance(got, dict) else None
    return [{"path": str(d["path"]), "reason": str(d["reason"])} for d in items or ()
            if isinstance(d, dict) and "path" in d and "reason" in d]


def write_discards(path: Path, items: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"discarded": items}, indent=1), encoding="utf-8")
    os.replace(tmp, path)           # never seen half-written
