"""One thin module per setup step (its ``Step`` class), in pipeline order (see
:func:`october.installer.pipeline.plan.plan_steps`); the results every step returns are in :mod:`.results`."""
