"""Plan, verification and manifest of `current download`, without any server."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.core.errors import DownloadError, FileSystemError, ReceiptError, RecipeError, UsageError
from october.installer.core.paths import default_cache_dir
from october.installer.core.schemas import load_schema
from october.installer.download import DownloadOptions, make_plan
from october.installer.download.manifest import SCHEMA_PATH, build_manifest, load_manifest, write_manifest
from october.installer.download.verify import Expected, VerifiedFile, digest_file, verify_files
from october.installer.recipe import load_recipe
from tests.download_server import git_blob_id
from tests.fixtures.root import PROJECT_ROOT
from tests.test_download_hub import AWQ_REPO, AWQ_REV, FP16_REPO, FP16_REV, PATTERNS, write_recipe


@pytest.fixture
def recipe(tmp_path: Path):
    return load_recipe(str(write_recipe(tmp_path / "recipe", awq_pins={"model-00001-of-00002.safetensors": "a" * 64})))


def opts(recipe, tmp_path: Path, **kw) -> DownloadOptions:
    base = dict(recipe=recipe, format="awq", output=tmp_path / "out.json", cache_dir=tmp_path / "cache")
    base.update(kw)
    return DownloadOptions(**base)


# ------------------------------------------------------------------------ plan


def test_plan_defaults(recipe, tmp_path: Path) -> None:
    plan = make_plan(opts(recipe, tmp_path), environ={})
    assert (plan.repo, plan.revision, plan.selection) == (AWQ_REPO, AWQ_REV, "awq")
    assert plan.patterns == tuple(PATTERNS)
    assert plan.local_dir == tmp_path / "cache" / "models" / "FakeOrg__Tiny-8B-AWQ" / AWQ_REV
    assert plan.default_local_dir and plan.fixtures is None and not plan.offline
    assert plan.pinned_sha256 == {"model-00001-of-00002.safetensors": "a" * 64}
    assert plan.recipe_name == "dltest" and plan.recipe_sha256 == recipe.sha256
    assert plan.output == tmp_path / "out.json"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.repo = "x/y"  # type: ignore[misc]


def test_plan_fp16_explicit_dirs_and_fixtures(recipe, tmp_path: Path) -> None:
    (tmp_path / "fx").mkdir()
    plan = make_plan(opts(recipe, tmp_path, format="fp16", local_dir=tmp_path / "m", fixtures=tmp_path / "fx",
                          offline=True), environ={"KNLP_KV_FIXTURES": "/ignored"})
    assert (plan.repo, plan.revision) == (FP16_REPO, FP16_REV)
    assert plan.local_dir == tmp_path / "m" and not plan.default_local_dir
    assert plan.fixtures == tmp_path / "fx" and plan.offline


def test_plan_fixtures_from_environment(recipe, tmp_path: Path) -> None:
    (tmp_path / "env-fx").mkdir()
    plan = make_plan(opts(recipe, tmp_path), environ={"KNLP_KV_FIXTURES": str(tmp_path / "env-fx")})
    assert plan.fixtures == tmp_path / "env-fx"


def test_plan_default_cache_dir_is_platformdirs(recipe, tmp_path: Path) -> None:
    plan = make_plan(opts(recipe, tmp_path, cache_dir=None), environ={})
    assert plan.cache_dir == default_cache_dir({}).absolute()
    assert plan.local_dir.parent.parent == default_cache_dir({}).absolute() / "models"
    plan = make_plan(opts(recipe, tmp_path, cache_dir=None), environ={"OCTOBER_CACHE_DIR": str(tmp_path / "oc")})
    assert plan.local_dir.parent.parent == tmp_path / "oc" / "models"


def test_plan_unknown_format(recipe, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="awq, fp16"):
        make_plan(opts(recipe, tmp_path, format="gguf"), environ={})


def test_plan_recipe_without_the_selection(tmp_path: Path) -> None:
    """A valid recipe that has no model for --format is a usage error (exit 2), not an invalid recipe; for a
    recipe of the user's own, adding the table is one of the ways out."""
    path = write_recipe(tmp_path / "r")
    text = path.read_text()
    path.write_text(text[:text.index("[models.fp16]")])
    with pytest.raises(UsageError) as info:
        make_plan(opts(load_recipe(str(path)), tmp_path, format="fp16"), environ={})
    msg = str(info.value)
    assert info.value.exit_code == 2 and "recipe 'dltest' has no fp16 model" in msg
    assert "awq" in msg and f"add [models.fp16] to {path}" in msg and "--recipe current" in msg


