"""Offline kits end to end on the fixture world: real git repos, real wheels, real uv.

The kit install runs after the world's git repositories and wheel directory are moved away and
with HTTP(S) proxies pointing at a closed loopback port, so any attempt to reach a source other
than the kit fails; the tool itself adds GIT_ALLOW_PROTOCOL=file and UV_OFFLINE=1.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from october.installer.core.errors import KitError
from october.installer.kit import url_key
from october.installer.kit.gitcopy import resolve_submodule_url
from october.installer.kit.make import KitOptions, make_kit
from october.installer.kit.use import open_kit
from october.installer.recipe import load_recipe
from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.world import World, make_world

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "october.installer.october_setup", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture()
def world(tmp_path: Path) -> World:
    return make_world(tmp_path / "world")


def _recipe_copy(world: World, where: Path) -> Path:
    """The world's recipe and forks.toml beside each other elsewhere (same bytes, so the same recipe
    sha256), its find-links pointing at the world's wheels by absolute path."""
    where.mkdir(parents=True)
    text = world.recipe.read_text().replace('find_links = ["wheels"]', f'find_links = ["{world.wheels}"]')
    (where / "fixture.toml").write_text(text)
    shutil.copy(world.forks_toml, where / "forks.toml")
    return where / "fixture.toml"


