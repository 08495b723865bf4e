"""The download scenario hunt: a manifest that over-claimed, a model file written over, credentials in
huggingface_hub's own warnings, a bad blob in the user's HF cache, a malformed offline record (each failed
before its fix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from october.installer.core.errors import OctoberError
from october.installer.download import run_download
from tests.test_download_hub import AWQ_REPO, AWQ_REV, PATTERNS, WEIGHT, Env, env, write_recipe  # noqa: F401


def _as_an_earlier_version_left_it(env: Env) -> tuple[Path, Path, dict]:
    """A copy downloaded into ``--local-dir`` whose record names no patterns (what the earlier version wrote);
    -> (the copy, its record, the record's document as written)."""
    d = env.tmp / "m"
    run_download(env.opts("awq", local_dir=d))
    rec = d / ".october" / "verified.json"
    doc = json.loads(rec.read_text())
    del doc["patterns"]
    rec.write_text(json.dumps(doc))
    return d, rec, doc


def test_offline_of_a_recipe_refuses_a_record_another_recipes_patterns_left(env: Env) -> None:
    """Recipe A (full patterns) then recipe B (same repo@rev, narrower patterns) in the cache's shared folder:
    B sets A's tokenizer files aside and rewrites the record; A --offline must not write a manifest that
    lists only B's files and exit 0 (it would over-claim a complete, verified copy)."""
    run_download(env.opts("awq"))
    narrow = write_recipe(env.tmp / "narrow")
    text = narrow.read_text().replace(
        "patterns = [" + ", ".join(json.dumps(p) for p in PATTERNS) + "]",
        'patterns = ["config.json", "model.safetensors.index.json", "*.safetensors"]', 1)
    narrow.write_text(text)
    run_download(env.opts("awq", recipe=narrow, output=env.tmp / "b.json"))
    out = env.tmp / "a-offline.json"
    with pytest.raises(OctoberError, match="written for other patterns"):
        run_download(env.opts("awq", offline=True, output=out))
    assert not out.exists()
    run_download(env.opts("awq", output=out))                 # online once: the copy is whole again
    run_download(env.opts("awq", offline=True, output=out))
    assert "tokenizer.json" in {f["path"] for f in json.loads(out.read_text())["files"]}


def test_offline_takes_a_record_an_earlier_version_wrote(env: Env) -> None:
    """A record without patterns (every copy the earlier version made) still serves --offline: an offline node
    that upgraded the tool is not sent online."""
    d, _rec, _doc = _as_an_earlier_version_left_it(env)
    out = env.tmp / "offline.json"
    run_download(env.opts("awq", local_dir=d, offline=True, output=out))
    assert WEIGHT in {f["path"] for f in json.loads(out.read_text())["files"]}


def test_output_naming_a_model_file_is_refused_not_written_over_it(env: Env) -> None:
    """The manifest was written over the config.json it had just verified (exit 0)."""
    from october.installer.core.errors import UsageError

    d = env.tmp / "m"
    with pytest.raises(UsageError, match="would be written over a file of the model copy"):
        run_download(env.opts("awq", local_dir=d, output=d / "config.json"))
    assert not (d / "config.json").exists()


def test_huggingface_hub_retry_warnings_carry_no_credentials(env: Env, monkeypatch: pytest.MonkeyPatch,
                                                              capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_ENDPOINT", env.hub.url.replace("http://", "http://alice:s3cretPW@"))
    env.hub.cut_after[(AWQ_REPO, WEIGHT)] = 5000          # an LFS file: its CDN URL is presigned
    env.hub.cut_after[(AWQ_REPO, "config.json")] = 100    # a hub file: its URL has the endpoint's userinfo
    run_download(env.opts("awq"))
    err = capfd.readouterr().err
    assert "Trying to resume" in err                       # the warnings were printed ...
    assert "s3cretPW" not in err and "X-Amz-Signature=fake" not in err, err   # ... masked


def test_a_bad_blob_in_the_users_hf_cache_does_not_break_every_download(env: Env,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants, snapshot_download

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(env.tmp / "users-hf-cache"))   # ~/.cache/huggingface/hub

    snap = Path(snapshot_download(AWQ_REPO, revision=AWQ_REV, allow_patterns=[WEIGHT], endpoint=env.hub.url))
    blob = (snap / WEIGHT).resolve()
    data = bytearray(blob.read_bytes()); data[200:216] = b"\0" * 16; blob.write_bytes(bytes(data))
    d = env.tmp / "m"
    for _ in range(2):                                     # the error says: re-run
        try:
            run_download(env.opts("awq", local_dir=d))
            return
        except OctoberError as exc:
            last = exc
    pytest.fail(f"every re-run fails on the HF cache's bad blob: {last}")


def test_a_malformed_offline_record_is_a_clean_error_and_moves_nothing(env: Env) -> None:
    d = env.tmp / "m"
    run_download(env.opts("awq", local_dir=d))
    rec = d / ".october" / "verified.json"
    r = json.loads(rec.read_text())
    for f in r["files"]:
        f["size"] = str(f["size"])
    rec.write_text(json.dumps(r))
    with pytest.raises(OctoberError):
        run_download(env.opts("awq", local_dir=d, offline=True, output=env.tmp / "b.json"))
    assert (d / WEIGHT).is_file(), "a record with string sizes moved every good file aside"


def test_which_recorded_patterns_show_a_copy_complete() -> None:
    """The review: a record written for broader patterns (``*.json``) covers each file the recipe names; a wildcard
    the record does not hold, or a named file an earlier version's record (no patterns) lacks, is not shown."""
    from october.installer.download.record import uncovered_patterns

    paths = {"config.json", "tokenizer.json", "model-00001-of-00002.safetensors"}
    assert uncovered_patterns(["config.json", "tokenizer.json", "*.safetensors"], ["*.json", "*.safetensors"], paths) == []
    assert uncovered_patterns(["vocab.json", "*.safetensors"], ["*.json", "*.safetensors"], paths) == []   # none on the hub
    assert uncovered_patterns(["config.json", "*.safetensors"], ["config.json"], paths) == ["*.safetensors"]
    assert uncovered_patterns(["merges.txt", "*.safetensors"], ["*.json", "*.safetensors"], paths) == ["merges.txt"]
    assert uncovered_patterns(["config.json", "merges.txt", "*.bin"], None, paths) == ["merges.txt", "*.bin"]
    assert uncovered_patterns(["config.json", "*.safetensors"], None, paths) == []
    assert uncovered_patterns(["config.json"], "config.json", paths) == ["config.json"]


def test_an_earlier_versions_record_lacking_a_named_file_is_refused(env: Env) -> None:
    """The review: a record without patterns was taken as complete (the hunt's narrower download in the same folder
    still gave a manifest of 4 of 9 files with exit 0 for a copy made before this version)."""
    d, rec, doc = _as_an_earlier_version_left_it(env)
    doc["files"] = [f for f in doc["files"] if f["path"] != "tokenizer.json"]
    rec.write_text(json.dumps(doc))
    out = env.tmp / "offline.json"
    with pytest.raises(OctoberError, match="tokenizer.json not covered"):
        run_download(env.opts("awq", local_dir=d, offline=True, output=out))
    assert not out.exists()


@pytest.mark.parametrize("path", ["../victim.safetensors", ".october/x.safetensors", ".cache/y.json"])
def test_a_record_naming_a_path_outside_the_copys_files_is_refused_by_name(env: Env, path: str) -> None:
    """A path outside the copy was renamed (to .corrupt-*), one in the tool's own folder taken for a model file."""
    d = env.tmp / "m"
    run_download(env.opts("awq", local_dir=d))
    rec = d / ".october" / "verified.json"
    doc = json.loads(rec.read_text())
    doc["files"].append({"path": path, "size": 1, "sha256": "0" * 64})
    rec.write_text(json.dumps(doc))
    with pytest.raises(OctoberError, match="malformed") as refused:
        run_download(env.opts("awq", local_dir=d, offline=True, output=env.tmp / "b.json"))
    assert path in str(refused.value)


def test_an_earlier_versions_record_that_passes_offline_is_not_made_to_vouch_for_the_patterns(env: Env) -> None:
    """The upgrade hunt: an earlier version's record (no patterns) that passed --offline by its files was written
    again with the recipe's patterns, so every later --offline run took it as complete (a shard its narrower
    recipe never fetched stayed missing for good)."""
    d, rec, _doc = _as_an_earlier_version_left_it(env)
    run_download(env.opts("awq", local_dir=d, offline=True, output=env.tmp / "o.json"))
    assert "patterns" not in json.loads(rec.read_text())
    run_download(env.opts("awq", local_dir=d, output=env.tmp / "online.json"))     # online: the patterns shown
    assert "patterns" in json.loads(rec.read_text())
