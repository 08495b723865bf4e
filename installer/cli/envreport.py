"""``current env``: an environment report to paste into a bug report (cf. ``vllm collect-env``): the tool,
the machine and its tools (the preflight probes), a stack's recipe, lock, forks, Python and torch (read
from files, nothing imported), and the variables that change behaviour.  It never holds secrets: token
variables show as set / not set, and every value passes through :func:`october.installer.core.redact.redact`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core import jsonread
from ..core.hashing import sha256_file
from ..core.paths import StackPaths
from ..core.redact import SECRET_ENV_VARS, env_secrets, redact
from ..core.runner import Runner

SHOWN_ENV_VARS = ("CUDA_HOME", "CUDA_VISIBLE_DEVICES", "OCTOBER_CACHE_DIR", "UV_CACHE_DIR", "HF_HOME",
                  "HF_ENDPOINT", "HF_HUB_OFFLINE", "KNLP_KV_FIXTURES", "FLASHINFER_WORKSPACE_BASE",
                  "FLASHINFER_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "CC", "CXX")
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.M)


def _tool(fact: Any) -> str | None:
    return f"{fact.version or fact.line} ({fact.path})" if fact.present else None


def stack_report(stack: Path) -> dict[str, Any]:
    """What the stack's own files say; nothing is run and nothing is imported."""
    from ..git.clonecheck import GitInspectError
    from ..git.worktree import dirty_entries, head_commit
    from ..pyenv.dists import installed

    paths = StackPaths(stack.resolve())
    out: dict[str, Any] = {"path": str(paths.root), "recipe": None, "lock_sha256": None, "forks": [],
                           "python": None, "torch": None, "packages": {},
                           "finished": paths.setup_receipt.is_file() and paths.pylock.is_file()}
    locked: dict[str, Any] = {}
    if paths.setup_receipt.is_file():
        try:
            receipt = jsonread.loads(paths.setup_receipt.read_text(encoding="utf-8"))
            if not isinstance(receipt, dict):
                raise TypeError("the setup receipt is not a JSON object")
            out["recipe"] = receipt.get("recipe") if isinstance(receipt.get("recipe"), dict) else None
            out["setup_tool"] = receipt.get("tool")
            locked = {f["name"]: f.get("commit") for f in receipt.get("forks") or [] if isinstance(f, dict)}
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            locked = {}
    if paths.pylock.is_file():
        out["lock_sha256"] = sha256_file(paths.pylock)
    for name in sorted(set(locked) | {p.name for p in paths.src.iterdir() if p.is_dir() and not p.name.startswith(".")}
                       if paths.src.is_dir() else set(locked)):
        where = paths.fork(name)
        head = head_commit(where)
        try:
            dirty = bool(dirty_entries(where)) if head else None
        except GitInspectError:             # no git on PATH, or a clone git cannot read: not known
            dirty = None
        out["forks"].append({"name": name, "locked": locked.get(name), "head": head, "dirty": dirty})
    cfg = paths.env / "pyvenv.cfg"
    if cfg.is_file():
        for line in cfg.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() in ("version", "version_info"):
                out["python"] = value.strip()
    dists = installed(paths.env) if paths.env.is_dir() else {}
    if (torch := dists.get("torch")) is not None:
        cuda = None
        version_py = torch.site / "torch" / "version.py"
        if version_py.is_file():
            m = _TORCH_CUDA.search(version_py.read_text(encoding="utf-8", errors="replace"))
            cuda = m.group(1) if m else None
        out["torch"] = {"version": torch.version, "cuda": cuda}
    out["packages"] = {name: dists[name].version for name in ("vllm", "flashinfer-python", "triton", "transformers")
                       if name in dists}
    jit = paths.state / "jit.json"
    if jit.is_file():
        try:
            out["jit_modules"] = len(jsonread.loads(jit.read_text(encoding="utf-8")).get("outputs", {}).get("modules", []))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError):
            out["jit_modules"] = None
    return out


def recipe_report(name_or_path: str) -> dict[str, Any]:
    from ..core.errors import OctoberError
    from ..recipe import load_recipe

    try:
        r = load_recipe(name_or_path)
    except OctoberError as exc:
        return {"name": name_or_path, "error": exc.what}
    return {"name": r.name, "path": str(r.path), "sha256": r.sha256, "description": r.description,
            "torch": r.torch.version, "cuda": r.cuda.version if r.cuda else None,
            "arch_list": r.cuda.flashinfer_arch_list if r.cuda else None}


