"""The install step's import guard, derived from what the verified base wheel ships (no hard-coded vllm._C).

Real wheels built by the fixtures in the shape of the recorded real vLLM wheels, verified by the
real verifier; the fork checkout is a directory where the precompiled install would have placed
files (the install step itself is exercised in test_install_step / test_setup_k16v8_e2e).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from october.installer.core.errors import InstallError
from october.installer.install.guards import import_guard
from october.installer.wheels.verify import WheelExpectation, verify_wheel
from tests.fixtures.base_wheels import host_tag, real_facts, vllm_wheel


def outputs(whl: Path, version: str) -> dict[str, object]:
    """What the wheel step records for this wheel (its verified extension list)."""
    torch, variant, major = ("2.10.0", "cu129", "12") if version == "0.18.0" else ("2.11.0", "cu130", "13")
    report = verify_wheel(whl, WheelExpectation(whl.name, "vllm", version, frozenset({host_tag()}), torch=torch,
                                                cuda_variant=variant, cudart_major=major, python_version=(3, 12)))
    return {"path": str(whl), "extensions": [e.as_json() for e in report.extensions]}


def place(checkout: Path, paths: list[str]) -> None:
    for rel in paths:
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_bytes(b"\x7fELF")


@pytest.mark.parametrize("version", ["0.18.0", "0.24.0"])
def test_guard_imports_what_the_wheel_ships_and_the_install_placed(tmp_path: Path, version: str) -> None:
    whl = vllm_wheel(tmp_path / "w", version=version)
    out = outputs(whl, version)
    src = tmp_path / "src" / "vllm"
    shipped = [e["path"] for e in out["extensions"]]  # type: ignore[union-attr]
    place(src, shipped)
    got = import_guard(out, {"vllm": src, "flashinfer": tmp_path / "src" / "flashinfer"})
    assert list(got) == real_facts()[version]["extensions"]
    assert ("vllm._C" in got) == (version == "0.18.0")          # 0.24.0 has no vllm._C
    assert ("vllm._C_stable_libtorch" in got) == (version == "0.24.0")


def test_only_what_the_fork_setup_copied_is_imported(tmp_path: Path) -> None:
    """The fork's setup.py copies a fixed list out of the wheel; modules it left out are not guarded."""
    whl = vllm_wheel(tmp_path / "w", version="0.24.0")
    src = tmp_path / "src" / "vllm"
    place(src, ["vllm/_C_stable_libtorch.abi3.so", "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"])
    assert import_guard(outputs(whl, "0.24.0"), {"vllm": src}) == \
        ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa2_C")


def test_nothing_placed_fails(tmp_path: Path) -> None:
    whl = vllm_wheel(tmp_path / "w", version="0.24.0")
    (tmp_path / "src" / "vllm").mkdir(parents=True)
    with pytest.raises(InstallError) as err:
        import_guard(outputs(whl, "0.24.0"), {"vllm": tmp_path / "src" / "vllm"})
    msg = str(err.value)
    assert "placed none of the base wheel's compiled extension modules" in msg
    assert "vllm/_C_stable_libtorch.abi3.so" in msg and "VLLM_USE_PRECOMPILED" in msg


def test_a_wheel_without_extension_modules_fails(tmp_path: Path) -> None:
    whl = vllm_wheel(tmp_path / "w", cudart=None)
    with pytest.raises(InstallError) as err:
        import_guard({"path": str(whl), "extensions": []}, {"vllm": tmp_path})
    assert "a wheel with no extension module" in str(err.value)


def test_outputs_without_the_list_fall_back_to_record(tmp_path: Path) -> None:
    """A wheel step done-marker from before ``extensions`` existed: file names from RECORD."""
    whl = vllm_wheel(tmp_path / "w", version="0.24.0")
    src = tmp_path / "src" / "vllm"
    here = f"{sys.version_info[0]}{sys.version_info[1]}"
    place(src, ["vllm/_moe_C_stable_libtorch.abi3.so", f"vllm/third_party/deep_gemm/_C.cpython-{here}-x86_64-linux-gnu.so"])
    got = import_guard({"path": str(whl)}, {"vllm": src})
    assert got == ("vllm._moe_C_stable_libtorch", "vllm.third_party.deep_gemm._C")
