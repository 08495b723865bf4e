"""The CPUs the tool counts (``core/cpus.py``): the affinity's, fewer under a cgroup CPU quota, the one count the
tool's own parallel work uses (the JIT builder's ``MAX_JOBS``: ``tests/test_jit_step.py``; git's checkout workers:
``tests/test_fetch_mirror.py``; the torch warm-up, the RECORD hashing and bytecode comparison threads).

Mocked: the cgroup files and ``/proc/self/cgroup``, as files of the same formats under a temporary folder (this
machine's own quota cannot be set from a test), and, where a test says so, the affinity and the host's CPU count
(a 192-core host with a 4-CPU affinity cannot exist here).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from october.installer.core.cpus import available_cpus, quota_cpus

INSTALLER = Path(__file__).resolve().parent.parent / "installer"


def _v2(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.max").write_text(text)
    return root


def _v1(root: Path, quota: str, period: str = "100000") -> Path:
    (root / "cpu").mkdir(parents=True, exist_ok=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text(quota + "\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text(period + "\n")
    return root


@pytest.fixture
def host_of_192(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 192-core host whose affinity gives this process 4 CPUs."""
    monkeypatch.setattr(os, "cpu_count", lambda: 192)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})


NO_PROC = Path("/nonexistent/proc-self-cgroup")


@pytest.mark.parametrize(("text", "expected"), [
    ("100000 100000\n", 1), ("150000 100000\n", 1), ("50000 100000\n", 1), ("400000 100000\n", 4),
    ("max 100000\n", None), ("garbage\n", None), ("", None), ("\xff\xfe 100000\n", None)])
def test_a_cgroup_v2_quota_is_read_in_whole_cpus(tmp_path: Path, text: str, expected: int | None) -> None:
    """The review: a pod limited to 4 CPUs on a 128-core node saw 128.  ``cpu.max`` is ``QUOTA PERIOD``; a part of a
    CPU rounds down, never below one; ``max`` and what cannot be read (not ASCII either) are no quota."""
    assert quota_cpus(_v2(tmp_path / "cg", text), NO_PROC) == expected


@pytest.mark.parametrize(("quota", "period", "expected"), [
    ("200000", "100000", 2), ("-1", "100000", None), ("50000", "100000", 1), ("100000", "0", None),
    ("\xe9", "100000", None)])
def test_a_cgroup_v1_quota_is_read_where_v2_has_none(tmp_path: Path, quota: str, period: str,
                                                     expected: int | None) -> None:
    """Older nodes (cgroup v1): ``cpu/cpu.cfs_quota_us`` over ``cpu.cfs_period_us``, ``-1`` for none."""
    assert quota_cpus(_v1(tmp_path / "cg", quota, period), NO_PROC) == expected


def test_without_a_cgroup_namespace_the_process_s_own_cgroup_and_those_above_count(tmp_path: Path) -> None:
    """cgroup v2 seen from the host's root (``--cgroupns=host``, a systemd service, a batch job): the quota is on the
    process's own cgroup, named in ``/proc/self/cgroup``, or on one above it; the tightest counts."""
    root = _v2(tmp_path / "cg", "max 100000\n")
    _v2(root / "system.slice", "600000 100000\n")
    _v2(root / "system.slice" / "job.service", "max 100000\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("0::/system.slice/job.service\n")
    assert quota_cpus(root, proc) == 6
    _v2(root / "system.slice" / "job.service", "200000 100000\n")
    assert quota_cpus(root, proc) == 2
    proc.write_text("12:cpu,cpuacct:/other\n0::/\n")          # a namespace: the root is the process's own
    assert quota_cpus(root, proc) is None


def test_the_count_is_the_affinity_s_or_the_quota_s_whichever_is_fewer(tmp_path: Path, host_of_192) -> None:
    assert available_cpus(tmp_path / "no-cgroup", NO_PROC) == 4
    assert available_cpus(_v2(tmp_path / "one", "100000 100000\n"), NO_PROC) == 1
    assert available_cpus(_v2(tmp_path / "many", "1200000 100000\n"), NO_PROC) == 4
    assert available_cpus(_v1(tmp_path / "v1", "200000"), NO_PROC) == 2


def test_every_cpu_count_of_the_tool_is_this_one() -> None:
    """No other place of the tool counts the host's CPUs for work it starts (``os.cpu_count`` is the machine facts'
    report, and ``core/cpus.py``'s fallback where there is no affinity), and no thread pool is sized by Python's
    default (a count of the host's CPUs)."""
    host_count = re.compile(r"\bcpu_count\(|checkout\.workers\", \"0\"")
    users = sorted(str(p.relative_to(INSTALLER)) for p in INSTALLER.rglob("*.py")
                   if host_count.search(p.read_text(encoding="utf-8")))
    assert users == ["core/cpus.py", "machine/probes.py"]
    default_pools = sorted(str(p.relative_to(INSTALLER)) for p in INSTALLER.rglob("*.py")
                           if re.search(r"(ThreadPoolExecutor|ProcessPoolExecutor|Pool)\(\s*\)", p.read_text(encoding="utf-8")))
    assert default_pools == []
