"""``current download --model-dir DIR``: a local copy (a site's shared storage, a model made offline)
checked in place against the recipe's sha256 pins (issue 18, item 3).  No hub, no server: the hub is
never asked (HF_ENDPOINT points at a closed port), nothing is written into the copy, nothing is moved."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.core.errors import DownloadError, FileSystemError, UsageError
from october.installer.download import DownloadOptions, load_manifest, run_download
from october.installer.recipe import load_recipe
from tests.fixtures.root import PROJECT_ROOT
from tests.test_download_hub import AWQ_REPO, AWQ_REV, write_recipe

FILES = {"config.json": b'{"num_hidden_layers": 2, "head_dim": 128}', "tokenizer.json": b'{"model": {}}',
         "model.safetensors": b"\x00" * 4096}


def _copy(root: Path) -> Path:
    root.mkdir(parents=True)
    for name, data in FILES.items():
        (root / name).write_bytes(data)
    (root / ".cache").mkdir()
    (root / ".cache" / "junk.lock").write_bytes(b"")       # bookkeeping of another tool: not the model
    return root


def _pins(**override: str) -> dict[str, str]:
    return {n: hashlib.sha256(d).hexdigest() for n, d in FILES.items()} | override


def _opts(tmp_path: Path, pins: dict[str, str], model_dir: Path, **kw: object) -> DownloadOptions:
    recipe = load_recipe(str(write_recipe(tmp_path / "recipe", awq_pins=pins)))
    base = dict(recipe=recipe, format="awq", output=tmp_path / "out" / "awq-download.json",
                cache_dir=tmp_path / "cache", quiet=True, model_dir=model_dir)
    base.update(kw)
    return DownloadOptions(**base)  # type: ignore[arg-type]


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime) for p in root.rglob("*")}


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")      # a closed port: any hub call would fail


def test_a_pinned_local_copy_gives_the_same_manifest_checked_the_same_way(tmp_path: Path) -> None:
    model = _copy(tmp_path / "shared" / "qwen3-tiny")
    before = _tree(model)
    out = run_download(_opts(tmp_path, _pins(), model))
    m = load_manifest(out)
    assert m["local_path"] == str(model) and m["repo"] == AWQ_REPO and m["revision"] == AWQ_REV
    assert m["resolved_revision"] == AWQ_REV and m["endpoint"].startswith("local directory")
    assert {f["path"]: (f["sha256"], f["verified_against"]) for f in m["files"]} == \
        {n: (h, "recipe") for n, h in _pins().items()}
    assert _tree(model) == before                 # nothing written into the copy, nothing moved


def test_a_changed_file_is_named_and_left_where_it_is(tmp_path: Path) -> None:
    model = _copy(tmp_path / "m")
    (model / "model.safetensors").write_bytes(b"\x01" * 4096)
    before = _tree(model)
    with pytest.raises(DownloadError) as err:
        run_download(_opts(tmp_path, _pins(), model))
    assert "model.safetensors" in str(err.value) and "nothing was moved" in str(err.value)
    assert _tree(model) == before and not (tmp_path / "out").exists()


def test_an_unpinned_file_is_refused_never_trusted_by_its_own_hash(tmp_path: Path) -> None:
    model = _copy(tmp_path / "m")
    pins = _pins()
    del pins["tokenizer.json"]
    with pytest.raises(DownloadError, match="no sha256 pinned") as err:
        run_download(_opts(tmp_path, pins, model))
    assert "tokenizer.json" in str(err.value) and "sha256sum" in str(err.value)


def test_a_pin_for_a_file_the_copy_lacks_is_refused(tmp_path: Path) -> None:
    model = _copy(tmp_path / "m")
    (model / "tokenizer.json").unlink()
    with pytest.raises(DownloadError, match="does not hold"):
        run_download(_opts(tmp_path, _pins(), model))


def test_a_copy_without_weights_is_refused(tmp_path: Path) -> None:
    model = _copy(tmp_path / "m")
    (model / "model.safetensors").unlink()
    pins = _pins()
    del pins["model.safetensors"]
    with pytest.raises(DownloadError, match="no weight file"):
        run_download(_opts(tmp_path, pins, model))


@pytest.mark.parametrize("extra, words", [({"offline": True}, "--model-dir alone"),
                                          ({"local_dir": Path("/tmp")}, "--model-dir alone")])
def test_model_dir_with_download_options_is_a_usage_error(tmp_path: Path, extra: dict, words: str) -> None:
    model = _copy(tmp_path / "m")
    with pytest.raises(UsageError, match=words):
        run_download(_opts(tmp_path, _pins(), model, **extra))


def test_a_model_dir_that_is_not_a_directory_is_a_path_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    for where in (tmp_path / "f", tmp_path / "nothing"):
        with pytest.raises(FileSystemError, match="is not a directory") as info:
            run_download(_opts(tmp_path, _pins(), where))
        assert info.value.exit_code == 19


@pytest.mark.parametrize("option", ["--model-dir", "--fixtures", "--output"])
def test_a_path_option_of_the_wrong_kind_exits_19_as_the_readme_says(tmp_path: Path, option: str) -> None:
    """A path of the wrong kind is exit 19 for every path option (it was 2 for --model-dir and
    --fixtures, as a usage error, while --cache-dir and --local-dir gave 19)."""
    model = _copy(tmp_path / "m")
    recipe = write_recipe(tmp_path / "recipe", awq_pins=_pins())
    (tmp_path / "afile").write_text("x")
    (tmp_path / "o" / "awq-download.json").mkdir(parents=True)       # --output: a directory where the file goes
    given = {"--model-dir": ["--model-dir", str(tmp_path / "afile"), "--output", str(tmp_path / "o2")],
             "--fixtures": ["--model-dir", str(model), "--fixtures", str(tmp_path / "nothing"),
                            "--output", str(tmp_path / "o2")],
             "--output": ["--model-dir", str(model), "--output", str(tmp_path / "o")]}[option]
    proc = subprocess.run([sys.executable, "-m", "october", "download", "--format", "awq", "--recipe", str(recipe),
                           *given, "--quiet"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, HF_ENDPOINT="http://127.0.0.1:9"))
    assert proc.returncode == 19, proc.stderr
    assert option in proc.stderr and "Expected" in proc.stderr


def test_the_cli_takes_model_dir(tmp_path: Path) -> None:
    model = _copy(tmp_path / "m")
    recipe = write_recipe(tmp_path / "recipe", awq_pins=_pins())
    proc = subprocess.run([sys.executable, "-m", "october", "download", "--format", "awq", "--recipe", str(recipe),
                           "--model-dir", str(model), "--output", str(tmp_path / "o"), "--quiet"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, HF_ENDPOINT="http://127.0.0.1:9"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "awq-download.json").read_text())["local_path"] == str(model)
    (model / "config.json").write_bytes(b"{}")
    proc = subprocess.run([sys.executable, "-m", "october", "download", "--format", "awq", "--recipe", str(recipe),
                           "--model-dir", str(model), "--output", str(tmp_path / "o2"), "--quiet"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 15 and "config.json" in proc.stderr
