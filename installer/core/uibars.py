"""The progress bars a terminal shows (rich's ``Progress`` with a byte-or-count amount and a rate column):
imported by :class:`october.installer.core.ui.ConsoleReporter` at its first bar only, so that a run whose
output goes to a log, a pipe or nowhere (``--quiet``) never imports rich's progress machinery."""

from __future__ import annotations

from rich import filesize
from rich.console import Console
from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, ProgressColumn, Task,
                           TextColumn, TimeRemainingColumn)
from rich.text import Text


def bars(console: Console) -> Progress:
    """Started bars on ``console``: label, bar, amount, rate, time left."""
    shown = Progress(TextColumn("    {task.description}"), BarColumn(), _Amount(), _Rate(), TimeRemainingColumn(),
                     console=console, transient=False)
    shown.start()
    return shown


class _Amount(ProgressColumn):
    """Bytes (``1.2/3.4 GB``) for transfers, ``12/40`` for counts."""

    def __init__(self) -> None:
        super().__init__()
        self._bytes, self._count = DownloadColumn(), MofNCompleteColumn()

    def render(self, task: Task) -> Text:
        column = self._bytes if task.fields.get("unit") == "B" else self._count
        return Text(str(column.render(task)))


class _Rate(ProgressColumn):
    """Bytes per second: rich's rate, else the average since the bar began (a bar fed in a few large
    steps, such as uv's downloads, has too few samples for rich's)."""

    def render(self, task: Task) -> Text:
        if task.fields.get("unit") != "B":
            return Text("")
        speed = task.finished_speed or task.speed
        if speed is None and task.elapsed and task.completed:
            speed = task.completed / task.elapsed
        return Text("?" if speed is None else f"{filesize.decimal(int(speed))}/s", style="progress.data.speed")
