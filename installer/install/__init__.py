"""Installing the forks into the stack env (the ``install`` step calls these)."""
