"""Console output: step progress, details in --verbose, nothing but errors in --quiet.

On a terminal a long step shows live progress: a bar with bytes, rate and time left for
transfers (the base wheel, git fetches, model files, hashing) and a done / total bar for
counted work (JIT compile jobs); otherwise a spinner with the latest line of the command it is
running.  In a log or pipe the same progress becomes a plain line at every tenth, so a CI log
shows it without a flood.  Command output lines are recognised here (git's ``Receiving objects:
45% (450/1000), 1.20 GiB | 30.00 MiB/s``, ninja's ``[12/40] ...``), so the steps need not know.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, ProgressColumn, Task,
                           TextColumn, TimeRemainingColumn, TransferSpeedColumn)
from rich.text import Text

GIT_PROGRESS = re.compile(r"^(?:remote: )?(?P<what>Receiving objects|Resolving deltas|Counting objects|"
                          r"Compressing objects|Updating files|Checking out files):\s+(?P<pct>\d+)% "
                          r"\((?P<done>\d+)/(?P<total>\d+)\)(?:, (?P<transfer>[\d.]+ [KMGT]?i?B(?: \| [\d.]+ "
                          r"[KMGT]?i?B/s)?))?")
NINJA_PROGRESS = re.compile(r"^\[(?P<done>\d+)/(?P<total>\d+)\]\s")


def parse_progress(line: str) -> tuple[str, str, float, float, str] | None:
    """(key, label, done, total, unit) from a command's progress line, or None.  ``unit`` is "B" for
    bytes and "" for a count.  git counts objects; the bytes received so far and git's own rate
    ride in the label (``git: receiving objects, 1.20 GiB | 30.00 MiB/s``)."""
    m = GIT_PROGRESS.match(line.strip())
    if m:
        key = f"git: {m.group('what').lower()}"
        label = f"{key}, {m.group('transfer')}" if m.group("transfer") else key
        return (key, label, float(m.group("done")), float(m.group("total")), "")
    m = NINJA_PROGRESS.match(line.strip())
    if m:
        return ("compile jobs", "compile jobs", float(m.group("done")), float(m.group("total")), "")
    return None


class _Amount(ProgressColumn):
    """Bytes (``1.2/3.4 GB``) for transfers, ``12/40`` for counts."""

    def __init__(self) -> None:
        super().__init__()
        self._bytes, self._count = DownloadColumn(), MofNCompleteColumn()

    def render(self, task: Task) -> Text:
        column = self._bytes if task.fields.get("unit") == "B" else self._count
        return Text(str(column.render(task)))


class _Rate(ProgressColumn):
    def __init__(self) -> None:
        super().__init__()
        self._speed = TransferSpeedColumn()

    def render(self, task: Task) -> Text:
        return self._speed.render(task) if task.fields.get("unit") == "B" else Text("")


class ConsoleReporter:
    def __init__(self, *, quiet: bool = False, verbose: bool = False, console: Console | None = None) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self.console = console or Console(file=sys.stderr, highlight=False, soft_wrap=True)
        self._status: Any = None
        self._bars: Progress | None = None
        self._tasks: dict[str, Any] = {}
        self._tenths: dict[str, int] = {}
        self._step = ""

    @property
    def live(self) -> bool:
        """Bars and spinners only on a terminal, and not under --quiet / --verbose."""
        return not self.quiet and not self.verbose and self.console.is_terminal

    def _say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False)

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
        self._tasks.clear()
        self._tenths.clear()

    def step_start(self, name: str, reason: str) -> None:
        if reason in ("", "not done yet"):
            why = "starting"
        elif reason.startswith("an earlier step ("):
            why = f"starting ({reason.removeprefix('an ')})"
        else:
            why = f"running again: {reason}"
        self._say(f"==> {name}: {why}")
        self._step = name
        if self.live:
            self._status = self.console.status(f"{name} ...", spinner="dots")
            self._status.start()

    def transfer(self, label: str, done: float, total: float | None, unit: str = "B", *,
                 key: str | None = None) -> None:
        """Progress of one piece of work: ``unit`` "B" for bytes (a bar with rate and time left),
        "" for a count (done / total).  ``key`` names the bar when the label changes as it goes."""
        key = key or label
        if self.quiet:
            return
        if self.live:
            if self._bars is None:
                if self._status is not None:
                    self._status.stop()
                    self._status = None
                self._bars = Progress(TextColumn("    {task.description}"), BarColumn(), _Amount(), _Rate(),
                                      TimeRemainingColumn(), console=self.console, transient=False)
                self._bars.start()
            task = self._tasks.get(key)
            if task is None:
                task = self._tasks[key] = self._bars.add_task(label, total=total or None, unit=unit)
            self._bars.update(task, completed=done, total=total or None, description=label)
            return
        if total:
            tenth = min(10, int(done * 10 // total))
            if self._tenths.get(key) != tenth:
                self._tenths[key] = tenth
                amount = (f"{done / 1e6:.1f} of {total / 1e6:.1f} MB" if unit == "B"
                          else f"{int(done)} of {int(total)}")
                self._say(f"    {label}: {tenth * 10}% ({amount})")

    def progress(self, line: str) -> None:
        """The latest output line of the running command: a bar when it reports progress,
        else the spinner's text (on a terminal)."""
        parsed = parse_progress(line)
        if parsed is not None:
            key, label, done, total, unit = parsed
            where = f"{self._step}: " if self._step else ""
            self.transfer(where + label, done, total, unit, key=where + key)
            return
        if self._status is not None and line.strip():
            self._status.update(f"{self._step}: {line.strip()[:100]}")

    def step_skip(self, name: str) -> None:
        self._say(f"==> {name}: already done (inputs unchanged)")

    def step_done(self, name: str, seconds: float) -> None:
        self._stop()
        self._say(f"    {name}: ok in {seconds:.1f}s")

    def info(self, text: str) -> None:
        self._say(f"    {text}")

    def detail(self, text: str) -> None:
        if self.verbose and not self.quiet:
            self.console.print(f"      {text}", markup=False)

    def warn(self, text: str) -> None:
        self.console.print(f"warning: {text}", markup=False, style="yellow")

    def error(self, title: str, text: str) -> None:
        self._stop()
        self.console.print(f"error: {title}: {text}", markup=False, style="red")
