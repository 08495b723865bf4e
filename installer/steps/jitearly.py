"""The JIT build begun while the install step checks what it installed.

The builder needs only the forks' files in place, not install's checks (RECORDs, guards, consistency,
imports).  Once every fork is installed (:data:`~october.installer.engine.FORKS_INSTALLED`),
:class:`EarlyJit` prepares the build and starts the builder in the background (:meth:`Runner.start`: its
own process group under a guard holding the stack lock); the jit step takes it (:func:`take_early`) and
checks what it made as always.  A run that ends first kills it (:meth:`EarlyJit.stop`) before the stack
lock is released; what it left in ``STACK/jit`` is recorded nowhere, so the next run discards it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from ..core.runner import Started
from ..engine import FORKS_INSTALLED, StepContext, must_run

if TYPE_CHECKING:
    from ..engine import Step
    from ..install.plan import ForkSource
    from ..jit.build import JitBuild
    from .jit import JitStep


class Deferred:
    """A reporter that keeps what is said, for the step it belongs to to say in its own turn."""

    def __init__(self) -> None:
        self.said: list[tuple[str, tuple[Any, ...]]] = []

    def replay(self, ui: Any, *, only: tuple[str, ...] | None = None) -> None:
        """Say what was kept (``only`` those methods, e.g. the warnings), once."""
        said, self.said = self.said, []
        for method, args in said:
            if only is None or method in only:
                getattr(ui, method)(*args)

    def _keep(self, method: str, *args: Any) -> None:
        self.said.append((method, args))

    def step_start(self, name: str, reason: str) -> None:
        self._keep("step_start", name, reason)

    def transfer(self, label: str, done: float, total: float | None, unit: str = "B") -> None:
        self._keep("transfer", label, done, total, unit)

    def step_skip(self, name: str) -> None:
        self._keep("step_skip", name)

    def step_done(self, name: str, seconds: float) -> None:
        self._keep("step_done", name, seconds)

    def info(self, text: str) -> None:
        self._keep("info", text)

    def detail(self, text: str) -> None:
        self._keep("detail", text)

    def warn(self, text: str) -> None:
        self._keep("warn", text)


class EarlyJit:
    """The jit step's preparation and builder, begun when the install step's forks are in place."""

    def __init__(self, step: JitStep, hold_fds: Sequence[int] = ()) -> None:
        self.step = step
        self.hold_fds = tuple(hold_fds)
        self.build: JitBuild | None = None
        self.started: Started | None = None
        self.deferred = Deferred()
        self.taken = False

    @classmethod
    def wire(cls, ctx: StepContext, steps: Sequence[Step[Any]], *, hold_fds: Sequence[int] = ()
             ) -> EarlyJit | None:
        """Listen for the install step's forks when the plan runs jit right after install, else None.
        ``hold_fds`` (the stack lock) are held by the builder's guard while its group lives."""
        names = [s.name for s in steps]
        if "install" not in names or "jit" not in names or names.index("jit") != names.index("install") + 1:
            return None
        early = cls(steps[names.index("jit")], hold_fds)      # type: ignore[arg-type]
        ctx.listen(FORKS_INSTALLED, early.begin)
        return early

    def begin(self, ctx: StepContext, forks: Sequence[ForkSource]) -> None:
        """Listener for FORKS_INSTALLED: prepare and start the build, or do nothing."""
        from .jit import known_aot_dir

        begun = "# begun during the install step's checks (october.installer.steps.jitearly)"
        try:
            if self.build is not None or not ctx.recipe.jit or not must_run(self.step, ctx):
                return
            checkout = next((f.path for f in forks if f.use.traits.jit_checkout), None)
            build = self.step.prepare(ctx, self.deferred, known_aot_dir(ctx, ctx.paths.jit, checkout=checkout))
            if build.argv is not None:      # nothing echoed until the jit step attaches
                self.started = ctx.runner.start(build.argv, step=self.step.name, env=build.env,
                                                cwd=build.workspace, hold_fds=self.hold_fds, preface=begun)
        except Exception as exc:  # noqa: BLE001 - the jit step prepares again in its turn and says what fails
            self._note(ctx, f"# not begun during install: {exc!r}")
            self.deferred.replay(ctx.ui, only=("warn",))     # what was discarded, said now
            self.deferred = Deferred()
            return
        self.build = build
        if self.started is None:
            self._note(ctx, begun + ": every module verified, nothing to build")
        ctx.early[self.step.name] = self

    def stop(self, ctx: StepContext, why: str = "the run ended before the jit step took its result") -> None:
        """At the end of the run, before the stack lock is released: a builder the jit step has not waited
        for to its end is killed with every process it started."""
        if not self.taken:
            self.deferred.replay(ctx.ui, only=("warn",))     # the libraries its preparation discarded
        if self.started is None or (self.taken and self.started.finished):
            return
        killed = not self.started.finished
        ended = self.started.kill()
        self._note(ctx, "# the JIT build begun during install was " + ("killed" if killed else "not used")
                   + f": {why}; nothing it built is recorded"
                   + ("" if ended else f" (its output was still held open by a process outside its group "
                                       f"after {self.started.KILL_WAIT_S:.0f}s; not waiting longer)"))

    @staticmethod
    def _note(ctx: StepContext, text: str) -> None:
        ctx.runner.note("jit", text, best_effort=True)


def take_early(ctx: StepContext, step: JitStep) -> tuple[JitBuild, Started | None] | None:
    """The jit step's preparation and builder begun during install, when it was prepared for the checkout
    install recorded; what was put off is said now."""
    from .jit import known_aot_dir

    early = ctx.early.pop(step.name, None)
    if not isinstance(early, EarlyJit) or early.build is None:
        return None
    if early.build.aot != known_aot_dir(ctx, early.build.workspace):
        early.stop(ctx, "it was prepared for another FlashInfer checkout than install recorded")    # start over
        return None
    early.taken = True
    early.deferred.replay(ctx.ui)
    if early.started is not None:
        ctx.ui.info(f"(the builder started during install, {time.monotonic() - early.started.started_at:.1f}s ago)")
    return early.build, early.started
