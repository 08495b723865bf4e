"""A kit changed by someone else, or written by two runs at once (the kit scenario hunt): nothing from it may reach
a stack unnoticed, and a refresh never seals what it did not write."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from october.installer.core.errors import KitBusyError, KitError
from october.installer.kit.make import KitOptions, make_kit
from october.installer.kit.use import open_kit
from october.installer.recipe import load_recipe
from tests.fixtures.wheels import build_wheel
from tests.test_kit import _lock_of, kit_and_recipe, world  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def test_a_build_wheel_of_a_package_the_lock_pins_is_refused(kit_and_recipe: tuple[Path, Path], tmp_path: Path) -> None:
    """kit.json may call any wheel a build requirement; one of a package the lock pins (here tinydep 2.0 beside the
    lock's 1.0) is offered to the env's resolution by --find-links and would replace the locked one (the hunt:
    setup ready, verify 0, tinydep 2.0's code installed)."""
    kit, recipe = kit_and_recipe
    lock = _lock_of(kit, tmp_path / "pylock.toml")
    build_wheel(kit / "wheels", "tinydep", "2.0", {"tinydep/__init__.py": "VALUE = 666\n"})
    wheel = kit / "wheels" / "tinydep-2.0-py3-none-any.whl"
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    doc = json.loads((kit / "kit.json").read_text())
    doc["files"]["wheels/" + wheel.name] = {"sha256": sha, "size": wheel.stat().st_size}
    doc["wheels"].append({"filename": wheel.name, "package": "tinydep", "role": "build", "sha256": sha,
                          "url": "https://example.invalid/" + wheel.name})
    (kit / "kit.json").write_text(json.dumps(doc))
    with pytest.raises(KitError, match=r"wheels/tinydep-2\.0-py3-none-any\.whl: a build requirement of tinydep"):
        open_kit(kit, load_recipe(str(recipe)), lock=lock)


def test_a_refresh_makes_each_repository_again(kit_and_recipe: tuple[Path, Path], tmp_path: Path) -> None:
    """A kit refused for a changed repository file is made again in place (the fix its refusal names): the
    refresh must not keep the changed file (or one someone added there) and seal it into kit.json."""
    kit, recipe = kit_and_recipe
    repo = next(p for p in (kit / "git").rglob("alpha.git") if p.is_dir())
    (repo / "PLANTED.txt").write_text("x\n")
    with (repo / "config").open("a") as f:
        f.write("[uploadpack]\n\tallowAnySHA1InWant = true\n")
    make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=kit, cache_dir=tmp_path / "cache-kit"))
    files = json.loads((kit / "kit.json").read_text())["files"]
    assert not any(rel.endswith("PLANTED.txt") for rel in files)
    assert "allowAnySHA1InWant" not in (repo / "config").read_text()
    assert subprocess.run(["git", "-C", str(repo), "fsck", "--full"], capture_output=True).returncode == 0
    open_kit(kit, load_recipe(str(recipe)))


@pytest.mark.parametrize("plant", ["fifo", "folder"])
def test_a_fifo_or_folder_named_as_a_wheel_is_refused(kit_and_recipe: tuple[Path, Path], plant: str) -> None:
    """uv's --find-links takes tinydep-3.0 (a FIFO: the install step blocked on it forever); the kit check names it."""
    kit, recipe = kit_and_recipe
    planted = kit / "wheels" / "tinydep-3.0-py3-none-any.whl"
    os.mkfifo(planted) if plant == "fifo" else planted.mkdir()
    with pytest.raises(KitError, match=r"wheels/tinydep-3\.0-py3-none-any\.whl: not a regular file"):
        open_kit(kit, load_recipe(str(recipe)))


def test_a_second_kit_run_into_one_directory_is_refused_at_once(kit_and_recipe: tuple[Path, Path],
                                                                 tmp_path: Path) -> None:
    """Two kit runs at once into one DIR interleaved (a healthy cache blamed, or both said "kit ready" for a DIR
    holding only the second's kit): the second is refused while the first holds the directory, nothing changed."""
    kit, recipe = kit_and_recipe
    before = (kit / "kit.json").read_bytes()
    fd = os.open(kit, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)          # what a kit run holds while it writes
        with pytest.raises(KitBusyError, match="another `october_setup kit` is writing"):
            make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=kit, cache_dir=tmp_path / "cache-kit"))
    finally:
        os.close(fd)
    assert (kit / "kit.json").read_bytes() == before
    make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=kit, cache_dir=tmp_path / "cache-kit"))


