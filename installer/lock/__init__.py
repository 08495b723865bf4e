"""Locks: the stack's PEP 751 pylock (:mod:`.pylock`) and the committed index locks (:mod:`.indexlock`)."""
