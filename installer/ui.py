"""Console output: step progress, details in --verbose, nothing but errors in --quiet."""

from __future__ import annotations

import sys
import time

from rich.console import Console


class ConsoleReporter:
    def __init__(self, *, quiet: bool = False, verbose: bool = False, console: Console | None = None) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self.console = console or Console(file=sys.stderr, highlight=False, soft_wrap=True)
        self._started = time.monotonic()

    def _say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False)

    def step_start(self, name: str, reason: str) -> None:
        self._say(f"==> {name}: running ({reason})")

    def step_skip(self, name: str) -> None:
        self._say(f"==> {name}: done earlier, inputs unchanged (skipped)")

    def step_done(self, name: str, seconds: float) -> None:
        self._say(f"    {name}: ok in {seconds:.1f}s")

    def info(self, text: str) -> None:
        self._say(f"    {text}")

    def detail(self, text: str) -> None:
        if self.verbose and not self.quiet:
            self.console.print(f"      {text}", markup=False)

    def warn(self, text: str) -> None:
        self.console.print(f"warning: {text}", markup=False, style="yellow")

    def error(self, title: str, text: str) -> None:
        self.console.print(f"error: {title}: {text}", markup=False, style="red")
