"""The project's one import package.

``october.installer`` is the tool (the ``installer/`` folder) and ``october.checks`` the code that
runs inside a stack's own interpreter (the ``checks/`` folder).  In a checkout both are links to
the layout's folders; a wheel carries them as real folders under ``october/``.  No other
distribution can claim a file of ours (PyPA's ``installer`` owns the top-level name ``installer``).
"""
