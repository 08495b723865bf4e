"""How many CPUs this process may use: the ones it may run on, fewer where its cgroup's CPU quota allows less.

``os.cpu_count()`` is the host's count: a pod limited to 8 CPUs on a 192-core node sees 192, and a JIT build
told ``MAX_JOBS=192`` starts that many compilers on 8 CPUs' worth of time (and their memory).  The quota is
read from cgroup v2 (``cpu.max``: ``QUOTA PERIOD`` or ``max PERIOD``) or, where that is absent, cgroup v1
(``cpu.cfs_quota_us``, ``-1`` for none, over ``cpu.cfs_period_us``); a fractional quota rounds down, never
below one.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")     # the container's own cgroup (cgroup namespaces, Docker's and Kubernetes' default)


def quota_cpus(root: Path | None = None) -> int | None:
    """The whole CPUs the cgroup quota under ``root`` (default :data:`CGROUP`) allows, or None where no quota
    is set or none can be read."""
    base = CGROUP if root is None else root
    try:
        quota, period = (base / "cpu.max").read_text(encoding="ascii").split()[:2]
    except (OSError, ValueError):
        v1 = base / "cpu"
        try:
            quota = (v1 / "cpu.cfs_quota_us").read_text(encoding="ascii").strip()
            period = (v1 / "cpu.cfs_period_us").read_text(encoding="ascii").strip()
        except OSError:
            return None
    try:
        q, p = int(quota), int(period)
    except ValueError:          # "max": no quota
        return None
    return max(1, q // p) if q > 0 and p > 0 else None


def available_cpus(root: Path | None = None) -> int:
    """The CPUs this process may use: those it may run on (a cpuset, a batch job's share), fewer where its
    cgroup's quota allows less (a container's ``--cpus``, a pod's CPU limit)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = quota_cpus(root)
    return min(cpus, quota) if quota is not None else cpus
