"""``--version``: the tool's version, and its git commit when it runs from a checkout, read from the
``.git`` files (linked worktrees too) without starting git, so it works where git is not installed."""

from __future__ import annotations

from pathlib import Path

from .. import __version__
from .ids import FULL_SHA
from .resources import checkout_root


def tool_version() -> str:
    from importlib import metadata  # not on a no-op re-run, which reads clones' HEADs from here

    try:
        return metadata.version("october")
    except metadata.PackageNotFoundError:
        return __version__


def git_dir(root: Path) -> Path | None:
    """``root/.git``, or the directory a ``.git`` file points at (worktrees, submodules)."""
    dot = root / ".git"
    if dot.is_dir():
        return dot
    if dot.is_file():  # a linked worktree or submodule: "gitdir: PATH"
        text = dot.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            gd = Path(text[len("gitdir:"):].strip())
            return gd if gd.is_absolute() else (root / gd).resolve()
    return None


def common_dir(gd: Path) -> Path:
    """The directory a linked worktree's git directory shares with its main repository (``gd/commondir``:
    config, refs, objects), else ``gd`` itself (also where ``commondir`` cannot be read)."""
    try:
        return gd / (gd / "commondir").read_text(encoding="utf-8", errors="replace").strip()
    except (OSError, ValueError):
        return gd


def head_commit(root: Path) -> str | None:
    """The commit checked out at ``root`` (a 40-hex id), or None when it cannot be read."""
    gd = git_dir(root)
    if gd is None:
        return None
    try:
        head = (gd / "HEAD").read_text(encoding="utf-8").strip()
        if FULL_SHA.match(head):
            return head
        if not head.startswith("ref: "):
            return None
        ref = head[len("ref: "):].strip()
        common = common_dir(gd)
        for base in (gd, common):
            loose = base / ref
            if loose.is_file():
                value = loose.read_text(encoding="utf-8").strip()
                return value if FULL_SHA.match(value) else None
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref and FULL_SHA.match(parts[0]):
                    return parts[0]
    except OSError:
        return None
    return None


def tool_commit() -> str | None:
    root = checkout_root()
    return head_commit(root) if root is not None else None


def version_line(prog: str) -> str:
    commit = tool_commit()
    where = f" (git {commit[:12]})" if commit else ""
    return f"{prog} {tool_version()}{where}"