def test_a_shipped_recipe_without_models_is_a_usage_error_naming_the_recipes_that_have_one(tmp_path: Path) -> None:
    """Audit: `--format fp16 --recipe flashinfer-pr3812` (a FlashInfer-only recipe, valid, no models) was exit 3
    "recipe invalid" telling the user to edit the shipped recipe.  It is exit 2 naming recipes that have the model."""
    proc = subprocess.run([sys.executable, "-m", "october", "download", "--format", "fp16", "--recipe",
                           "flashinfer-pr3812", "--output", str(tmp_path / "o")], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert "recipe 'flashinfer-pr3812' has no fp16 model" in err and "Expected" in err and "found" in err
    assert "--recipe current" in err and "current recipes" in err
    assert "add [models" not in err and "invalid" not in err
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------- verify


def _files(root: Path) -> dict[str, bytes]:
    data = {"a.safetensors": b"weights" * 1000, "sub/b.safetensors": b"more" * 500, "config.json": b"{}"}
    for p, d in data.items():
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_bytes(d)
    return data


def test_digest_matches_sha256_and_git_blob(tmp_path: Path) -> None:
    data = _files(tmp_path)
    d = digest_file(tmp_path / "a.safetensors")
    assert d.sha256 == hashlib.sha256(data["a.safetensors"]).hexdigest()
    assert d.blob_id == git_blob_id(data["a.safetensors"])
    assert d.size == len(data["a.safetensors"])


def test_verify_all_good(tmp_path: Path) -> None:
    data = _files(tmp_path)
    exp = [Expected("a.safetensors", len(data["a.safetensors"]), hashlib.sha256(data["a.safetensors"]).hexdigest()),
           Expected("sub/b.safetensors", None, hashlib.sha256(data["sub/b.safetensors"]).hexdigest(), source="recipe"),
           Expected("config.json", 2, None, git_blob_id(b"{}"), source="hub-git-blob")]
    out = verify_files(tmp_path, exp, where="x@y")
    assert [(f.path, f.source) for f in out] == [("a.safetensors", "hub-lfs"), ("config.json", "hub-git-blob"),
                                                 ("sub/b.safetensors", "recipe")]


def test_verify_collects_every_problem_and_moves_bad_files_aside(tmp_path: Path) -> None:
    data = _files(tmp_path)
    forgotten: list[str] = []
    exp = [Expected("a.safetensors", None, "0" * 64),
           Expected("sub/b.safetensors", 1, hashlib.sha256(data["sub/b.safetensors"]).hexdigest()),
           Expected("config.json", 2, None, "1" * 40, source="hub-git-blob"),
           Expected("gone.safetensors", 5, "2" * 64)]
    with pytest.raises(DownloadError) as ei:
        verify_files(tmp_path, exp, where="org/m@rev", on_bad=forgotten.append)
    msg = str(ei.value)
    found_a = hashlib.sha256(data["a.safetensors"]).hexdigest()
    assert "4 files failed verification" in msg
    assert "0" * 64 in msg and found_a in msg and "1" * 40 in msg and "gone.safetensors" in msg
    assert "1 bytes" in msg and f"{len(data['sub/b.safetensors'])} bytes" in msg
    assert sorted(forgotten) == ["a.safetensors", "config.json", "sub/b.safetensors"]
    assert not (tmp_path / "a.safetensors").exists()
    assert (tmp_path / f"a.safetensors.corrupt-{found_a[:8]}").read_bytes() == data["a.safetensors"]
    assert not (tmp_path / "sub" / "b.safetensors").exists()
    assert not (tmp_path / "config.json").exists()


def test_verify_refuses_a_file_with_nothing_to_check_against(tmp_path: Path) -> None:
    _files(tmp_path)
    with pytest.raises(DownloadError, match="neither"):
        verify_files(tmp_path, [Expected("config.json", 2, None, None)], where="x@y")


# -------------------------------------------------------------------- manifest


def _manifest(recipe, tmp_path: Path) -> dict:
    plan = make_plan(opts(recipe, tmp_path), environ={})
    files = [VerifiedFile("config.json", 2, "b" * 64, "hub-git-blob"),
             VerifiedFile("model-00001-of-00002.safetensors", 10, "a" * 64, "recipe")]
    return build_manifest(plan, resolved_revision=AWQ_REV, files=files, scales=None,
                          endpoint="https://huggingface.co", created_at="2026-01-01T00:00:00Z")


def test_schema_is_valid_draft_2020_12() -> None:
    from jsonschema import Draft202012Validator

    schema = load_schema("download")
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA_PATH.parent.name == "receipts"


def test_manifest_shape_and_round_trip(recipe, tmp_path: Path) -> None:
    m = _manifest(recipe, tmp_path)
    for key in ("format_version", "kind", "recipe", "selection", "repo", "revision", "local_path", "files",
                "tool", "created_at", "scales"):
        assert key in m
    assert m["recipe"]["name"] == "dltest" and m["tool"]["name"] == "october"
    assert all(set(f) >= {"path", "size", "sha256"} for f in m["files"])
    out = tmp_path / "deep" / "m.json"
    write_manifest(out, m)
    assert load_manifest(out) == m
    assert not [p for p in out.parent.iterdir() if p.name != "m.json"]   # no temp file left


@pytest.mark.parametrize("mutate", [
    lambda m: m.pop("files"),
    lambda m: m.update(revision="main"),
    lambda m: m["files"][0].update(sha256="XYZ"),
    lambda m: m["files"][0].update(path="../escape"),
    lambda m: m.update(selection="gguf"),
    lambda m: m.update(scales={"path": "x"}),
    lambda m: m.update(resolved_revision="f" * 40),
])
def test_invalid_manifests_are_refused(recipe, tmp_path: Path, mutate) -> None:
    m = _manifest(recipe, tmp_path)
    mutate(m)
    with pytest.raises(ReceiptError):
        write_manifest(tmp_path / "m.json", m)
    assert not (tmp_path / "m.json").exists()


def test_manifest_with_a_secret_is_not_written(recipe, tmp_path: Path) -> None:
    m = _manifest(recipe, tmp_path)
    m["endpoint"] = "https://hf_secretsecret1234@example.invalid"
    with pytest.raises(ReceiptError, match="secret"):
        write_manifest(tmp_path / "m.json", m, secrets=["hf_secretsecret1234"])
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("placeholder", ["false", "null", "2026"])
def test_a_placeholder_token_is_not_taken_for_a_leak(recipe, tmp_path: Path, placeholder: str) -> None:
    """HF_TOKEN=false (null, a year) is in every manifest's own text ("offline": false): the whole download ran,
    then 'a token leaked, report this' (the download hunt).  A real token is far longer."""
    import json

    m = _manifest(recipe, tmp_path)
    assert placeholder in json.dumps(m, indent=2, sort_keys=True)      # false, null, the year of created_at
    write_manifest(tmp_path / "m.json", m, secrets=[placeholder])
    assert (tmp_path / "m.json").is_file()


def test_load_manifest_errors(tmp_path: Path) -> None:
    with pytest.raises(ReceiptError, match="current download"):
        load_manifest(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ReceiptError, match="not JSON"):
        load_manifest(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"kind": "something-else"}))
    with pytest.raises(ReceiptError, match="schema"):
        load_manifest(tmp_path / "other.json")


