"""Plan and run ``october_setup``: which steps, in which order, under one stack lock."""

from __future__ import annotations

import shutil
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from ..core.errors import FileSystemError, UsageError
from ..core.paths import StackPaths, inside
from ..core.resources import locks_dir
from ..core.runner import Runner
from ..core.stackmutex import StackLock
from ..engine import (STEP_ORDER, Reporter, SetupOptions, Step, StepContext, StepRecord, planned_step_names,
                      run_pipeline, verify_pipeline)
from ..recipe import Recipe

if TYPE_CHECKING:
    from ..lock.pylock import LockedState


def plan_steps(recipe: Recipe) -> list[Step[Any]]:
    """The pipeline for ``recipe``: the steps :func:`~october.installer.engine.planned_step_names` names (every one
    of STEP_ORDER the recipe asks for: ``wheel`` only with a ``[wheel]``, ``jit`` only with JIT modules), in
    that order."""
    from ..steps.env import EnvStep
    from ..steps.fetch import FetchStep
    from ..steps.install import InstallStep
    from ..steps.lock import LockStep
    from ..steps.preflight import PreflightStep
    from ..steps.receipt import ReceiptStep

    names = planned_step_names(recipe)
    planned: list[Step[Any]] = [PreflightStep(), FetchStep(), EnvStep(), InstallStep(), LockStep(), ReceiptStep()]
    if "wheel" in names:
        from ..steps.wheel import WheelStep
        planned.append(WheelStep())
    if "jit" in names:
        from ..steps.jit import JitStep
        planned.append(JitStep(builder=recipe.jit_builder) if recipe.jit_builder else JitStep())
    return sorted(planned, key=lambda step: names.index(step.name))


def resolve_locked(recipe: Recipe, stack: Path, locked: bool, lock_file: Path | None) -> LockedState | None:
    if lock_file is not None and not locked:
        raise UsageError("--lock-file only makes sense with --locked", expected="--locked --lock-file PATH",
                         found="--lock-file alone", fix="add --locked, or drop --lock-file")
    if not locked:
        return None
    from ..lock.pylock import locked_state  # packaging.pylock: only under --locked

    if lock_file is not None:
        return locked_state(lock_file, option="--lock-file", recipe_name=recipe.name)
    # the project's committed lock for the recipe, else the stack's own
    committed, own = inside(locks_dir(), f"{recipe.name}.pylock.toml"), StackPaths(stack).pylock
    lock_file = committed if committed.exists() else own
    if not lock_file.exists():      # nothing to compare with: not a mismatch (13) but a missing file (19)
        raise FileSystemError(f"--locked has no lock to install from for recipe {recipe.name}",
                              expected=f"a lock at {committed} (the recipe's committed lock) or {own} (the stack's own)",
                              found="neither exists",
                              fix="run october_setup once without --locked (it writes STACK/pylock.toml), or pass "
                                  "--lock-file PATH")
    return locked_state(lock_file, recipe_name=recipe.name)


@dataclass(frozen=True)
class SetupResult:
    records: Sequence[StepRecord]
    paths: StackPaths


def summary(result: SetupResult) -> str:
    """What ``october_setup`` prints when the stack is ready."""
    ran = sum(1 for r in result.records if r.status == "ran")
    return (f"stack ready: {result.paths.root} ({ran} step(s) ran, {len(result.records) - ran} already done)\n"
            f"  lock:    {result.paths.pylock}\n"
            f"  receipt: {result.paths.setup_receipt}")


