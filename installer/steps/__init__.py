"""One thin module per setup step (its ``Step`` class), in pipeline order (see
october.installer.pipeline.plan.plan_steps); each calls the domain libraries (``git``, ``wheels``, ``pyenv``,
``install``, ``jit``, ``lock``, ``machine``, ``recipe``).  The results every step returns are in
:mod:`.results`; ``jitearly`` is the jit step's early start during install."""
