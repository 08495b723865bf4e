"""The built-stack cache's key (:func:`key_for`): every input that decides what the env and install steps produce,
the stack's own path replaced by a placeholder (:func:`templated`, undone by :func:`placed`), so that a stack
elsewhere with the same inputs has the same key; and the tool's own code (:func:`tool_code`), which an entry and a
smoke receipt name."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from .. import __version__
from ..core.hashing import fingerprint
from .uvcmd import uv_exe

BUILT_FORMAT = 1
PLACEHOLDER = "@OCTOBER_STACK_ROOT@"
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")        # needs no quoting in a file:// URL, no regex meaning


def path_ok(root: Path) -> bool:
    return bool(SAFE_PATH.match(str(root))) and PLACEHOLDER not in str(root)


def root_pattern(root: str) -> re.Pattern[bytes]:
    # the root itself, not a longer name that starts with it (/tmp/st1 is not /tmp/st10)
    return re.compile(re.escape(root.encode()) + rb"(?![A-Za-z0-9._+-])")


def templated(value: Any, root: Path) -> Any:
    """``value`` (JSON) with the stack root replaced by the placeholder in every string."""
    text = json.dumps(value, sort_keys=True)
    return json.loads(root_pattern(str(root)).sub(PLACEHOLDER.encode(), text.encode()).decode())


def placed(value: Any, root: Path) -> Any:
    """The inverse of :func:`templated` for ``root``."""
    return json.loads(json.dumps(value).replace(PLACEHOLDER, str(root)))


def stat_identity(paths: list[Path]) -> list[list[Any]]:
    """(path, inode, size, mtime_ns) of each file (a missing one: None): a reinstall changes them."""
    out: list[list[Any]] = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append([str(p), st.st_ino, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([str(p), None])
    return out


def system_torch_identity(facts: Mapping[str, Any]) -> list[Any]:
    """The site-provided torch's facts plus the stat signatures of the files that say which torch it is."""
    init = Path(str(facts.get("file") or facts.get("path") or ""))
    torch_dir = init.parent
    files = [init, torch_dir / "version.py", *sorted(torch_dir.glob("_C*.so"))]
    site = facts.get("dist_site")
    if site and facts.get("dist_version"):
        info = Path(str(site)) / f"torch-{facts['dist_version']}.dist-info"
        files += [info / "RECORD", info / "METADATA"]
    exe = facts.get("python_path") or facts.get("executable")
    if exe:
        files.append(Path(os.path.realpath(str(exe))))
    return [dict(facts), stat_identity(files)]


def key_for(root: Path, *, env_inputs: Any, install_inputs: Mapping[str, Any], wheel_sha256: str | None,
            forks: Mapping[str, Mapping[str, Any]], uv_line: str,
            system_torch: Mapping[str, Any] | None = None, signer: str | None = None,
            files: Mapping[str, str | None] | None = None) -> str:
    """The key of a stack at ``root``: the env and install steps' inputs (the recipe's ``wheel_sha256`` pin
    standing for the wheel's hash: the wheel step runs after env), each fork's ``{commit, submodules, sparse}``,
    uv (:func:`uv_identity`), this tool's code, a site-provided torch's identity, the signing key's id
    (``signer``: :func:`october.installer.core.cachekey.key_id`) and the sha256 of each local file a requirement
    names by path or ``file:`` URL (``files``: :func:`october.installer.lock.asked.asked_files`; the line alone does
    not say which bytes it installs)."""
    install = dict(install_inputs)
    install.pop("wheel_sha256", None)
    parts: dict[str, Any] = {
        "env": templated(env_inputs, root), "install": templated(install, root),
        "wheel": wheel_sha256,
        "forks": {name: {"commit": rec["commit"], "submodules": dict(rec["submodules"]),
                         **({"sparse": {k: list(v) for k, v in sorted(rec["sparse"].items())}} if rec.get("sparse") else {})}
                  for name, rec in sorted(forks.items())},
        "uv": uv_identity(uv_line),
        "tool": tool_code(),
    }
    if system_torch is not None:
        parts["system_torch"] = system_torch_identity(system_torch)
    if files:
        parts["files"] = dict(sorted(files.items()))
    parts["signer"] = signer        # the signing key's id: each key's entries apart, another's never replaced or taken
    return fingerprint({"format": BUILT_FORMAT, "tool": __version__, **parts})


def uv_identity(uv_line: str) -> list[Any]:
    """uv as the key names it: its ``--version`` line and its binary's size.  Not its path or inode: every
    tool install brings its own copy of the same uv, and an identity by path made every reinstall build again."""
    try:
        size: int | None = os.path.getsize(os.path.realpath(uv_exe()))
    except OSError:
        size = None
    return [uv_line, size]


@functools.cache
def tool_code() -> str:
    """sha256 of the tool's own code: an entry made by other code is never taken, whatever the version
    says; a smoke receipt names the code that judged the stack (a no-op re-run never reads it)."""
    import october

    return code_digest(Path(october.__file__).resolve().parent)


def code_digest(top: Path) -> str:
    """sha256 of every ``.py`` under ``top`` by its path there (links followed: a checkout links installer/;
    ``__pycache__`` and ``_data`` are not code; the folders above ``top`` do not count)."""
    h = hashlib.sha256()
    files = [Path(d, f) for d, dirs, names in os.walk(top, followlinks=True)
             for f in names if f.endswith(".py")
             if not {"__pycache__", "_data"} & set(Path(d).relative_to(top).parts)]
    for path in sorted(files, key=lambda p: p.relative_to(top).as_posix()):
        h.update(path.relative_to(top).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()