def check_stack_dir(paths: StackPaths) -> None:
    """Refuse to provision into a directory that holds something else (no lost data)."""
    root = paths.root
    if root.exists() and not root.is_dir():
        raise FileSystemError(f"the stack path {root} is a file", expected="a new or empty directory, or an existing stack",
                         found="a file", fix="pass a directory path as STACK")
    here = root.absolute()
    nested = next(((outer, part) for outer in here.parents for part in StackPaths(outer).parts()
                   if (part == here or part in here.parents) and StackPaths(outer).is_stack()), None)
    if nested is not None:
        outer, part = nested
        raise UsageError(f"the stack path {root} is inside the stack {outer}, in its own {part.name}/",
                         expected=f"a STACK outside {', '.join(p.name + '/' for p in StackPaths(outer).parts())} of "
                                  f"{outer} (october_setup makes and replaces those: a re-run there removes what is in them)",
                         found=f"STACK {root}, under {part}",
                         fix=f"choose a directory outside them, e.g. {outer.parent / root.name}; nothing was changed")
    others = paths.foreign()
    if others:
        shown = ", ".join(others[:5])
        raise UsageError(f"the stack path {root} is not empty and is not an october stack",
                         expected="a new or empty directory, or a stack made by october_setup (with .state/)",
                         found=f"other files ({shown}{', ...' if len(others) > 5 else ''})",
                         fix="choose a new directory for the stack; nothing was changed")


def record_recipe(paths: StackPaths, options: SetupOptions) -> None:
    """Which recipe this stack is being set up with, and the options a re-run needs to repeat (--cache-dir,
    --kit, --system-python, --skip-preflight), written before any step runs (under the stack lock), so a
    re-run without --recipe of a stack stopped before its receipt is not silently switched to the default one
    (``provision.recipe_for`` reads ``STACK/.state/recipe-used.json`` beside the setup receipt), and
    ``current verify``'s fixes name the whole command (:mod:`october.installer.verify.fix`)."""
    import json

    from ..core.atomic import write_text_atomic

    recipe, target = options.recipe, paths.recipe_record
    again = {"cache_dir": str(options.cache_dir), "kit": str(options.kit.root) if options.kit else None,
             "system_python": recipe.torch.system_python, "skip_preflight": list(options.skip_preflight)}
    text = json.dumps({"name": recipe.name, "path": str(recipe.path), "sha256": recipe.sha256, "options": again},
                      sort_keys=True) + "\n"
    try:
        if target.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    write_text_atomic(target, text)


def run_setup(options: SetupOptions, ui: Reporter, *, echo_commands: bool = False) -> SetupResult:
    paths = StackPaths(options.stack.resolve())
    check_stack_dir(paths)
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.state.mkdir(parents=True, exist_ok=True)
    steps = plan_steps(options.recipe)
    with Signals() as signals, StackLock(paths.lockfile) as lock:
        # bytecode a killed run left (its end never came): no run executes what it did not compile itself
        shutil.rmtree(paths.run_pycache, ignore_errors=True)
        record_recipe(paths, options)
        echo = ui.detail if echo_commands else getattr(ui, "progress", None)
        runner = Runner(paths.logs, echo=echo)
        ctx = StepContext(options=options, paths=paths, runner=runner, ui=ui)
        settler = CloneSettler(ctx)         # its thread starts once the fetch is done
        from ..steps.envearly import EarlyEnv
        from ..steps.jitearly import EarlyJit
        from ..steps.lockearly import EarlyLock
        from ..steps.torchearly import EarlyTorch

        # the env copied (or else the site torch warmed) during the fetch; the JIT build and the lock's listing
        # begun during install's checks (their guards hold the stack lock)
        early = [e for e in (EarlyEnv.wire(ctx, steps), EarlyTorch.wire(ctx, steps, hold_fds=(lock.fd,)),
                             EarlyJit.wire(ctx, steps, hold_fds=(lock.fd,)),
                             EarlyLock.wire(ctx, steps, hold_fds=(lock.fd,))) if e is not None]
        failed = True
        try:
            records = run_pipeline(steps, ctx, on_record=settler.on_record)
            failed = False
        finally:
            with signals.held():                # a second Ctrl-C or SIGTERM waits for this clean-up
                try:
                    # before the lock is released and this run's bytecode removed
                    stop_early(early, ctx, raise_first=not failed)
                finally:
                    settler.stop()
                    shutil.rmtree(paths.run_pycache, ignore_errors=True)     # this run's bytecode only
        settler.settle_rest()
    return SetupResult(records=records, paths=paths)


