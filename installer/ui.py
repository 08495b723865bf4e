"""Console output: step progress, details in --verbose, nothing but errors in --quiet.

On a terminal a long step shows a live spinner with the latest line of the command
it is running; in a log or pipe only the step lines are printed.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console


class ConsoleReporter:
    def __init__(self, *, quiet: bool = False, verbose: bool = False, console: Console | None = None) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self.console = console or Console(file=sys.stderr, highlight=False, soft_wrap=True)
        self._status: Any = None
        self._step = ""

    def _say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False)

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def step_start(self, name: str, reason: str) -> None:
        self._say(f"==> {name}: running ({reason})")
        self._step = name
        if not self.quiet and not self.verbose and self.console.is_terminal:
            self._status = self.console.status(f"{name} ...", spinner="dots")
            self._status.start()

    def progress(self, line: str) -> None:
        """The latest output line of the running command (spinner text on a terminal)."""
        if self._status is not None and line.strip():
            self._status.update(f"{self._step}: {line.strip()[:100]}")

    def step_skip(self, name: str) -> None:
        self._say(f"==> {name}: done earlier, inputs unchanged (skipped)")

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
