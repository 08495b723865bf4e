"""Installing the forks into the stack env: the ordered plan, the upstream base commit, the post-install guards,
RECORD checks, nested installs, consistency, overwritten files (the ``install`` step calls these)."""
