"""The stack's Python environment: uv command lines, a site-provided torch, the runtime environment file, and
what is read of an env from disk without starting it: its distributions (:mod:`.dists`), bytecode Python would run
in place of its source (:mod:`.bytecode`), files no RECORD owns (:mod:`.unowned`)."""
