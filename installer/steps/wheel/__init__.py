"""The vLLM base (precompiled) wheel: download, verification, source commit, source equivalence.

``download``      httpx download into a content-addressed cache, resumable, hashed while streaming
``scan``          one pass over the members: RECORD hashes, ELF scan and kept files from one read
``verify``        every check on the wheel file, all problems reported at once
``retag``         WHEEL's tags against the file name's (vLLM's linux -> manylinux retag accepted, recorded)
``extensions``    the compiled extension modules the wheel ships (RECORD + ``PyInit_<name>``)
``tags``          the stack Python's wheel tags and markers: packaging's answer, run there through the Runner
``elf``           DT_NEEDED and the dynamic string table of the wheel's shared objects (pyelftools)
``version_info``  the source commit from ``vllm/_version.py`` (parsed, never imported)
``equivalence``   the compiled sources at the wheel's commit equal the fork's (git via the Runner)

The ``wheel`` step (:mod:`october.installer.steps.wheel.step`) strings these together.
"""

from __future__ import annotations

import importlib
from typing import Any

# The names below load their module on first use (PEP 562): importing one light module of this
# package (``extensions``, for the install guards) must not import httpx and GitPython, which a
# no-op re-run never needs.
_WHERE = {"Downloaded": "download", "DownloadPolicy": "download", "download_wheel": "download",
          "SourceEquivalence": "equivalence", "check_source_equivalence": "equivalence",
          "WheelExpectation": "verify", "WheelReport": "verify", "verify_wheel": "verify",
          "VersionInfo": "version_info", "read_version_info": "version_info"}

__all__ = ["SourceEquivalence", "check_source_equivalence", "Downloaded", "DownloadPolicy", "download_wheel",
           "WheelExpectation", "WheelReport", "verify_wheel", "VersionInfo", "read_version_info"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
