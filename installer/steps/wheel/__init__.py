"""The vLLM base (precompiled) wheel: download, verification, source commit, source equivalence.

``download``      httpx download into a content-addressed cache, resumable, hashed while streaming
``scan``          one pass over the members: RECORD hashes, ELF scan and kept files from one read
``verify``        every check on the wheel file, all problems reported at once
``retag``         WHEEL's tags against the file name's (vLLM's linux -> manylinux retag accepted, recorded)
``extensions``    the compiled extension modules the wheel ships (RECORD + ``PyInit_<name>``)
``tags``          the stack Python's supported wheel tags (probed through the Runner)
``elf``           DT_NEEDED and the dynamic string table of the wheel's shared objects
``version_info``  the source commit from ``vllm/_version.py`` (parsed, never imported)
``equivalence``   the compiled sources at the wheel's commit equal the fork's (git via the Runner)

The ``wheel`` step (:mod:`october.installer.steps.wheel.step`) strings these together.
"""

from october.installer.steps.wheel.download import Downloaded, DownloadPolicy, download_wheel
from october.installer.steps.wheel.equivalence import SourceEquivalence, check_source_equivalence
from october.installer.steps.wheel.verify import WheelExpectation, WheelReport, verify_wheel
from october.installer.steps.wheel.version_info import VersionInfo, read_version_info

__all__ = ["SourceEquivalence", "check_source_equivalence", "Downloaded", "DownloadPolicy", "download_wheel",
           "WheelExpectation", "WheelReport", "verify_wheel", "VersionInfo", "read_version_info"]