def test_output_is_a_directory_like_smoke_or_a_json_file(recipe, tmp_path: Path) -> None:
    """`--output DIR` writes DIR/<format>-download.json (the name smoke looks for); `--output X.json`
    is the file itself."""
    from october.installer.download.plan import manifest_path

    assert manifest_path(tmp_path, "awq") == tmp_path / "awq-download.json"
    assert manifest_path(tmp_path / "new-dir", "fp16") == tmp_path / "new-dir" / "fp16-download.json"
    assert manifest_path(tmp_path / "m.json", "awq") == tmp_path / "m.json"
    (tmp_path / "odd.json").mkdir()
    assert manifest_path(tmp_path / "odd.json", "awq") == tmp_path / "odd.json" / "awq-download.json"
    plan = make_plan(opts(recipe, tmp_path, output=tmp_path / "out"), environ={})
    assert plan.output == tmp_path / "out" / "awq-download.json"


def test_fixtures_pointing_nowhere_is_refused(recipe, tmp_path: Path) -> None:
    with pytest.raises(FileSystemError) as e:
        make_plan(opts(recipe, tmp_path, fixtures=tmp_path / "missing"), environ={})
    assert "--fixtures" in e.value.message and "nothing there" in e.value.message
    with pytest.raises(FileSystemError) as e:
        make_plan(opts(recipe, tmp_path), environ={"KNLP_KV_FIXTURES": str(tmp_path / "gone")})
    assert "$KNLP_KV_FIXTURES" in e.value.message and "unset it" not in e.value.message
    assert "kv_scales.json" in e.value.message and "cannot pass `current smoke`" in e.value.message


