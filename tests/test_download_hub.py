"""`current download` end to end against a loopback hub (tests/download_server.py).

Nothing is mocked inside the tool: run_download drives the real huggingface_hub
(model_info + snapshot_download) over HTTP. What cannot exist here is the real
hub, so a local server stands in for it: it speaks the endpoints and headers
huggingface_hub 2.4 uses (see the server's docstring). HF_TOKEN is set to a
random planted value in every test; no output may contain it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from october.checks.scales import write_scales
from october.installer.core.errors import DownloadError, ScalesError
from october.installer.download import DownloadOptions, load_manifest, run_download
from october.installer.download.manifest import validate_manifest
from october.installer.recipe import load_recipe
from tests.test_disk_full import full_dir  # noqa: F401  (the filled tmpfs fixture)
from tests.download_server import FakeHub, FakeRepo, model_files, running, safetensors_blob

AWQ_REPO = "FakeOrg/Tiny-8B-AWQ"
FP16_REPO = "FakeOrg/Tiny-8B"
AWQ_REV = "4da05a8edb55c6046cce958586c33b61da07bb79"
FP16_REV = "b968826d9c46dd6066d109eabc6255188de91218"
NUM_LAYERS = 4
PATTERNS = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "vocab.json", "merges.txt", "model.safetensors.index.json", "*.safetensors"]
WEIGHT = "model-00001-of-00002.safetensors"


def write_recipe(root: Path, *, awq_rev: str = AWQ_REV, awq_pins: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "forks.toml").write_text(
        'format_version = 1\n[forks.flashinfer]\nurl = "https://example.invalid/flashinfer.git"\n'
        f'[forks.flashinfer.pins]\nk16v8 = "{"a" * 40}"\n')
    pats = ", ".join(json.dumps(p) for p in PATTERNS)
    text = (f'format_version = 1\nname = "dltest"\nforks_file = "forks.toml"\n'
            f'[python]\nversion = "3.12.11"\n[torch]\nversion = "2.4.0"\n'
            f'[[forks]]\nname = "flashinfer"\npin = "k16v8"\n'
            f'[models.awq]\nrepo = "{AWQ_REPO}"\nrevision = "{awq_rev}"\npatterns = [{pats}]\n')
    if awq_pins:
        text += "[models.awq.sha256]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in awq_pins.items())
    text += f'[models.fp16]\nrepo = "{FP16_REPO}"\nrevision = "{FP16_REV}"\npatterns = [{pats}]\n'
    path = root / "dltest.toml"
    path.write_text(text)
    return path


@dataclass
class Env:
    hub: FakeHub
    tmp: Path
    token: str
    awq: FakeRepo
    fp16: FakeRepo

    def opts(self, fmt: str = "awq", *, recipe: Path | None = None, **kw: object) -> DownloadOptions:
        rec = load_recipe(str(recipe or write_recipe(self.tmp / "recipe")))
        base = dict(recipe=rec, format=fmt, output=self.tmp / f"{fmt}-download.json", local_dir=None,
                    cache_dir=self.tmp / "cache", offline=False, fixtures=None, quiet=True)
        base.update(kw)
        return DownloadOptions(**base)  # type: ignore[arg-type]

    def local_dir(self, fmt: str = "awq") -> Path:
        repo, rev = (AWQ_REPO, AWQ_REV) if fmt == "awq" else (FP16_REPO, FP16_REV)
        return self.tmp / "cache" / "models" / repo.replace("/", "__") / rev


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    token = "hf_" + secrets.token_hex(16)
    hub = FakeHub()
    files, lfs = model_files(num_layers=NUM_LAYERS, seed=1, quant="awq")
    awq = hub.add(FakeRepo(AWQ_REPO, AWQ_REV, files, lfs))
    files, lfs = model_files(num_layers=NUM_LAYERS, seed=2)
    fp16 = hub.add(FakeRepo(FP16_REPO, FP16_REV, files, lfs))
    # huggingface_hub's log handler keeps the sys.stderr of the test that first used it (pytest
    # closes that stream afterwards); write to the real fd 2, which pytest's fd capture still sees.
    import huggingface_hub.utils.logging  # noqa: F401 - sets up the library's handler
    for h in logging.getLogger("huggingface_hub").handlers:
        if isinstance(h, logging.StreamHandler):
            monkeypatch.setattr(h, "stream", sys.__stderr__)
    with running(hub):
        for k, v in {"HF_ENDPOINT": hub.url, "HF_TOKEN": token, "HF_HOME": str(tmp_path / "hf_home"),
                     "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_ENABLE_HF_TRANSFER": "0",
                     "HF_HUB_DISABLE_XET": "1", "NO_PROXY": "127.0.0.1,localhost",
                     "no_proxy": "127.0.0.1,localhost"}.items():
            monkeypatch.setenv(k, v)
        for k in ("HF_HUB_OFFLINE", "KNLP_KV_FIXTURES", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                  "http_proxy", "https_proxy", "all_proxy", "HUGGING_FACE_HUB_TOKEN"):
            monkeypatch.delenv(k, raising=False)
        yield Env(hub, tmp_path, token, awq, fp16)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assert_no_token(env: Env, *texts: str) -> None:
    for t in texts:
        assert env.token not in t
    for f in env.tmp.rglob("*"):
        if f.is_file() and not f.is_symlink():
            assert env.token.encode() not in f.read_bytes(), f"token leaked into {f}"


# ------------------------------------------------------------------ happy path


def test_happy_path_writes_a_valid_manifest(env: Env, capfd: pytest.CaptureFixture[str]) -> None:
    out = run_download(env.opts("awq", quiet=False))
    assert out == env.tmp / "awq-download.json"
    m = json.loads(out.read_text())
    validate_manifest(m)
    assert load_manifest(out) == m
    assert m["kind"] == "october-download-manifest" and m["format_version"] == 1
    assert (m["selection"], m["repo"], m["revision"], m["resolved_revision"]) == ("awq", AWQ_REPO, AWQ_REV, AWQ_REV)
    assert m["recipe"]["name"] == "dltest" and len(m["recipe"]["sha256"]) == 64
    assert m["tool"]["name"] == "october" and m["tool"]["version"]
    assert m["local_path"] == str(env.local_dir("awq"))
    assert m["scales"] is None
    wanted = sorted(p for p in env.awq.files if not p.startswith(("README", ".git", "original/")))
    assert [f["path"] for f in m["files"]] == wanted
    for f in m["files"]:
        data = env.awq.files[f["path"]]
        assert (f["size"], f["sha256"]) == (len(data), sha(data))
        assert (Path(m["local_path"]) / f["path"]).read_bytes() == data
        assert f["verified_against"] == ("hub-lfs" if f["path"] in env.awq.lfs else "hub-git-blob")
    # files outside the patterns were never fetched
    assert not (env.local_dir() / "README.md").exists()
    assert not env.hub.gets_of("README.md")
    # the hub got the token, the CDN never did
    assert all(s.authorization == f"Bearer {env.token}" for s in env.hub.requests("hub"))
    assert env.hub.requests("cdn") and all(s.authorization is None for s in env.hub.requests("cdn"))
    cap = capfd.readouterr()
    assert "current smoke` will need them" in cap.err
    assert (env.tmp / "cache" / "models" / "CACHEDIR.TAG").is_file()
    assert_no_token(env, cap.out, cap.err)


def test_fp16_selection_and_rerun_fetches_nothing(env: Env) -> None:
    run_download(env.opts("fp16"))
    m = json.loads((env.tmp / "fp16-download.json").read_text())
    assert (m["repo"], m["revision"]) == (FP16_REPO, FP16_REV)
    n_get = len(env.hub.requests(method="GET"))
    run_download(env.opts("fp16"))   # complete copy: no file body is fetched again
    new = env.hub.requests(method="GET")[n_get:]
    assert not [s for s in new if "/resolve/" in s.path or s.server == "cdn"]


def test_explicit_local_dir(env: Env) -> None:
    target = env.tmp / "elsewhere" / "awq"
    run_download(env.opts("awq", local_dir=target))
    m = json.loads((env.tmp / "awq-download.json").read_text())
    assert m["local_path"] == str(target)
    assert (target / WEIGHT).read_bytes() == env.awq.files[WEIGHT]


# -------------------------------------------------------------------- failures


def test_corrupt_file_on_server_fails_and_is_moved_aside(env: Env) -> None:
    env.hub.corrupt.add((AWQ_REPO, WEIGHT))
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq"))
    msg = str(ei.value)
    good = sha(env.awq.files[WEIGHT])
    bad = sha(env.hub.served_bytes(env.awq, WEIGHT))
    assert WEIGHT in msg and good in msg and bad in msg
    d = env.local_dir()
    assert not (d / WEIGHT).exists()
    assert (d / f"{WEIGHT}.corrupt-{bad[:8]}").is_file()
    assert not (env.tmp / "awq-download.json").exists()
    # the server is fixed: a re-run fetches that file again (and only that one) and succeeds
    env.hub.corrupt.clear()
    n = len(env.hub.seen)
    run_download(env.opts("awq"))
    assert (d / WEIGHT).read_bytes() == env.awq.files[WEIGHT]
    refetched = [s.path for s in env.hub.seen[n:] if s.method == "GET" and (s.server == "cdn" or "/resolve/" in s.path)]
    assert refetched == [f"/repos/{AWQ_REPO.replace('/', '__')}/{good}"]


def test_transfer_cut_mid_file_resumes_with_range(env: Env) -> None:
    # huggingface_hub writes what it received in DOWNLOAD_CHUNK_SIZE (10 MiB) pieces, so the cut must
    # come after the first piece for a resume to have something to resume from: an 11 MiB shard.
    from huggingface_hub import constants

    chunk = constants.DOWNLOAD_CHUNK_SIZE
    env.awq.files[WEIGHT] = safetensors_blob(random.Random(3), {"w": (1, chunk // 2 + 512 * 1024)})
    size = len(env.awq.files[WEIGHT])
    cut = chunk + 100_000
    env.hub.cut_after[(AWQ_REPO, WEIGHT)] = cut
    run_download(env.opts("awq"))
    gets = [s for s in env.hub.requests("cdn", "GET") if s.path.endswith(sha(env.awq.files[WEIGHT]))]
    assert [s.range for s in gets] == [None, f"bytes={chunk}-"]
    sent = env.hub.body_bytes[(AWQ_REPO, WEIGHT)]
    assert sent == cut + (size - chunk) and sent < 2 * size
    assert (env.local_dir() / WEIGHT).read_bytes() == env.awq.files[WEIGHT]


def test_unknown_revision(env: Env) -> None:
    missing = "0" * 40
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", recipe=write_recipe(env.tmp / "r2", awq_rev=missing)))
    msg = str(ei.value)
    assert missing in msg and "does not exist" in msg and "revision" in msg
    assert not (env.tmp / "awq-download.json").exists()


def test_hub_resolving_another_revision_is_refused(env: Env) -> None:
    env.hub.report_sha[AWQ_REPO] = "f" * 40
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq"))
    assert AWQ_REV in str(ei.value) and "f" * 40 in str(ei.value)
    assert not env.hub.requests("cdn")


def test_gated_repository_says_to_log_in(env: Env, capfd: pytest.CaptureFixture[str]) -> None:
    env.awq.gated = True
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq"))
    msg = str(ei.value)
    assert "hf auth login" in msg and "HF_TOKEN" in msg and "gated" in msg
    assert env.token not in msg
    assert any(s.path.endswith("/resolve/" + AWQ_REV + "/config.json") for s in env.hub.requests("hub"))
    cap = capfd.readouterr()
    assert_no_token(env, msg, cap.out, cap.err)


def test_a_second_download_into_the_same_directory_is_refused(env: Env) -> None:
    """The scenario hunt: it exited 15, while `current --help` keeps 5 for "busy" (StackLockedError's code)."""
    from filelock import FileLock

    from october.installer.core.errors import DownloadBusyError

    d = env.local_dir()
    (d / ".october").mkdir(parents=True)       # the lock is inside the directory it guards, never beside it
    with FileLock(str(d / ".october" / "download.lock")):
        with pytest.raises(DownloadBusyError, match="another download") as ei:
            run_download(env.opts("awq"))
    assert ei.value.exit_code == 5 and ei.value.fix
    assert not env.hub.seen


def test_unknown_repository(env: Env) -> None:
    del env.hub.repos[AWQ_REPO]
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq"))
    assert AWQ_REPO in str(ei.value) and "not found" in str(ei.value)


def test_hub_unreachable(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")   # discard port: connection refused
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq"))
    assert "could not reach the hub" in str(ei.value) and "--offline" in str(ei.value)


def test_a_hub_answering_with_a_page_instead_of_json_is_named_as_such(env: Env) -> None:
    """Audit: a hub (a proxy's login page) answering 200 with HTML gave "unexpected failure ... Found Expecting
    value: line 1 column 1", no expectation, no fix.  Now: the hub's JSON was expected, the page's first bytes
    were found, check HF_ENDPOINT and the proxy."""
    env.hub.api_page = "<!DOCTYPE html><html><title>Proxy login</title><body>Sign in</body></html>"
    with pytest.raises(DownloadError) as info:
        run_download(env.opts("awq"))
    msg = str(info.value)
    assert info.value.exit_code == 15 and "unexpected failure" not in msg
    assert "did not answer with JSON" in msg and "Expected the hub's JSON" in msg, msg
    assert "<!DOCTYPE html><html><title>Proxy login" in msg and "HF_ENDPOINT" in msg and "proxy" in msg
    assert env.hub.url in msg


@pytest.mark.parametrize("body", ["[]", "{}", "null", '"signed out"'])
def test_a_hub_answering_json_that_is_no_model_listing_is_named_as_such(env: Env, body: str) -> None:
    """JSON that huggingface_hub cannot read as a model (a list, an empty object) was a TypeError or KeyError
    out of the tool (a traceback on the command line)."""
    env.hub.api_page = body
    with pytest.raises(DownloadError) as info:
        run_download(env.opts("awq"))
    msg = str(info.value)
    assert info.value.exit_code == 15 and "JSON that is not a model listing" in msg and "HF_ENDPOINT" in msg, msg


def test_recipe_pinned_sha256_wins_over_the_hub(env: Env) -> None:
    wrong = "0" * 64
    rec = write_recipe(env.tmp / "r3", awq_pins={WEIGHT: wrong})
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", recipe=rec))
    assert wrong in str(ei.value) and WEIGHT in str(ei.value)
    right = sha(env.awq.files[WEIGHT])
    rec = write_recipe(env.tmp / "r4", awq_pins={WEIGHT: right})
    run_download(env.opts("awq", recipe=rec))
    m = json.loads((env.tmp / "awq-download.json").read_text())
    f = next(f for f in m["files"] if f["path"] == WEIGHT)
    assert (f["sha256"], f["verified_against"]) == (right, "recipe")


# --------------------------------------------------------------------- offline


def test_offline_reverifies_a_complete_copy_without_network(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    run_download(env.opts("awq"))
    first = json.loads((env.tmp / "awq-download.json").read_text())
    n = len(env.hub.seen)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    out = run_download(env.opts("awq", offline=True, output=env.tmp / "offline.json"))
    assert len(env.hub.seen) == n
    m = json.loads(out.read_text())
    assert m["offline"] is True
    assert [(f["path"], f["sha256"]) for f in m["files"]] == [(f["path"], f["sha256"]) for f in first["files"]]


def test_offline_detects_a_tampered_copy(env: Env) -> None:
    run_download(env.opts("awq"))
    target = env.local_dir() / WEIGHT
    data = bytearray(target.read_bytes())
    data[-1] ^= 0x01
    target.write_bytes(bytes(data))
    n = len(env.hub.seen)
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", offline=True, output=env.tmp / "offline.json"))
    assert len(env.hub.seen) == n
    msg = str(ei.value)
    assert WEIGHT in msg and sha(env.awq.files[WEIGHT]) in msg and sha(bytes(data)) in msg
    assert not target.exists()
    assert not (env.tmp / "offline.json").exists()
    # back online, the bad file is fetched again
    run_download(env.opts("awq"))
    assert target.read_bytes() == env.awq.files[WEIGHT]


def test_offline_without_a_copy(env: Env) -> None:
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", offline=True))
    assert "without --offline" in str(ei.value)
    assert not env.hub.seen


# ---------------------------------------------------------------------- scales


def _scales(env: Env, *, repo: str = AWQ_REPO, rev: str = AWQ_REV, values: list[float] | None = None) -> Path:
    fixtures = env.tmp / "fixtures"
    write_scales(fixtures / f"{AWQ_REPO.replace('/', '__')}.kv_scales.json", repo=repo, revision=rev,
                 v_scales=values if values is not None else [0.01 * (i + 1) for i in range(NUM_LAYERS)])
    return fixtures


def test_valid_scales_are_recorded(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    fixtures = _scales(env)
    monkeypatch.setenv("KNLP_KV_FIXTURES", str(fixtures))
    run_download(env.opts("awq"))
    m = json.loads((env.tmp / "awq-download.json").read_text())
    p = fixtures / f"{AWQ_REPO.replace('/', '__')}.kv_scales.json"
    assert m["scales"] == {"path": str(p), "sha256": sha(p.read_bytes()), "num_layers": NUM_LAYERS}


@pytest.mark.parametrize("case", ["wrong-model", "wrong-revision", "nan", "zero", "layers"])
def test_bad_scales_are_refused(env: Env, case: str) -> None:
    kw: dict = {
        "wrong-model": {"repo": FP16_REPO},
        "wrong-revision": {"rev": "1" * 40},
        "nan": {"values": [0.01, math.nan, 0.01, 0.01]},
        "zero": {"values": [0.01, 0.0, 0.01, 0.01]},
        "layers": {"values": [0.01] * (NUM_LAYERS + 1)},
    }[case]
    fixtures = _scales(env, **kw)
    with pytest.raises(ScalesError) as ei:
        run_download(env.opts("awq", fixtures=fixtures))
    msg = str(ei.value)
    expect = {"wrong-model": FP16_REPO, "wrong-revision": "1" * 40, "nan": "nan", "zero": "positive",
              "layers": "num_layers"}[case]
    assert expect in msg
    assert not (env.tmp / "awq-download.json").exists()


def test_missing_scales_file_is_refused(env: Env) -> None:
    (env.tmp / "empty-fixtures").mkdir()
    with pytest.raises(ScalesError):
        run_download(env.opts("awq", fixtures=env.tmp / "empty-fixtures"))


# ----------------------------------------------------------------- secrets


def test_planted_token_appears_nowhere(env: Env, capfd: pytest.CaptureFixture[str]) -> None:
    """Success, a corrupt file, a gated repo and offline: the token is in no output or file."""
    run_download(env.opts("awq", quiet=False))
    env.hub.corrupt.add((FP16_REPO, WEIGHT))
    with pytest.raises(DownloadError) as e1:
        run_download(env.opts("fp16", quiet=False))
    env.fp16.gated = True
    (env.local_dir("fp16") / "config.json").unlink()
    with pytest.raises(DownloadError) as e2:
        run_download(env.opts("fp16", quiet=False))
    run_download(env.opts("awq", offline=True, quiet=False, output=env.tmp / "off.json"))
    cap = capfd.readouterr()
    assert_no_token(env, cap.out, cap.err, str(e1.value), str(e2.value), repr(e1.value), repr(e2.value))
    assert env.token not in json.dumps(json.loads((env.tmp / "awq-download.json").read_text()))


def test_download_and_hashing_report_their_bytes(env: Env) -> None:
    """The bars: huggingface_hub's own byte counts are forwarded (its bars draw nothing), and the
    sha256 pass reports every byte it reads; both end at their totals."""
    calls: dict[str, list[tuple[float, float | None]]] = {}
    run_download(env.opts("awq", quiet=False), bars=lambda label, done, total: calls.setdefault(label, []).append(
        (done, total)))
    wanted = sum(len(d) for p, d in env.awq.files.items() if not p.startswith(("README", ".git", "original/")))
    assert set(calls) == {"model files", "sha256"}
    assert calls["sha256"][-1] == (wanted, wanted)
    done, total = calls["model files"][-1]
    assert done == total and total >= wanted


# ------------------------------------------------------------- unwritable paths


def _works(argv: list[str]) -> bool:
    import shutil
    import subprocess

    if shutil.which(argv[0]) is None:
        return False
    return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0


def _read_only_argv(directory: Path, argv: list[str]) -> list[str]:
    """``argv`` run so that ``directory`` cannot be written: as root, a read-only bind mount in a mount
    namespace of its own (``unshare -m``), else root without CAP_DAC_OVERRIDE (``setpriv``) on a 0555
    directory; not root, a 0555 directory.  Skipped where none of these works."""
    import os
    import shlex

    if os.geteuid() != 0:
        directory.chmod(0o555)
        return argv
    if _works(["unshare", "-m", "true"]):
        d = shlex.quote(str(directory))
        script = (f"mount --bind {d} {d} && mount -o remount,bind,ro {d} && exec "
                  + " ".join(shlex.quote(a) for a in argv))
        return ["unshare", "-m", "sh", "-c", script]
    drop = ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override"]
    if _works([*drop, "true"]):
        directory.chmod(0o555)
        return [*drop, *argv]
    pytest.skip("no way to make a directory read-only for root here (unshare -m and setpriv refused)")


@pytest.mark.parametrize("option", ["--output", "--local-dir"])
def test_an_unwritable_output_or_local_dir_is_exit_19_before_anything_is_fetched(env: Env, option: str) -> None:
    """Audit: a read-only --output failed only after the whole model was downloaded and hashed, naming an
    internal temp file (``.awq-download.json.<random>.tmp``); --local-dir ro/m named ``ro/.m.lock``.  Now
    the paths are checked with the options: exit 19 naming the option and the directory, nothing fetched."""
    import subprocess

    from tests.fixtures.root import PROJECT_ROOT

    ro = env.tmp / "ro"
    ro.mkdir()
    recipe = write_recipe(env.tmp / "recipe")
    given = {"--output": ["--output", str(ro)],
             "--local-dir": ["--local-dir", str(ro / "m"), "--output", str(env.tmp / "out")]}[option]
    argv = [sys.executable, "-m", "october", "download", "--format", "awq", "--recipe", str(recipe),
            "--cache-dir", str(env.tmp / "cache"), *given]
    try:
        proc = subprocess.run(_read_only_argv(ro, argv), cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=300)
    finally:
        ro.chmod(0o755)
    assert proc.returncode == 19, proc.stderr
    assert option in proc.stderr and str(ro) in proc.stderr, proc.stderr
    assert "writable directory" in proc.stderr and ".tmp" not in proc.stderr and ".lock" not in proc.stderr
    assert env.hub.requests() == [], "the hub was asked before the paths were checked"
    assert list(ro.iterdir()) == []


def test_download_progress_has_one_total_from_the_listing_and_only_rises(env: Env) -> None:
    """Audit: in a pipe the percentage went 100%, 80%, 90%, 60%, 100%, 0% ... while the total grew (852 bytes
    -> 5.4 kB -> 268 MB): huggingface_hub adds each file's size to its bar as the file starts.  Every size is
    known from the hub's listing first: one total, set before any byte, and a count that never goes back."""
    wanted = sum(len(d) for p, d in env.awq.files.items() if not p.startswith(("README", ".git", "original/")))
    env.hub.cut_after[(AWQ_REPO, WEIGHT)] = 5000          # a resumed file too
    for run in range(2):                                   # the second run finds every file complete
        calls: list[tuple[float, float | None]] = []
        run_download(env.opts("awq", quiet=False), bars=lambda label, done, total: calls.append((done, total))
                     if label == "model files" else None)
        assert calls[0] == (0, wanted), run
        assert {t for _, t in calls} == {wanted}, run
        dones = [d for d, _ in calls]
        assert dones == sorted(dones) and dones[-1] == wanted, run


def test_download_progress_in_a_pipe_only_rises(env: Env) -> None:
    """The same, as a user sees it: `current download` with stderr in a pipe prints tenths of one total."""
    import re
    import subprocess

    from tests.fixtures.root import PROJECT_ROOT

    recipe = write_recipe(env.tmp / "recipe")
    proc = subprocess.run([sys.executable, "-m", "october", "download", "--format", "awq", "--recipe", str(recipe),
                           "--cache-dir", str(env.tmp / "cache"), "--output", str(env.tmp / "o")],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = re.findall(r"model files: (\d+)% \(([\d.]+) of ([\d.]+) MB\)", proc.stderr)
    assert lines, proc.stderr
    assert len({total for _, _, total in lines}) == 1, lines
    percents = [int(p) for p, _, _ in lines]
    assert percents == sorted(percents) and percents[-1] == 100, lines


# ------------------------------------------------- the model directory: ours, and nothing beside the pin


def test_a_local_dir_holding_files_of_the_users_is_refused_and_left_as_it_was(env: Env) -> None:
    """The scenario hunt: ``--local-dir`` at a directory with the user's own ``config.json`` and a shard
    overwrote both with the hub's bytes, rc 0.  Now a directory that is not new, empty or one a download made
    (``.october/``) is refused before the hub is asked; new and empty ones still work."""
    mine = env.tmp / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "precious config"}')
    (mine / WEIGHT).write_bytes(b"mine")
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", local_dir=mine))
    assert "holds files no download made" in str(ei.value) and "config.json" in str(ei.value)
    assert ei.value.fix and "--model-dir" in ei.value.fix
    assert (mine / "config.json").read_text() == '{"my": "precious config"}' and (mine / WEIGHT).read_bytes() == b"mine"
    assert sorted(p.name for p in mine.iterdir()) == ["config.json", WEIGHT]
    assert not env.hub.seen
    empty = env.tmp / "empty"
    empty.mkdir()
    run_download(env.opts("awq", local_dir=empty))
    run_download(env.opts("awq", local_dir=empty))        # its own: a re-run is fine
    assert (empty / WEIGHT).read_bytes() == env.awq.files[WEIGHT]
    # the lock lives inside the directory given, nothing is written beside it
    assert sorted(p.name for p in env.tmp.iterdir() if p.name.startswith(".")) == []
    assert (empty / ".october" / "download.lock").exists()


@pytest.mark.parametrize("layout", ["hf-download", "mount-point", "older-version"])
def test_a_local_dir_a_download_made_or_a_bare_mount_point_is_taken(env: Env, layout: str) -> None:
    """The review: ``hf download --local-dir`` (its ``.cache/huggingface/download/``), a fresh filesystem's
    ``lost+found``, and an earlier version's unfinished download (its files, the hub's bookkeeping, no
    ``.october/``) are not a user's own files."""
    d = env.tmp / "dl"
    d.mkdir()
    if layout == "mount-point":
        (d / "lost+found").mkdir()
    else:
        (d / ".cache" / "huggingface" / "download").mkdir(parents=True)
        (d / "config.json").write_bytes(env.awq.files["config.json"])
    run_download(env.opts("awq", local_dir=d))
    assert (d / WEIGHT).read_bytes() == env.awq.files[WEIGHT]


def test_a_refused_local_dir_names_how_to_adopt_it(env: Env) -> None:
    d = env.tmp / "mine"
    d.mkdir()
    (d / "config.json").write_bytes(env.awq.files["config.json"])
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", local_dir=d))
    assert f"mkdir {d / '.october'}" in (ei.value.fix or "")
    (d / ".october").mkdir()
    run_download(env.opts("awq", local_dir=d))


@pytest.mark.parametrize("offline", [False, True])
@pytest.mark.parametrize("extra", ["model-00003-of-00003.safetensors", "sub/stale.safetensors",
                                   "x.corrupt-.safetensors", "special_tokens_map.json", "chat_template.jinja"])
def test_a_file_the_pin_does_not_list_is_refused_in_a_local_dir(env: Env, offline: bool, extra: str) -> None:
    """The scenario hunt: a shard of another revision beside the pinned ones was accepted online and
    ``--offline``; vLLM loads every ``*.safetensors`` of a directory without an index, and its tokenizer reads
    files the patterns may not select (the review).  In a --local-dir the tool downloads into nothing else may
    be: refused, named, left in place; once it is gone the same command passes.  Only the names the tool gives
    a bad file it moved aside are let through (the review: ``x.corrupt-.safetensors`` was)."""
    d = env.tmp / "models" / "awq"
    run_download(env.opts("awq", local_dir=d))
    planted = d / extra
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_bytes(b"junk")
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", local_dir=d, offline=offline, output=env.tmp / "again.json"))
    assert extra in str(ei.value) and "does not list" in str(ei.value), str(ei.value)
    assert planted.read_bytes() == b"junk" and not (env.tmp / "again.json").exists()
    planted.unlink()
    run_download(env.opts("awq", local_dir=d, offline=offline, output=env.tmp / "again.json"))


@pytest.mark.parametrize("offline", [False, True])
def test_in_the_caches_own_folder_what_another_selection_left_is_set_aside(env: Env, offline: bool) -> None:
    """The review: the cache's folder is keyed on repository and revision, so two recipes pinning one model
    with other patterns share it, and the narrower one was refused files the wider one fetched.  There (the
    tool's own folder, no user's files) they are set aside under ``.october/set-aside/``, named."""
    run_download(env.opts("awq"))
    left = env.local_dir() / "preprocessor_config.json"
    left.write_text("{}")
    run_download(env.opts("awq", offline=offline, output=env.tmp / "again.json"))
    assert not left.exists() and (env.local_dir() / ".october" / "set-aside" / "preprocessor_config.json").is_file()


def test_the_manifest_written_into_the_model_folder_is_not_an_extra_file(env: Env) -> None:
    """The review: ``--local-dir D --output D`` put the manifest in D, and the re-run refused its own manifest."""
    d = env.tmp / "m"
    run_download(env.opts("awq", local_dir=d, output=d / "awq-download.json"))
    run_download(env.opts("awq", local_dir=d, output=d / "awq-download.json"))
    from october.installer.download.copycheck import check_copy

    check_copy(load_manifest(d / "awq-download.json"), redo="run it again", path=d / "awq-download.json")


def test_offline_names_the_way_back_for_a_tampered_file(env: Env) -> None:
    """The scenario hunt: ``--offline``'s fix said "re-run the download", which offline cannot fetch."""
    run_download(env.opts("awq"))
    target = env.local_dir() / WEIGHT
    target.write_bytes(b"changed")
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", offline=True, output=env.tmp / "offline.json"))
    assert ei.value.fix and "without --offline" in ei.value.fix


# ------------------------------------------------------------ the scenario hunt: shared cache, kill, full


@pytest.mark.parametrize("offline", [False, True])
@pytest.mark.parametrize("path", ["config.json", WEIGHT])        # a plain git file (blob id), an LFS one
def test_a_wrong_pin_leaves_the_hubs_good_file_in_a_shared_cache(env: Env, offline: bool, path: str) -> None:
    """The scenario hunt: recipe A filled cache CX; recipe B (same repo and revision, a wrong pin for config.json)
    with CX exited 15 and renamed A's good file to ``config.json.corrupt-<hex>``, so A ``--offline`` then failed.
    A file that is the hub's own (its record matches) is a pin conflict, named as such, and stays in place."""
    run_download(env.opts("awq"))
    good = env.local_dir() / path
    wrong = "0" * 64
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", recipe=write_recipe(env.tmp / "b", awq_pins={path: wrong}), offline=offline,
                              output=env.tmp / "b.json"))
    msg = str(ei.value)
    assert ei.value.exit_code == 15 and path in msg and wrong in msg and sha(env.awq.files[path]) in msg, msg
    assert "the recipe's pin is wrong" in msg and "left in place" in (ei.value.fix or ""), msg
    assert good.read_bytes() == env.awq.files[path]
    assert not list(good.parent.glob(f"{good.name}.corrupt-*"))
    run_download(env.opts("awq", offline=True, output=env.tmp / "a-again.json"))    # A's copy is whole


def test_a_wrong_pin_and_a_file_matching_neither_is_still_set_aside(env: Env) -> None:
    run_download(env.opts("awq"))
    target = env.local_dir() / "config.json"
    target.write_bytes(b'{"tampered": true}')
    with pytest.raises(DownloadError) as ei:
        run_download(env.opts("awq", recipe=write_recipe(env.tmp / "b", awq_pins={"config.json": "0" * 64}),
                              offline=True, output=env.tmp / "b.json"))
    assert "moved aside" in str(ei.value) and not target.exists()
    assert list(target.parent.glob("config.json.corrupt-*"))


def test_a_killed_downloads_partial_file_is_removed_by_the_next_run(env: Env) -> None:
    """The scenario hunt: kill -9 mid-file left ``<hash>.<etag>.<random>.incomplete`` in
    ``.cache/huggingface/download/`` for good (huggingface_hub writes to a file of that process alone and
    never reuses it), and the hub-unreachable fix said "re-running resumes".  The partial is planted as
    huggingface_hub names it; the next run removes it, fetches the file whole, and the message says the truth."""
    from huggingface_hub._local_folder import get_local_download_paths

    d = env.local_dir()
    etag = sha(env.awq.files[WEIGHT])
    inc = get_local_download_paths(d, WEIGHT).incomplete_path(etag)
    partial = inc.with_name(f"{inc.stem}.0123abcd.incomplete")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(env.awq.files[WEIGHT][:1000])
    run_download(env.opts("awq"))
    assert (d / WEIGHT).read_bytes() == env.awq.files[WEIGHT]
    assert not list((d / ".cache").rglob("*.incomplete")), "a stale partial file was left behind"
    import httpx2

    from october.installer.download.hub import _map_error

    fix = _map_error(httpx2.ConnectError("refused"), AWQ_REPO, AWQ_REV, "downloading the model").fix or ""
    assert "resumes" not in fix and "from their start" in fix, fix


def test_a_full_disk_at_the_manifest_names_the_manifest(env: Env, full_dir: Path) -> None:
    """The scenario hunt: "disk full: cannot write a path".  The real CLI, --output on a tiny tmpfs filled to
    the last byte (needs root to mount; skipped elsewhere): exit 19 naming the manifest's path."""
    import subprocess

    from tests.fixtures.root import PROJECT_ROOT

    out = full_dir / "awq-download.json"
    proc = subprocess.run([sys.executable, "-m", "october", "download", "--format", "awq", "--recipe",
                           str(write_recipe(env.tmp / "recipe")), "--cache-dir", str(env.tmp / "cache"),
                           "--output", str(out), "-q"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 19, proc.stderr
    assert "disk full" in proc.stderr and str(out) in proc.stderr and "a path" not in proc.stderr, proc.stderr
