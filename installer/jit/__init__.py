"""The JIT workspace: the shared content-addressed cache of built modules (:mod:`.cache`), the
integrity manifest of what a workspace holds (:mod:`.integrity`) and the build's requests and answers."""