def _offline_env() -> dict[str, str]:
    dead = f"http://127.0.0.1:{_free_port()}"
    return {"HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead, "ALL_PROXY": dead}


def _sources_out(lock: dict[str, Any]) -> dict[str, Any]:
    """The lock with the recorded sources of wheels reduced to their file names."""
    for p in lock.get("packages", []):
        for w in p.get("wheels") or []:
            w["url"] = w["url"].rsplit("/", 1)[-1]
    return lock


def _receipt_core(path: Path, stack: Path) -> dict[str, Any]:
    """The receipt with the stack's own path written as STACK, without times, free-disk figures and
    the lock's sha256 (its bytes record where the wheels were read)."""
    doc = json.loads(path.read_text().replace(str(stack), "STACK"))
    for key in ("created_at", "steps", "preflight"):
        doc.pop(key)
    doc["lock"].pop("sha256")
    if doc.get("wheel"):
        doc["wheel"].pop("mtime_ns")          # when the file was placed, not what it is
    doc["options"].pop("cache_dir")          # each run was given its own --cache-dir
    if doc.get("stack_env"):
        doc["stack_env"].pop("sha256")        # the file names the stack's path (compared above as STACK)
    return doc


def test_kit_install_uses_only_the_kit_and_matches_an_online_install(world: World, tmp_path: Path) -> None:
    recipe = _recipe_copy(world, tmp_path / "recipe")
    online = cli(str(tmp_path / "online"), "--recipe", str(recipe), "--cache-dir", str(tmp_path / "cache-online"), "-q")
    assert online.returncode == 0, online.stderr

    kit = tmp_path / "kit"
    made = cli("kit", "--recipe", str(recipe), str(kit), "--cache-dir", str(tmp_path / "cache-kit"))
    assert made.returncode == 0, made.stderr
    doc = json.loads((kit / "kit.json").read_text())
    jsonschema.Draft202012Validator(json.loads((PROJECT_ROOT / "receipts" / "kit.schema.json").read_text())).validate(doc)
    assert {r["owner"] for r in doc["repos"]} == {"alpha", "beta", "beta/third_party/gamma"}
    assert sorted(w["filename"] for w in doc["wheels"]) == ["tinydep-1.0-py3-none-any.whl",
                                                            "torch-2.10.0+fixture-py3-none-any.whl"]
    assert doc["forks"] == world.commits
    assert all(len(f["sha256"]) == 64 for f in doc["files"].values()) and len(doc["files"]) > 10

    # a kit made from a lock carries exactly the lock's index files
    from_lock = cli("kit", "--recipe", str(recipe), str(tmp_path / "kit-from-lock"), "--cache-dir",
                    str(tmp_path / "cache-kit"), "--lock-file", str(tmp_path / "online" / "pylock.toml"), "-q")
    assert from_lock.returncode == 0, from_lock.stderr
    lock_doc = json.loads((tmp_path / "kit-from-lock" / "kit.json").read_text())
    assert lock_doc["lock"] == {"source": "lock", "name": "pylock.toml"}
    online_lock = tomllib.loads((tmp_path / "online" / "pylock.toml").read_text())
    assert {w["sha256"] for w in lock_doc["wheels"]} == {w["hashes"]["sha256"] for p in online_lock["packages"]
                                                         for w in p.get("wheels") or []}

    # nothing but the kit from here on: the world's repos and wheels are gone, proxies are dead
    shutil.move(str(world.root), str(tmp_path / "world-gone"))
    stack = tmp_path / "offline"
    done = cli(str(stack), "--recipe", str(recipe), "--kit", str(kit), "--cache-dir", str(tmp_path / "cache-offline"),
               extra_env=_offline_env())
    assert done.returncode == 0, done.stderr + done.stdout
    assert "offline: installing from the kit" in done.stderr + done.stdout
    # the fixture recipe has no committed lock: the setup says that only kit.json vouches for its wheels
    assert "held only to its own kit.json" in done.stderr + done.stdout
    # a kit-built stack verifies clean (issue 22, item 2)
    checked = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr
    # a fix verify names for it is the whole command it was set up with, --kit included: run offline as printed
    lock_text = (stack / "pylock.toml").read_text()
    (stack / "pylock.toml").write_text(lock_text + "# edited by hand\n")
    found = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack), "--json"],
                           cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert found.returncode == 13, found.stderr
    (fix,) = [d["fix"] for d in json.loads(found.stdout)["differences"]]
    (command,) = re.findall(r"`([^`]+)`", fix)
    argv = shlex.split(command)
    assert argv[:2] == ["october_setup", str(stack)] and argv[argv.index("--kit") + 1] == str(kit), fix
    assert "add --kit" not in fix and "--locked" not in argv
    again = cli(*argv[1:], "-q", extra_env=_offline_env())
    assert again.returncode == 0, again.stderr
    assert (stack / "pylock.toml").read_text() == lock_text
    checked = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr

    # the same lock and receipt as the online install, apart from where the wheels were read
    a = _sources_out(tomllib.loads((tmp_path / "online" / "pylock.toml").read_text()))
    b = _sources_out(tomllib.loads((stack / "pylock.toml").read_text()))
    assert a == b
    assert _receipt_core(tmp_path / "online" / "receipts" / "setup.json", tmp_path / "online") == \
        _receipt_core(stack / "receipts" / "setup.json", stack)
    # and the kit's wheels were what the env got (uv read them from the kit, not a cache of the online run)
    assert any(str(kit / "wheels") in w["url"] for p in tomllib.loads((stack / "pylock.toml").read_text())["packages"]
               for w in p.get("wheels") or [])

    # a --locked kit install reproduces the online lock exactly
    locked = cli(str(tmp_path / "offline-locked"), "--recipe", str(recipe), "--kit", str(kit), "--locked",
                 "--lock-file", str(tmp_path / "online" / "pylock.toml"), "--cache-dir", str(tmp_path / "cache-locked"),
                 "-q", extra_env=_offline_env())
    assert locked.returncode == 0, locked.stderr
    assert "held only to its own kit.json" not in locked.stderr + locked.stdout
    assert _sources_out(tomllib.loads((tmp_path / "offline-locked" / "pylock.toml").read_text())) == a


def test_without_the_kit_the_same_offline_run_fails(world: World, tmp_path: Path) -> None:
    """The control for the test above: with the world gone, an install without --kit cannot succeed."""
    recipe = _recipe_copy(world, tmp_path / "recipe")
    shutil.move(str(world.root), str(tmp_path / "world-gone"))
    proc = cli(str(tmp_path / "s"), "--recipe", str(recipe), "--cache-dir", str(tmp_path / "c"), extra_env=_offline_env())
    assert proc.returncode != 0


@pytest.fixture()
def kit_and_recipe(world: World, tmp_path: Path) -> tuple[Path, Path]:
    recipe = _recipe_copy(world, tmp_path / "recipe")
    kit = tmp_path / "kit"
    make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=kit, cache_dir=tmp_path / "cache-kit"))
    return kit, recipe


