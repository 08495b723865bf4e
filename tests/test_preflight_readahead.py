"""Preflight's readahead of a site-provided torch (issue 20): the located torch's libraries are the
ones ``import torch`` loads, found from the real probe's facts for this interpreter's real torch."""

from __future__ import annotations

import sys
from pathlib import Path

from october.installer.core.runner import Runner
from october.installer.steps.env import systorch
from october.installer.steps.preflight import readahead


def test_the_located_torch_s_libraries_are_found_and_advised(tmp_path: Path) -> None:
    facts = systorch.probe(Runner(tmp_path / "logs"), "preflight", Path(sys.executable), locate=True)
    assert not facts.get("error"), facts
    libs = readahead.torch_libraries(facts)
    names = {p.name for p in libs}
    assert "libtorch_cpu.so" in names and all(p.is_file() for p in libs)
    assert readahead.advise(libs) == sum(p.stat().st_size for p in libs)
    thread = readahead.start(facts)
    assert thread is not None
    thread.join(timeout=30)


def test_nothing_located_means_nothing_asked_and_no_error(tmp_path: Path) -> None:
    assert readahead.torch_libraries({"error": "no torch"}) == []
    assert readahead.torch_libraries({"file": str(tmp_path / "torch" / "__init__.py")}) == []
    assert readahead.start(None) is None and readahead.start({"file": ""}) is None
    assert readahead.advise([tmp_path / "gone.so"]) == 0
