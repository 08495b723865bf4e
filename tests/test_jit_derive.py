"""JIT modules are derived from each selection, named with FlashInfer's recorded URI rule, and a recipe
cannot silently leave one out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.core.errors import RecipeError
from october.installer.recipe import load_recipe
from october.installer.recipe.jitmodules import DeriveError, JitModule, ModelShape, derive_modules, module_uri

ROOT = Path(__file__).resolve().parent.parent
RULE = ROOT / "tests" / "fixtures" / "flashinfer_uri_rule.json"
QWEN3_8B = ModelShape(32, 8, 128, 36)


def test_uris_follow_the_recorded_real_rule() -> None:
    rule = json.loads(RULE.read_text())
    assert rule["source"]["commit"] == "2f3f0f6df6fdb48e9a8e92969711ecb7e6f23b55"
    assert len(rule["samples"]) >= 6
    for s in rule["samples"]:
        key = JitModule(s["kind"], s["q"], s["k"], s["v"], s["o"], s["head_dim"], s["posenc"],
                        s["backend"] or "fa2", s["use_swa"], s["use_logits_cap"], s["f16qk"])
        assert module_uri(key) == s["uri"], s


def test_the_measured_h200_uri() -> None:
    """The decode module URI measured on the H200 with the real 2f3f0f6d (../shared/real-forks/README.md)."""
    decode, = derive_modules(QWEN3_8B, "bfloat16", routes=("decode",))
    assert decode.uri == ("batch_decode_with_kv_cache_dtype_q_bf16_dtype_k_bf16_dtype_v_e4m3_dtype_o_bf16_dtype_idx_i32_"
                          "head_dim_qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False")


def test_derivation_follows_dtype_v_format_and_routes() -> None:
    mods = derive_modules(QWEN3_8B, "float16")
    assert [(m.route, m.kind, m.q, m.k, m.v, m.o) for m in mods] == [
        ("decode", "decode", "f16", "f16", "e4m3", "f16"), ("fresh_prefill", "prefill", "f16", "f16", "f16", "f16")]
    paged = derive_modules(QWEN3_8B, "bfloat16", "fp8_e5m2", ("decode", "fresh_prefill", "paged_prefill"))
    assert [(m.kind, m.v) for m in paged] == [("decode", "e5m2"), ("prefill", "bf16"), ("prefill", "e5m2")]
    assert derive_modules(ModelShape(16, 8, 64, 2), "float16")[0].head_dim == 64


@pytest.mark.parametrize("shape,dtype,why", [
    (ModelShape(32, 8, 512, 36), "float16", "head_dim 512"),
    (ModelShape(40, 8, 128, 36), "float16", "GQA group size 5"),
    (ModelShape(30, 8, 128, 36), "float16", "whole number"),
    (QWEN3_8B, "float32", "compute dtype 'float32'"),
])
def test_underivable_selections_are_refused(shape: ModelShape, dtype: str, why: str) -> None:
    with pytest.raises(DeriveError, match=why):
        derive_modules(shape, dtype)


def test_shipped_recipes_derive_their_modules() -> None:
    for name, c in (("current", "f16"), ("20260702", "bf16")):
        r = load_recipe(name)
        for fmt, sel in r.models.items():
            assert sel.shape is not None and sel.shape.head_dim == 128 and sel.shape.num_key_value_heads == 8
            assert sel.jit_modules == (
                f"batch_decode_with_kv_cache_dtype_q_{c}_dtype_k_{c}_dtype_v_e4m3_dtype_o_{c}_dtype_idx_i32_"
                "head_dim_qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False",
                f"batch_prefill_with_kv_cache_dtype_q_{c}_dtype_kv_{c}_dtype_o_{c}_dtype_idx_i32_"
                "head_dim_qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False"), fmt
        assert [m.uri for m in r.jit] == list(r.models["awq"].jit_modules)
    assert load_recipe("current").models["fp16"].compute_dtype == "float16"


def test_a_recipe_holds_the_derived_modules_themselves() -> None:
    """One module type: what the recipe lists is what derive_modules returns, route and all."""
    r = load_recipe("current")
    sel = r.models["fp16"]
    assert sel.shape is not None and sel.compute_dtype is not None
    assert r.jit == derive_modules(sel.shape, sel.compute_dtype, sel.v_format, r.jit_routes)
    assert [m.route for m in r.jit] == ["decode", "fresh_prefill"]


def _recipe(tmp_path: Path, jit: str, models_extra: str = "") -> Path:
    text = (ROOT / "recipes" / "current.toml").read_text()
    start, end = text.index("[jit]"), text.index("[models.awq]")
    text = text[:start] + jit + "\n" + text[end:]
    if models_extra:
        text = text.replace('compute_dtype = "float16"', models_extra, 1)
    p = tmp_path / "r.toml"
    p.write_text(text)
    (tmp_path / "forks.toml").write_text((ROOT / "forks.toml").read_text())
    p.write_text('forks_file = "forks.toml"\n' + text)
    return p


DECODE_F16 = '[[jit.modules]]\nkind = "decode"\nq = "f16"\nk = "f16"\nv = "e4m3"\no = "f16"\nhead_dim = 128\n'
PREFILL_F16 = '[[jit.modules]]\nkind = "prefill"\nq = "f16"\nk = "f16"\nv = "f16"\no = "f16"\nhead_dim = 128\n'
EXTRA_BF16 = '[[jit.modules]]\nkind = "decode"\nq = "bf16"\nk = "bf16"\nv = "e4m3"\no = "bf16"\nhead_dim = 128\n'


def test_a_hand_list_may_add_modules(tmp_path: Path) -> None:
    r = load_recipe(str(_recipe(tmp_path, "[jit]\n" + DECODE_F16 + PREFILL_F16 + EXTRA_BF16)))
    assert len(r.jit) == 3 and r.jit[2].k == "bf16" and r.jit[2].route == ""


def test_a_hand_list_that_misses_a_derived_module_is_refused(tmp_path: Path) -> None:
    """The old hand-written list (bf16 modules) for an fp16 selection: exit 3 naming the missing module."""
    path = _recipe(tmp_path, "[jit]\n" + DECODE_F16 + EXTRA_BF16)
    with pytest.raises(RecipeError) as exc:
        load_recipe(str(path))
    assert exc.value.exit_code == 3 and "jit.modules" in str(exc.value)
    assert "batch_prefill_with_kv_cache_dtype_q_f16_dtype_kv_f16_dtype_o_f16" in str(exc.value)
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(tmp_path / "stack"),
                           "--recipe", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "1 derived module(s) not listed" in proc.stderr


@pytest.mark.parametrize("change,fragment", [
    ('compute_dtype = "float32"', "models.awq.compute_dtype"),
    ('v_format = "int8"\ncompute_dtype = "float16"', "models.awq.v_format"),
])
def test_bad_selection_values(tmp_path: Path, change: str, fragment: str) -> None:
    text = _recipe(tmp_path, '[jit]\nroutes = ["decode", "fresh_prefill"]\n').read_text()
    text = text.replace('compute_dtype = "float16"\nv_format = "fp8_e4m3"', change, 1)
    p = tmp_path / "r2.toml"
    p.write_text(text)
    with pytest.raises(RecipeError, match=fragment.replace(".", r"\.")):
        load_recipe(str(p))


def test_a_selection_without_compute_dtype_or_config_is_refused(tmp_path: Path) -> None:
    text = _recipe(tmp_path, '[jit]\n').read_text()
    p = tmp_path / "r3.toml"
    p.write_text(text.replace('compute_dtype = "float16"\n', "", 1))
    with pytest.raises(RecipeError, match=r"models\.awq\.compute_dtype"):
        load_recipe(str(p))
    start = text.index("[models.awq.config]")
    p.write_text(text[:start] + text[text.index("[models.fp16]"):])
    with pytest.raises(RecipeError, match=r"models\.awq\.config"):
        load_recipe(str(p))


def test_routes_must_include_decode(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"jit\.routes"):
        load_recipe(str(_recipe(tmp_path, '[jit]\nroutes = ["fresh_prefill"]\n')))
    with pytest.raises(RecipeError, match=r"jit\.routes"):
        load_recipe(str(_recipe(tmp_path, '[jit]\nroutes = ["decode", "speculative"]\n')))


@pytest.mark.real
def test_the_recorded_rule_is_the_real_sources(real_mirror: Path, tmp_path: Path) -> None:
    """Re-record the naming rule from the real FlashInfer 2f3f0f6d and compare with the committed fixture."""
    src = real_mirror / "github.com" / "flashinfer-ai" / "flashinfer.git"
    checkout = tmp_path / "fi"
    subprocess.run(["git", "clone", "-q", str(src), str(checkout)], check=True, timeout=120)
    out = tmp_path / "rule.json"
    subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "flashinfer_uri_record.py"), str(checkout),
                    str(out)], check=True, timeout=120, cwd=ROOT)
    assert json.loads(out.read_text()) == json.loads(RULE.read_text())
