"""``[models.<format>]``: the pinned hub model of each format, its files, dtypes and attention shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ...checks.contract import FORMATS
from ..core.ids import FULL_SHA, SHA256
from .jitmodules import COMPUTE_DTYPES, V_FORMATS, ModelShape
from .tomlcheck import MAX_KEY, Table

MODEL_FORMATS = FORMATS  # one definition: the contract both interpreters share
SHAPE_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers")
SHAPE_MAX = 1 << 16         # heads, head dim, layers: far above any model, far below an overflow


@dataclass(frozen=True)
class ModelSelection:
    format: str
    repo: str
    revision: str
    patterns: tuple[str, ...]
    sha256: Mapping[str, str] = field(default_factory=dict)
    compute_dtype: str | None = None        # vLLM --dtype the engine runs with (float16 | bfloat16)
    v_format: str = "fp8_e4m3"              # the V cache dtype; K is the compute dtype (K16)
    shape: ModelShape | None = None         # from config.json at the pinned revision
    jit_modules: tuple[str, ...] = ()       # URIs derived for this selection


def parse_models(top: Table, *, for_jit: bool) -> dict[str, ModelSelection]:
    """Every selection; with a ``[jit]`` table (``for_jit``) each must name its compute dtype and shape."""
    mt_all = top.table("models", required=False)
    if mt_all is None:
        return {}
    models: dict[str, ModelSelection] = {}
    for fmt in list(mt_all.data):
        if fmt not in MODEL_FORMATS:
            raise mt_all.err(fmt, f"a model format ({', '.join(MODEL_FORMATS)})", fmt)
        sel = mt_all.table(fmt)
        assert sel is not None
        models[fmt] = parse_selection(sel, fmt, for_jit=for_jit)
    mt_all.done()
    return models


def parse_selection(sel: Table, fmt: str, *, for_jit: bool) -> ModelSelection:
    rev = sel.get("revision", str, what="a 40-hex hub revision")
    if not FULL_SHA.match(rev):
        raise sel.err("revision", "a 40-character lowercase hex revision", rev)
    hashes = _file_hashes(sel)
    compute = sel.get("compute_dtype", str, required=for_jit,
                      what=f"the dtype the engine computes in ({', '.join(COMPUTE_DTYPES)})")
    if compute is not None and compute not in COMPUTE_DTYPES:
        raise sel.err("compute_dtype", f"one of {', '.join(COMPUTE_DTYPES)}", compute)
    v_format = sel.get("v_format", str, required=False, default="fp8_e4m3")
    if v_format not in V_FORMATS:
        raise sel.err("v_format", f"one of {', '.join(V_FORMATS)}", v_format)
    shape = model_shape(sel, required=for_jit)
    selection = ModelSelection(format=fmt, repo=sel.get("repo", str, what="'org/name'", max_len=MAX_KEY * 2),
                               revision=rev, patterns=sel.str_list("patterns"), sha256=hashes,
                               compute_dtype=compute, v_format=v_format, shape=shape)
    if "/" not in selection.repo:
        raise sel.err("repo", "a hub repository 'org/name'", selection.repo)
    sel.done()
    return selection


def _file_hashes(sel: Table) -> dict[str, str]:
    """``[models.X.sha256]``: file name -> its pinned sha256."""
    hashes_t = sel.table("sha256", required=False)
    hashes: dict[str, str] = {}
    if hashes_t is not None:
        for fname in hashes_t.data:
            h = hashes_t.get(fname, str, what="64 lowercase hex characters")
            if not SHA256.match(h):
                raise hashes_t.err(fname, "64 lowercase hex characters", h)
            hashes[fname] = h
    return hashes


def model_shape(sel: Table, required: bool) -> ModelShape | None:
    """``[models.X.config]``: the attention shape from the model's config.json, with its source."""
    ct = sel.table("config", required=required)
    if ct is None:
        return None
    values = {k: ct.get(k, int, what="a positive integer from the model's config.json") for k in SHAPE_KEYS}
    source = ct.get("source", str, what="where the values were read (repo, revision, file)")
    ct.done()
    for k, v in values.items():
        if not 0 < v <= SHAPE_MAX:
            raise ct.err(k, "a positive integer" if v <= 0 else f"at most {SHAPE_MAX}", v)
    return ModelShape(source=source, **values)
