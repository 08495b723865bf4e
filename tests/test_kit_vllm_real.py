"""Real tier: the kit's resolution for the shipped upstream-vLLM recipe on a system torch, against PyPI.

First contact of ``october_setup kit --recipe vllm-0.24.0-pr3812 --system-torch`` with the real index
(2026-12-02) stopped at the env's wheels: the resolution held torch to the recipe's ``2.11.0+cu130``, a
build only the PyTorch index has, and vLLM 0.24.0's own ``torch==2.11.0`` could not meet it on PyPI
("there is no version of torch==2.11.0+cu130").  A system torch is left out of the kit, and any build
of it satisfies the public version, so the kit resolves against that (:func:`torch_constraint`).

Run here: the real ``uv pip compile`` of the real vLLM 0.24.0 (metadata from PyPI, nothing installed),
as the kit makes it; torch is resolved (it holds the others) but not carried.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from october.installer.core.runner import Runner
from october.installer.kit.wheels import compile_wants, torch_constraint
from october.installer.recipe import load_recipe

pytestmark = pytest.mark.real


def _system_torch_recipe():  # -> Recipe, as `--system-torch` makes it
    r = load_recipe("vllm-0.24.0-pr3812")
    return dataclasses.replace(r, torch=dataclasses.replace(r.torch, source="system"))


def test_a_system_torch_is_held_to_its_public_version() -> None:
    r = load_recipe("vllm-0.24.0-pr3812")
    assert torch_constraint(r) == "torch==2.11.0+cu130"          # from its index: the exact build
    assert torch_constraint(_system_torch_recipe()) == "torch==2.11.0"


def test_the_real_vllm_resolves_for_a_kit_on_a_system_torch(tmp_path: Path) -> None:
    r = _system_torch_recipe()
    wants = compile_wants(Runner(tmp_path / "logs"), "kit", r, tmp_path / "compile", ["vllm==0.24.0"], "lock",
                          skip=["torch"])
    names = {w.package for w in wants}
    assert {"vllm", "pydantic", "msgspec", "transformers"} <= names, sorted(names)
    assert "torch" not in names
    assert all(w.sha256 and w.url.startswith("https://") for w in wants)
