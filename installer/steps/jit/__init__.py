"""JIT pre-building of the asymmetric FlashInfer modules; the builder modules run inside the stack env.

Nothing in this package may import anything but the standard library at import
time: ``python -m october.checks.jit_build`` runs with the stack python.
"""
