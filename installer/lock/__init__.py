"""Locks: the stack's PEP 751 pylock and a lock a run is held to (:mod:`.pylock`, ``LockedState``), and the
committed index locks in ``locks/`` (:mod:`.indexlock`).  The ``lock`` step writes the first."""
