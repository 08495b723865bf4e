"""A SIGKILL at any git command of the fetch step, then a plain re-run: the re-run finishes.

Real git throughout: a fork whose ``3rdparty/sub`` is a submodule of a second repository,
made by the fixtures.  The fetch runs in a forked child; the one stand-in is a ``git``
wrapper first on PATH (tests/fixtures/fetch_kill.py) that counts the git commands the step
and GitPython start and SIGKILLs the whole process group at the chosen one: just before it
starts, or part-way through it (a fraction of the time it took in a calibration run).  Each
kill point gets its own stack and cache; the re-run is the same fetch with no kill, and must
leave the clone at the pinned commit, clean, its submodule at the recorded commit, with
complete objects (``git fsck``), every mirror a bare repository, and nothing half-made.

Two stories: a new stack with an empty cache, and a finished stack whose pin moves to a
commit that records another submodule commit (the clone moves in place).  Kill points:
before every command that changes disk, and during each of them (the long compound ones --
clone, fetch, ``submodule update`` -- at three places).  ``OCTOBER_KILL_SWEEP=all`` adds a
kill before every git command, reads included, and three places in every command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.fetch_kill import Outcome, finish, install_git_wrapper, poll, run_fetch, start_fetch
from tests.fixtures.gitrepos import bare_path, git, make_repo_with_submodule
from tests.fixtures.world import make_world

pytestmark = pytest.mark.slow

WORKERS = 2
SUB = "3rdparty/sub"
_WRITES = ("init", "fetch", "clone", "checkout", "submodule --quiet", "submodule update", "config submodule",
           "update-ref", "remote", "clean")
_LONG = ("fetch", "clone", "submodule update")


@dataclass(frozen=True)
class Fork:
    url: str
    old: str          # a commit recording the submodule at sub_old
    new: str          # the tip: the submodule at sub_new, and a changed file
    sub_old: str
    sub_new: str


@dataclass(frozen=True)
class Point:
    n: int            # the git command (1-based) at which the kill lands
    frac: float       # 0: before it starts; else this fraction of its calibrated duration in
    us: int           # its calibrated duration (microseconds)
    what: str

    @property
    def label(self) -> str:
        when = "before" if self.frac == 0 else f"{self.frac:.0%} into"
        return f"{when} git #{self.n} ({self.what[:90]})"


def _fork(tmp: Path) -> Fork:
    url, ids, _, sub_ids = make_repo_with_submodule(tmp, "fork", "sub", sub_path=SUB, relative_url=False)
    work = tmp / "work-move"
    git("clone", "--quiet", str(bare_path(url)), str(work))
    (work / "history.txt").write_text("moved\n", encoding="utf-8")
    (work / "fork" / "extra.py").write_text("X = 1\n", encoding="utf-8")
    git("add", "-A", cwd=work)
    git("update-index", "--cacheinfo", f"160000,{sub_ids[1]},{SUB}", cwd=work)
    git("commit", "--quiet", "-m", "move the submodule", cwd=work)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=work)
    new = git("rev-parse", "HEAD", cwd=work)
    shutil.rmtree(work)
    return Fork(url, ids[-1], new, sub_ids[0], sub_ids[1])


def _spec(root: Path, fork: Fork, commit: str) -> dict[str, object]:
    return {"stack": str(root / "stack"), "cache": str(root / "cache"),
            "forks": [{"name": "fork", "url": fork.url, "commit": commit}]}


def _points(calibration: Outcome, sweep_all: bool) -> list[Point]:
    cmds: dict[int, tuple[int, str]] = {}
    for line in calibration.commands:
        n, us, what = line.split(" ", 2)
        cmds[int(n)] = (int(us), what)
    points: list[Point] = []
    for n in range(1, calibration.count + 1):
        us, what = cmds.get(n, (0, "a GitPython reader that stays open"))
        writes = any(w in what for w in _WRITES) and "--get" not in what
        if sweep_all or writes:
            points.append(Point(n, 0.0, us, what))
        if n in cmds and (sweep_all or writes):
            fracs = (0.2, 0.5, 0.8) if sweep_all or any(w in what for w in _LONG) else (0.5,)
            points += [Point(n, f, us, what) for f in fracs]
    points.append(Point(calibration.count + 1, 0.0, 0, "none: the run ends first"))
    return points


def _check(root: Path, fork: Fork, commit: str, sub: str) -> str | None:
    """None when the re-run left what a finished fetch leaves; read with plain git."""
    dest = root / "stack" / "src" / "fork"
    try:
        head = git("rev-parse", "HEAD", cwd=dest)
        status = git("status", "--porcelain", "--ignore-submodules=none", "--untracked-files=all", cwd=dest)
        subs = git("submodule", "status", "--recursive", cwd=dest)
        git("fsck", "--connectivity-only", "--no-progress", cwd=dest)
        git("fsck", "--connectivity-only", "--no-progress", cwd=dest / SUB)
        mirrors = sorted((root / "cache" / "git").iterdir())
        bare = [git("rev-parse", "--is-bare-repository", cwd=m) for m in mirrors if m.suffix == ".git"]
    except RuntimeError as exc:
        return str(exc)
    if head != commit:
        return f"HEAD {head}, not {commit}"
    if status:
        return f"not clean: {status!r}"
    if subs.split()[:2] != [sub, SUB]:          # a "-", "+" or "U" flag would lead the line
        return f"submodule status {subs!r}, not at {sub}"
    if bare != ["true", "true"]:
        return f"mirrors {[m.name for m in mirrors]}: bare={bare}"
    left = [p.name for p in (root / "stack" / "src").iterdir() if p.name != "fork"]
    left += [m.name for m in mirrors if m.name.startswith(".")]
    if (dest / ".git" / "october-fetch-incomplete").exists():
        left.append("the incomplete marker")
    return f"left behind: {left}" if left else None


def _sweep(tmp: Path, fork: Fork, base: Path | None, commit: str, sub: str) -> tuple[int, list[str]]:
    """Calibrate, then kill at every point and re-run; return (points, failures)."""
    bin_dir = install_git_wrapper(tmp / "bin")

    def fresh(root: Path) -> None:
        shutil.rmtree(root, ignore_errors=True)
        if base is not None:
            shutil.copytree(base, root, symlinks=True)
        else:
            root.mkdir(parents=True)

    fresh(tmp / "cal")
    cal = run_fetch(_spec(tmp / "cal", fork, commit), bin_dir, tmp / "kd-cal")
    assert cal.returncode == 0, cal.output
    assert _check(tmp / "cal", fork, commit, sub) is None
    points = _points(cal, os.environ.get("OCTOBER_KILL_SWEEP") == "all")
    todo = list(enumerate(points))
    active: dict[int, tuple[Point, Path, object, str]] = {}   # slot -> (point, root, running, phase)
    failures: list[str] = []
    free = list(range(WORKERS))
    while todo or active:
        while todo and free:
            slot = free.pop()
            i, pt = todo.pop(0)
            root = tmp / f"p{i}"
            fresh(root)
            mode = "before" if pt.frac == 0 else "during"
            run = start_fetch(_spec(root, fork, commit), bin_dir, tmp / f"kd{slot}", kill_at=pt.n, mode=mode,
                              delay=pt.us * pt.frac / 1e6)
            active[slot] = (pt, root, run, "kill")
        for slot, (pt, root, run, phase) in list(active.items()):
            if not poll(run):                       # type: ignore[arg-type]
                continue
            out = finish(run)                       # type: ignore[arg-type]
            if phase == "kill":
                if out.returncode not in (-9, 0) or (out.returncode == 0 and pt.n <= cal.count):
                    failures.append(f"{pt.label}: the killed run ended {out.returncode}: {out.output[-600:]}")
                    del active[slot]
                    free.append(slot)
                    continue
                again = start_fetch(_spec(root, fork, commit), bin_dir, tmp / f"kd{slot}")
                active[slot] = (pt, root, again, "rerun")
                continue
            del active[slot]
            free.append(slot)
            if out.returncode != 0:
                failures.append(f"{pt.label}: the re-run exited {out.returncode}: {out.output[-600:]}")
                continue
            bad = _check(root, fork, commit, sub)
            if bad is not None:
                failures.append(f"{pt.label}: the re-run exited 0 but {bad}")
                continue
            shutil.rmtree(root)
        time.sleep(0.005)
    return len(points), failures


def test_a_kill_at_any_git_command_of_a_new_stack_is_finished_by_a_plain_rerun(tmp_path: Path) -> None:
    fork = _fork(tmp_path)
    started = time.monotonic()
    n, failures = _sweep(tmp_path, fork, None, fork.new, fork.sub_new)
    print(f"new stack: {n} kill points, {len(failures)} failed, {time.monotonic() - started:.0f}s")
    assert n >= 25
    assert not failures, "\n".join(failures)


def test_a_kill_while_a_clone_moves_to_a_new_pin_is_finished_by_a_plain_rerun(tmp_path: Path) -> None:
    fork = _fork(tmp_path)
    base = tmp_path / "base"
    base.mkdir()
    done = run_fetch(_spec(base, fork, fork.old), install_git_wrapper(tmp_path / "bin"), tmp_path / "kd-base")
    assert done.returncode == 0, done.output
    assert _check(base, fork, fork.old, fork.sub_old) is None
    started = time.monotonic()
    n, failures = _sweep(tmp_path, fork, base, fork.new, fork.sub_new)
    print(f"moving stack: {n} kill points, {len(failures)} failed, {time.monotonic() - started:.0f}s")
    assert n >= 15
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("match,delay", [("submodule update", 0.03), ("init --bare", 0.01)])
def test_october_setup_killed_in_its_fetch_is_finished_by_the_same_command(tmp_path: Path, match: str,
                                                                           delay: float) -> None:
    """The whole command, as a user runs it: killed inside the submodule's clone and checkout
    (or inside the first mirror's `git init`), then run again as it
    was, with no other step."""
    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    args = [str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "-q"]
    kill_dir = tmp_path / "kd"
    kill_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k.startswith("GIT_AUTHOR")
           or k.startswith("GIT_COMMITTER")}
    killed = subprocess.run(
        ["bash", "-c", 'export KILL_PGID=$$; exec "$0" -m october.installer.october_setup "$@"', sys.executable, *args],
        cwd=PROJECT_ROOT, start_new_session=True, capture_output=True, text=True, timeout=600,
        env={**env, "PATH": f"{install_git_wrapper(tmp_path / 'bin')}{os.pathsep}{env['PATH']}",
             "KILL_DIR": str(kill_dir), "KILL_MATCH": match, "KILL_MODE": "during" if delay else "before",
             "KILL_DELAY": f"{delay}"})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert "killed" in (kill_dir / "log").read_text()
    assert not (stack / ".state" / "fetch.json").exists()
    again = subprocess.run([sys.executable, "-m", "october.installer.october_setup", *args], cwd=PROJECT_ROOT,
                           capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    beta = stack / "src" / "beta"
    assert git("rev-parse", "HEAD", cwd=beta) == world.commits["beta"]
    assert git("status", "--porcelain", "--ignore-submodules=none", "--untracked-files=all", cwd=beta) == ""
    gamma = git("-C", str(world.beta_bare), "rev-parse", f"{world.commits['beta']}:third_party/gamma")
    assert git("submodule", "status", "--recursive", cwd=beta).split()[:2] == [gamma, "third_party/gamma"]


def test_a_commit_whose_tree_a_killed_fetch_never_wrote_is_fetched_again(tmp_path: Path) -> None:
    """The state CI hit once in the sweep above (20% into the clone's fetch): a small fetch is
    unpacked into loose objects one at a time, commit first, so the kill left the new commit
    object in the clone without its tree.  Planted here exactly: the commit object alone is
    written into a finished clone at the old pin; the re-run must fetch the rest, not trust
    the lone object and check out a commit git cannot read."""
    fork = _fork(tmp_path)
    bin_dir = install_git_wrapper(tmp_path / "bin")
    done = run_fetch(_spec(tmp_path, fork, fork.old), bin_dir, tmp_path / "kd-base")
    assert done.returncode == 0, done.output
    clone = tmp_path / "stack" / "src" / "fork"
    raw = subprocess.run(["git", "-C", str(bare_path(fork.url)), "cat-file", "commit", fork.new],
                         capture_output=True, check=True).stdout
    planted = subprocess.run(["git", "-C", str(clone), "hash-object", "-t", "commit", "-w", "--stdin"],
                             input=raw, capture_output=True, check=True).stdout.decode().strip()
    assert planted == fork.new
    tree = git("-C", str(bare_path(fork.url)), "rev-parse", f"{fork.new}^{{tree}}")
    assert subprocess.run(["git", "-C", str(clone), "cat-file", "-e", tree]).returncode != 0   # the fault is real
    again = run_fetch(_spec(tmp_path, fork, fork.new), bin_dir, tmp_path / "kd-again")
    assert again.returncode == 0, again.output
    assert _check(tmp_path, fork, fork.new, fork.sub_new) is None