@pytest.mark.parametrize("plant", ["tamper-wheel", "tamper-git", "missing", "extra-wheel", "link"])
def test_a_kit_that_differs_from_its_manifest_is_refused_naming_the_file(kit_and_recipe: tuple[Path, Path],
                                                                         tmp_path: Path, plant: str) -> None:
    kit, recipe = kit_and_recipe
    wheel = kit / "wheels" / "tinydep-1.0-py3-none-any.whl"
    if plant == "tamper-wheel":
        data = bytearray(wheel.read_bytes())
        data[-30] ^= 0x01
        wheel.write_bytes(bytes(data))
        named = "wheels/tinydep-1.0-py3-none-any.whl: sha256"
    elif plant == "tamper-git":
        target = next(p for p in sorted((kit / "git").rglob("*")) if p.is_file() and "/objects/" in p.as_posix())
        target.chmod(0o644)
        target.write_bytes(target.read_bytes() + b"x")
        named = target.relative_to(kit).as_posix()
    elif plant == "missing":
        wheel.unlink()
        named = "wheels/tinydep-1.0-py3-none-any.whl: missing"
    elif plant == "link":           # the scenario hunt: a link to an identical copy was said to be "missing"
        copy = tmp_path / "elsewhere.whl"
        shutil.copy(wheel, copy)
        wheel.unlink()
        wheel.symlink_to(copy)
        named = f"wheels/tinydep-1.0-py3-none-any.whl: a link (to {copy}), not the file the manifest lists"
    else:
        shutil.copy(wheel, kit / "wheels" / "tinydep-9.0-py3-none-any.whl")
        named = "wheels/tinydep-9.0-py3-none-any.whl: not in the manifest"
    proc = cli(str(tmp_path / "s"), "--recipe", str(recipe), "--kit", str(kit), "--cache-dir", str(tmp_path / "c"),
               extra_env=_offline_env())
    assert proc.returncode == KitError.exit_code, proc.stderr
    assert named in proc.stderr and "copy the kit again" in proc.stderr
    assert not (tmp_path / "s" / "src").exists(), "nothing may be installed from a kit that failed verification"


def test_a_kit_for_another_recipe_or_without_manifest_is_refused(kit_and_recipe: tuple[Path, Path], tmp_path: Path) -> None:
    kit, recipe = kit_and_recipe
    changed = recipe.read_text().replace("min_ram_gb = 0.1", "min_ram_gb = 0.2")
    recipe.write_text(changed)
    with pytest.raises(KitError, match="made for another recipe"):
        open_kit(kit, load_recipe(str(recipe)))
    recipe.write_text(changed.replace("min_ram_gb = 0.2", "min_ram_gb = 0.1"))
    # a manifest naming a commit its repository lacks (the files themselves unchanged)
    doc = json.loads((kit / "kit.json").read_text())
    doc["repos"][0]["commits"] = ["1" * 40]
    (kit / "kit.json").write_text(json.dumps(doc))
    with pytest.raises(KitError, match="lacks commit"):
        open_kit(kit, load_recipe(str(recipe)))
    (kit / "kit.json").unlink()
    with pytest.raises(KitError, match="not a finished kit"):
        open_kit(kit, load_recipe(str(recipe)))


def _lock_of(kit: Path, where: Path) -> Path:
    """A PEP 751 lock naming the kit's wheels with their true sha256 (what `october_setup` writes for
    the fixture recipe, reduced to its index packages)."""
    doc = json.loads((kit / "kit.json").read_text())
    lines = ['lock-version = "1.0"', 'created-by = "tests"', ""]
    for w in doc["wheels"]:
        version = w["filename"].split("-")[1]
        lines += ["[[packages]]", f'name = "{w["package"]}"', f'version = "{version}"',
                  f'wheels = [{{ url = "{(kit / "wheels" / w["filename"]).as_uri()}", hashes = {{ sha256 = "{w["sha256"]}" }} }}]',
                  ""]
    where.write_text("\n".join(lines))
    return where


