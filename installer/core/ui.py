"""Console output: step progress, details in --verbose, nothing but errors in --quiet.

On a terminal a long step shows bars (bytes with rate and time left, or done / total) or a spinner
with the command's latest line; in a log or pipe the same progress is a plain line at every tenth
(git's: one per phase), so a CI log shows it without a flood.  Progress is recognised here in the
output lines of git, ninja, uv and the JIT builder, so the steps need not know.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from rich.progress import Progress

# git's transfer figures after the counts (``1.20 GiB | 30.00 MiB/s``), shown in the bar's label
GIT_TRANSFER = re.compile(r"[\d.]+ [KMGT]?i?B(?: \| [\d.]+ [KMGT]?i?B/s)?")
NINJA_PROGRESS = re.compile(r"^\[(?P<done>\d+)/(?P<total>\d+)\]\s")
# october.checks.jit_build.ModuleProgress prints this once per module (cached ones first)
JIT_MODULES = re.compile(r"^JIT modules built: (?P<done>\d+)/(?P<total>\d+)(?:\s|$)")
# uv in a pipe: a line as a wheel of 1 MiB or more starts and ends downloading, and as an sdist is built
UV_DOWNLOADING = re.compile(r"^Downloading (?P<name>\S+) \((?P<size>[\d.]+)\s?(?P<unit>[KMGT]?i?B)\)$")
UV_DOWNLOADED = re.compile(r"^Downloaded (?P<name>\S+)$")
UV_BUILDING = re.compile(r"^Building (?P<what>\S+(?: @ \S+|==\S+))$")
UV_BUILT = re.compile(r"^Built (?P<what>\S+(?: @ \S+|==\S+))$")
# what a command prints for us, not for the user: a probe's JSON (maybe behind a marker) and uv's env hint
_NOT_FOR_USERS = re.compile(r"^(?:[A-Z][A-Z0-9_]* )?[\[{]|^Activate with:")
_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
          "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

Progress5 = tuple[str, str, float, float, str]


def _git_bar(phase: str, done: Any, total: Any, message: str) -> Progress5:
    key, transfer = f"git: {phase}", GIT_TRANSFER.match(message)
    return (key, f"{key}, {transfer.group(0)}" if transfer else key, float(done), float(total), "")


@functools.cache
def _git_parser() -> type:
    """GitPython's parser of git's ``--progress`` lines, keeping the bar of the one line it is fed; made at
    the first line with a done / total, so a run that shows no git progress never imports GitPython."""
    from git import RemoteProgress as RP

    phases = {RP.COUNTING: "counting objects", RP.COMPRESSING: "compressing objects", RP.RECEIVING: "receiving objects",
              RP.RESOLVING: "resolving deltas", RP.CHECKING_OUT: "checking out files"}

    class GitLine(RP):
        found: Progress5 | None = None

        def update(self, op_code: int, cur_count: Any, max_count: Any = None, message: str = "") -> None:
            if max_count is not None and (op_code & RP.OP_MASK) in phases:  # "Counting objects: 4, done.": no total
                self.found = _git_bar(phases[op_code & RP.OP_MASK], cur_count, max_count, message)

        def line_dropped(self, line: str) -> None:    # checkout's "Updating files" has no op code: its regex reads it
            m = self.re_op_relative.match(line)
            if m is not None and m.group(2) == "Updating files":
                self.found = _git_bar("updating files", m.group(4), m.group(5), m.group(6).strip(", "))

    return GitLine


def parse_progress(line: str) -> Progress5 | None:
    """(key, label, done, total, unit) from a command's progress line, or None; ``unit`` "B" for bytes,
    "" for a count (git counts objects; its bytes and rate ride in the label)."""
    text = line.strip()
    if "% (" in text:       # git's ``Receiving objects:  45% (450/1000), 1.20 GiB | 30.00 MiB/s`` (or ``remote: ``)
        parse = _git_parser()()
        parse.new_message_handler()(text)
        if parse.found is not None:
            return parse.found
    for pattern, key, label in ((NINJA_PROGRESS, "compile jobs", "compile jobs"),
                                (JIT_MODULES, "JIT modules", "JIT modules built")):
        if m := pattern.match(text):
            return (key, label, float(m.group("done")), float(m.group("total")), "")
    return None


class ProgressConsole(Console):
    """rich's console for our progress on stderr, whose reader may leave (``2>&1 | head -2``): rich then pointed
    *stdout* at /dev/null and raised SystemExit(1), so a healthy setup stopped half-way and a healthy verify
    said 1 (a failed smoke check).  Here the progress goes quiet, stderr to /dev/null, and the work goes on."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass                # a file without a descriptor: quiet is enough


