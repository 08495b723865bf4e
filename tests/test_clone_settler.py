"""The settling of a fresh clone's indexes (issue 20).  Once the install step is done (the last one
writing into the clones) and every index of the clone is a timestamp tick old, ``git status`` rewrites
them while later steps still run, so entries checked out in their index's own tick stop being "racily
clean" and no-op re-runs (whose ``git status`` never rewrites an index) do not hash those files again.

Real git repositories (a real submodule among them) and the real Runner; the step context is a
stand-in holding only what the settler reads (the fetch/install results, whether those steps ran
in this run, the logs directory and the runner's secrets), because a whole pipeline cannot be
paused between steps from a test."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from october.installer.core.runner import Runner
from october.installer.git.settle import COARSE_MARGIN_S, index_files, settle_index, settle_wait
from october.installer.pipeline.plan import CloneSettler
from october.installer.steps.results import FetchResult, ForkRecord, InstallResult


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           "-c", "protocol.file.allow=always", *args], check=True, capture_output=True,
                          text=True).stdout


def _repo(where: Path, files: int = 20) -> Path:
    where.mkdir(parents=True)
    for i in range(files):
        (where / f"f{i}.txt").write_text(f"{where.name} {i}\n")
    _git(where, "init", "-q")
    _git(where, "add", ".")
    _git(where, "commit", "-qm", "x")
    return where


def _clone_with_submodule(tmp: Path) -> Path:
    """A clone whose submodule is named a/b (its git dir is .git/modules/a/b, as CCCL's is 3rdparty/cccl)."""
    sub = _repo(tmp / "sub-origin")
    top = _repo(tmp / "fork")
    _git(top, "submodule", "add", "-q", str(sub), "a/b")
    _git(top, "commit", "-qm", "sub")
    return top


def _racy(repo: Path) -> int:
    """Index entries whose file's mtime is not older than the index itself (git hashes each again)."""
    index_ns = (repo / ".git" / "index").stat().st_mtime_ns if (repo / ".git").is_dir() else \
        Path(_git(repo, "rev-parse", "--absolute-git-dir").strip(), "index").stat().st_mtime_ns
    count, name = 0, ""
    for ln in _git(repo, "ls-files", "--debug").splitlines():
        if not ln.startswith("  "):
            name = ln
        elif ln.strip().startswith("mtime:") and (repo / name).is_file():
            sec, ns = ln.split()[1].split(":")
            count += int(sec) * 10**9 + int(ns) >= index_ns
    return count


def _make_racy(repo: Path) -> None:
    """Every file and every index of the clone stamped with the same instant, 5 s ago."""
    t = time.time_ns() - 5 * 10**9 + 123
    for f in repo.rglob("*"):
        if f.is_file() and ".git" not in f.relative_to(repo).parts:
            os.utime(f, ns=(t, t))
    for index in index_files(repo):
        os.utime(index, ns=(t, t))


class _Ctx:
    def __init__(self, tmp: Path, repo: Path) -> None:
        self.runner = Runner(tmp / "logs")
        self.paths = SimpleNamespace(logs=tmp / "logs")
        self.fetch: FetchResult | None = None
        self.installed = False
        self.done: dict[str, SimpleNamespace] = {}
        self.record = ForkRecord(path=str(repo), url="u", upstream=None, pin="p", requested=None, branch=None,
                                 commit="c" * 40)

    def finish_fetch(self, status: str = "ran") -> None:
        self.fetch = FetchResult(forks={"fork": self.record})
        self.done["fetch"] = SimpleNamespace(status=status)

    def finish_install(self, status: str = "ran") -> None:
        self.installed = True
        self.done["install"] = SimpleNamespace(status=status)

    def result(self, kind: type) -> object:
        if kind is InstallResult:
            return object() if self.installed else None
        return self.fetch if kind is FetchResult else None


def _statuses(tmp: Path) -> int:
    log = tmp / "logs" / "fetch.log"
    return log.read_text().count(" status --porcelain") if log.exists() else 0


def test_settling_clears_the_racy_entries_of_the_clone_and_its_submodule(tmp_path: Path) -> None:
    repo = _clone_with_submodule(tmp_path)
    sub = repo / "a" / "b"
    assert index_files(repo) == [repo / ".git" / "index", repo / ".git" / "modules" / "a" / "b" / "index"]
    _make_racy(repo)
    assert _racy(repo) > 0 and _racy(sub) > 0          # planted: what a fresh checkout in one tick leaves
    assert settle_index(Runner(tmp_path / "logs"), "fetch", repo) is True
    assert _racy(repo) == 0 and _racy(sub) == 0


def test_the_index_is_settled_in_the_background_once_install_is_done_and_a_tick_old(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "fork")
    ctx = _Ctx(tmp_path, repo)
    settler = CloneSettler(ctx)  # type: ignore[arg-type]
    settler.start()
    time.sleep(0.3)
    assert _statuses(tmp_path) == 0                 # fetch not done: nothing to settle yet
    ctx.finish_fetch()
    time.sleep(1.3)
    assert _statuses(tmp_path) == 0                 # install not done: it may still write into the clone
    ctx.finish_install()
    deadline = time.monotonic() + 5
    while str(repo) not in settler.settled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert str(repo) in settler.settled             # settled while "the pipeline" still runs
    settler.stop()
    settler.settle_rest()                           # nothing left: no second status
    assert _statuses(tmp_path) == 1


def test_what_the_background_did_not_reach_is_settled_at_the_end_after_the_wait(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "fork")
    ctx = _Ctx(tmp_path, repo)
    ctx.finish_fetch()
    ctx.finish_install()
    now = time.time_ns()
    whole = now - now % 10**9 + 10**9 - 1             # just before a whole second: the fine margin applies
    os.utime(repo / ".git" / "index", ns=(whole, whole))
    settler = CloneSettler(ctx)  # type: ignore[arg-type]
    settler.start()
    settler.stop()                                  # the pipeline ended at once
    assert settler.settled == set() and _statuses(tmp_path) == 0
    left = settle_wait(repo)
    assert left is not None and left > 0.05
    start = time.monotonic()
    settler.settle_rest()                           # waits out the rest of the margin, then settles
    assert _statuses(tmp_path) == 1 and time.monotonic() - start >= left - 0.05


def test_nothing_is_settled_when_fetch_and_install_were_already_done(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "fork")
    _make_racy(repo)
    ctx = _Ctx(tmp_path, repo)
    ctx.finish_fetch(status="cached")
    ctx.finish_install(status="cached")
    settler = CloneSettler(ctx)  # type: ignore[arg-type]
    settler.start()
    time.sleep(0.4)
    settler.stop()
    settler.settle_rest()
    assert _statuses(tmp_path) == 0


def test_a_submodule_index_too_new_holds_the_settle_back_and_the_wait_is_bounded(tmp_path: Path) -> None:
    repo = _clone_with_submodule(tmp_path)
    _make_racy(repo)
    assert settle_wait(repo) == 0.0
    sub_index = repo / ".git" / "modules" / "a" / "b" / "index"
    sub_index.touch()                               # the submodule checked out after the parent's index
    left = settle_wait(repo)
    assert left is not None and 0 < left <= COARSE_MARGIN_S
    future = time.time_ns() + 3600 * 10**9          # an index from the future (a clock set back)
    os.utime(sub_index, ns=(future, future))
    assert 0 < (settle_wait(repo) or 0) <= COARSE_MARGIN_S


def test_a_failure_of_the_settler_is_noted_never_raised(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "fork")
    ctx = _Ctx(tmp_path, repo)
    ctx.finish_fetch()
    ctx.finish_install()
    ctx.fetch = SimpleNamespace(forks={"fork": None})  # type: ignore[assignment]  # planted: unreadable result
    settler = CloneSettler(ctx)  # type: ignore[arg-type]
    settler.start()
    time.sleep(0.3)
    settler.stop()
    settler.settle_rest()
    log = (tmp_path / "logs" / "fetch.log").read_text()
    assert "settling the clone indexes in the background stopped" in log
    assert "settling the clone indexes at the end of the run failed" in log


def test_a_best_effort_note_passes_over_a_log_that_cannot_be_written(tmp_path: Path) -> None:
    """Clean-up notes (the settler's, the early starts') use ``best_effort``: a logs folder that cannot
    be made (a file in its place) raises for an ordinary note, and passes quietly for a best-effort one."""
    blocked = tmp_path / "logs"
    blocked.write_text("a file where the logs folder should be")
    runner = Runner(blocked)
    with pytest.raises(OSError):
        runner.note("fetch", "# ordinary")
    runner.note("fetch", "# best effort", best_effort=True)
    ok = Runner(tmp_path / "ok-logs")
    ok.note("fetch", "# written", best_effort=True)
    assert (tmp_path / "ok-logs" / "fetch.log").read_text() == "# written\n"


def test_a_settle_that_does_not_end_holds_neither_the_run_nor_its_lock(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario hunt: an early Ctrl-C hung the run for good (3 in 50), its stack lock held, a second
    Ctrl-C deferred: stop() joined a thread that waited on a module lock the interrupted import left held.
    Here the thread's settle never returns (a real ``git``, ``sleep``, stands in for the stuck one); stop()
    gives up after its bound, says so in the fetch log, and returns."""
    repo = _repo(tmp_path / "fork")
    ctx = _Ctx(tmp_path, repo)
    ctx.finish_fetch()
    ctx.finish_install()
    monkeypatch.setattr(CloneSettler, "STOP_WAIT_S", 0.5)
    settler = CloneSettler(ctx)  # type: ignore[arg-type]
    began = threading.Event()

    def stuck(runner: Runner, step: str, path: Path, **_: object) -> bool:
        began.set()
        runner.run(["sleep", "8"], step=step)
        return True

    settler._settle = stuck                         # type: ignore[method-assign]
    settler.start()
    assert began.wait(5)
    start = time.monotonic()
    settler.stop()
    assert time.monotonic() - start < 3
    assert "not waiting longer" in (tmp_path / "logs" / "fetch.log").read_text()


def test_the_settler_thread_imports_nothing() -> None:
    """What the thread runs was imported by the main thread when the settler was started: no import statement
    in the code the thread executes (an import there is what hung)."""
    import dis

    for fn in (CloneSettler._run, CloneSettler._paths, CloneSettler._changed, CloneSettler._note):
        names = [i.argval for i in dis.get_instructions(fn) if i.opname in ("IMPORT_NAME", "IMPORT_FROM")]
        assert names == [], (fn.__name__, names)


def test_the_fetch_s_check_of_a_clone_it_made_records_its_racy_entries_and_a_look_never_does(tmp_path: Path) -> None:
    """The fetch step's clean check of a clone this run has just checked out (``dirty_entries(refresh=True)``,
    worktree.py passes it for a fresh clone only) may rewrite its indexes, submodule's too: the files it had to
    hash because they were as new as their index are recorded, so the install step's ``git status`` and the
    settling do not hash them again.  Every other look (a no-op, ``current verify``, a clone the user works
    in) leaves the indexes as they are, byte for byte."""
    from october.installer.git.clonecheck import dirty_entries

    top = _clone_with_submodule(tmp_path)
    _git(top, "submodule", "update", "--init", "-q")
    indexes = index_files(top)
    assert len(indexes) == 2
    _make_racy(top)
    assert _racy(top) > 0 and _racy(top / "a" / "b") > 0
    before = [ix.read_bytes() for ix in indexes]
    assert dirty_entries(top, ["a/b"]) == []
    assert [ix.read_bytes() for ix in indexes] == before and _racy(top) > 0       # a look: nothing rewritten
    assert dirty_entries(top, ["a/b"], refresh=True) == []
    assert _racy(top) == 0 and _racy(top / "a" / "b") == 0                        # the fresh clone's check: recorded


def test_the_writing_check_still_names_a_file_put_back_outside_a_sparse_cone(tmp_path: Path) -> None:
    """A cone-mode sparse clone with a file outside the cone on disk: its skip-worktree entry is named by the
    writing check as by a look, and the bit stays (git >= 2.36's status clears it from a file present outside
    the cone, and a writing status then hid the file from every later look)."""
    from october.installer.git.clonecheck import dirty_entries

    repo = tmp_path / "r"
    (repo / "in").mkdir(parents=True)
    (repo / "out").mkdir()
    (repo / "in" / "a").write_text("a\n")
    (repo / "out" / "b").write_text("b\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "x")
    _git(repo, "sparse-checkout", "set", "--cone", "in")
    (repo / "out").mkdir()
    (repo / "out" / "b").write_text("b\n")              # the pinned bytes, put back outside the cone
    for refresh in (False, True, False):
        assert dirty_entries(repo, refresh=refresh) == ["out/b (skip-worktree)"], refresh


def test_the_install_step_s_look_at_tracked_files_leaves_the_index_to_the_settler(tmp_path: Path) -> None:
    """install.overwritten.changed_tracked runs before and after each fork's install.  Its `git status` rewrote the
    index each time (a refresh git makes when it can take the lock), so the index was never a tick old when the run
    ended and the end of every second stack slept out the settle margin (~0.1 s of its 0.75 s here).  The look
    now leaves the index as it is; what it answers is unchanged."""
    from october.installer.install.overwritten import changed_tracked

    repo = _repo(tmp_path / "fork")
    index = repo / ".git" / "index"
    time.sleep(0.05)
    for i in range(3):                              # same bytes, new mtimes: entries git would refresh
        (repo / f"f{i}.txt").write_text(f"fork {i}\n")
    (repo / "f5.txt").write_text("changed\n")
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    runner = Runner(tmp_path / "logs")
    assert changed_tracked(runner, "install", repo) == ["f5.txt"]
    assert changed_tracked(runner, "install", repo) == ["f5.txt"]
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before


def test_the_run_starts_the_thread_once_the_fetch_is_recorded(tmp_path: Path) -> None:
    """run_setup hands the pipeline's records to the settler: before the fetch's record nothing is started (nor
    GitPython imported for it, ~30 ms and a ``git version`` before the first step), at it the thread begins."""
    from october.installer.engine import StepRecord

    repo = _repo(tmp_path / "fork")
    ctx = _Ctx(tmp_path, repo)
    settler = CloneSettler(ctx)  # type: ignore[arg-type]
    assert settler._settle is None
    settler.on_record(StepRecord("preflight", "fp", None, 0.0, "", "ran"))  # type: ignore[arg-type]
    assert settler._thread.ident is None and settler._settle is None
    ctx.finish_fetch()
    settler.on_record(StepRecord("fetch", "fp", None, 0.0, "", "ran"))  # type: ignore[arg-type]
    assert settler._thread.ident is not None and settler._settle is not None
    settler.on_record(StepRecord("fetch", "fp", None, 0.0, "", "cached"))  # type: ignore[arg-type]   # once
    settler.stop()


@pytest.mark.slow
def test_a_setup_run_starts_its_settler_after_the_fetch_and_before_the_install(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A real setup (the offline fixture world); ``start`` is wrapped to note which steps were done when it ran."""
    from tests.fixtures.world import make_world
    from tests.test_setup_e2e import setup

    seen: list[list[str]] = []
    real_start = CloneSettler.start

    def start(self: CloneSettler) -> None:
        seen.append(sorted(self.ctx.done))
        real_start(self)

    monkeypatch.setattr(CloneSettler, "start", start)
    setup(make_world(tmp_path / "world"), tmp_path / "stack", tmp_path / "cache")
    assert len(seen) == 1 and "fetch" in seen[0] and "install" not in seen[0]