def test_a_kit_of_another_recipe_is_not_replaced(kit_and_recipe: tuple[Path, Path], tmp_path: Path) -> None:
    """A mistyped DIR: a kit run for another recipe pruned the finished kit's forks and wheels and said "kit
    ready".  Refused, naming both recipes, nothing changed."""
    kit, recipe = kit_and_recipe
    other = recipe.with_name("other.toml")
    other.write_text(recipe.read_text().replace('name = "fixture"', 'name = "other"', 1))
    assert 'name = "other"' in other.read_text()
    before = sorted(p.relative_to(kit).as_posix() for p in kit.rglob("*"))
    with pytest.raises(KitError, match="is a kit of recipe 'fixture', not 'other'"):
        make_kit(KitOptions(recipe=load_recipe(str(other)), out=kit, cache_dir=tmp_path / "cache-kit"))
    assert sorted(p.relative_to(kit).as_posix() for p in kit.rglob("*")) == before
    open_kit(kit, load_recipe(str(recipe)))


def test_what_only_the_kits_own_word_vouches_for_is_said(kit_and_recipe: tuple[Path, Path], tmp_path: Path) -> None:
    """With no lock to hold its wheels to (the recipe has none committed, no --locked), a kit whose wheel was
    swapped and kit.json re-sealed installs (the hunt: ready, verify 0): the setup says so, and says which forks
    are held only to a prefix; a lock held them, or --locked: not said."""
    from october.installer.kit.use import own_word

    kit, recipe = kit_and_recipe
    rec = load_recipe(str(recipe))
    prefixed = [f.name for f in rec.forks if f.pin.is_prefix]
    alone = own_word(open_kit(kit, rec), rec, locked=False)
    assert len(alone) == 1 + len(prefixed) and "held only to its own kit.json" in alone[0]
    assert all(f"fork {name}: pinned by the prefix" in " ".join(alone) for name in prefixed)
    held = own_word(open_kit(kit, rec, lock=_lock_of(kit, tmp_path / "pylock.toml")), rec, locked=True)
    assert held == []


def test_a_build_requirement_the_lock_pins_is_resolved_to_its_version_or_refused_where_the_kit_is_made(
        kit_and_recipe: tuple[Path, Path], world, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: refusing a build wheel of a package the lock pins only on the offline node left a kit that
    `october_setup kit` called ready and the node could not use.  The build requirements are resolved with the
    lock's versions as constraints, and a kit that would still be refused is refused where it is made.  The
    fixture's forks build with no requirements, so the resolution of one that needs tinydep 2.0 is planted (the
    one stand-in here: its wheel is real and is fetched into the kit)."""
    import october.installer.kit.make as make
    from october.installer.kit.wheels import WheelWant

    kit, recipe = kit_and_recipe
    lock = _lock_of(kit, tmp_path / "pylock.toml")
    newer = build_wheel(tmp_path / "more", "tinydep", "2.0", {"tinydep/__init__.py": "VALUE = 2\n"})
    seen: list[object] = []
    real = make.compile_wants

    def compile_wants(runner, step, r, work, requirements, role, **kw):  # type: ignore[no-untyped-def]
        if role != "build":
            return real(runner, step, r, work, requirements, role, **kw)
        seen.append(kw.get("have"))
        return [WheelWant("tinydep", newer.name, newer.as_uri(), hashlib.sha256(newer.read_bytes()).hexdigest(),
                          "build")]

    monkeypatch.setattr(make, "compile_wants", compile_wants)
    out = tmp_path / "kit2"
    with pytest.raises(KitError, match="would be refused where it is used") as refused:
        make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=out, cache_dir=tmp_path / "cache-kit", lock=lock))
    assert "build_isolation = false" in str(refused.value)
    assert seen and isinstance(seen[0], dict) and seen[0].get("tinydep") == "1.0"
    assert not (out / "kit.json").exists()


def test_a_prefix_pinned_fork_is_said_unless_locked() -> None:
    """The review: the fixture's forks are pinned by full ids, so the prefix warning was never exercised."""
    from types import SimpleNamespace

    from october.installer.kit.use import Kit, own_word

    pin = SimpleNamespace(is_prefix=True, commit="2315e62e2", branch="asym")
    full = SimpleNamespace(is_prefix=False, commit="a" * 40, branch=None)
    recipe = SimpleNamespace(name="r", forks=[SimpleNamespace(name="vllm", pin=pin), SimpleNamespace(name="fi", pin=full)])
    kit = Kit(root=Path("/k"), manifest={}, repos={}, lock=Path("/l.pylock.toml"))
    said = own_word(kit, recipe, locked=False)  # type: ignore[arg-type]
    assert said == [said[0]] and said[0].startswith("fork vllm: pinned by the prefix 2315e62e2 on asym")
    assert own_word(kit, recipe, locked=True) == []  # type: ignore[arg-type]