def test_a_kit_is_checked_against_the_recipe_and_the_lock_not_only_itself(kit_and_recipe: tuple[Path, Path],
                                                                          tmp_path: Path) -> None:
    """Issue 22 (6): each edit below leaves the kit consistent with its own kit.json, so only the recipe
    (fork pins, target) and the lock (wheel sha256) can tell; each is refused at the kit check (exit 20,
    naming what differs) before anything is installed."""
    from tests.fixtures.wheels import build_wheel

    kit, recipe = kit_and_recipe
    manifest = kit / "kit.json"
    original = manifest.read_text()
    lock = _lock_of(kit, tmp_path / "pylock.toml")
    open_kit(kit, load_recipe(str(recipe)), lock=lock)            # the faithful kit passes, lock and all

    def refused(edit: Any, named: str, *extra: str) -> None:
        doc = json.loads(original)
        edit(doc)
        manifest.write_text(json.dumps(doc))
        proc = cli(str(tmp_path / "s"), "--recipe", str(recipe), "--kit", str(kit), "--cache-dir", str(tmp_path / "c"),
                   *extra, extra_env=_offline_env())
        assert proc.returncode == KitError.exit_code, proc.stderr
        assert named in proc.stderr and "does not match the recipe and lock" in proc.stderr, proc.stderr
        assert not (tmp_path / "s" / "src").exists(), "nothing may be installed from a kit that failed its check"

    refused(lambda d: d["forks"].update(alpha="a" * 40), f"fork alpha: the kit has commit {'a' * 40}")
    refused(lambda d: d["target"].update(python="3.99.0"), "target: the kit's wheels are for Python 3.99.0")

    # a wheel changed together with its hash (and size) in kit.json: caught by the lock, not later in env
    wheel = kit / "wheels" / "tinydep-1.0-py3-none-any.whl"
    honest = wheel.read_bytes()
    build_wheel(tmp_path / "evil", "tinydep", "1.0", {"tinydep/__init__.py": "import os  # anything at all\n"})
    wheel.write_bytes((tmp_path / "evil" / wheel.name).read_bytes())
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()

    def swap(d: dict[str, Any]) -> None:
        d["files"]["wheels/" + wheel.name] = {"sha256": sha, "size": wheel.stat().st_size}
        next(w for w in d["wheels"] if w["filename"] == wheel.name)["sha256"] = sha

    refused(swap, f"wheels/{wheel.name}: sha256 {sha}, the lock pylock.toml says", "--locked", "--lock-file", str(lock))
    wheel.write_bytes(honest)
    manifest.write_text(original)
    open_kit(kit, load_recipe(str(recipe)), lock=lock)


def test_a_url_the_kit_lacks_is_named_with_what_to_do(kit_and_recipe: tuple[Path, Path]) -> None:
    kit, recipe = kit_and_recipe
    opened = open_kit(kit, load_recipe(str(recipe)))
    with pytest.raises(KitError) as err:
        opened.source_for("https://github.com/gabime/spdlog.git")
    assert "https://github.com/gabime/spdlog.git" in str(err.value) and "october_setup kit" in str(err.value)
    # git's own URL rewriting covers every form of a kit URL, and allows local files only
    env = opened.git_config()
    assert env["GIT_ALLOW_PROTOCOL"] == "file" and int(env["GIT_CONFIG_COUNT"]) >= 3


def test_a_refreshed_kit_is_rewritten_and_other_directories_are_not_taken_over(kit_and_recipe: tuple[Path, Path],
                                                                              tmp_path: Path) -> None:
    kit, recipe = kit_and_recipe
    before = json.loads((kit / "kit.json").read_text())
    # a wheel an earlier kit recorded (its recipe needed it) would be offered to uv by --find-links: a refresh drops it
    old = kit / "wheels" / "tinydep-0.9-py3-none-any.whl"
    shutil.copy(kit / "wheels" / "tinydep-1.0-py3-none-any.whl", old)
    earlier = json.loads((kit / "kit.json").read_text())
    earlier["files"]["wheels/" + old.name] = {"sha256": hashlib.sha256(old.read_bytes()).hexdigest(),
                                              "size": old.stat().st_size}
    (kit / "kit.json").write_text(json.dumps(earlier))
    make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=kit, cache_dir=tmp_path / "cache-kit"))
    assert json.loads((kit / "kit.json").read_text())["files"] == before["files"]
    assert not old.exists() and not (kit / "kit-unfinished.json").exists()
    # a wheel no kit run wrote (someone put it there) is neither deleted nor recorded: the refresh is refused
    mine = kit / "wheels" / "tinydep-9.0-py3-none-any.whl"
    shutil.copy(kit / "wheels" / "tinydep-1.0-py3-none-any.whl", mine)
    manifest = (kit / "kit.json").read_bytes()
    with pytest.raises(KitError, match="holds files no `october_setup kit` run wrote") as err:
        make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=kit, cache_dir=tmp_path / "cache-kit"))
    assert "wheels/tinydep-9.0-py3-none-any.whl" in str(err.value) and "choose an empty or new DIR" in str(err.value)
    assert mine.exists() and (kit / "kit.json").read_bytes() == manifest and not (kit / "kit-unfinished.json").exists()
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(KitError, match="holds other files"):
        make_kit(KitOptions(recipe=load_recipe(str(recipe)), out=other, cache_dir=tmp_path / "cache-kit"))
    assert sorted(p.name for p in other.iterdir()) == ["cat.jpg"]


