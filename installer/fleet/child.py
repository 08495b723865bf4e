"""``python -m october.installer.fleet.child ARGV...``: exec ARGV so that it dies with its parent.

A node's task runs october_setup and current smoke as children of a Ray worker.  When the node
dies (raylet killed, machine removed) the worker is killed; without this the child would go on
installing, orphaned, holding the stack's lock.  Linux ``PR_SET_PDEATHSIG`` survives ``exec``;
elsewhere ARGV simply runs.  The single-node pipeline is resumable, so a killed child leaves a
stack that the next run finishes.
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m october.installer.fleet.child PROGRAM [ARGS...]")
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)          # PR_SET_PDEATHSIG
        if os.getppid() == 1:                            # the parent died before prctl took effect
            sys.exit(143)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