@pytest.mark.parametrize("value,why", [("huggingface.co", "scheme ''"), ("ftp://hub.example", "scheme 'ftp'"),
                                       ("https://", "no host name"), ("https://hub.example:port", "port"),
                                       ("https://user:s3cret@hub example", "white space")])
def test_a_malformed_hf_endpoint_is_a_usage_error_naming_it(value: str, why: str) -> None:
    from october.installer.download import hub

    with pytest.raises(UsageError) as info:
        hub.endpoint({"HF_ENDPOINT": value})
    text = info.value.message
    assert "HF_ENDPOINT is not a hub URL" in text and why.split("'")[0] in text and "unset it" in text
    assert "s3cret" not in text
    assert hub.endpoint({"HF_ENDPOINT": "http://127.0.0.1:8080/"}) == "http://127.0.0.1:8080"
    assert hub.endpoint({}) == "https://huggingface.co"


def test_download_with_a_malformed_hf_endpoint_exits_2(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.fixtures.root import PROJECT_ROOT

    proc = subprocess.run([sys.executable, "-m", "october", "download", "--format", "awq", "--output",
                           str(tmp_path)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, HF_ENDPOINT="hub.internal:8080"))
    assert proc.returncode == 2 and "HF_ENDPOINT is not a hub URL" in proc.stderr
    assert "unexpected failure" not in proc.stderr and not list(tmp_path.iterdir())


def test_one_pass_digests_agree_with_huggingface_hubs_own_checksums(tmp_path: Path) -> None:
    """Our digest (sha256 and git blob id in one read) computes what huggingface_hub's verification
    (`hf cache verify`) computes; this fails if either side changes its definition."""
    import os

    from huggingface_hub.utils.sha import git_hash, sha_fileobj

    for size in (0, 1, 4096, (1 << 20) + 17):
        data = os.urandom(size)
        f = tmp_path / f"f{size}"
        f.write_bytes(data)
        d = digest_file(f)
        with open(f, "rb") as fh:
            assert d.sha256 == sha_fileobj(fh).hex()
        assert d.blob_id == git_hash(data) and d.size == size
