"""``october_setup kit --have FILE``: a kit for a target whose interpreter already has most of the env
(a site image with torch) leaves those wheels out.  Real kit making on the fixture world (real git, real
wheels); the listing parser on the forms pip and uv print.  A listing it cannot read is an error naming
the line: misread, it would silently leave out what the target lacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.core.errors import UsageError
from october.installer.kit.have import has, read_have
from october.installer.kit.make import KitOptions, make_kit
from october.installer.recipe import load_recipe
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.world import World
from tests.test_kit import _recipe_copy
from tests.test_setup_e2e import world  # noqa: F401  (the world fixture)

PIP_LIST = """Package                 Version
----------------------- -----------
absl-py                 2.5.0
Tiny_Dep                1.0
torch                   2.11.0+cu130
"""
FREEZE = "# made by pip freeze\nabsl-py==2.5.0\nTiny_Dep==1.0\nflashinfer @ file:///src/flashinfer\nzope.interface===7.0\n"


@pytest.mark.parametrize("text", [PIP_LIST, FREEZE])
def test_pip_list_and_freeze_are_read(tmp_path: Path, text: str) -> None:
    f = tmp_path / "have.txt"
    f.write_text(text)
    have = read_have(f)
    assert have["tiny-dep"] == "1.0" and have["absl-py"] == "2.5.0"
    assert has(have, "tiny_dep", "1.0") and has(have, "TINY.DEP", "1.0.0") and not has(have, "tiny-dep", "1.1")
    assert not has(have, "flashinfer", "0.6.15")


@pytest.mark.parametrize("text,line", [("absl-py==2.5.0\nnot a listing at all\n", "line 2"),
                                       ("tinydep  notaversion\n", "line 1"), ("\n# nothing\n", "lists no")])
def test_a_listing_that_cannot_be_read_is_refused_naming_the_line(tmp_path: Path, text: str, line: str) -> None:
    f = tmp_path / "have.txt"
    f.write_text(text)
    with pytest.raises(UsageError) as err:
        read_have(f)
    assert line in str(err.value) and err.value.exit_code == 2


def test_the_real_h200_image_listing_is_read() -> None:
    """The listing the lent H200's image printed (pip list), as shipped in ../shared/reference."""
    ref = PROJECT_ROOT.parent / "shared" / "reference" / "h200-image-packages.txt"
    if not ref.is_file():
        pytest.skip(f"{ref} is not here")
    text = ref.read_text()
    listing = text[:text.index("\n\n")] if "\n\n" in text else text
    tmp = Path(sys.prefix).parent / ".have-probe.txt"
    try:
        tmp.write_text(listing)
        have = read_have(tmp)
    finally:
        tmp.unlink(missing_ok=True)
    assert have["torch"].startswith("2.11.0") and len(have) > 100


def test_a_kit_leaves_out_what_the_target_has_and_says_so(world: World, tmp_path: Path) -> None:
    recipe = _recipe_copy(world, tmp_path / "recipe")
    full, slim = tmp_path / "full", tmp_path / "slim"
    make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=full, cache_dir=tmp_path / "ck"))
    wheels = json.loads((full / "kit.json").read_text())["wheels"]
    gone = next(w for w in wheels if w["package"] == "tinydep")
    version = gone["filename"].split("-")[1]
    make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=slim, cache_dir=tmp_path / "ck",
                        have={"tinydep": version, "other": "9.9"}))
    doc = json.loads((slim / "kit.json").read_text())
    assert [w["filename"] for w in doc["left_out"]] == [gone["filename"]]
    assert gone["filename"] not in {w["filename"] for w in doc["wheels"]}
    assert not (slim / "wheels" / gone["filename"]).exists() and (full / "wheels" / gone["filename"]).exists()
    assert len(doc["wheels"]) == len(wheels) - 1


def test_have_without_system_torch_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "have.txt"
    f.write_text(FREEZE)
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", "kit", str(tmp_path / "k"),
                           "--recipe", "flashinfer-pr3812", "--have", str(f)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--have needs --system-torch" in proc.stderr
    assert not (tmp_path / "k").exists()