class UvProgress:
    """uv's progress from its output lines: the wheels it downloads (bytes, from the sizes uv announces;
    nothing in between) and the sdists it builds.  One per step: a step's uv commands share the bars."""

    def __init__(self) -> None:
        self._sizes: dict[str, float] = {}
        self._downloaded: set[str] = set()
        self._builds: set[str] = set()
        self._built: set[str] = set()

    def feed(self, line: str) -> Progress5 | None:
        text = line.strip()
        if m := UV_DOWNLOADING.match(text):
            self._sizes[m.group("name")] = float(m.group("size")) * _UNITS.get(m.group("unit"), 1)
            return self._downloads()
        if (m := UV_DOWNLOADED.match(text)) and m.group("name") in self._sizes:
            self._downloaded.add(m.group("name"))
            return self._downloads()
        if m := UV_BUILDING.match(text):
            self._builds.add(m.group("what"))
            return self._count()
        if (m := UV_BUILT.match(text)) and m.group("what") in self._builds:
            self._built.add(m.group("what"))
            return self._count()
        return None

    def _downloads(self) -> Progress5:
        done = sum(size for name, size in self._sizes.items() if name in self._downloaded)   # == total at the end
        label = f"uv: {len(self._downloaded)} of {len(self._sizes)} wheel(s) downloaded"
        return ("uv: downloads", label, done, sum(self._sizes.values()), "B")

    def _count(self) -> Progress5:
        return ("uv: builds", "uv: source builds", float(len(self._built)), float(len(self._builds)), "")


class ConsoleReporter:
    def __init__(self, *, quiet: bool = False, verbose: bool = False, console: Console | None = None) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self.console = console or ProgressConsole(file=sys.stderr, highlight=False, soft_wrap=True, emoji=False)
        self._status: Any = None
        self._bars: Progress | None = None
        self._tasks: dict[str, Any] = {}
        self._tenths: dict[str, int] = {}
        self._step = ""
        self._uv = UvProgress()

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
        self._uv = UvProgress()

    def step_start(self, name: str, reason: str) -> None:
        if reason in ("", "not done yet"):
            why = "starting"
        elif reason.startswith("an earlier step ("):
            why = f"starting ({reason.removeprefix('an ')})"
        else:
            why = f"running again: {reason}"
        self.task_start(name, why)

    def task_start(self, name: str, text: str) -> None:
        """One long piece of work begins: a ``==> name: text`` line, then a spinner on a terminal."""
        self._say(f"==> {name}: {text}")
        self._step = name
        self._uv = UvProgress()
        if self.live:
            self._status = self.console.status(f"{name} ...", spinner="dots")
            self._status.start()

    def transfer(self, label: str, done: float, total: float | None, unit: str = "B", *,
                 key: str | None = None) -> None:
        """Progress of one piece of work in ``unit`` "B" (bytes) or "" (a count); ``key`` names the bar
        when the label changes as it goes."""
        key = key or label
        if self.quiet:
            return
        if self.live:
            if self._bars is None:
                if self._status is not None:
                    self._status.stop()
                    self._status = None
                from .uibars import bars        # rich's bars: only on a terminal (not in a log, a pipe, --quiet)

                self._bars = bars(self.console)
            task = self._tasks.get(key)
            if task is None:
                task = self._tasks[key] = self._bars.add_task(label, total=total or None, completed=done, unit=unit)
            self._bars.update(task, completed=done, total=total or None, description=label)
            return
        if total:
            tenth = 10 if done >= total else int(done * 10 // total)     # (a float 10x // x can be 9)
            if self._tenths.get(key) != tenth:
                self._tenths[key] = tenth
                if "git: " in key and tenth < 10:
                    return          # git in a log: one line per phase done, not one per tenth of each
                amount = (f"{done / 1e6:.1f} of {total / 1e6:.1f} MB" if unit == "B"
                          else f"{int(done)} of {int(total)}")
                self._say(f"    {label}: {tenth * 10}% ({amount})")

    def progress(self, line: str) -> None:
        """The running command's latest output line: a bar when it reports progress, else the spinner's text."""
        if (parsed := parse_progress(line) or self._uv.feed(line)) is not None:
            key, label, done, total, unit = parsed
            where = f"{self._step}: " if self._step else ""
            self.transfer(where + label, done, total, unit, key=where + key)
            return
        if self._status is not None and line.strip() and not _NOT_FOR_USERS.match(line.strip()):
            self._status.update(f"{self._step}: {line.strip()[:100]}")

    def step_skip(self, name: str) -> None:
        from .reportlines import skip_line
        self._say(skip_line(name))

    def stage(self, key: str, label: str, done: int, total: int) -> None:
        """Where one of several pieces of work side by side is (a fleet node at a step): on a terminal a
        done / total bar named ``key``, removed once ``done >= total``; in a log a line under --verbose."""
        if not self.live:
            self.detail(f"{label} ({done}/{total})")
            return
        if done < total:
            self.transfer(label, done, total, "", key=key)
        else:
            task = self._tasks.pop(key, None)
            if task is not None and self._bars is not None:
                self._bars.remove_task(task)
        if self._bars is not None:
            self._bars.refresh()          # drawn now: a line printed next shows the bars as they are

    def step_done(self, name: str, seconds: float) -> None:
        self.task_done(name, f"ok in {seconds:.1f}s")

    def task_done(self, name: str, text: str) -> None:
        """The work of :meth:`task_start` ended: its bars and spinner stop, a ``    name: text`` line."""
        self._stop()
        self._say(f"    {name}: {text}")

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
