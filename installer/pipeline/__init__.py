"""``october_setup``'s pipeline: the plan that orders the steps in ``installer/steps/`` and runs them
through the step engine (``installer/engine.py``: resumable, fingerprinted done-markers)."""
