"""What ``current verify`` found: each :class:`Difference` (what, expected, found, the command that puts it back)
and the :class:`VerifyReport` of a stack, as lines, JSON or one error naming every difference."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..core.errors import LockError

MAX_FILES_LISTED = 20


def listed(items: Sequence[Any], sep: str, show: Callable[[Any], str] = str) -> str:
    """The first MAX_FILES_LISTED of ``items``, each as ``show`` gives it, joined by ``sep``, then how many
    more (``show`` runs on the listed ones only)."""
    more = f"{sep}... {len(items) - MAX_FILES_LISTED} more" if len(items) > MAX_FILES_LISTED else ""
    return sep.join(show(item) for item in items[:MAX_FILES_LISTED]) + more


@dataclass(frozen=True)
class Difference:
    check: str          # steps | forks | distributions | files | torch | system | wheel | jit | lock | receipt | stack-env | env
    what: str
    expected: str
    found: str
    fix: str = ""       # the command that puts it back (verify/fix.py)

    def line(self) -> str:
        return f"[{self.check}] {self.what}: expected {self.expected}, found {self.found}"

    def as_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class VerifyReport:
    stack: Path
    lock_sha256: str
    checked: Mapping[str, int]                    # check -> how many items were looked at
    differences: tuple[Difference, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.differences

    def as_json(self) -> dict[str, Any]:
        return {"stack": str(self.stack), "ok": self.ok, "lock_sha256": self.lock_sha256,
                "checked": dict(self.checked), "differences": [d.as_json() for d in self.differences]}

    def error(self) -> LockError:
        lines = "\n".join(f"  - {d.line()}" for d in self.differences)
        todo = list(dict.fromkeys(d.fix for d in self.differences if d.fix))     # in order, each once
        fix = todo[0] if len(todo) == 1 else "\n     ".join(f"{i}. {t}" for i, t in enumerate(todo, 1))
        return LockError(f"the stack {self.stack} differs from its lock in {len(self.differences)} place(s):\n{lines}",
                         fix=(fix + "\n     then run `current verify` again") if fix else None)


def format_report(report: VerifyReport) -> Sequence[str]:
    c = report.checked
    lines = [f"checked {c['forks']} fork(s) ({c['build_outputs']} build output(s)), {c['distributions']} "
             f"distribution(s), {c['files']} file(s), "
             f"{c['jit']} JIT librar{'y' if c['jit'] == 1 else 'ies'}, {c['wheel']} base wheel"]
    if report.ok:
        lines.append(f"stack {report.stack} matches its lock (sha256 {report.lock_sha256[:12]})")
    return lines
