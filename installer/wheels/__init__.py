"""The vLLM base (precompiled) wheel: download, verification, source commit, ancestry.

``download``      httpx download into a content-addressed cache, resumable, hashed while streaming
``verify``        every check on the wheel file, all problems reported at once
``tags``          the stack Python's supported wheel tags (probed through the Runner)
``elf``           DT_NEEDED of the wheel's extensions (for the CUDA-variant check)
``version_info``  the source commit from ``vllm/_version.py`` (parsed, never imported)
``ancestry``      the source commit must be an ancestor of the fork commit (git via the Runner)

The ``wheel`` step (:mod:`installer.steps.wheel`) strings these together.
"""

from installer.wheels.ancestry import Ancestry, check_ancestry
from installer.wheels.download import Downloaded, DownloadPolicy, download_wheel
from installer.wheels.verify import WheelExpectation, WheelReport, verify_wheel
from installer.wheels.version_info import VersionInfo, read_version_info

__all__ = ["Ancestry", "check_ancestry", "Downloaded", "DownloadPolicy", "download_wheel",
           "WheelExpectation", "WheelReport", "verify_wheel", "VersionInfo", "read_version_info"]
