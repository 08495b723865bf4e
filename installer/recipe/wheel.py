"""``[wheel]``: the upstream base wheel the vLLM fork's compiled parts come from."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..core.ids import SHA256
from .tomlcheck import MAX_URL, Table, version_key

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


def parse_wheel(top: Table) -> BaseWheel | None:
    wt = top.table("wheel", required=False)
    if wt is None:
        return None
    sha = wt.get("sha256", str, required=False)
    if sha is not None and not SHA256.match(sha):
        raise wt.err("sha256", "64 lowercase hex characters", sha)
    url = wt.get("url", str, max_len=MAX_URL)
    if not re.match(r"^(https?|file)://", url):
        raise wt.err("url", "an https://, http:// or file:// URL", url)
    fname = _filename(wt)
    req_torch = _requires_torch(wt)
    compiled = _compiled_sources(wt)
    wheel = BaseWheel(url=url, filename=fname,
                      name=wt.get("name", str), version=version_key(wt, "version") or "",
                      sha256=sha, cuda_variant=wt.get("cuda_variant", str, required=False),
                      cudart_major=wt.get("cudart_major", str, required=False),
                      requires_torch=req_torch, compiled_sources=compiled)
    wt.done()
    return wheel


def _filename(wt: Table) -> str:
    fname: str = wt.get("filename", str, max_len=255)
    if "/" in fname or "\\" in fname or fname.startswith("."):
        raise wt.err("filename", "a plain wheel file name (it names STACK/wheels/<filename>)", fname)
    try:
        parse_wheel_filename(fname)
    except InvalidWheelFilename:
        raise wt.err("filename", "a wheel filename such as 'vllm-0.18.0-cp38-abi3-manylinux_2_31_x86_64.whl'",
                     fname) from None
    return fname


def _requires_torch(wt: Table) -> str | None:
    req_torch: str | None = wt.get("requires_torch", str, required=False)
    if req_torch is not None:
        try:
            Version(req_torch)
        except InvalidVersion:
            raise wt.err("requires_torch", "a torch version such as '2.10.0'", req_torch) from None
    return req_torch


def _compiled_sources(wt: Table) -> tuple[str, ...]:
    compiled: list[Any] | None = wt.get("compiled_sources", list, required=False)
    if compiled is None:
        return DEFAULT_COMPILED_SOURCES
    if not compiled or not all(isinstance(p, str) and p and not p.startswith("/") and "\\" not in p
                               and ".." not in p.split("/") and p == p.strip("/") for p in compiled):
        raise wt.err("compiled_sources", "a non-empty list of relative paths in the fork such as "
                     "['csrc', 'CMakeLists.txt', 'cmake']", compiled)
    return tuple(compiled)
