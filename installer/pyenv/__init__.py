"""The stack's Python environment: every uv command line (:mod:`.uvcmd`), a site-provided torch
(:mod:`.systorch`) and the stack's runtime environment file (:mod:`.stackenv`)."""
