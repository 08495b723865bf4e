"""The source commit a vLLM wheel was built from, read from its ``vllm/_version.py``.

setuptools-scm writes ``__commit_id__ = commit_id = 'gbcf2be961'`` there (git-describe's ``g`` prefix,
abbreviated); older templates have none, and a development build then names the node in its local
version (``0.18.1.dev3+gbcf2be961.d20260101``).  The file is parsed with :mod:`ast`, never executed.
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import WheelError

VERSION_FILE = "vllm/_version.py"
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
_NODE_IN_VERSION = re.compile(r"(?:^|[+.])g([0-9a-f]{7,40})(?:$|[.])")


@dataclass(frozen=True)
class VersionInfo:
    version: str | None
    commit: str | None          # hex, abbreviated or full, without the "g" prefix
    raw_commit: str | None      # as written in the file
    where: str                  # "commit_id" | "version" | "none"


def _constants(source: str) -> dict[str, object]:
    """Module-level ``name = <literal>`` assignments (chained targets too)."""
    tree = ast.parse(source)
    found: dict[str, object] = {}
    for node in tree.body:
        targets: list[ast.expr]
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        try:
            literal = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        for t in targets:
            if isinstance(t, ast.Name):
                found[t.id] = literal
    return found


def normalize_commit(raw: str) -> str | None:
    """``'gbcf2be961'`` -> ``'bcf2be961'``; a bare hex id is kept; anything else is None."""
    text = raw.strip().lower().removeprefix("g")      # "g" is no hex digit: a bare hex id never starts with it
    return text if _HEX.match(text) else None


def parse_version_file(source: str) -> VersionInfo:
    try:
        consts = _constants(source)
    except SyntaxError as exc:
        raise WheelError(f"{VERSION_FILE} in the base wheel is not valid Python",
                         expected="a setuptools-scm version file", found=f"a syntax error: {exc.msg}",
                         fix="use a vLLM release wheel built by vLLM's own setup.py") from None
    version = next((str(consts[k]) for k in ("__version__", "version") if isinstance(consts.get(k), str)), None)
    for key in ("__commit_id__", "commit_id"):
        raw = consts.get(key)
        if isinstance(raw, str) and (commit := normalize_commit(raw)):
            return VersionInfo(version, commit, raw, "commit_id")
    if version and (m := _NODE_IN_VERSION.search(version.lower())):
        return VersionInfo(version, m.group(1), f"g{m.group(1)}", "version")
    return VersionInfo(version, None, None, "none")


def read_version_info(wheel: Path) -> VersionInfo:
    """Parse ``vllm/_version.py`` straight out of the wheel (zip) without extracting it."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                data = zf.read(VERSION_FILE)
            except KeyError:
                raise WheelError(f"the base wheel {wheel.name} has no {VERSION_FILE}",
                                 expected=f"{VERSION_FILE} written by setuptools-scm (it names the source commit)",
                                 found="no such file in the wheel",
                                 fix="use a vLLM wheel built by vLLM's setup.py (PyPI or wheels.vllm.ai)") from None
    except zipfile.BadZipFile as exc:
        raise WheelError(f"the base wheel {wheel.name} is not a readable zip", expected="a wheel (zip archive)",
                         found=str(exc), fix="delete it and re-run to download it again") from None
    return parse_version_file(data.decode("utf-8", errors="replace"))