def environment_vars(environ: Mapping[str, str]) -> dict[str, str]:
    secrets = env_secrets(dict(environ))
    shown = {k: redact(environ[k], secrets) for k in SHOWN_ENV_VARS if k in environ}
    return shown | {k: "set (value not shown)" if environ.get(k) else "not set" for k in SECRET_ENV_VARS}


def collect(stack: Path | None, recipe: str | None, runner: Runner,
            environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    from ..core.version import tool_commit, tool_version
    from ..machine.probes import gather_facts

    env = dict(os.environ if environ is None else environ)
    f = gather_facts(stack or Path.cwd(), runner, environ=env)
    report: dict[str, Any] = {
        "october": {"version": tool_version(), "git_commit": tool_commit()},
        "machine": {"os": f"{f.os} {f.os_release}", "arch": f.arch, "cpus": f.cpu_count,
                    "ram_gb": round(f.ram_bytes / 1e9, 1) if f.ram_bytes else None, "tool_python": f.python},
        "gpus": [{"name": g.name, "compute_capability": g.compute_capability, "driver": g.driver} for g in f.gpus],
        "tools": {"nvidia-smi": _tool(f.nvidia_smi), "nvcc": _tool(f.nvcc), "cc": _tool(f.cc),
                  "c++": _tool(f.cxx), "git": _tool(f.git), "uv": _tool(f.uv)},
        "stack": stack_report(stack) if stack is not None else None,
        "recipe": recipe_report(recipe) if recipe is not None else None,
        "environment": environment_vars(env),
    }
    secrets = env_secrets(env)
    text = json.dumps(report)
    if any(s in text for s in secrets):  # belt and braces: a value we did not expect carried a token
        report = json.loads(redact(text, secrets))
    return report


def format_text(report: Mapping[str, Any]) -> Sequence[str]:
    """``key: value`` lines, grouped, in the order a maintainer reads them."""
    lines: list[str] = []

    def put(key: str, value: Any) -> None:
        lines.append(f"{key + ':':24} {'-' if value in (None, '', [], {}) else value}")

    o = report["october"]
    put("october", f"{o['version']}" + (f" (git {o['git_commit']})" if o.get("git_commit") else ""))
    m = report["machine"]
    put("os", m["os"])
    put("arch / cpus / ram", f"{m['arch']} / {m['cpus']} / {m['ram_gb']} GB")
    put("tool python", m["tool_python"])
    for i, g in enumerate(report["gpus"]):
        put(f"gpu {i}", f"{g['name']} (sm {g['compute_capability']}, driver {g['driver']})")
    if not report["gpus"]:
        put("gpu", "none found")
    for name, value in report["tools"].items():
        put(name, value or "not found")
    if rec := report.get("recipe"):
        put("recipe", f"{rec['name']} sha256 {rec.get('sha256')}" if "sha256" in rec else f"{rec['name']}: {rec.get('error')}")
    if s := report.get("stack"):
        put("stack", s["path"] + ("" if s.get("finished") else
                                  " (not a finished october stack: no receipts/setup.json and pylock.toml yet)"))
        r = s.get("recipe") or {}
        put("stack recipe", f"{r.get('name')} sha256 {r.get('sha256')}" if r else None)
        put("lock sha256", s.get("lock_sha256"))
        for fk in s.get("forks", []):
            state = "" if fk.get("head") is None else (" (dirty)" if fk.get("dirty") else " (clean)")
            moved = "" if not fk.get("locked") or fk.get("locked") == fk.get("head") else f", locked {fk['locked']}"
            put(f"fork {fk['name']}", f"{fk.get('head') or 'no clone'}{state}{moved}")
        put("stack python", s.get("python"))
        t = s.get("torch") or {}
        put("torch", f"{t['version']} (CUDA {t.get('cuda') or 'none'})" if t else None)
        for name, version in (s.get("packages") or {}).items():
            put(name, version)
        if "jit_modules" in s:
            put("jit modules", s["jit_modules"])
    for k, v in report["environment"].items():
        put(k, v)
    return lines
