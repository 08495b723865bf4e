"""Probes: stdlib-only scripts the tool runs by path (``PYTHON -I checks/probes/<name>.py``) with the stack's
Python or a candidate system Python; each prints facts and decides nothing.  Never imported by the tool."""
