"""``python -m october.installer.fleet.child ARGV...``: exec ARGV so that it dies with its parent (the node's
Ray worker): a child orphaned by a dead node would go on installing, holding the stack's lock.  Linux
``PR_SET_PDEATHSIG`` survives ``exec``; elsewhere ARGV simply runs.
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