def test_an_interrupted_kit_of_another_recipe_is_not_replaced_either(kit_and_recipe: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    """The review: the recipe was read from kit.json only, which a refresh removes first: a kit interrupted
    mid-refresh could be pruned by another recipe's run.  Its marker names the recipe too."""
    from october.installer.kit.owned import open_kit_dir

    kit, recipe = kit_and_recipe
    open_kit_dir(kit, "fixture")                  # what a refresh does first: the marker, then kit.json goes
    assert not (kit / "kit.json").exists()
    other = recipe.with_name("other.toml")
    other.write_text(recipe.read_text().replace('name = "fixture"', 'name = "other"', 1))
    with pytest.raises(KitError, match="is a kit of recipe 'fixture', not 'other'"):
        make_kit(KitOptions(recipe=load_recipe(str(other)), out=kit, cache_dir=tmp_path / "cache-kit"))
    make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=kit, cache_dir=tmp_path / "cache-kit"))
    open_kit(kit, load_recipe(str(recipe)))


def test_two_kits_of_one_recipe_from_one_cache_work_apart(kit_and_recipe: tuple[Path, Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: each run removed CACHE/kit-work/<recipe> as it began, so two kits of one recipe made at once
    from one cache (into two DIRs) removed each other's checkouts."""
    import october.installer.kit.make as make

    kit, recipe = kit_and_recipe
    works: list[Path] = []
    real = make._make

    def spy(opts, kit_dir, runner, work, say, phases):  # type: ignore[no-untyped-def]
        works.append(work)
        return real(opts, kit_dir, runner, work, say, phases)

    monkeypatch.setattr(make, "_make", spy)
    legacy = tmp_path / "cache-kit" / "kit-work" / "fixture" / "src"      # what a killed earlier version left
    legacy.mkdir(parents=True)
    for out in (tmp_path / "a", tmp_path / "b", tmp_path / "a"):
        make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=out, cache_dir=tmp_path / "cache-kit"))
    assert works[0] != works[1] and works[0] == works[2]
    assert not legacy.parent.exists()


def test_a_kit_with_have_and_a_lock_is_made_and_opened(kit_and_recipe: tuple[Path, Path], tmp_path: Path) -> None:
    """The review: `october_setup kit --have` with a lock left out the lock's file of a package the target has,
    and the check (now run where the kit is made too) refused it as missing, telling the user to make the kit
    again, which repeated it.  A file kit.json lists as left out is the target's to have (checked on the node)."""
    kit, recipe = kit_and_recipe
    lock = _lock_of(kit, tmp_path / "pylock.toml")
    out = tmp_path / "kit-have"
    make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=out, cache_dir=tmp_path / "cache-kit", lock=lock,
                        have={"tinydep": "1.0"}))
    doc = json.loads((out / "kit.json").read_text())
    assert [d["package"] for d in doc["left_out"]] == ["tinydep"]
    open_kit(out, load_recipe(str(recipe)), lock=lock)
    doc["left_out"][0]["package"] = "otherdep"            # the node would check another package: not the lock's file
    (out / "kit.json").write_text(json.dumps(doc))
    with pytest.raises(KitError, match="the lock's file for tinydep is not in the kit"):
        open_kit(out, load_recipe(str(recipe)), lock=lock)
