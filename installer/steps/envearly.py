"""The env copied from the built-stack cache while the fetch step clones the forks.

A second stack's env step copies (and hashes) the env of the entry its key names, and the key needs the
fetch's record (each fork's commit and submodule commits), so the copy waited for the fetch's git commands
though it reads none of their work.  When the fetch step begins (:data:`~october.installer.engine.FETCH_BEGUN`)
and the env step must run on a stack with no env, :class:`EarlyEnv` looks up the entry stacks of the same
recipe took last (:func:`~october.installer.steps.reuse.recipe_key`, remembered in the cache by
:func:`~october.installer.pyenv.builtstack.note_recipe_key`) and, in a thread of its own, copies its env into
``STACK/.state/env-ahead/env`` exactly as the env step would (:func:`~october.installer.pyenv.builtrestore.restore_env`:
every byte hashed against the signed manifest).  The env step takes that copy (:meth:`EarlyEnv.take`) only when
the entry its own key finds, once the forks are fetched, is the very one copied (its path and its manifest's
identity); else the copy is removed and the env step copies as before.  A run that ends first stops the copy
between two files and removes it (:meth:`EarlyEnv.stop`) before the stack lock is released; a killed run's
leftover is removed by the next run's copy ahead, or by its env step, and never taken.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..core.idle import wait_event
from ..core.runner import Started
from ..engine import FETCH_BEGUN, StepContext, must_run

if TYPE_CHECKING:
    from ..engine import Step
    from ..pyenv.builtstack import Entry, Hashed

AHEAD = "env-ahead"         # STACK/.state/env-ahead: the copy made during the fetch


def ahead_dir(ctx: StepContext) -> Path:
    return ctx.paths.state / AHEAD


class EarlyEnv:
    """The env of the entry this recipe's stacks took, copied in a thread while the fetch step runs."""

    def __init__(self, step: Step[Any]) -> None:
        self.step = step
        self.entry: Entry | None = None
        self.hashed: dict[Path, Hashed] | None = None
        self.wrote: dict[str, str] = {}
        self.why_not: str | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # set when the copy's thread is done; never Thread.join (see lockearly.EarlyLock)
        self._done = threading.Event()

    @classmethod
    def wire(cls, ctx: StepContext, steps: Sequence[Step[Any]]) -> EarlyEnv | None:
        """Listen for the fetch step's beginning when the plan runs env after fetch, else None."""
        names = [s.name for s in steps]
        if "fetch" not in names or "env" not in names or names.index("env") < names.index("fetch"):
            return None
        early = cls(steps[names.index("env")])
        ctx.listen(FETCH_BEGUN, early.begin)
        return early

    def begin(self, ctx: StepContext, _detail: Any) -> None:
        """Listener for FETCH_BEGUN: start the copy once, or do nothing (never fails the fetch step)."""
        from ..pyenv import builtkey, builtrestore, builtstack
        from .reuse import recipe_key

        try:
            if self._thread is not None or os.path.lexists(ctx.paths.env) or not must_run(self.step, ctx):
                return
            named = recipe_key(ctx, self.step.name)
            key = builtstack.key_for_recipe(ctx.options.cache_dir, named) if named is not None else None
            entry = builtstack.find(ctx.options.cache_dir, key) if key is not None else None
            if entry is None or builtrestore.interpreter_moved(builtkey.placed(entry.facts, ctx.paths.root)):
                return
            builtstack.mark_used(entry)     # before the copy: a prune beside it sees the entry in use
            builtrestore.import_restore()     # what the copy imports, in this (the main) thread: core.idle says why
            ahead = ahead_dir(ctx)
            shutil.rmtree(ahead, ignore_errors=True)    # a killed run's copy: never taken
            ahead.mkdir(parents=True)
            self.entry = entry
            self._note(ctx, f"# copying the env of the built-stack cache entry {entry.path} during the fetch "
                            "(october.installer.steps.envearly)")
            # the restore handed over, not imported there (an import in another thread can hang: core.idle)
            thread = threading.Thread(target=self._work, args=(builtrestore.restore_env, entry, ahead / "env",
                                                               ctx.paths.root), name="october-env-early", daemon=True)
            # known before it starts: a Ctrl-C raised inside start() comes once the thread runs, and the run's end
            # must wait for it (the review: it went on writing in the stack after the lock was released)
            self._thread = thread
            ctx.early[self.step.name] = self
            try:
                thread.start()
            except BaseException:
                if thread.ident is None:        # it never ran: nothing to wait for
                    self._done.set()
                raise
        except Exception as exc:  # noqa: BLE001 - the env step copies the env itself
            self._note(ctx, f"# not copied during the fetch: {exc!r}")

    def _work(self, restore_env: Callable[..., dict[Path, Hashed]], entry: Entry, env: Path, root: Path) -> None:
        try:
            self.hashed = restore_env(entry, env, root, stop=self._stop.is_set, wrote=self.wrote)
        except BaseException as exc:  # noqa: BLE001 - the env step copies again and says what fails
            self.why_not = f"the copy failed: {exc}"
        finally:
            self._done.set()

    def take(self, ctx: StepContext, entry: Entry | None) -> tuple[dict[Path, Hashed], dict[str, str]] | None:
        """The copy put at ``STACK/env`` -> each file it hashed there, and what it wrote (``restore_env``'s
        ``wrote``), when it is of ``entry`` (the one this stack's key finds, which must have no env yet); else
        None, the copy stopped and removed."""
        if entry is None or self.entry is None:
            self.stop(ctx)
            return None
        self.wait()
        made = ahead_dir(ctx) / "env"
        if self.hashed is None:
            why = self.why_not or "the copy made nothing"
        elif self.entry.path != entry.path or self.entry.ident != entry.ident:
            why = f"it was copied from {self.entry.path}, not this stack's entry {entry.path}"
        elif os.path.lexists(ctx.paths.env):
            why = f"{ctx.paths.env} is there"
        elif os.path.islink(made) or not made.is_dir():
            why = f"{made} is not the folder the copy made"     # e.g. swapped for a link to a folder elsewhere
        else:
            why = None
            shutil.rmtree(ctx.paths.env.with_name(ctx.paths.env.name + ".partial"), ignore_errors=True)
            try:
                os.rename(made, ctx.paths.env)      # renaming the folder changes no signature of the files in it
            except OSError as exc:
                why = f"it could not be put in place: {exc}"
        if why is not None or self.hashed is None:
            self._note(ctx, f"# the env copied during the fetch is not used ({why}); copying it now")
            self.stop(ctx)
            return None
        shutil.rmtree(made.parent, ignore_errors=True)
        return {ctx.paths.env / p.relative_to(made): h for p, h in self.hashed.items()}, self.wrote

    def stop(self, ctx: StepContext) -> None:
        """End the copy (between two files) and remove what it made; at the end of the run too, before the
        stack lock is released: the thread is waited for however long its file takes (it writes in the stack; it
        dies only with the process)."""
        self._stop.set()
        if not self.wait(timeout=Started.KILL_WAIT_S):
            self._note(ctx, f"# the env copy begun during the fetch had not ended {Started.KILL_WAIT_S:.0f}s "
                            "after it was stopped (one file still copying); waiting for it")
            self.wait()
        shutil.rmtree(ahead_dir(ctx), ignore_errors=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the copy's thread (at most ``timeout`` s), in slices so that a signal is handled."""
        if self._thread is None:
            return True
        return wait_event(self._done, timeout, Started.POLL_S)

    def _note(self, ctx: StepContext, text: str) -> None:
        ctx.runner.note(self.step.name, text, best_effort=True)
