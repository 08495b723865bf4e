"""How many CPUs this process may use: the ones it may run on, fewer where a cgroup CPU quota allows less.

``os.cpu_count()`` is the host's count: a pod limited to 8 CPUs on a 192-core node sees 192, and a JIT build
told ``MAX_JOBS=192`` starts that many compilers on 8 CPUs' worth of time (and their memory).  The quota is
read from cgroup v2 (``cpu.max``: ``QUOTA PERIOD`` or ``max PERIOD``) of this process's cgroup and each cgroup
above it (the tightest counts: a systemd slice's ``CPUQuota=`` or a batch job's limit sits above the process),
found through ``/proc/self/cgroup`` (``0::/path``) and, with a cgroup namespace (Docker's and Kubernetes'
default), at the root of ``/sys/fs/cgroup``; where v2 holds none, cgroup v1 (``cpu.cfs_quota_us``, ``-1`` for
none, over ``cpu.cfs_period_us``).  A fractional quota rounds down, never below one.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, ValueError):       # missing, unreadable, not ASCII
        return None


def _whole_cpus(quota: str, period: str) -> int | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:                  # "max": no quota
        return None
    return max(1, q // p) if q > 0 and p > 0 else None


def _v2_dirs(base: Path, proc_cgroup: Path) -> list[Path]:
    """``base`` and every folder from it down to this process's own cgroup (``0::/a/b`` -> base, base/a, base/a/b)."""
    dirs = [base]
    for line in (_read(proc_cgroup) or "").splitlines():
        if line.startswith("0::/"):
            parts = [p for p in line[4:].strip().split("/") if p and p != ".."]
            dirs += [base.joinpath(*parts[:i]) for i in range(1, len(parts) + 1)]
    return dirs


def quota_cpus(root: Path | None = None, proc_cgroup: Path | None = None) -> int | None:
    """The whole CPUs the tightest cgroup quota over this process allows (under ``root``, default :data:`CGROUP`;
    the process's cgroup from ``proc_cgroup``, default :data:`PROC_CGROUP`), or None where none is set or read."""
    base = CGROUP if root is None else root
    found = []
    for d in _v2_dirs(base, PROC_CGROUP if proc_cgroup is None else proc_cgroup):
        fields = (_read(d / "cpu.max") or "").split()
        if len(fields) >= 2 and (n := _whole_cpus(fields[0], fields[1])) is not None:
            found.append(n)
    if found:
        return min(found)
    quota, period = _read(base / "cpu" / "cpu.cfs_quota_us"), _read(base / "cpu" / "cpu.cfs_period_us")
    return _whole_cpus(quota.strip(), period.strip()) if quota is not None and period is not None else None


def available_cpus(root: Path | None = None, proc_cgroup: Path | None = None) -> int:
    """The CPUs this process may use: those it may run on (a cpuset, a batch job's share), fewer where a cgroup
    quota allows less (a container's ``--cpus``, a pod's CPU limit, a systemd slice's ``CPUQuota=``)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = quota_cpus(root, proc_cgroup)
    return max(1, min(cpus, quota) if quota is not None else cpus)
