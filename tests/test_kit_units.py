"""Kit planning without git or network: which file of a locked package goes into a kit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from october.installer.core.errors import KitError
from october.installer.kit.wheels import from_lock, pick, target_tags, torch_from_system
from october.installer.recipe import load_recipe


def _pkg(*files: str, sdist: bool = False) -> dict:
    p: dict = {"name": "demo", "version": "1.0",
               "wheels": [{"url": f"https://files.example/{f}", "hashes": {"sha256": f"{i:064x}"}} for i, f in enumerate(files)]}
    if sdist:
        p["sdist"] = {"url": "https://files.example/demo-1.0.tar.gz", "hashes": {"sha256": "e" * 64}}
    return p


def test_one_file_per_package_the_most_portable_that_installs() -> None:
    r = load_recipe("20260702")                     # CPython 3.12 on x86_64
    tags = target_tags(r)
    files = ["demo-1.0-cp312-cp312-manylinux_2_34_x86_64.whl", "demo-1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
             "demo-1.0-cp38-abi3-manylinux_2_17_x86_64.whl", "demo-1.0-cp312-cp312-macosx_11_0_arm64.whl",
             "demo-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", "demo-1.0-cp312-cp312-manylinux_2_39_x86_64.whl"]
    [got] = pick(_pkg(*files), tags, Path("/"), "lock")
    assert got.filename == "demo-1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    [abi3] = pick(_pkg(files[2], files[3]), tags, Path("/"), "lock")
    assert abi3.filename == files[2]
    [pure] = pick(_pkg("demo-1.0-py3-none-any.whl"), tags, Path("/"), "lock")
    assert pure.sha256 == "0" * 64 and pure.url.endswith("demo-1.0-py3-none-any.whl")
    [sd] = pick(_pkg(files[3], sdist=True), tags, Path("/"), "lock")
    assert sd.filename == "demo-1.0.tar.gz"
    with pytest.raises(KitError, match="no file of demo 1.0 installs"):
        pick(_pkg(files[3], files[4], files[5]), tags, Path("/"), "lock")   # glibc 2.39 is past the kit's target


def test_from_lock_skips_forks_and_torch_when_the_system_gives_it(tmp_path: Path) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text('lock-version = "1.0"\ncreated-by = "t"\n'
                    '[[packages]]\nname = "torch"\nversion = "2.11.0"\n'
                    'wheels = [{ url = "https://f/torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl", hashes = { sha256 = "' + "a" * 64 + '" } }]\n'
                    '[[packages]]\nname = "tinydep"\nversion = "1.0"\n'
                    'wheels = [{ url = "https://f/tinydep-1.0-py3-none-any.whl", hashes = { sha256 = "' + "b" * 64 + '" } }]\n'
                    '[[packages]]\nname = "flashinfer-python"\nversion = "0.6.15"\n'
                    '[packages.vcs]\ntype = "git"\nurl = "https://github.com/x/y.git"\ncommit-id = "' + "c" * 40 + '"\n')
    r = load_recipe("20260702")
    assert [w.package for w in from_lock(lock, r)] == ["torch", "tinydep"]
    assert [w.package for w in from_lock(lock, r, skip=["torch"])] == ["tinydep"]


def test_torch_from_system_reads_the_recipes_flag() -> None:
    r = load_recipe("20260702")
    assert torch_from_system(r) is False

    @dataclasses.dataclass(frozen=True)
    class SystemTorch:
        version: str
        index_url: str | None = None
        system: bool = True

    assert torch_from_system(dataclasses.replace(r, torch=SystemTorch("2.11.0+cu130"))) is True  # type: ignore[arg-type]


def test_the_kit_command_and_the_setup_command_share_one_program(tmp_path: Path) -> None:
    import subprocess
    import sys

    from october.installer.recipe import PROJECT_ROOT

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "october.installer.october_setup", *args], cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=120)

    helped = run("kit", "--help")
    assert helped.returncode == 0 and "--recipe" in helped.stdout and "kit.json" in helped.stdout
    setup_help = run("--help")
    assert setup_help.returncode == 0 and "--kit" in setup_help.stdout and "october_setup kit" in setup_help.stdout
    missing = run(str(tmp_path / "stack"), "--recipe", "20260702", "--kit", str(tmp_path / "no-kit"))
    assert missing.returncode == KitError.exit_code and "no kit at" in missing.stderr
    assert not (tmp_path / "stack").exists()


def test_a_downloaded_file_that_is_not_the_locked_one_is_refused(tmp_path: Path) -> None:
    from october.installer.kit.wheels import WheelWant, fetch

    src = tmp_path / "demo-1.0-py3-none-any.whl"
    src.write_bytes(b"not the locked bytes")
    want = WheelWant("demo", src.name, src.as_uri(), "0" * 64, "lock")
    with pytest.raises(KitError, match="is not the file the lock names"):
        fetch(want, tmp_path / "cache", tmp_path / "kit" / "wheels")
    assert not (tmp_path / "kit" / "wheels" / src.name).exists()


def test_a_base_wheel_other_than_the_recipes_is_refused(tmp_path: Path) -> None:
    from october.installer.kit.use import Kit, seed_cache
    from october.installer.recipe import BaseWheel

    r = dataclasses.replace(load_recipe("20260702"))
    assert r.wheel is not None
    kit = Kit(root=tmp_path, manifest={"base_wheel": {"filename": r.wheel.filename, "sha256": "f" * 64, "url": r.wheel.url},
                                       "tool": {"version": "0"}}, repos={})
    with pytest.raises(KitError, match="base wheel is not the recipe's"):
        seed_cache(kit, r, tmp_path / "cache")
    no_base = Kit(root=tmp_path, manifest={"base_wheel": None}, repos={})
    with pytest.raises(KitError, match="has no base wheel"):
        seed_cache(no_base, r, tmp_path / "cache")
    assert isinstance(r.wheel, BaseWheel)
