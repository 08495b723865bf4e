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

    system = dataclasses.replace(r.torch, version="2.11.0+cu130", index_url=None, source="system")
    assert torch_from_system(dataclasses.replace(r, torch=system)) is True


def test_the_kit_command_and_the_setup_command_share_one_program(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.fixtures.root import PROJECT_ROOT

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


# ----------------------------------------------------------------- the kit against the recipe and lock

LOCK = Path(__file__).resolve().parents[1] / "locks" / "current.pylock.toml"


def _kit_doc(recipe_name: str = "current") -> tuple[dict, "object"]:
    """The manifest a faithful kit of ``recipe_name`` has (the committed lock's files, the pins, the
    target): what ``october_setup kit`` writes, built here without git or network."""
    from october.installer.kit import repo_relpath, url_key

    r = load_recipe(recipe_name)
    assert r.wheel is not None and r.wheel.sha256
    wants = from_lock(LOCK, r)
    files = {f"wheels/{w.filename}": {"sha256": w.sha256, "size": 1} for w in wants}
    files[f"wheels/{r.wheel.filename}"] = {"sha256": r.wheel.sha256, "size": 1}
    forks, repos = {}, []
    for f in r.forks:
        commit = f.pin.commit.ljust(40, "0")
        forks[f.name] = commit
        repos.append({"url": f.fetch_url, "key": url_key(f.fetch_url), "path": repo_relpath(f.fetch_url), "role": "fork",
                      "owner": f.name, "commits": [commit], "branches": {f.pin.branch: commit} if f.pin.is_prefix else {}})
    doc = {"target": {"python": r.python, "arch": r.preflight.arch},
           "torch": {"requirement": r.torch.requirement, "from_system": False}, "forks": forks, "repos": repos,
           "base_wheel": {"filename": r.wheel.filename, "sha256": r.wheel.sha256, "url": r.wheel.url},
           "wheels": [{"filename": w.filename, "package": w.package, "role": "lock", "sha256": w.sha256, "url": w.url}
                      for w in wants],
           "files": files}
    return doc, r


def _set_wheel_sha(doc: dict, filename: str, sha: str) -> None:
    """A wheel changed together with its hash everywhere in kit.json (file table and wheel list)."""
    doc["files"][f"wheels/{filename}"]["sha256"] = sha
    for w in doc["wheels"]:
        if w["filename"] == filename:
            w["sha256"] = sha


def _plant(doc: dict, fault: str) -> str:
    """Plant ``fault`` in a faithful manifest; return the text its problem must contain."""
    first = doc["wheels"][0]["filename"]
    if fault == "fork-commit":                      # the edit: a full pin's commit to 'a' x 40
        doc["forks"]["flashinfer"] = "a" * 40
        return "fork flashinfer: the kit has commit " + "a" * 40 + ", the recipe pins 2b532f7b"
    if fault == "fork-commit-everywhere":           # ... and in its repository's record too
        doc["forks"]["flashinfer"] = "a" * 40
        doc["repos"][1]["commits"] = ["a" * 40]
        return "fork flashinfer: the kit has commit " + "a" * 40
    if fault == "prefix-other-commit":
        doc["forks"]["vllm"] = "b" * 40
        return "fork vllm: the kit has commit " + "b" * 40 + ", the recipe pins 2315e62e2... on paper-memory-decode-v0.18"
    if fault == "prefix-branch":
        doc["repos"][0]["branches"] = {"main": doc["forks"]["vllm"]}
        return "fork vllm: the kit's copy does not record"
    if fault == "commit-not-in-copy":
        doc["repos"][1]["commits"] = ["c" * 40]
        return "fork flashinfer: commit 2b532f7b9236d89e45d571bc3bbf63d1e40d1f7d is not in the kit's copy"
    if fault == "missing-fork":
        del doc["forks"]["vllm"]
        return "fork vllm: not in the kit"
    if fault == "extra-fork":
        doc["forks"]["sneaky"] = "d" * 40
        return "fork sneaky: in the kit, not in the recipe"
    if fault == "target-python":
        doc["target"]["python"] = "3.11.7"
        return "target: the kit's wheels are for Python 3.11.7, the recipe's is 3.12.11"
    if fault == "target-arch":
        doc["target"]["arch"] = "aarch64"
        return "target: the kit's wheels are for aarch64"
    if fault == "torch-requirement":
        doc["torch"]["requirement"] = "torch==2.11.0"
        return "torch: the kit is for torch==2.11.0, the recipe pins torch==2.10.0"
    if fault == "torch-from-system":
        doc["torch"]["from_system"] = True
        return "torch: the kit has no torch wheel"
    if fault == "wheel-and-hash":
        _set_wheel_sha(doc, first, "e" * 64)
        return f"wheels/{first}: sha256 {'e' * 64}, the lock current.pylock.toml says"
    if fault == "wheel-missing":
        del doc["files"][f"wheels/{first}"]
        doc["wheels"] = doc["wheels"][1:]
        return f"wheels/{first}: the lock's file for"
    if fault == "wheel-extra":
        doc["files"]["wheels/evil-9.0-py3-none-any.whl"] = {"sha256": "f" * 64, "size": 1}
        doc["wheels"].append({"filename": "evil-9.0-py3-none-any.whl", "package": "evil", "role": "lock",
                              "sha256": "f" * 64, "url": "https://x/evil-9.0-py3-none-any.whl"})
        return "wheels/evil-9.0-py3-none-any.whl: not a file the lock current.pylock.toml names"
    if fault == "wheel-list-vs-table":
        doc["wheels"][0]["sha256"] = "1" * 64
        return f"wheels/{first}: kit.json lists sha256 {'1' * 64}, its file table another"
    if fault == "base-wheel":
        base = doc["base_wheel"]
        base["sha256"] = doc["files"][f"wheels/{base['filename']}"]["sha256"] = "2" * 64
        return f"wheels/{base['filename']}: sha256 {'2' * 64}, the recipe (or lock) pins 0bc51491"
    if fault == "base-wheel-table":                 # kit.json's base wheel entry disagrees with its own file table
        base = doc["base_wheel"]
        doc["files"][f"wheels/{base['filename']}"]["sha256"] = "6" * 64
        return f"wheels/{base['filename']}: the base wheel's sha256 in kit.json is not its file table's"
    if fault == "base-wheel-name":                  # another release's wheel as the base wheel
        base = doc["base_wheel"]
        other = base["filename"].replace("vllm-", "vllm-9", 1)
        doc["files"][f"wheels/{other}"] = doc["files"].pop(f"wheels/{base['filename']}")
        base["filename"] = other
        return f"wheels/{other}: the recipe's base wheel is vllm-"
    raise AssertionError(fault)


FAULTS = ["fork-commit", "fork-commit-everywhere", "prefix-other-commit", "prefix-branch", "commit-not-in-copy",
          "missing-fork", "extra-fork", "target-python", "target-arch", "torch-requirement", "torch-from-system",
          "wheel-and-hash", "wheel-missing", "wheel-extra", "wheel-list-vs-table", "base-wheel", "base-wheel-table",
          "base-wheel-name"]


def test_a_faithful_kit_has_no_problem_against_its_recipe_and_lock() -> None:
    from october.installer.kit.against import kit_problems

    doc, r = _kit_doc()
    assert kit_problems(doc, r, LOCK) == []
    # a build requirement the kit lists as such is not the lock's to vouch for, unless the lock pins its package:
    # --find-links offers it to the env's resolution too, where it would replace the locked file (scenario hunt)
    for name, pinned in (("hatchling-99.0-py3-none-any.whl", False), ("setuptools-99.0-py3-none-any.whl", True)):
        doc["files"]["wheels/" + name] = {"sha256": "3" * 64, "size": 1}
        doc["wheels"].append({"filename": name, "package": name.split("-")[0], "role": "build",
                              "sha256": "3" * 64, "url": "https://x/" + name})
        assert kit_problems(doc, r, LOCK) == ([f"wheels/{name}: a build requirement of setuptools, which the lock "
                                               f"{LOCK.name} pins to another file (the env could take it; a kit made before its "
                                               "build requirements were resolved to the lock's versions: make it "
                                               "again)"] if pinned else [])


@pytest.mark.parametrize("fault", FAULTS)
def test_each_way_a_kit_differs_from_its_recipe_or_lock_is_named(fault: str) -> None:
    from october.installer.kit.against import kit_problems

    doc, r = _kit_doc()
    named = _plant(doc, fault)
    problems = kit_problems(doc, r, LOCK)
    assert any(named in p for p in problems), problems


def test_without_a_lock_the_wheels_are_held_to_the_manifest() -> None:
    """A recipe without a committed lock: a file under wheels/ that kit.json does not list is refused;
    a listed one cannot be checked further (no lock names it)."""
    from october.installer.kit.against import kit_problems

    doc, r = _kit_doc()
    assert kit_problems(doc, r, None) == []
    doc["files"]["wheels/stray-1.0-py3-none-any.whl"] = {"sha256": "4" * 64, "size": 1}
    assert kit_problems(doc, r, None) == ["wheels/stray-1.0-py3-none-any.whl: not listed among the kit's wheels"]


def test_a_kit_for_a_system_torch_needs_no_torch_wheel_when_the_recipe_takes_torch_from_the_system() -> None:
    from october.installer.kit.against import kit_problems

    doc, r = _kit_doc()
    torch_files = [w["filename"] for w in doc["wheels"] if w["package"] == "torch"]
    assert torch_files, "the committed lock has a torch wheel"
    for name in torch_files:
        del doc["files"][f"wheels/{name}"]
    doc["wheels"] = [w for w in doc["wheels"] if w["package"] != "torch"]
    doc["torch"]["from_system"] = True
    system = dataclasses.replace(r, torch=dataclasses.replace(r.torch, source="system"))
    assert kit_problems(doc, system, LOCK) == []
    assert any("the kit has no torch wheel" in p for p in kit_problems(doc, r, LOCK))
    # a kit made with the index torch serves a --system-python install too: its torch wheel is the lock's
    full, _ = _kit_doc()
    assert kit_problems(full, system, LOCK) == []
    _set_wheel_sha(full, torch_files[0], "5" * 64)
    assert any(f"wheels/{torch_files[0]}: sha256 {'5' * 64}" in p for p in kit_problems(full, system, LOCK))


def test_a_base_wheel_for_a_recipe_without_one_and_a_lock_without_hashes_are_named(tmp_path: Path) -> None:
    """The remaining ways the base wheel or the lock cannot vouch for a kit (mutation bench survivors)."""
    import tomllib

    from october.installer.kit.against import kit_problems

    doc, r = _kit_doc()
    no_wheel = dataclasses.replace(r, wheel=None)
    assert any("a base wheel, and the recipe has no [wheel]" in p for p in kit_problems(doc, no_wheel, LOCK))
    # the recipe's sha256 left out: the lock's [tool.october.wheel] pins the base wheel instead
    unpinned = dataclasses.replace(r, wheel=dataclasses.replace(r.wheel, sha256=None))
    assert kit_problems(doc, unpinned, LOCK) == []
    base = doc["base_wheel"]
    base["sha256"] = doc["files"][f"wheels/{base['filename']}"]["sha256"] = "7" * 64
    assert any("7777" in p and "pins" in p for p in kit_problems(doc, unpinned, LOCK))
    # a lock whose file has no sha256 never gets as far as the kit check: PEP 751 refuses it when read
    from october.installer.core.errors import LockError

    doc, r = _kit_doc()
    lock = tomllib.loads(LOCK.read_text())
    pkg = next(p for p in lock["packages"] if p.get("wheels"))
    for w in pkg["wheels"]:
        w["hashes"] = {}
    import tomli_w
    bare = tmp_path / "current.pylock.toml"
    bare.write_text(tomli_w.dumps(lock))
    with pytest.raises(LockError, match="At least one hash"):
        kit_problems(doc, r, bare)


def test_the_committed_lock_is_the_default_only_where_the_project_commits_one() -> None:
    from october.installer.kit.against import committed_lock

    assert committed_lock(load_recipe("current")) == LOCK
    assert committed_lock(load_recipe("flashinfer-pr3812")) is None


# ----------------------------------------------------------------- which directory is a kit, what of it is the tool's
def test_a_kit_record_never_names_a_path_outside_the_kit(tmp_path: Path) -> None:
    """A kit.json or marker is the tool's proof of what it wrote, but only kit-shaped entries count: a
    repository path leading out of DIR is no entry, so a refresh never removes anything through it."""
    import json

    from october.installer.kit.owned import open_kit_dir, valid_entry

    victim = tmp_path / "victim.git"
    (victim / "objects").mkdir(parents=True)
    (victim / "HEAD").write_text("ref: refs/heads/main\n")
    kit = tmp_path / "kit"
    (kit / "wheels").mkdir(parents=True)
    (kit / "wheels" / "a-1.0-py3-none-any.whl").write_bytes(b"a")
    (kit / "kit.json").write_text(json.dumps({
        "kind": "october-kit", "repos": [{"path": "git/../../victim.git"}, {"path": "../victim.git"}],
        "files": {"wheels/a-1.0-py3-none-any.whl": {}, "wheels/../../victim.git/HEAD": {}}}))
    opened = open_kit_dir(kit)
    assert opened.entries == {"wheels/a-1.0-py3-none-any.whl"}
    assert json.loads((kit / "kit-unfinished.json").read_text())["entries"] == ["wheels/a-1.0-py3-none-any.whl"]
    opened.prune(set())
    assert (victim / "HEAD").is_file() and not (kit / "wheels" / "a-1.0-py3-none-any.whl").exists()
    assert [valid_entry(e) for e in ("git/github.com/a/b.git", "wheels/t-1+x-py3-none-any.whl", "git/../x.git",
                                     "wheels/..", "wheels/.a.whl.partial", "wheels/a/b.whl", "kit.json", "/etc/x")] == \
        [True, True, False, False, False, False, False, False]


def test_an_empty_or_new_directory_gets_the_marker_first_and_a_stray_one_is_refused(tmp_path: Path) -> None:
    from october.installer.kit.owned import open_kit_dir

    for d in (tmp_path / "new" / "kit", tmp_path / "empty"):
        if d.name == "empty":
            d.mkdir()
        assert open_kit_dir(d).entries == set() and sorted(p.name for p in d.iterdir()) == ["kit-unfinished.json"]
    only_dirs = tmp_path / "dirs"
    (only_dirs / "git").mkdir(parents=True)
    with pytest.raises(KitError, match="holds other files") as err:
        open_kit_dir(only_dirs)
    assert "git/" in str(err.value) and not (only_dirs / "kit-unfinished.json").exists()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(KitError, match="is a file"):
        open_kit_dir(a_file)
