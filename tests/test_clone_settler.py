"""The background settling of a fresh clone's index (issue 20): once the install step is done (the
last one writing into the clones) and the clone's index is a second old, ``git status`` rewrites it while later steps still run, so the run's
end does not wait for it and no-op re-runs find the files clean by their stat data.

Real git repositories and the real Runner; the step context is a stand-in holding only what the
settler reads (a FetchResult and the runner), because a whole pipeline cannot be paused between
steps from a test (``result`` answers only whether the fetch and install results exist)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

from october.installer.core.runner import Runner
from october.installer.pipeline.plan import CloneSettler
from october.installer.steps.results import FetchResult, ForkRecord, InstallResult


def _clone(tmp: Path) -> Path:
    repo = tmp / "fork"
    repo.mkdir()
    for i in range(20):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    return repo


class _Ctx:
    def __init__(self, tmp: Path, repo: Path) -> None:
        self.runner = Runner(tmp / "logs")
        self.fetch: FetchResult | None = None
        self.installed = False
        self.record = ForkRecord(path=str(repo), url="u", upstream=None, pin="p", requested=None, branch=None,
                                 commit="c" * 40)

    def finish_fetch(self) -> None:
        self.fetch = FetchResult(forks={"fork": self.record})

    def finish_install(self) -> None:
        self.installed = True

    def result(self, kind: type) -> object:
        if kind is InstallResult:
            return object() if self.installed else None
        return self.fetch if kind is FetchResult else None


def _statuses(tmp: Path) -> int:
    log = tmp / "logs" / "fetch.log"
    return log.read_text().count(" status --porcelain") if log.exists() else 0


def test_the_index_is_settled_in_the_background_once_install_is_done_and_a_second_old(tmp_path: Path) -> None:
    repo = _clone(tmp_path)
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


def test_what_the_background_did_not_reach_is_settled_at_the_end(tmp_path: Path) -> None:
    repo = _clone(tmp_path)
    ctx = _Ctx(tmp_path, repo)
    ctx.finish_fetch()
    ctx.finish_install()
    settler = CloneSettler(ctx)  # type: ignore[arg-type]
    settler.start()
    (repo / ".git" / "index").touch()               # a fresh index: too new to settle yet
    settler.stop()                                  # the pipeline ended at once
    assert settler.settled == set() and _statuses(tmp_path) == 0
    start = time.monotonic()
    settler.settle_rest()                           # waits out the rest of the margin, then settles
    assert _statuses(tmp_path) == 1 and time.monotonic() - start <= 1.2


def test_a_failure_of_the_settler_is_noted_never_raised(tmp_path: Path) -> None:
    repo = _clone(tmp_path)
    ctx = _Ctx(tmp_path, repo)
    ctx.finish_fetch()
    ctx.finish_install()
    ctx.record = None  # type: ignore[assignment]
    ctx.fetch = SimpleNamespace(forks={"fork": None})  # type: ignore[assignment]  # planted: unreadable result
    settler = CloneSettler(ctx)  # type: ignore[arg-type]
    settler.start()
    time.sleep(0.3)
    settler.stop()
    assert "settling the clone indexes in the background stopped" in (tmp_path / "logs" / "fetch.log").read_text()


def test_a_submodule_index_too_new_holds_the_settle_back(tmp_path: Path) -> None:
    """The wait covers every index of the clone: a submodule checked out after the parent's index was
    written (CCCL in FlashInfer) is what stays racy on the H200."""
    from october.installer.steps.fetch.worktree import FINE_MARGIN_S, index_files, settle_wait

    repo = _clone(tmp_path)
    sub_index = repo / ".git" / "modules" / "3rdparty" / "cccl" / "index"
    sub_index.parent.mkdir(parents=True)
    old = time.time_ns() - 5 * 10**9 + 123
    import os
    os.utime(repo / ".git" / "index", ns=(old, old))
    assert settle_wait(repo) == 0.0
    sub_index.write_bytes(b"")
    assert sub_index in index_files(repo)
    left = settle_wait(repo)
    assert left is not None and 0 < left <= max(FINE_MARGIN_S, 1.0)
