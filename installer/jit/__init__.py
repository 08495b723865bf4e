"""The JIT workspace: the shared content-addressed cache of built modules (:mod:`.cache`) and the
integrity manifest of what a workspace holds (:mod:`.integrity`).

The module set is the recipe's (:mod:`october.installer.recipe.jitmodules`); the ``jit`` step
(``steps/jit.py``, its early start in ``steps/jitearly.py``) builds it with the builder modules,
which run inside the stack env (``python -m october.checks.jit_build`` runs with the stack python).
"""
