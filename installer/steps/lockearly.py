"""The lock's listing begun while the install step checks what it installed.

What the lock is made from (:func:`~october.installer.steps.lock.list_env`) needs only the env as install
left it.  Once every fork is installed (:data:`~october.installer.engine.FORKS_INSTALLED`), or as soon as the
install step took the forks' build outputs from the built-stack cache entry this run copied the env from, whose
fork installs it keeps (:data:`~october.installer.engine.ENV_COPIED`), :class:`EarlyLock` makes that listing in a
thread of its own, and the lock step takes it
(:func:`take_early`) only when the env's distributions are as they were while it was listed
(:func:`env_signature`); else the lock step lists the env itself.  A run that ends first ends it
(:meth:`EarlyLock.stop`) before the stack lock is released.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.filetrust import signature
from ..core.idle import wait_event
from ..core.runner import Completed, Runner, Started
from ..engine import ENV_COPIED, FORKS_INSTALLED, StepContext, must_run
from .results import EnvResult

if TYPE_CHECKING:
    from ..engine import Step
    from .lock import Listing, LockStep

METADATA_SUFFIXES = (".dist-info", ".egg-info", ".pth")
INSIDE = ("METADATA", "PKG-INFO", "direct_url.json")


def env_signature(ctx: StepContext, extra: Sequence[str] = ()) -> tuple[Any, ...] | None:
    """Each site directory of the env and of ``extra`` (other directories the listing read), with every
    metadata directory and ``.pth`` file there and each metadata directory's ``METADATA``/``PKG-INFO``/
    ``direct_url.json`` (rewritten in place), by name and stat signature; None without an env result.
    Not a directory's own mtime: install's import checks add ``__pycache__`` to a copied env."""
    env = ctx.result(EnvResult)
    if env is None:
        return None
    return tuple(_site_signature(site) for site in dict.fromkeys([*env.site_packages, *extra]))


def _site_signature(site: str) -> tuple[Any, ...]:
    def stamp(path: str) -> list[int] | None:
        """The file's stat signature (:func:`~october.installer.core.filetrust.signature`: inode, size,
        mtime and ctime, which no copy that keeps times, ``cp -p`` or ``rsync -a``, can set back)."""
        try:
            return signature(os.stat(path, follow_symlinks=False))
        except OSError:
            return None

    try:
        with os.scandir(site) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(METADATA_SUFFIXES))
    except OSError:
        return (site, None)
    return (site, [(n, stamp(os.path.join(site, n)),
                    *((stamp(os.path.join(site, n, f)) for f in INSIDE) if not n.endswith(".pth") else ()))
                   for n in names])


class EarlyLock:
    """The lock's listing, begun in a thread when the install step's forks are in place."""

    def __init__(self, step: LockStep, hold_fds: Sequence[int] = (),
                 lister: Callable[[StepContext, Any], Listing] | None = None) -> None:
        """``lister``: makes the listing from the context and this object's :meth:`run` (default: list_env)."""
        self.step = step
        self.hold_fds = tuple(hold_fds)
        self.lister = lister
        self.listing: Listing | None = None
        self.why_not: str | None = None
        self._signature: tuple[Any, ...] | None = None
        self._sites: list[str] = []
        self._runner: Runner | None = None
        self._thread: threading.Thread | None = None
        self._started: Started | None = None
        self._stopped = False
        self._lock = threading.Lock()
        # set when the listing's thread is done; never Thread.join: a join interrupted by a signal
        # handler's exception (Ctrl-C, SIGTERM) marks a running thread stopped (CPython 3.11)
        self._done = threading.Event()

    @classmethod
    def wire(cls, ctx: StepContext, steps: Sequence[Step[Any]], *, hold_fds: Sequence[int] = ()
             ) -> EarlyLock | None:
        """Listen for the install step's forks when the plan runs lock after install, else None."""
        names = [s.name for s in steps]
        if "install" not in names or "lock" not in names or names.index("lock") < names.index("install"):
            return None
        early = cls(steps[names.index("lock")], hold_fds)      # type: ignore[arg-type]
        ctx.listen(ENV_COPIED, early.begin)
        ctx.listen(FORKS_INSTALLED, early.begin)
        return early

    def begin(self, ctx: StepContext, forks: Any) -> None:
        """Listener for ENV_COPIED (``forks`` None) and FORKS_INSTALLED: start the listing once, or do nothing
        (never fails the install step)."""
        try:
            if self._thread is not None or not must_run(self.step, ctx):
                return
            self._note(ctx, "# listing the env begun " + ("once the forks' build outputs came from the built-stack "
                            "cache" if forks is None else "during the install step's checks")
                       + " (october.installer.steps.lockearly)")
            # its own runner: the same log files and secrets, nothing echoed (the display is install's)
            self._runner = Runner(ctx.paths.logs, secrets=ctx.runner.secrets)
            thread = threading.Thread(target=self._work, args=(ctx,), name="october-lock-early", daemon=True)
            thread.start()
            self._thread = thread
            ctx.early[self.step.name] = self
        except Exception as exc:  # noqa: BLE001 - see above
            self._note(ctx, f"# not begun during install: {exc!r}")

    def run(self, argv: Sequence[str], *, step: str, env: Mapping[str, str] | None = None) -> Completed:
        """The lock's commands, run from the listing's thread through :meth:`Runner.start` (:meth:`stop` ends them)."""
        assert self._runner is not None
        with self._lock:
            if self._stopped:
                raise RuntimeError("the run ended before the listing did")
            self._started = self._runner.start(argv, step=step, env=env, hold_fds=self.hold_fds)
        return self._started.wait()

    def _work(self, ctx: StepContext) -> None:
        from .lock import list_env

        try:
            before = env_signature(ctx)
            listing = (self.lister or list_env)(ctx, self)
            # the directories the listing found distributions in (``site`` of each)
            sites = sorted({str(d["site"]) for d in listing.raw.get("distributions", ()) if d.get("site")})
            after = env_signature(ctx, sites)   # the env's own sites first, in the order ``before`` has them
            if before is None or after is None or after[:len(before)] != before:
                self.why_not = "the env changed while it was listed"
            else:
                self.listing, self._sites, self._signature = listing, sites, after
        except Exception as exc:  # noqa: BLE001 - the lock step lists the env itself and says what fails
            self.why_not = f"listing it failed: {exc!r}"
        finally:
            self._done.set()

    def take(self, ctx: StepContext) -> Listing | None:
        """The listing, once it has ended, when the env is still as it was listed; else None (said in the log)."""
        self.wait()
        if self.listing is not None and env_signature(ctx, self._sites) != self._signature:
            self.listing, self.why_not = None, "the env changed after it was listed"
        self._note(ctx, "# the listing begun during install " + (
            "is used" if self.listing is not None else f"is not used ({self.why_not}); listing the env now"))
        return self.listing

    def current(self, ctx: StepContext) -> Listing | None:
        """The listing, once it has ended, while the env is as it was listed (else None); left for :meth:`take`."""
        self.wait()
        if self.listing is None or env_signature(ctx, self._sites) != self._signature:
            return None
        return self.listing

    def stop(self, ctx: StepContext) -> None:
        """At the end of the run, before the stack lock is released: a listing still running is ended (its
        command killed with its group) and waited for, at most :attr:`Started.KILL_WAIT_S`."""
        with self._lock:
            self._stopped = True
            started = self._started
        if started is not None and not started.finished:
            ended = started.kill()      # waits at most KILL_WAIT_S for the command's output to close
            self._note(ctx, "# the listing begun during install was ended: the run ended before the lock step"
                       + ("" if ended else f" (its output was still held open by a process outside its group "
                                           f"after {started.KILL_WAIT_S:.0f}s; not waiting longer)"))
            if not ended:
                return                  # its thread waits on that output: waiting for it would wait as long
        if not self.wait(timeout=Started.KILL_WAIT_S):
            self._note(ctx, f"# the listing begun during install had not ended {Started.KILL_WAIT_S:.0f}s after "
                            "the run did; not waiting longer")

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the listing's thread (at most ``timeout`` s), in slices so that a signal is handled;
        -> whether it has ended."""
        if self._thread is None:
            return True
        return wait_event(self._done, timeout, Started.POLL_S)

    @staticmethod
    def _note(ctx: StepContext, text: str) -> None:
        ctx.runner.note("lock", text, best_effort=True)


def take_early(ctx: StepContext, step: Step[Any]) -> Listing | None:
    """The listing begun during install, when there is one and the env is as it was listed."""
    early = ctx.early.pop(step.name, None)
    return early.take(ctx) if isinstance(early, EarlyLock) else None
