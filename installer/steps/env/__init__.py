"""Step ``env``: the stack's own Python environment (uv venv, or a system Python's torch)."""