def stop_early(early: Sequence[Any], ctx: StepContext, *, raise_first: bool) -> None:
    """Stop each work begun early, whatever another's stop raises; errors are noted in the step's log and
    the first is raised only when ``raise_first`` (the run's own error is what the user must see)."""
    errors: list[BaseException] = []
    for begun in early:
        try:
            begun.stop(ctx)
        except Exception as exc:  # noqa: BLE001 - the others are stopped all the same
            errors.append(exc)
            ctx.runner.note(getattr(getattr(begun, "step", None), "name", "setup"),
                            f"# stopping what was begun early failed: {exc!r}", best_effort=True)
    if errors and raise_first:
        raise errors[0]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP during ``run_setup``: raised in the main thread like Ctrl-C's KeyboardInterrupt, so
    the run ends as an interrupted one does (background build killed, stack lock released, resumable)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class Signals:
    """While a run holds the stack: SIGTERM and SIGHUP raise :class:`Terminated` (else Python dies at once,
    no ``finally`` runs, and the background build outlives the lock); inside :meth:`held` those and SIGINT
    wait until the clean-up is done.  Main thread only; a signal ignored by whoever started the run
    (``nohup``) stays ignored."""

    RAISES = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._main = False
        self._holding = False
        self._pending: int | None = None

    def __enter__(self) -> "Signals":
        self._main = threading.current_thread() is threading.main_thread()
        if self._main:
            for sig in self.RAISES:
                took, previous = _take(sig, self._handle)
                if took:
                    self._previous[sig] = previous
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._holding:
            self._pending = self._pending or signum
            return
        raise Terminated(signum)

    @contextmanager
    def held(self) -> Iterator[None]:
        """The signals wait until the block is done, then are raised (unless the block raised)."""
        if not self._main:                  # not the main thread: nothing to hold
            yield
            return
        self._holding = True
        took_sigint, sigint = _take(signal.SIGINT, self._handle)
        try:
            yield
        finally:
            if took_sigint:
                signal.signal(signal.SIGINT, sigint)
            self._holding = False
            pending, self._pending = self._pending, None
        if pending is not None:
            raise KeyboardInterrupt() if pending == signal.SIGINT else Terminated(pending)


def _take(sig: int, handler: Any) -> tuple[bool, Any]:
    """Handle ``sig`` with ``handler`` -> (True, the previous handler); (False, None) when it is ignored."""
    if signal.getsignal(sig) is signal.SIG_IGN:
        return False, None
    return True, signal.signal(sig, handler)


