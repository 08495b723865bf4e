"""The ``wheel`` step end to end: loopback wheel host, real wheels, real git repos, real stack Python.

Mocked: nothing.  The stack env's ``bin/python`` is a symlink to this CPython (the env
step is not run here); the ``fetch`` step's done-record is written by hand, pointing
at a real fork clone made by the fixtures.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

import pytest

from october.installer.core.errors import LockError, WheelError
from october.installer.core.paths import StackPaths
from october.installer.core.runner import Runner
from october.installer.engine import SetupOptions, SilentReporter, StepContext, StepRecord, run_pipeline
from october.installer.lock.pylock import LockedState
from october.installer.recipe import (
    BaseWheel,
    CudaPin,
    ForkUse,
    Pin,
    PreflightLimits,
    Recipe,
    SmokeConfig,
    Sources,
    TorchPin,
    parse_arch_list,
)
from october.installer.steps.results import FetchResult, ForkRecord, NoWheel, WheelResult
from october.installer.steps.wheel import WheelStep, choose_sha256
from october.installer.wheels.download import DownloadPolicy
from tests.fixtures.base_wheels import Histories, host_tag, make_histories, python_link, real_facts, vllm_wheel
from tests.fixtures.base_wheels import vllm_wheel as _vllm_wheel
from tests.fixtures.wheel_server import WheelServer

EXTENSIONS_0_18 = [(m, next(p for p in real_facts()["0.18.0"]["so_files"]
                           if p.replace("/", ".").startswith(m + ".")))
                   for m in real_facts()["0.18.0"]["extensions"]]
POLICY = DownloadPolicy(timeout_s=5, attempts=2, backoff_s=0)
ALL_CHECKS = ["sha256", "zip", "filename", "tags", "metadata", "torch-pin", "record", "paths", "cuda-variant",
              "source-commit", "source-equivalence"]


def gid(hist: Histories) -> str:
    """The upstream release commit (off main, not in the fork) as setuptools-scm writes it into _version.py."""
    return "g" + hist.release[:9]


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> Histories:
    return make_histories(tmp_path_factory.mktemp("git"))


@pytest.fixture
def server():
    with WheelServer() as srv:
        yield srv


def make_recipe(tmp: Path, hist: Histories, wheel: BaseWheel | None) -> Recipe:
    fork = ForkUse(name="vllm", url=hist.clone.as_uri(), upstream=hist.upstream_url,
                   pin=Pin("paper", hist.fork), mode="vllm-precompiled")
    return Recipe(name="t", path=tmp / "t.toml", sha256="0" * 64, description="", python="3.11",
                  torch=TorchPin("2.10.0+cu128"), build_requirements=(), sources=Sources(), forks=(fork,),
                  cuda=CudaPin("12.9", parse_arch_list("9.0"), "cu129"), wheel=wheel, preflight=PreflightLimits(),
                  jit=(), models={}, smoke=SmokeConfig())


def serve(server: WheelServer, whl: Path, data: bytes | None = None) -> tuple[str, str]:
    body = whl.read_bytes() if data is None else data
    server.add(f"/packages/{whl.name}", body)
    return server.url(f"/packages/{whl.name}"), hashlib.sha256(whl.read_bytes()).hexdigest()


def base_wheel(url: str, whl: Path, sha: str | None, **over: object) -> BaseWheel:
    fields: dict[str, object] = dict(url=url, filename=whl.name, name="vllm", version="0.18.0", sha256=sha,
                                     cuda_variant="cu129", cudart_major="12", requires_torch="2.10.0")
    fields.update(over)
    return BaseWheel(**fields)  # type: ignore[arg-type]


def make_ctx(tmp: Path, hist: Histories, wheel: BaseWheel | None, *, locked: LockedState | None = None
             ) -> StepContext:
    paths = StackPaths(tmp / "stack")
    if not paths.python.exists():
        python_link(paths.python)
    recipe = make_recipe(tmp, hist, wheel)
    opts = SetupOptions(stack=paths.root, recipe=recipe, cache_dir=tmp / "cache", locked=locked)
    ctx = StepContext(options=opts, paths=paths, runner=Runner(paths.logs), ui=SilentReporter())
    fetch = FetchResult(forks={"vllm": ForkRecord(path=str(hist.clone), url=hist.clone.as_uri(), upstream=None,
                                                  pin="p", requested=hist.fork, branch=None, commit=hist.fork)})
    ctx.done["fetch"] = StepRecord("fetch", "f" * 64, fetch, 0.0, "", "ran")
    return ctx


def installed(ctx: StepContext) -> list[str]:
    return sorted(p.name for p in ctx.paths.wheels.glob("*")) if ctx.paths.wheels.exists() else []


# -------------------------------------------------------------------------- good


def test_good_pinned_wheel(tmp_path: Path, hist: Histories, server: WheelServer) -> None:
    whl = vllm_wheel(tmp_path / "build", commit_id=gid(hist))
    url, sha = serve(server, whl)
    ctx = make_ctx(tmp_path, hist, base_wheel(url, whl, sha))
    step = WheelStep(policy=POLICY)
    result = step.run(ctx)
    assert isinstance(result, WheelResult) and step.load(result.to_json()) == result   # marker round trip
    out = result.to_json()
    dest = ctx.paths.wheels / whl.name
    equivalence = out.pop("source_equivalence")
    arch = platform.machine()
    assert out == {"path": str(dest), "filename": whl.name, "url": url, "wheel_sha256": sha, "size": whl.stat().st_size,
                   "mtime_ns": dest.stat().st_mtime_ns, "trust": "pinned", "source_commit": hist.release,
                   "checks": ALL_CHECKS, "wheel_tags": [f"cp38-abi3-linux_{arch}"],
                   "retag": [{"wheel": f"cp38-abi3-linux_{arch}", "filename": host_tag()}],
                   "extensions": [{"module": m, "path": p} for m, p in EXTENSIONS_0_18]}
    # the release commit is not in the fork's history: fetched from upstream, compared tree by tree
    assert (equivalence["source_commit"], equivalence["fork_commit"]) == (hist.release, hist.fork)
    assert (equivalence["compared_in"], equivalence["fetched_upstream"]) == ("fork-mirror", True)
    assert [(p["path"], p["type"]) for p in equivalence["paths"]] == [("csrc", "tree"), ("CMakeLists.txt", "blob"),
                                                                     ("cmake", "tree")]
    assert dest.read_bytes() == whl.read_bytes() and installed(ctx) == [whl.name]
    assert step.verify(ctx, result) is None
    json.dumps(out)                                    # outputs go into a JSON done-marker
    dest.write_bytes(dest.read_bytes()[:-1] + b"!")     # tampered after the fact
    assert "no longer has sha256" in (step.verify(ctx, result) or "")
    dest.unlink()
    assert "missing" in (step.verify(ctx, result) or "")


def test_step_runs_in_the_pipeline_and_is_cached(tmp_path: Path, hist: Histories, server: WheelServer) -> None:
    whl = vllm_wheel(tmp_path / "build", commit_id=gid(hist))
    url, sha = serve(server, whl)
    ctx = make_ctx(tmp_path, hist, base_wheel(url, whl, sha))
    first = run_pipeline([WheelStep(policy=POLICY)], ctx)
    assert first[0].status == "ran" and ctx.paths.marker("wheel").exists()
    again = run_pipeline([WheelStep(policy=POLICY)], ctx)
    assert again[0].status == "cached" and len(server.requests) == 1


def test_tofu_records_the_hash_and_locked_enforces_it(tmp_path: Path, hist: Histories,
                                                      server: WheelServer) -> None:
    whl = vllm_wheel(tmp_path / "build", commit_id=gid(hist))
    url, sha = serve(server, whl)
    out = WheelStep(policy=POLICY).run(make_ctx(tmp_path / "a", hist, base_wheel(url, whl, None)))
    assert isinstance(out, WheelResult)
    assert (out.trust, out.wheel_sha256) == ("tofu", sha) and "sha256" not in out.checks
    lock = LockedState(path=tmp_path / "pylock.toml", sha256="", commits={}, wheel_sha256=sha, packages={})
    ctx = make_ctx(tmp_path / "b", hist, base_wheel(url, whl, None), locked=lock)
    out = WheelStep(policy=POLICY).run(ctx)
    assert isinstance(out, WheelResult) and (out.trust, out.checks[0]) == ("locked", "sha256")
    # The host now serves other bytes: --locked refuses them.
    other = vllm_wheel(tmp_path / "other", commit_id=gid(hist), tamper={"vllm/__init__.py": b"# changed\n"})
    server.add(f"/packages/{whl.name}", other.read_bytes())
    ctx = make_ctx(tmp_path / "c", hist, base_wheel(url, whl, None), locked=lock)
    with pytest.raises(WheelError) as err:
        WheelStep(policy=POLICY).run(ctx)
    assert "[sha256]" in str(err.value) and installed(ctx) == []


def test_trust_rules() -> None:
    w = BaseWheel(url="https://x/v.whl", filename="v.whl", name="vllm", version="0.18.0", sha256="a" * 64)
    lock = LockedState(path=Path("pylock.toml"), sha256="", commits={}, wheel_sha256="b" * 64, packages={})
    nolock = LockedState(path=Path("pylock.toml"), sha256="", commits={}, wheel_sha256=None, packages={})
    unpinned = BaseWheel(**{**w.__dict__, "sha256": None})
    assert choose_sha256(w, None) == ("a" * 64, "pinned")
    assert choose_sha256(w, nolock) == ("a" * 64, "pinned")
    assert choose_sha256(unpinned, lock) == ("b" * 64, "locked")
    assert choose_sha256(unpinned, None) == (None, "tofu")
    with pytest.raises(LockError) as err:
        choose_sha256(w, lock)
    assert "pin different base wheels" in str(err.value)
    with pytest.raises(LockError) as err:
        choose_sha256(unpinned, nolock)
    assert "records no sha256" in str(err.value)


def test_recipe_without_wheel_is_skipped(tmp_path: Path, hist: Histories) -> None:
    ctx = make_ctx(tmp_path, hist, None)
    step = WheelStep()
    assert step.run(ctx) == NoWheel("recipe has no [wheel]")
    assert step.load({"skipped": "recipe has no [wheel]"}) == NoWheel("recipe has no [wheel]")
    assert step.inputs(ctx) == {"wheel": None}
    assert step.verify(ctx, NoWheel("recipe has no [wheel]")) is None


# ------------------------------------------------------------------------ faults


def _fault(tmp: Path, kind: str, hist: Histories) -> tuple[Path, bytes | None, dict[str, object]]:
    """(wheel file, bytes the host serves instead (None: the file), BaseWheel overrides)."""
    build = tmp / "build"

    def vllm_wheel(out: Path, **kw: object) -> Path:
        kw.setdefault("commit_id", gid(hist))
        return _vllm_wheel(out, **kw)  # type: ignore[arg-type]

    if kind == "sha256":
        whl = vllm_wheel(build)
        return whl, None, {"sha256": "0" * 64}
    if kind == "record":
        return vllm_wheel(build, tamper={"vllm/__init__.py": b"import evil\n"}), None, {}
    if kind == "paths":
        return vllm_wheel(build, extra_record=[("../../escape.py", b"x = 1\n")]), None, {}
    if kind == "tags":
        return vllm_wheel(build, tag="cp38-abi3-win_amd64"), None, {}
    if kind == "metadata-name":
        return vllm_wheel(build, metadata_name="not-vllm"), None, {}
    if kind == "metadata-version":
        return vllm_wheel(build, metadata_version="0.18.1"), None, {}
    if kind == "torch-pin":
        return vllm_wheel(build, torch="2.11.0"), None, {}
    if kind == "cuda-variant":
        return vllm_wheel(build, cudart="13"), None, {}
    if kind == "truncated-pinned":
        whl = vllm_wheel(build)
        return whl, whl.read_bytes()[:2000], {}
    if kind == "truncated-tofu":
        whl = vllm_wheel(build)
        return whl, whl.read_bytes()[:2000], {"sha256": None}
    if kind == "source-commit":
        return vllm_wheel(build, commit_id=None, version="0.18.0"), None, {}
    if kind == "retag":
        return vllm_wheel(build, wheel_tag=f"cp38-abi3-manylinux2014_{platform.machine()}"), None, {}
    raise AssertionError(kind)


FAULTS = {"sha256": "[sha256]", "record": "[record] vllm/__init__.py: hash mismatch",
          "paths": "[paths] ../../escape.py has a '..' component", "tags": "[tags]",
          "metadata-name": "[metadata] METADATA Name", "metadata-version": "[metadata] METADATA Version",
          "torch-pin": "[torch-pin]", "cuda-variant": "[cuda-variant] expected libcudart.so.12",
          "truncated-pinned": "[sha256]", "truncated-tofu": "[zip]",
          "source-commit": "does not say which commit it was built from",
          "retag": "[tags] WHEEL declares tags cp38-abi3-manylinux2014_"}


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_fault_wheel_fails_naming_the_check_and_installs_nothing(tmp_path: Path, hist: Histories,
                                                                 server: WheelServer, kind: str) -> None:
    whl, served, over = _fault(tmp_path, kind, hist)
    url, sha = serve(server, whl, served)
    ctx = make_ctx(tmp_path, hist, base_wheel(url, whl, over.pop("sha256", sha), **over))  # type: ignore[arg-type]
    ctx.paths.wheels.mkdir(parents=True)
    (ctx.paths.wheels / "vllm-0.17.0-cp38-abi3-manylinux_2_17_x86_64.whl").write_bytes(b"an older run's wheel")
    with pytest.raises(WheelError) as err:
        WheelStep(policy=POLICY).run(ctx)
    assert FAULTS[kind] in str(err.value)
    assert installed(ctx) == []
    if kind == "truncated-tofu":                       # unverified TOFU bytes leave the cache too,
        assert not list((tmp_path / "cache" / "wheels" / "sha256").rglob("*.whl"))
        assert not list((tmp_path / "cache" / "wheels" / "seen").glob("*.json"))  # and are not "trusted"


def test_wheel_whose_kernels_differ_from_the_fork_is_refused(tmp_path: Path, hist: Histories,
                                                             server: WheelServer) -> None:
    """The wheel comes from a later upstream main that changed csrc/: the fork lacks those kernels."""
    whl = vllm_wheel(tmp_path / "build", commit_id="g" + hist.kernel[:9])
    url, sha = serve(server, whl)
    ctx = make_ctx(tmp_path, hist, base_wheel(url, whl, sha))
    with pytest.raises(WheelError) as err:
        WheelStep(policy=POLICY).run(ctx)
    msg = str(err.value)
    assert "the precompiled path is wrong for the vllm fork" in msg
    assert "csrc/attention/paged_attention_v2.cu (changed)" in msg and installed(ctx) == []


def test_compiled_sources_come_from_the_recipe(tmp_path: Path, hist: Histories, server: WheelServer) -> None:
    whl = vllm_wheel(tmp_path / "build", commit_id="g" + hist.kernel[:9])
    url, sha = serve(server, whl)
    ctx = make_ctx(tmp_path, hist, base_wheel(url, whl, sha, compiled_sources=("CMakeLists.txt", "cmake")))
    out = WheelStep(policy=POLICY).run(ctx).to_json()
    assert [p["path"] for p in out["source_equivalence"]["paths"]] == ["CMakeLists.txt", "cmake"]


def test_inputs_carry_the_wheel_table_and_lock_and_run_nothing(tmp_path: Path, hist: Histories) -> None:
    w = BaseWheel(url="https://user:secret@example.invalid/v.whl", filename="v.whl", name="vllm",
                  version="0.18.0", sha256=None)
    lock = LockedState(path=Path("pylock.toml"), sha256="", commits={}, wheel_sha256="c" * 64, packages={})
    got = WheelStep().inputs(make_ctx(tmp_path, hist, w, locked=lock))
    assert got["locked_wheel_sha256"] == "c" * 64 and got["wheel"]["filename"] == "v.whl"
    assert got["fork"] == {"name": "vllm", "commit": hist.fork, "upstream": hist.upstream_url}
    # a no-op re-run computes every step's inputs: this one must start no process and write no log
    assert "python_tags" not in got and not (tmp_path / "stack" / "logs").exists()


def test_lock_and_receipt_carry_retag_extensions_and_compared_trees(tmp_path: Path, hist: Histories,
                                                                   server: WheelServer) -> None:
    import jsonschema
    import tomli_w

    from october.installer.steps.lock import wheel_for_lock

    whl = vllm_wheel(tmp_path / "build", commit_id=gid(hist))
    url, sha = serve(server, whl)
    result = WheelStep(policy=POLICY).run(make_ctx(tmp_path, hist, base_wheel(url, whl, sha)))
    assert isinstance(result, WheelResult)
    out = result.to_json()
    lock = wheel_for_lock(result)
    assert lock["sha256"] == out["wheel_sha256"] == sha                # [tool.october.wheel] sha256
    arch = platform.machine()
    assert lock["retag"] == [{"wheel": f"cp38-abi3-linux_{arch}", "filename": host_tag()}]
    assert lock["extensions"] == real_facts()["0.18.0"]["extensions"]
    eq = lock["source-equivalence"]
    assert (eq["source-commit"], eq["fork-commit"], eq["fetched-upstream"]) == (hist.release, hist.fork, True)
    assert [p["path"] for p in eq["paths"]] == ["csrc", "CMakeLists.txt", "cmake"] and all(
        len(p["id"]) == 40 for p in eq["paths"])
    tomli_w.dumps({"tool": {"october": {"wheel": lock}}})               # TOML-serialisable (no nulls)
    schema = json.loads((Path(__file__).parent.parent / "receipts" / "setup.schema.json").read_text())
    jsonschema.validate(out, schema["properties"]["wheel"])             # the receipt embeds the outputs
    bad = dict(out, source_equivalence={**out["source_equivalence"], "compared_in": "somewhere"})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema["properties"]["wheel"])
