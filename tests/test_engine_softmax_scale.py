"""The engine fault ``softmax_scale_x1_02`` is planted where vLLM 0.24.0 reads the softmax scale, and the
stand-in reads it from the same place, so the planted fault does there what it does on the real engine.

``tests/fixtures/vllm_fork_api.json`` (``upstream_softmax_scale``) records the facts, read from the real
0.24.0 (``vllm/v1/attention/backends/flashinfer.py``): ``FlashInferImpl.__init__`` keeps the model's scale as
``self.scale``; ``FlashInferMetadataBuilder.__init__`` reads every layer's ``impl.scale`` once
(``get_per_layer_parameters`` in ``vllm/v1/attention/backends/utils.py``) into ``self.sm_scale``;
``FlashInferMetadataBuilder.build`` passes that to every ``plan()``; ``FlashInferImpl.forward`` asserts the
planned wrappers hold ``self.scale``; the builders are made in ``initialize_kv_cache``, after ``load_model``
(where the harness plants its faults).  The stand-in test runs every time (a subprocess: this process never
imports ``vllm``); the real-tier test re-reads the facts from the real wheel, so a drift on either side fails.
"""

from __future__ import annotations

import ast
import json
import warnings
import zipfile
from pathlib import Path

import pytest

with warnings.catch_warnings():  # torch warns at import when numpy is absent
    warnings.simplefilter("ignore", UserWarning)
    from october.checks.engine.planted_faults import SOFTMAX_FACTOR
from tests.fixtures.smoke_runs import stand_in_probe
from tests.test_vllm_api_surface import _class, _func, _wheel

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "fake_vllm"
RUNNER = FAKE / "vllm" / "v1" / "worker" / "gpu_model_runner.py"
SM = json.loads((ROOT / "tests" / "fixtures" / "vllm_fork_api.json").read_text())["upstream_softmax_scale"]


def _probe(tmp: Path, fault: str) -> dict:
    return stand_in_probe("fake_vllm_softmax_probe.py", tmp, fault)


def _flat(node: ast.AST) -> str:
    return " ".join(ast.unparse(node).split())


def test_the_stand_in_reads_the_softmax_scale_where_vllm_0_24_does() -> None:
    """The stand-in has the recorded chain by name: the impl keeps ``self.scale``, the per-layer read is
    ``impl.scale``, the builder reads it once into ``sm_scale``, the impl asserts what was planned."""
    tree = ast.parse(RUNNER.read_text(encoding="utf-8"))
    cls, meth, keeps = SM["impl_keeps"]
    assert keeps in _flat(_func(_class(tree, cls), meth))
    per_layer = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == SM["per_layer_read"][1])
    assert "impl.scale" in _flat(per_layer)
    builder = _class(tree, SM["builder_reads_once"][0])
    assert "get_per_layer_parameters(" in _flat(_func(builder, "__init__")) and "self.sm_scale" in _flat(builder)
    forward = _flat(_func(_class(tree, "FlashInferImpl"), "forward"))
    assert "assert sm_scale == self.scale" in forward and "attn_metadata.sm_scale" in forward
    made = _flat(_func(_class(tree, "GPUModelRunner"), "initialize_kv_cache"))
    assert f"{SM['builder_reads_once'][0]}(" in made          # made with the cache, after load_model


def test_the_planted_softmax_fault_reaches_what_the_stand_in_attends_with(tmp_path: Path) -> None:
    healthy = _probe(tmp_path / "none", "none")
    planted = _probe(tmp_path / "fault", "softmax_scale_x1_02")
    scale = healthy["head_dim"] ** -0.5                       # the model's self.scaling
    assert healthy["impl_scale"] == [scale] * 2 and healthy["builder_sm_scale"] == scale
    assert planted["scale_before"] == [scale] * 2
    assert planted["impl_scale"] == [scale * SOFTMAX_FACTOR] * 2 == [planted["builder_sm_scale"]] * 2
    # the layer's output follows the planted scale: the reference at 1.02 x fits it as the model's scale
    # fits the healthy run, and the model's scale is off by a systematic slope
    h, p = healthy["vs_reference"], planted["vs_reference"]
    assert p["x1.02"]["max_abs"] == pytest.approx(h["model"]["max_abs"], rel=1e-6)
    assert p["model"]["max_abs"] > 3 * p["x1.02"]["max_abs"]
    assert abs(h["model"]["slope"] - 1) < 1e-4 and abs(p["x1.02"]["slope"] - 1) < 1e-3
    assert abs(p["model"]["slope"] - 1) > 0.004


@pytest.mark.real
def test_the_recorded_softmax_scale_facts_are_the_real_vllm_0_24() -> None:
    names = [SM["file"], SM["model_scaling"][0], SM["per_layer_read"][0], *SM["builders_made_after_load_model"]]
    with zipfile.ZipFile(_wheel()) as zf:
        src = {n: zf.read(n).decode() for n in names}
    fi = ast.parse(src[SM["file"]])
    assert SM["model_scaling"][1] in src[SM["model_scaling"][0]]
    cls, meth, keeps = SM["impl_keeps"]
    assert keeps in _flat(_func(_class(fi, cls), meth))
    utils = ast.parse(src[SM["per_layer_read"][0]])
    per_layer = next(n for n in utils.body if isinstance(n, ast.FunctionDef) and n.name == SM["per_layer_read"][1])
    assert SM["per_layer_read"][2] in _flat(per_layer)
    cls, meth, *reads = SM["builder_reads_once"]
    init = _flat(_func(_class(fi, cls), meth))
    assert all(r in init for r in reads), reads
    cls, meth, passes, at_least = SM["plan_passes"]
    assert _flat(_func(_class(fi, cls), meth)).count(passes) >= at_least
    # nothing else in the builder sets sm_scale: read once, in __init__
    assert sum(_flat(f).count("self.sm_scale =") for f in _class(fi, cls).body if isinstance(f, ast.FunctionDef)) == 1
    cls, meth, *asserts = SM["forward_asserts"]
    forward = _flat(_func(_class(fi, cls), meth))
    assert all(a in forward for a in asserts), asserts
    for path, (meth, call) in SM["builders_made_after_load_model"].items():
        runner = _class(ast.parse(src[path]), "GPUModelRunner")
        assert call in _flat(_func(runner, meth)), (path, call)
        assert "load_model" in {n.name for n in runner.body if isinstance(n, ast.FunctionDef)}