class CloneSettler:
    """Each fork clone's indexes rewritten once its files are no longer racily clean, so no-op re-runs do
    not hash them again (:func:`october.installer.git.settle.settle_index`).  A background thread does
    it once the install step is done (an editable build rewrites files in the clones) and every index is a
    timestamp tick old; what it has not reached is settled at the end of the run.  It only reads the work
    tree: git takes the index lock or skips the rewrite.  A failure only loses the speed-up: it is noted in
    the fetch log, never raised."""

    POLL_S = 0.05
    STOP_WAIT_S = 5.0       # what stop() waits for a settle under way; the next run settles what is left
    CHANGES_CLONES = ("fetch", "install")

    def __init__(self, ctx: StepContext) -> None:
        from ..steps.results import FetchResult, InstallResult

        self._settle: Callable[..., bool] | None = None     # imported by start(), in the main thread
        self._results = (FetchResult, InstallResult)
        self.ctx = ctx
        # its own runner: the same log files, nothing echoed (the display is the running step's)
        self.runner = Runner(ctx.paths.logs, secrets=ctx.runner.secrets)
        self.settled: set[str] = set()
        self._stop = threading.Event()
        self._done = threading.Event()      # never Thread.join: see stop()
        self._thread = threading.Thread(target=self._run, name="october-settle", daemon=True)

    def start(self) -> None:
        self._settler()
        self._thread.start()

    def _settler(self) -> Callable[..., bool]:
        """``settle_index``, imported here, in the main thread (start, settle_rest): an import the thread made could
        wait for ever on a module lock that a Ctrl-C in the middle of the main thread's import left held, and the
        run would hang holding the stack lock (the scenario hunt: 3 hangs in 50 early Ctrl-Cs)."""
        if self._settle is None:
            from ..git.settle import settle_index

            self._settle = settle_index
        return self._settle

    def on_record(self, record: StepRecord) -> None:
        """The pipeline's record of each step: the thread starts once the fetch is done (it has nothing to settle
        before the install step is), so GitPython is imported by the fetch, not before the first step."""
        if record.name == "fetch" and self._thread.ident is None:
            self.start()

    def stop(self) -> None:
        """Ask the thread to end and wait for it at most :attr:`STOP_WAIT_S`: a thread that does not end
        (a stuck ``git``) is left to the interpreter's exit (it is a daemon) rather than holding the run, and
        the stack lock, for ever."""
        self._stop.set()
        if self._thread.ident is not None and not self._done.wait(self.STOP_WAIT_S):
            self._note(f"# the background settling had not ended {self.STOP_WAIT_S:.0f}s after the run; not "
                       "waiting longer (the next run settles what is left)")

    def _changed(self) -> bool:
        """Whether this run checked a clone out or installed into one."""
        return any(rec is not None and rec.status == "ran" for rec in map(self.ctx.done.get, self.CHANGES_CLONES))

    def _paths(self, *, after_install: bool = False) -> list[Path]:
        fetch_result, install_result = self._results
        fetch = self.ctx.result(fetch_result)
        if fetch is None or (after_install and self.ctx.result(install_result) is None):
            return []
        return [Path(rec.path) for rec in fetch.forks.values()]

    def _run(self) -> None:
        settle_index = self._settle
        assert settle_index is not None     # start() set it
        try:
            while not self._stop.wait(self.POLL_S):
                ready = self._paths(after_install=True)
                if ready and not self._changed():
                    return                  # fetch and install were already done: nothing new to settle
                todo = [p for p in ready if str(p) not in self.settled]
                if ready and not todo:
                    return
                for path in todo:
                    if self._stop.is_set():
                        return
                    if settle_index(self.runner, "fetch", path):
                        self.settled.add(str(path))
        except Exception as exc:  # noqa: BLE001 - a speed-up only: the end of the run settles instead
            self._note(f"# settling the clone indexes in the background stopped: {exc!r}")
        finally:
            self._done.set()

    def settle_rest(self) -> None:
        """What the thread did not reach, after the wait that is left; never raises."""
        if not self._changed():
            return
        try:
            settle_index = self._settler()
            for path in self._paths():
                if str(path) not in self.settled:
                    settle_index(self.runner, "fetch", path, wait=True)
                    self.settled.add(str(path))
        except Exception as exc:  # noqa: BLE001 - see above
            self._note(f"# settling the clone indexes at the end of the run failed: {exc!r}")

    def _note(self, text: str) -> None:
        self.runner.note("fetch", text, best_effort=True)


def finished_setup(options: SetupOptions, ui: Reporter) -> SetupResult | None:
    """The setup of a finished stack whose every step still verifies (nothing run or written), else None."""
    paths = StackPaths(options.stack.resolve())
    if not paths.marker(STEP_ORDER[-1]).is_file():
        return None
    steps = plan_steps(options.recipe)
    with StackLock(paths.lockfile):
        ctx = StepContext(options=options, paths=paths, runner=Runner(paths.logs), ui=ui)
        records = verify_pipeline(steps, ctx)
    return SetupResult(records=records, paths=paths) if records is not None else None