def test_a_directory_with_a_git_folder_is_no_kit_and_nothing_in_it_is_touched(world: World, tmp_path: Path) -> None:
    """The audit's case: a git/ folder is no proof the tool made DIR (only kit.json or kit-unfinished.json
    are); the run is refused (exit 20) before anything is written or deleted, naming DIR and its files."""
    recipe = _recipe_copy(world, tmp_path / "recipe")
    k = tmp_path / "K"
    planted = {"git/notes": "n\n", "wheels/mine.whl": "w\n", "README.txt": "x\n"}
    for rel, text in planted.items():
        (k / rel).parent.mkdir(parents=True, exist_ok=True)
        (k / rel).write_text(text)
    for foreign_manifest in (None, '{"kind": "something-else", "files": {}, "repos": []}'):
        if foreign_manifest is not None:
            (k / "kit.json").write_text(foreign_manifest)
        proc = cli("kit", "--recipe", str(recipe), str(k), "--cache-dir", str(tmp_path / "cache"))
        assert proc.returncode == KitError.exit_code == 20, proc.stderr
        assert f"{k} holds other files" in proc.stderr and "choose an empty or new DIR" in proc.stderr
        assert all(rel in proc.stderr for rel in planted), proc.stderr
        assert {rel: (k / rel).read_text() for rel in planted} == planted
        assert sorted(p.relative_to(k).as_posix() for p in k.rglob("*") if p.is_file()) == \
            sorted([*planted, *(["kit.json"] if foreign_manifest else [])])
        assert not (tmp_path / "cache").exists()
    # --json: the refusal as the error document
    proc = cli("kit", "--recipe", str(recipe), str(k), "--cache-dir", str(tmp_path / "cache"), "--json")
    doc = json.loads(proc.stdout)
    assert doc["exit_code"] == 20 and str(k) in doc["error"]["message"] and "wheels/mine.whl" in doc["error"]["message"]


def _interrupted(monkeypatch: pytest.MonkeyPatch, at: int) -> None:
    """The next kit run stops (Ctrl-C) as it places its ``at``-th wheel."""
    import october.installer.kit.make as make

    real, calls = make.fetch, []

    def stop(*args: Any, **kw: Any) -> Path:
        calls.append(args)
        if len(calls) == at:
            monkeypatch.setattr(make, "fetch", real)
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(make, "fetch", stop)


