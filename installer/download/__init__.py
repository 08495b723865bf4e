"""`current download`: pinned, verified model weights for a recipe's AWQ / FP16 selection.

Modules, one job each:

* :mod:`.plan`     -- options -> frozen :class:`DownloadPlan` (nothing runs)
* :mod:`.hub`      -- the only code that talks to huggingface_hub
* :mod:`.verify`   -- streaming sha256 / git blob checks; bad files moved aside
* :mod:`.manifest` -- build, schema-validate and atomically write the manifest
* :mod:`.run`      -- :func:`run_download`, the entry point the CLI calls
"""

from .manifest import load_manifest
from .plan import DownloadOptions, DownloadPlan, make_plan
from .run import run_download

__all__ = ["DownloadOptions", "DownloadPlan", "load_manifest", "make_plan", "run_download"]
