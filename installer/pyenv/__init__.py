"""The stack's Python environment: uv command lines, a site-provided torch, the runtime environment file."""
