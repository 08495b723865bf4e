"""On a CUDA GPU the reference level passes all six checks, CUDA graphs included (and proves the harness only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.gpu


def test_reference_level_passes_on_cuda(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "october.checks.smoke", "--level", "reference",
                           "--device", "cuda", "--output", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    print(proc.stdout, proc.stderr, f"wall {time.monotonic() - start:.1f}s", sep="\n")
    receipt = json.loads((tmp_path / "receipt.json").read_text())
    status = {c["name"]: c["status"] for c in receipt["checks"]}
    # every check passes, but a reference run proves the harness only: never a stack verdict
    assert receipt["checks_passed"] is True and set(status.values()) == {"passed"} and len(status) == 6, status
    assert receipt["proves"] == "harness" and receipt["passed"] is False and proc.returncode == 1
    graphs = next(c for c in receipt["checks"] if c["name"] == "decode_graphs")
    assert graphs["measured"]["cuda_graphs"] is True
    assert {r["batch"] for r in graphs["measured"]["replays"]} == {1, 2, 3, 4}
    assert receipt["machine"]["gpu"] and receipt["machine"]["device"].startswith("cuda")


def test_stale_graph_inputs_fail_on_cuda() -> None:
    import warnings
    sys.path.insert(0, str(ROOT))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        import torch  # noqa: F401
    from october.checks.reference import checks as reference_checks
    from october.checks.reference.backend import DecodeGraph, ReferenceBackend

    class Stale(DecodeGraph):
        def load(self, batch):  # type: ignore[no-untyped-def]
            pass

    class Backend(ReferenceBackend):
        graph_class = Stale

    b = Backend(seed=0, device="cuda")
    b.start([0.01, 0.02])
    assert b.uses_cuda_graphs
    assert reference_checks.check_decode_graphs(b, reference_checks.SuiteConfig()).status == "failed"
