"""The ``install`` step's parts: the ordered plan, the upstream base commit, the post-install guards."""