def test_an_interrupted_kit_is_resumed_and_only_what_a_run_recorded_is_removed(world: World, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = load_recipe(str(_recipe_copy(world, tmp_path / "recipe")))
    kit = tmp_path / "kit"
    _interrupted(monkeypatch, at=2)
    with pytest.raises(KeyboardInterrupt):
        make_kit(KitOptions(recipe=recipe, out=kit, cache_dir=tmp_path / "ck"))
    assert not (kit / "kit.json").exists()
    marker = json.loads((kit / "kit-unfinished.json").read_text())
    assert {e.split("/")[0] for e in marker["entries"]} == {"git", "wheels"}, marker
    # what a killed run leaves of its own writes, and a wheel an earlier run recorded that is no longer needed
    [placed] = [p.name for p in (kit / "wheels").iterdir()]
    (kit / "wheels" / f".{placed}.partial").write_bytes(b"half")
    (kit / f".kit-unfinished.json.{os.getpid()}.tmp").write_bytes(b"{")
    marker["entries"].append("wheels/old-0.1-py3-none-any.whl")
    (kit / "kit-unfinished.json").write_text(json.dumps(marker))
    (kit / "wheels" / "old-0.1-py3-none-any.whl").write_bytes(b"old")
    make_kit(KitOptions(recipe=recipe, out=kit, cache_dir=tmp_path / "ck"))
    assert sorted(p.name for p in (kit / "wheels").iterdir()) == ["tinydep-1.0-py3-none-any.whl",
                                                                  "torch-2.10.0+fixture-py3-none-any.whl"]
    assert not (kit / "kit-unfinished.json").exists()
    open_kit(kit, recipe)                        # every file as kit.json records it, nothing else
    # an interrupted refresh keeps the earlier kit's record: it resumes too
    _interrupted(monkeypatch, at=1)
    with pytest.raises(KeyboardInterrupt):
        make_kit(KitOptions(recipe=recipe, out=kit, cache_dir=tmp_path / "ck"))
    assert not (kit / "kit.json").exists() and (kit / "kit-unfinished.json").exists()
    make_kit(KitOptions(recipe=recipe, out=kit, cache_dir=tmp_path / "ck"))
    open_kit(kit, recipe)


def test_a_file_put_into_a_kit_while_it_is_made_is_refused_not_deleted(world: World, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import october.installer.kit.make as make

    recipe = load_recipe(str(_recipe_copy(world, tmp_path / "recipe")))
    kit = tmp_path / "kit"
    real = make.fetch

    def fetch_and_plant(want: Any, cache_dir: Path, dest_dir: Path, sources: Any = ()) -> Path:
        dest_dir.mkdir(parents=True, exist_ok=True)
        (dest_dir / "stray-1.0-py3-none-any.whl").write_bytes(b"mine")     # someone's file, mid-run
        return real(want, cache_dir, dest_dir, sources)

    monkeypatch.setattr(make, "fetch", fetch_and_plant)
    with pytest.raises(KitError, match="stray-1.0-py3-none-any.whl"):
        make_kit(KitOptions(recipe=recipe, out=kit, cache_dir=tmp_path / "ck"))
    assert (kit / "wheels" / "stray-1.0-py3-none-any.whl").read_bytes() == b"mine"
    assert not (kit / "kit.json").exists()


def test_the_install_offline_hint_runs_as_printed_with_spaces_in_its_paths(world: World, tmp_path: Path) -> None:
    """``october_setup kit`` ends with the command that installs from the kit: a recipe path and a kit path
    with spaces (and a ``$``) must stay one shell word each when it is copied."""
    import shlex

    recipe = _recipe_copy(world, tmp_path / "my recipes $HOME")
    kit = tmp_path / "kit dir"
    made = cli("kit", "--recipe", str(recipe), str(kit), "--cache-dir", str(tmp_path / "ck"))
    assert made.returncode == 0, made.stderr
    [hint] = [ln.split(": ", 1)[1] for ln in made.stdout.splitlines() if ln.strip().startswith("install offline:")]
    assert shlex.split(hint) == ["october_setup", "STACK", "--recipe", str(recipe), "--kit", str(kit)], hint


def test_a_prefix_pin_resolves_offline_to_the_same_commit(world: World, tmp_path: Path) -> None:
    recipe = _recipe_copy(world, tmp_path / "recipe")
    full = world.commits["alpha"]
    forks = recipe.parent / "forks.toml"
    forks.write_text(forks.read_text().replace(f'main = "{full}"', f'main = {{ prefix = "{full[:9]}", branch = "main" }}', 1))
    kit = tmp_path / "kit"
    assert cli("kit", "--recipe", str(recipe), str(kit), "--cache-dir", str(tmp_path / "ck"), "-q").returncode == 0
    alpha = next(r for r in json.loads((kit / "kit.json").read_text())["repos"] if r["owner"] == "alpha")
    assert alpha["branches"] == {"main": full}
    shutil.move(str(world.root), str(tmp_path / "world-gone"))
    proc = cli(str(tmp_path / "s"), "--recipe", str(recipe), "--kit", str(kit), "--cache-dir", str(tmp_path / "c"), "-q",
               extra_env=_offline_env())
    assert proc.returncode == 0, proc.stderr
    lock = tomllib.loads((tmp_path / "s" / "pylock.toml").read_text())
    assert lock["tool"]["october"]["forks"]["alpha"] == {**lock["tool"]["october"]["forks"]["alpha"],
                                                        "commit": full, "requested": full[:9], "branch": "main"}


@pytest.mark.parametrize(("base", "url", "want"), [
    ("https://github.com/mcgrof/flashinfer.git", "../../NVIDIA/cccl.git", "https://github.com/NVIDIA/cccl.git"),
    ("file:///x/origins/beta.git", "../gamma.git", "file:///x/origins/gamma.git"),
    ("https://h/a/b", "./c", "https://h/a/b/c"),
    ("https://h/a/b", "https://other/x.git", "https://other/x.git"),
])
def test_relative_submodule_urls_resolve_as_git_does(base: str, url: str, want: str) -> None:
    assert resolve_submodule_url(base, url) == want


def test_url_keys_match_the_forms_git_uses() -> None:
    assert url_key("https://github.com/a/b.git") == url_key("https://github.com/a/b/") == "https://github.com/a/b"
    assert url_key("git@github.com:gabime/spdlog.git") == "https://github.com/gabime/spdlog"


@pytest.mark.parametrize("wheel_from", ["fork-history", "release-branch"])
def test_the_k16v8_standin_stack_installs_offline_from_a_kit(tmp_path: Path, wheel_from: str) -> None:
    """The whole K16/V8 path (base wheel + source equivalence, precompiled vLLM fork, FlashInfer fork,
    JIT) from a kit, with the wheel server stopped and the git repos and find-links directory moved
    away.  ``release-branch``: the wheel was built from an upstream release commit that is not in the
    fork's history (as vLLM cuts its releases), so the kit must carry that commit too."""
    from tests.fixtures.base_wheels import vllm_wheel
    from tests.fixtures.findlinks_server import serve_find_links
    from tests.fixtures.gitrepos import add_commit
    from tests.fixtures.stack_forks import TORCH
    from tests.test_setup_k16v8_e2e import make_k16v8_world, write_recipe

    root = tmp_path / "w"
    w = make_k16v8_world(root)
    if wheel_from == "release-branch":
        release = add_commit(root / "git" / "vllm-upstream.git", {"RELEASE": "v0.18.0\n"}, branch="releases/v0.18.0",
                             base=str(w["up_commit"]), message="release v0.18.0")
        w["wheel"] = vllm_wheel(root / "served", commit_id="g" + release[:9], torch=TORCH.split("+")[0],
                                requires=[f"torch=={TORCH.split('+')[0]}"], so=None, cudart="12")
    wheel = w["wheel"]
    assert isinstance(wheel, Path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    skip = ["--skip-preflight", "nvcc"]
    with serve_find_links(wheel.parent) as served:
        recipe = write_recipe(root, w, served.url + wheel.name)
        online = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(tmp_path / "online"), "--recipe",
                                 str(recipe), "--cache-dir", str(tmp_path / "c-online"), *skip, "-q"],
                                cwd=PROJECT_ROOT, capture_output=True, text=True, env=env, timeout=300)
        assert online.returncode == 0, online.stderr
        made = cli("kit", "--recipe", str(recipe), str(tmp_path / "kit"), "--cache-dir", str(tmp_path / "c-kit"))
        assert made.returncode == 0, made.stderr
    doc = json.loads((tmp_path / "kit" / "kit.json").read_text())
    assert doc["base_wheel"]["sha256"] == json.loads((tmp_path / "online" / "receipts" / "setup.json").read_text())["wheel"]["wheel_sha256"]
    vllm = next(r for r in doc["repos"] if r["owner"] == "vllm")
    # the fork's copy reaches down to its upstream base (and the wheel's source when that is in its history)
    depth = subprocess.run(["git", "--git-dir", str(tmp_path / "kit" / vllm["path"]), "rev-list", "--count",
                            f"refs/october/pins/{w['vllm']}"], capture_output=True, text=True, check=True).stdout
    assert int(depth) == 2
    if wheel_from == "release-branch":
        assert release in vllm["commits"] and len(vllm["commits"]) == 2

    for gone in ("git", "links", "served"):
        shutil.move(str(root / gone), str(tmp_path / f"gone-{gone}"))
    stack = tmp_path / "offline"
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe", str(recipe), "--kit",
                           str(tmp_path / "kit"), "--cache-dir", str(tmp_path / "c-offline"), *skip],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, env={**env, **_offline_env()}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "wheel: ok" in proc.stderr and "jit: ok" in proc.stderr
    # a kit-built stack verifies clean (issue 22, item 2)
    checked = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr
    a = _sources_out(tomllib.loads((tmp_path / "online" / "pylock.toml").read_text()))
    b = _sources_out(tomllib.loads((stack / "pylock.toml").read_text()))
    assert a == b
    ra = _receipt_core(tmp_path / "online" / "receipts" / "setup.json", tmp_path / "online")
    rb = _receipt_core(stack / "receipts" / "setup.json", stack)
    assert ra == rb
    assert ra["wheel"]["source_equivalence"]["compared_in"] == ("fork-mirror" if wheel_from == "release-branch"
                                                                else "fork-clone")


