"""The CPUs the tool counts (``core/cpus.py``): the affinity's, fewer under a cgroup CPU quota, the one count the
tool's own parallel work uses (the JIT builder's ``MAX_JOBS``: ``tests/test_jit_step.py``; the torch warm-up, the
RECORD hashing and bytecode comparison threads).

Mocked: the cgroup files, as files of the same formats under a temporary folder (this machine's own quota cannot
be set from a test); the affinity is this machine's real one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from october.installer.core.cpus import available_cpus, quota_cpus

AFFINITY = len(os.sched_getaffinity(0))


def _v2(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.max").write_text(text)
    return root


def _v1(root: Path, quota: str, period: str = "100000") -> Path:
    (root / "cpu").mkdir(parents=True, exist_ok=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text(quota + "\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text(period + "\n")
    return root


@pytest.mark.parametrize(("text", "expected"), [
    ("100000 100000\n", 1), ("150000 100000\n", 1), ("50000 100000\n", 1), ("400000 100000\n", 4),
    ("max 100000\n", None), ("garbage\n", None), ("", None)])
def test_a_cgroup_v2_quota_is_read_in_whole_cpus(tmp_path: Path, text: str, expected: int | None) -> None:
    """The review: a pod limited to 4 CPUs on a 128-core node saw 128.  ``cpu.max`` is ``QUOTA PERIOD``; a part of a
    CPU rounds down, never below one; ``max`` and what cannot be read are no quota."""
    assert quota_cpus(_v2(tmp_path / "cg", text)) == expected


@pytest.mark.parametrize(("quota", "period", "expected"), [
    ("200000", "100000", 2), ("-1", "100000", None), ("50000", "100000", 1), ("100000", "0", None)])
def test_a_cgroup_v1_quota_is_read_where_v2_has_none(tmp_path: Path, quota: str, period: str,
                                                     expected: int | None) -> None:
    """Older nodes (cgroup v1): ``cpu/cpu.cfs_quota_us`` over ``cpu.cfs_period_us``, ``-1`` for none."""
    assert quota_cpus(_v1(tmp_path / "cg", quota, period)) == expected


def test_the_count_is_the_affinity_s_or_the_quota_s_whichever_is_fewer(tmp_path: Path) -> None:
    assert available_cpus(tmp_path / "no-cgroup") == AFFINITY
    assert available_cpus(_v2(tmp_path / "one", "100000 100000\n")) == 1
    assert available_cpus(_v2(tmp_path / "many", f"{(AFFINITY + 8) * 100000} 100000\n")) == AFFINITY
    assert available_cpus(_v1(tmp_path / "v1", "100000")) == 1


def test_every_cpu_count_of_the_tool_is_this_one() -> None:
    """No other place counts the host's CPUs for work it starts (``os.cpu_count`` is the machine facts' report only)."""
    root = Path(__file__).resolve().parent.parent / "installer"
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                   if "os.cpu_count" in p.read_text(encoding="utf-8"))
    assert users == ["core/cpus.py", "machine/probes.py"]
