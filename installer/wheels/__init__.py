"""The vLLM base (precompiled) wheel: download (:mod:`.download`), every check on the file (:mod:`.verify`,
with :mod:`.scan` reading each member once), its extension modules, wheel tags and source commit.

The ``wheel`` step (``steps/wheel.py``) strings these together.  Nothing is imported here: the install
guards import the light :mod:`.extensions` alone, without httpx and GitPython.
"""
