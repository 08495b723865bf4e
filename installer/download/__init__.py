"""`current download`: pinned, verified model weights for a recipe's AWQ / FP16 selection
(:mod:`.plan`, :mod:`.hub`, :mod:`.verify`, :mod:`.manifest`, :mod:`.run`)."""

from .manifest import load_manifest
from .plan import DownloadOptions, DownloadPlan, make_plan
from .run import run_download

__all__ = ["DownloadOptions", "DownloadPlan", "load_manifest", "make_plan", "run_download"]