def test_a_stack_run_again_from_a_moved_kit_locks_the_kit_it_used(kit_and_recipe: tuple[Path, Path],
                                                                   tmp_path: Path) -> None:
    """The scenario hunt: after ``mv kA kB`` and a re-run with ``--kit kB``, env and install ran again from kB
    but the lock step was "already done (inputs unchanged)", so ``pylock.toml`` named wheels under kA, a path
    that no longer exists.  The lock's inputs now hold the package sources it was compiled from."""
    kit, recipe = kit_and_recipe
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    first = cli(str(stack), "--recipe", str(recipe), "--kit", str(kit), "--cache-dir", str(cache), "-q",
                extra_env=_offline_env())
    assert first.returncode == 0, first.stderr

    def wheel_urls() -> list[str]:
        lock = tomllib.loads((stack / "pylock.toml").read_text())
        return [w["url"] for p in lock["packages"] for w in p.get("wheels") or [] if "url" in w]

    assert wheel_urls() and all(str(kit / "wheels") in u for u in wheel_urls())
    moved = tmp_path / "kit-moved"
    shutil.move(str(kit), str(moved))
    again = cli(str(stack), "--recipe", str(recipe), "--kit", str(moved), "--cache-dir", str(cache),
                extra_env=_offline_env())
    assert again.returncode == 0, again.stderr
    assert wheel_urls() and all(str(moved / "wheels") in u for u in wheel_urls()), wheel_urls()
    third = cli(str(stack), "--recipe", str(recipe), "--kit", str(moved), "--cache-dir", str(cache),
                extra_env=_offline_env())
    assert third.returncode == 0 and "(0 step(s) ran" in third.stdout, third.stdout + third.stderr
    checked = subprocess.run([sys.executable, "-m", "october", "verify", "--install", str(stack)], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("how", ["url", "netrc"])
def test_a_kit_from_find_links_that_need_credentials_downloads_with_them_and_records_none(
        world: World, tmp_path: Path, how: str) -> None:
    """The scenario hunt: a recipe whose find-links server needs credentials (in the URL, or in ~/.netrc as uv
    reads it): uv resolved with them, then the kit's own download of the same wheels had none (HTTP 401,
    exit 10).  It now takes the recipe URL's credentials for that host, else the netrc's; the kit and the
    cache hold no trace of them."""
    from tests.fixtures.findlinks_server import serve_find_links

    token = "qKITt0kenq"
    with serve_find_links(world.wheels, auth=("user", token)) as links:
        base = links.url if how == "netrc" else links.url.replace("http://", f"http://user:{token}@")
        extra: dict[str, str] = {}
        if how == "netrc":
            netrc = tmp_path / "netrc"
            netrc.write_text(f"machine 127.0.0.1 login user password {token}\n")
            netrc.chmod(0o600)
            extra = {"NETRC": str(netrc)}
        recipe = _recipe_copy(world, tmp_path / "recipe")
        recipe.write_text(recipe.read_text().replace(f'find_links = ["{world.wheels}"]', f'find_links = ["{base}"]'))
        kit, cache = tmp_path / "kit", tmp_path / "cache-kit"
        made = cli("kit", "--recipe", str(recipe), str(kit), "--cache-dir", str(cache), extra_env=extra)
        assert made.returncode == 0, made.stderr
        assert not [r for r in links.refused if r.endswith(".whl")], links.refused     # every wheel with them
        assert "tinydep-1.0-py3-none-any.whl" in {p.name for p in (kit / "wheels").iterdir()}
    for root in (kit, cache):
        for p in root.rglob("*"):
            if p.is_file() and not p.is_symlink():
                assert token.encode() not in p.read_bytes(), p
    assert token not in made.stdout + made.stderr
    # the review: the download cache's file names are keyed on the URL without its credentials; the key names
    # an unpinned URL's first-seen record, so it is the one earlier versions wrote (a query's ?key= is kept)
    from october.installer.wheels.download import _url_key

    assert _url_key(f"http://user:{token}@127.0.0.1:1/x.whl") == _url_key("http://127.0.0.1:1/x.whl")
    assert _url_key("http://127.0.0.1:1/x.whl") == "dc30b61724b14e0702a9ce5f60768942"      # as 5d9e5d5 keyed it
    assert _url_key("https://h/x.whl?key=builds/123") != _url_key("https://h/x.whl?key=builds/124")
