"""Step ``lock``: the stack's PEP 751 pylock (and the committed index locks in ``locks/``)."""
