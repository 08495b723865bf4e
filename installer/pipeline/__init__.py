"""``october_setup``'s pipeline: the step engine (resumable, fingerprinted done-markers) and the plan
that orders the steps in ``installer/steps/``."""
