"""The vLLM base (precompiled) wheel: download, verification, source commit.

``download``      httpx download into a content-addressed cache, resumable, hashed while streaming
``scan``          one pass over the members: RECORD hashes, ELF scan and kept files from one read
``verify``        every check on the wheel file, all problems reported at once
``retag``         WHEEL's tags against the file name's (vLLM's linux -> manylinux retag accepted, recorded)
``extensions``    the compiled extension modules the wheel ships (RECORD + ``PyInit_<name>``)
``tags``          the stack Python's wheel tags and markers: packaging's answer, run there through the Runner
``elf``           DT_NEEDED and the dynamic string table of the wheel's shared objects (pyelftools)
``version_info``  the source commit from ``vllm/_version.py`` (parsed, never imported)

The ``wheel`` step (``steps/wheel.py``) strings these together, with the source equivalence from
:mod:`october.installer.git.equivalence` (git) and :mod:`october.installer.git.sdistmatch`.
"""

from __future__ import annotations

import importlib
from typing import Any

# The names below load their module on first use (PEP 562): importing one light module of this
# package (``extensions``, for the install guards) must not import httpx and GitPython, which a
# no-op re-run never needs.
_WHERE = {"Downloaded": "download", "DownloadPolicy": "download", "download_wheel": "download",
          "WheelExpectation": "verify", "WheelReport": "verify", "verify_wheel": "verify",
          "VersionInfo": "version_info", "read_version_info": "version_info"}

__all__ = ["Downloaded", "DownloadPolicy", "download_wheel",
           "WheelExpectation", "WheelReport", "verify_wheel", "VersionInfo", "read_version_info"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
