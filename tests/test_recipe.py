"""Recipes and forks load into typed objects; every malformed file fails with an exact message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from october.installer.core.errors import ReceiptError, RecipeError
from october.installer.core.paths import StackPaths
from october.installer.core.runner import Runner
from october.installer.core.schemas import validate
from october.installer.engine import SetupOptions, SilentReporter, StepContext, StepRecord
from october.installer.recipe import ComputeCapability, load_forks, load_recipe, parse_arch_list
from tests.fixtures.root import PROJECT_ROOT
from october.installer.steps.receipt import ReceiptStep

FULL = "a" * 40
FORKS = f"""
format_version = 1
[forks.alpha]
url = "file:///tmp/alpha.git"
upstream = "file:///tmp/alpha-up.git"
[forks.alpha.pins]
one = "{FULL}"
pre = {{ prefix = "abcdef123", branch = "main" }}
"""

GOOD = """
format_version = 1
name = "t"
forks_file = "forks.toml"
[python]
version = "3.11.7"
[torch]
version = "2.10.0+cpu"
[[forks]]
name = "alpha"
pin = "one"
[models.awq]
repo = "Org/Model"
revision = "{rev}"
patterns = ["*.json"]
""".replace("{rev}", "b" * 40)


def write(tmp_path: Path, recipe: str, forks: str = FORKS) -> Path:
    (tmp_path / "forks.toml").write_text(forks)
    p = tmp_path / "r.toml"
    p.write_text(recipe)
    return p


def test_shipped_recipes_load() -> None:
    cur = load_recipe("current")
    assert cur.python == "3.12.11" and cur.torch.version == "2.10.0" and cur.torch.index_url is None
    vllm = cur.fork("vllm")
    assert vllm.pin.is_prefix and vllm.pin.commit == "2315e62e2" and vllm.pin.branch == "paper-memory-decode-v0.18"
    assert cur.fork("flashinfer").pin.commit == "2b532f7b9236d89e45d571bc3bbf63d1e40d1f7d"
    assert cur.wheel is not None and cur.wheel.sha256 == "0bc51491598f4bcd161b693b27cbe2864082d6c49fa9065965d94b371f6ae8ef"
    assert {m.kind for m in cur.jit} == {"decode", "prefill"}
    assert cur.models["awq"].repo == "Qwen/Qwen3-8B-AWQ"
    new = load_recipe("20260702")
    assert all(not f.pin.is_prefix for f in new.forks) and new.torch.version.startswith("2.11.0")
    assert new.fork("flashinfer").fetch_url == "https://github.com/mcgrof/flashinfer.git"
    assert new.fork("vllm").fetch_url == "https://github.com/mcgrof/vllm.git"
    # FlashInfer's decode JIT needs only the CCCL headers; vLLM takes all its submodules (default)
    fi = new.fork("flashinfer")
    assert fi.submodule_paths == ("3rdparty/cccl",) and fi.wants_submodule("3rdparty/cccl")
    assert not fi.wants_submodule("3rdparty/cutlass") and not fi.wants_submodule("3rdparty/spdlog")
    assert new.fork("vllm").submodule_paths is None and new.fork("vllm").wants_submodule("anything")


def test_good_fixture_recipe(tmp_path: Path) -> None:
    r = load_recipe(str(write(tmp_path, GOOD)))
    assert r.fork("alpha").pin.commit == FULL and r.fork("alpha").url == "file:///tmp/alpha.git"
    assert r.sources.find_links == () and r.cuda is None and r.wheel is None
    assert len(r.sha256) == 64


BAD = [
    # (what to change, expected message fragment)
    (lambda s: s.replace('name = "t"\n', 'name = "t"\ncolour = "red"\n'),
     "key 'colour' is invalid. Expected one of"),
    (lambda s: s.replace('[python]\nversion = "3.11.7"\n', ''),
     "key 'python' is invalid. Expected a table, found the key is missing"),
    (lambda s: s.replace('version = "3.11.7"', 'version = "three"'),
     "key 'python.version' is invalid. Expected a PEP 440 version such as '2.10.0', found 'three'"),
    (lambda s: s.replace('version = "2.10.0+cpu"', 'version = 2'),
     "key 'torch.version' is invalid. Expected a version string such as '2.10.0', found 2"),
    (lambda s: s.replace('pin = "one"', 'pin = "nope"'),
     "key 'forks[0].pin' is invalid. Expected a pin of fork 'alpha' in forks.toml (one, pre), found 'nope'"),
    (lambda s: s.replace('name = "alpha"', 'name = "beta"'),
     "key 'forks[0].name' is invalid. Expected a fork defined in forks.toml (alpha), found 'beta'"),
    (lambda s: s.replace("b" * 40, "B" * 40),
     "key 'models.awq.revision' is invalid. Expected a 40-character lowercase hex revision"),
    (lambda s: s.replace('[models.awq]', '[models.int4]'),
     "key 'models.int4' is invalid. Expected a model format (awq, fp16), found 'int4'"),
    (lambda s: s.replace('format_version = 1', 'format_version = 7'),
     "key 'format_version' is invalid. Expected 1 (this tool's recipe format), found 7"),
    (lambda s: s + '\n[preflight]\nuv = "newest"\n',
     "key 'preflight.uv' is invalid. Expected a version specifier such as '>=0.12.11', found 'newest'"),
    (lambda s: s + '\n[preflight]\nmin_ram_gb = "lots"\n',
     "key 'preflight.min_ram_gb' is invalid. Expected a number, found 'lots'"),
    (lambda s: s + '\n[[jit.modules]]\nkind = "decode"\nq = "bf16"\nk = "bf16"\nv = "e4m3"\no = "bf16"\nhead_dim = 512\n',
     "key 'jit.modules[0].head_dim' is invalid. Expected 64, 128 or 256 (FlashInfer rejects > 256), found 512"),
    (lambda s: s + '\n[wheel]\nurl = "x"\nfilename = "y"\nname = "vllm"\nversion = "0.18.0"\nsha256 = "abc"\n',
     "key 'wheel.sha256' is invalid. Expected 64 lowercase hex characters, found 'abc'"),
    (lambda s: s.replace('[[forks]]\nname = "alpha"\npin = "one"\n', '').replace('name = "t"\n', 'name = "t"\nforks = []\n'),
     "key 'forks' is invalid. Expected an array of tables [[forks]] with at least one fork, found a list (0 items)"),
    (lambda s: s.replace('[[forks]]\nname = "alpha"\npin = "one"\n', '[[forks]]\nname = "alpha"\npin = "one"\nmode = "magic"\n'),
     "key 'forks[0].mode' is invalid. Expected one of editable, vllm-precompiled, flashinfer, found 'magic'"),
    (lambda s: s + '\n[cuda]\nversion = "12.9"\narch_list = "hopper"\nvariant = "cu129"\n',
     "key 'cuda.arch_list' is invalid. Expected compute capabilities such as '9.0' or '8.9 9.0a', found 'hopper'"),
    (lambda s: s + '\n[cuda]\nversion = "12.9"\narch_list = "9.0"\nvariant = "cuda12"\n',
     "key 'cuda.variant' is invalid. Expected a CUDA wheel variant such as 'cu129' or 'cu130', found 'cuda12'"),
    (lambda s: s + '\n[wheel]\nurl = "ftp://x/v.whl"\nfilename = "vllm-0.18.0-py3-none-any.whl"\nname = "vllm"\nversion = "0.18.0"\n',
     "key 'wheel.url' is invalid. Expected an https://, http:// or file:// URL, found 'ftp://x/v.whl'"),
    (lambda s: s + '\n[wheel]\nurl = "https://x/v.whl"\nfilename = "vllm.zip"\nname = "vllm"\nversion = "0.18.0"\n',
     "key 'wheel.filename' is invalid. Expected a wheel filename"),
    (lambda s: s + '\n[preflight]\nmin_compute_capability = "sm90"\n',
     "key 'preflight.min_compute_capability' is invalid. Expected a compute capability major.minor such as '8.9', found 'sm90'"),
    (lambda s: s + '\n[smoke]\nprompt_tokens = 0\n',
     "key 'smoke.prompt_tokens' is invalid. Expected a positive number of tokens, found 0"),
    (lambda s: s.replace('version = "2.10.0+cpu"', 'version = "2.10.0+cpu"\nindex = "pytorch.org/whl"'),
     "key 'torch.index' is invalid. Expected an https:// (or file://) package index URL, found 'pytorch.org/whl'"),
    (lambda s: s.replace('name = "t"', 'name = "t'),
     "key '<file>' is invalid. Expected valid TOML, found a syntax error"),
    (lambda s: s.replace('[[forks]]\nname = "alpha"\npin = "one"\n', '[[forks]]\nname = "alpha"\npin = "one"\nsubmodules = "cccl"\n'),
     "key 'forks[0].submodules' is invalid. Expected true, false, or a list of submodule paths"),
    (lambda s: s.replace('[[forks]]\nname = "alpha"\npin = "one"\n', '[[forks]]\nname = "alpha"\npin = "one"\nsubmodules = ["../x"]\n'),
     "key 'forks[0].submodules[0]' is invalid. Expected a submodule path relative to the fork"),
    (lambda s: s.replace('[[forks]]\nname = "alpha"\npin = "one"\n', '[[forks]]\nname = "alpha"\npin = "one"\nsubmodules = ["a", 3]\n'),
     "key 'forks[0].submodules[1]' is invalid. Expected a string"),
    # the scenario hunt: uv takes --no-index over any index, so the one named was ignored without a word
    (lambda s: s + '\n[sources]\nno_index = true\nindex_url = "https://pypi.org/simple"\n',
     "key 'sources.no_index' is invalid. Expected no index_url or extra_index_urls beside no_index = true"),
]


@pytest.mark.parametrize("mutate,fragment", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_malformed_recipe(tmp_path: Path, mutate, fragment: str) -> None:
    path = write(tmp_path, mutate(GOOD))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path))
    assert str(path) in info.value.message
    assert fragment in info.value.message
    assert info.value.exit_code == 3


BAD_FORKS = [
    (FORKS.replace(f'one = "{FULL}"', 'one = "abc123"'),
     "key 'forks.alpha.pins.one' is invalid. Expected a 40-character lowercase hex commit id"),
    (FORKS.replace(f'one = "{FULL}"', f'one = "{FULL.upper()}"'),
     "key 'forks.alpha.pins.one' is invalid. Expected a 40-character lowercase hex commit id"),
    (FORKS.replace('prefix = "abcdef123"', 'prefix = "xyz"'),
     "key 'forks.alpha.pins.pre.prefix' is invalid. Expected a lowercase hex commit prefix of 7 to 39 characters, found 'xyz'"),
    (FORKS.replace(', branch = "main"', ''),
     "key 'forks.alpha.pins.pre.branch' is invalid. Expected the branch the prefix is resolved on, found the key is missing"),
    (FORKS.replace('pre = {', 'pre = { fetch_from = "mirror", '),
     "key 'forks.alpha.pins.pre.fetch_from' is invalid. Expected 'fork' or 'upstream', found 'mirror'"),
    (FORKS.replace('pre = { prefix = "abcdef123", branch = "main" }', 'pre = { commit = "abc" }'),
     "key 'forks.alpha.pins.pre.commit' is invalid. Expected a 40-character lowercase hex commit id, found 'abc'"),
    (FORKS.replace('upstream = "file:///tmp/alpha-up.git"\n', '').replace('pre = {', 'pre = { fetch_from = "upstream", '),
     "key 'forks.alpha.pins.pre.fetch_from' is invalid. Expected an 'upstream' URL for fork 'alpha', found no upstream key"),
    (FORKS.replace('url = "file:///tmp/alpha.git"\n', ''),
     "key 'forks.alpha.url' is invalid. Expected a git URL, found the key is missing"),
    # the new-user hunt: a typo said only that the key it meant was missing, never the one to rename
    (FORKS.replace('url = "file:///tmp/alpha.git"\n', 'uri = "file:///tmp/alpha.git"\n'),
     "key 'forks.alpha.uri' is invalid. Expected one of ['pins', 'upstream', 'url'], found unknown key 'uri' "
     "(the key 'url' beside it is missing: a typo?)"),
    # and a fork URL git would read as an option (the secrets hunt: --upload-pack=<command> ran the command)
    (FORKS.replace('url = "file:///tmp/alpha.git"', 'url = "--upload-pack=touch x"'),
     "key 'forks.alpha.url' is invalid. Expected a git URL (not beginning with '-', no spaces or control characters)"),
]


@pytest.mark.parametrize("forks,fragment", BAD_FORKS, ids=[f"badfork{i}" for i in range(len(BAD_FORKS))])
def test_malformed_forks(tmp_path: Path, forks: str, fragment: str) -> None:
    write(tmp_path, GOOD, forks)
    with pytest.raises(RecipeError) as info:
        load_forks(tmp_path / "forks.toml")
    assert fragment in info.value.message


def test_unknown_recipe_name_lists_the_choices() -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe("nonexistent")
    assert "current" in info.value.message and "20260702" in info.value.message


def test_cli_exit_code_and_message_for_bad_recipe(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace('pin = "one"', 'pin = "nope"'))
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(tmp_path / "stack"),
                           "--recipe", str(path)], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert proc.returncode == 3
    assert "key 'forks[0].pin' is invalid" in proc.stderr and "->" in proc.stderr
    assert not (tmp_path / "stack").exists()


INSTALL_KEYS = """
[forks.build_env]
BUILD_NVEP = "0"
[forks.nested_installs]
Nvidia_CUDA_NVCC = "cuTile only"
[install]
supply = ["nccl4py>=0.3.1"]
[[install.exceptions]]
package = "vllm"
requires = "FlashInfer_Python"
why = "the fork replaces it"
"""


def _with_install_keys(text: str) -> str:
    return GOOD.replace('pin = "one"\n', 'pin = "one"\n' + text, 1)


def test_install_keys_parse(tmp_path: Path) -> None:
    r = load_recipe(str(write(tmp_path, _with_install_keys(INSTALL_KEYS))))
    alpha = r.fork("alpha")
    assert alpha.build_env == {"BUILD_NVEP": "0"} and alpha.nested_installs == {"nvidia-cuda-nvcc": "cuTile only"}
    assert r.install.supply == ("nccl4py>=0.3.1",)
    assert [(e.package, e.requires) for e in r.install.exceptions] == [("vllm", "flashinfer-python")]
    shipped = load_recipe("20260702")
    assert shipped.fork("flashinfer").build_env["BUILD_NVEP"] == "0"
    assert "nvidia-nvjitlink" in shipped.fork("flashinfer").nested_installs


BAD_INSTALL = [
    (INSTALL_KEYS.replace('BUILD_NVEP = "0"', "BUILD_NVEP = 0"),
     "key 'forks[0].build_env.BUILD_NVEP' is invalid. Expected a string value"),
    (INSTALL_KEYS.replace('BUILD_NVEP = "0"', 'PATH = "/x"'),
     "key 'forks[0].build_env.PATH' is invalid. Expected an environment variable name the tool does not set"),
    (INSTALL_KEYS.replace('"cuTile only"', '""'),
     "key 'forks[0].nested_installs.Nvidia_CUDA_NVCC' is invalid. Expected the reason"),
    (INSTALL_KEYS.replace('supply = ["nccl4py>=0.3.1"]', 'supply = ["nccl4py >>= 1"]'),
     "key 'install.supply[0]' is invalid. Expected a requirement"),
    (INSTALL_KEYS.replace('why = "the fork replaces it"\n', ''),
     "key 'install.exceptions[0].why' is invalid. Expected a string, found the key is missing"),
    (INSTALL_KEYS + '[[install.exceptions]]\npackage = "vllm"\nrequires = "flashinfer-python"\nwhy = "again"\n',
     "key 'install.exceptions' is invalid. Expected each (package, requires) pair at most once"),
    (INSTALL_KEYS.replace("[install]", "[install]\ncolour = 1"), "key 'install.colour' is invalid"),
]


@pytest.mark.parametrize("text,fragment", BAD_INSTALL, ids=[f"bad_install{i}" for i in range(len(BAD_INSTALL))])
def test_malformed_install_keys(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(str(write(tmp_path, _with_install_keys(text))))
    assert fragment in info.value.message, info.value.message


CUDA = '\n[cuda]\nversion = "12.9"\narch_list = "{}"\nvariant = "cu129"\n'


def test_arch_list_is_parsed_once_into_compute_capabilities(tmp_path: Path) -> None:
    r = load_recipe(str(write(tmp_path, GOOD + CUDA.format("8.9;9.0a, 10.0+PTX"))))
    assert r.cuda is not None
    assert r.cuda.arch_list == (ComputeCapability(8, 9), ComputeCapability(9, 0, "a"),
                                ComputeCapability(10, 0, "", ptx=True))
    assert [c.pair for c in r.cuda.arch_list] == [(8, 9), (9, 0), (10, 0)]
    # FlashInfer splits FLASHINFER_CUDA_ARCH_LIST on single spaces: whatever the recipe separates with
    assert r.cuda.flashinfer_arch_list == "8.9 9.0a 10.0+PTX"
    assert r.cuda.as_recipe() == {"version": "12.9", "arch_list": "8.9 9.0a 10.0+PTX", "variant": "cu129"}
    shipped = load_recipe("current").cuda
    assert shipped is not None and shipped.as_recipe()["arch_list"] == "9.0"   # the preflight fingerprint's shape
    for bad in ("", " ; ", "9", "9.0A", "9.0ab", "sm90", "9.0+ptx"):
        with pytest.raises(ValueError):
            parse_arch_list(bad)


def test_the_setup_receipt_records_the_parsed_arch_list(tmp_path: Path) -> None:
    """The receipt step's document, built for a recipe with [cuda] and one without, against the schema."""
    stack = tmp_path / "stack"
    paths = StackPaths(stack)
    paths.pylock.parent.mkdir(parents=True)
    paths.pylock.write_text("lock-version = '1.0'\n")

    def receipt(text: str) -> dict[str, object]:
        recipe = load_recipe(str(write(tmp_path, text)))
        ctx = StepContext(options=SetupOptions(stack=stack, recipe=recipe, cache_dir=tmp_path / "cache"),
                          paths=paths, runner=Runner(paths.logs), ui=SilentReporter())
        ctx.done["env"] = StepRecord("env", "0" * 64, {}, 0.1, "2026-12-01T00:00:00+00:00", "ran")
        doc = ReceiptStep().build(ctx)
        validate("setup", doc)
        return doc

    assert receipt(GOOD + CUDA.format("8.9 9.0a"))["cuda_arch_list"] == ["8.9", "9.0a"]
    assert receipt(GOOD)["cuda_arch_list"] is None
    doc = receipt(GOOD + CUDA.format("9.0"))
    for wrong in (["hopper"], [], "9.0", [9.0]):
        with pytest.raises(ReceiptError, match="cuda_arch_list"):
            validate("setup", {**doc, "cuda_arch_list": wrong})
    schema = json.loads((PROJECT_ROOT / "receipts" / "setup.schema.json").read_text())
    jsonschema.validate({k: v for k, v in doc.items() if k != "cuda_arch_list"}, schema)  # older receipts


PROBE = ("import sys; from pathlib import Path; from october.installer.recipe import load_recipe, remember_checked; "
         "c = Path(sys.argv[2]) if sys.argv[2] else None; r = load_recipe(sys.argv[1], checked=c); "
         "print(r.name, 'pydantic' in sys.modules, type(r.description).__name__); "
         "sys.argv[3:] and remember_checked(r, c)")


def test_a_recipe_validated_in_a_stack_loads_again_there_without_pydantic_and_a_change_is_validated(
        tmp_path: Path) -> None:
    """A stack's no-op re-run loads the recipe without importing pydantic: content that passed the models in
    that stack, with the same code, is marked in its ``.state/recipe-checked`` by its digest when the stack is
    provisioned (installer/recipe/tomlcheck.py); a load alone writes nothing; any change is validated, and so
    is every load that names no stack."""
    path = write(tmp_path, GOOD)
    state = tmp_path / "stack" / ".state"
    state.mkdir(parents=True)
    checked = state / "recipe-checked"

    def load(where: Path | None = checked, mark: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", PROBE, str(path), str(where or ""), *(["mark"] if mark else [])],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)

    assert load().stdout.split() == ["t", "True", "str"]    # validated: the models were imported
    assert not checked.exists()                             # a load alone marks nothing (the no-op's)
    assert load(mark=True).stdout.split() == ["t", "True", "str"]     # validated, then marked (provisioning)
    assert load().stdout.split() == ["t", "False", "str"]   # the same content again in that stack: remembered
    assert load(None).stdout.split() == ["t", "True", "str"]          # no stack named: always validated
    other = tmp_path / "other" / ".state" / "recipe-checked"
    assert load(other, mark=True).stdout.split() == ["t", "True", "str"]  # another stack: not told by this one
    assert not other.exists()                               # and nothing written where no .state exists
    path.write_text(GOOD.replace('name = "t"', 'name = "t"\ncolour = "red"'))
    proc = load()                                           # a planted fault after a pass is still found
    assert proc.returncode != 0 and "key 'colour' is invalid. Expected one of" in proc.stderr
    # a string that reads like a date passes and is marked; the date itself is another document, refused
    path.write_text(GOOD.replace('name = "t"', 'name = "t"\ndescription = "datetime.date(2020, 1, 1)"'))
    assert load(mark=True).stdout.split() == ["t", "True", "str"]
    assert len(list(checked.iterdir())) == 1                # one marker per stack: the last recipe's
    path.write_text(GOOD.replace('name = "t"', 'name = "t"\ndescription = 2020-01-01'))
    proc = load()
    assert proc.returncode != 0 and "key 'description' is invalid" in proc.stderr, proc.stdout
    (tmp_path / "forks.toml").write_text(FORKS.replace('one = "', 'one = "x'))
    path.write_text(GOOD)                                   # a good recipe over a changed forks.toml
    proc = load()
    assert proc.returncode != 0 and "key 'forks.alpha.pins.one' is invalid" in proc.stderr


SHARED_PROBE = ("import sys; from pathlib import Path; from october.installer.recipe import SharedMark, load_recipe, "
                "remember_checked; c = Path(sys.argv[2]); s = SharedMark.in_cache(Path(sys.argv[3])); "
                "r = load_recipe(sys.argv[1], checked=c, shared=s); print(r.name, 'pydantic' in sys.modules); "
                "remember_checked(r, c, s)")


def test_a_recipe_validated_for_one_stack_is_not_validated_again_for_the_next_on_that_cache_unless_its_mark_is_forged(
        tmp_path: Path) -> None:
    """A second stack set up with the same recipe on the same cache loads it without pydantic: the first run's
    pass is marked in the cache (``CACHE/recipe-checked/<key id>/<digest>``), signed with the per-user key
    (installer/recipe/tomlcheck.py SharedMark), and the second stack gets its own marker.  A mark planted by
    whoever can write the cache (forged, signed for other content, signed by another key, a FIFO) is not taken:
    the models run and a bad recipe is refused; without a usable key nothing is marked."""
    import hmac
    import hashlib
    import os

    from october.installer.core import cachekey
    from october.installer.recipe.tomlcheck import content_digest, read_toml

    path = write(tmp_path, GOOD)
    cache = tmp_path / "cache"
    env = {**os.environ, "OCTOBER_KEY_FILE": str(tmp_path / "keys" / "cache.key")}
    env.pop(cachekey.KEY_ENV, None)

    def load(stack: str, *, environ: dict[str, str] = env) -> subprocess.CompletedProcess[str]:
        checked = tmp_path / stack / ".state" / "recipe-checked"
        checked.parent.mkdir(parents=True, exist_ok=True)
        return subprocess.run([sys.executable, "-c", SHARED_PROBE, str(path), str(checked), str(cache)],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, env=environ)

    assert load("a").stdout.split() == ["t", "True"]        # the first stack: validated, then marked in the cache
    key = (tmp_path / "keys" / "cache.key").read_bytes()
    folder = cache / "recipe-checked" / cachekey.key_id(key)
    good = content_digest([read_toml(path), read_toml(tmp_path / "forks.toml")])
    assert [p.name for p in folder.iterdir()] == [good]
    assert load("b").stdout.split() == ["t", "False"]       # a new stack, same recipe and cache: the mark vouches
    assert (tmp_path / "b" / ".state" / "recipe-checked" / good).is_file()    # and the stack has its own marker

    # a recipe the models refuse, with a mark at its digest: never taken unless signed for it with this key
    path.write_text(GOOD.replace('name = "t"', 'name = "t"\ncolour = "red"'))
    bad = content_digest([read_toml(path), read_toml(tmp_path / "forks.toml")])
    doc = {"format": 1, "what": "recipe and forks.toml passed the models", "digest": bad}
    other_key = hashlib.sha256(b"someone else").digest()
    body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    good_mark = json.loads((folder / good).read_text())
    plants = {
        "unsigned": json.dumps(doc),
        "another key": json.dumps({**doc, "mac": hmac.new(other_key, body, hashlib.sha256).hexdigest()}),
        "signed for other content": json.dumps(good_mark),
        "mac of other content": json.dumps({**doc, "mac": good_mark["mac"]}),
        "not JSON": "{",
    }
    for n, (what, text) in enumerate(plants.items()):
        (folder / bad).unlink(missing_ok=True)
        (folder / bad).write_text(text)
        proc = load(f"c{n}")
        assert proc.returncode != 0 and "key 'colour' is invalid" in proc.stderr, (what, proc.stdout, proc.stderr)
    (folder / bad).unlink()
    os.mkfifo(folder / bad)                                 # a FIFO: not waited on
    proc = load("fifo")
    assert proc.returncode != 0 and "key 'colour' is invalid" in proc.stderr
    # the planted mark signed with this key (what only its holder can make) is what the check reads
    (folder / bad).unlink()
    (folder / bad).write_text(json.dumps({**doc, "mac": cachekey.sign(doc, key)}))
    assert load("d").stdout.split() == ["t", "False"]

    # no usable key (its file inside the cache it would sign for): no mark taken or written
    path.write_text(GOOD)
    inside = {**env, "OCTOBER_KEY_FILE": str(cache / "cache.key")}
    assert load("e", environ=inside).stdout.split() == ["t", "True"]
    assert sorted(p.name for p in (cache / "recipe-checked").iterdir()) == [cachekey.key_id(key)]


def test_a_shared_mark_is_written_only_inside_the_cache_and_pruning_keeps_this_run_s_mark(tmp_path: Path) -> None:
    """Whoever can write a shared cache cannot turn the marks against the user (a review of SharedMark): a
    mark folder that is a link to the user's files gets no write and loses no file; a mark of 4,096 nested
    brackets is not taken and is no traceback (the models run); planted mark-shaped files dated in the future
    do not push this run's mark out, and a name not shaped like a mark is never pruned."""
    import hashlib
    import os
    import time

    from october.installer.core import cachekey
    from october.installer.recipe import SharedMark

    key = hashlib.sha256(b"k").digest()
    cache = tmp_path / "cache"
    folder = cache / "recipe-checked" / cachekey.key_id(key)
    digest, other = "a" * 64, "b" * 64
    victim = tmp_path / "victim"
    victim.mkdir()
    for i in range(70):
        (victim / f"{i:064x}").write_text("mine")
    folder.parent.mkdir(parents=True)
    folder.symlink_to(victim)
    mark = SharedMark(folder, key)
    mark.add(digest)
    assert sorted(p.name for p in victim.iterdir()) == sorted(f"{i:064x}" for i in range(70))
    assert not mark.holds(digest)
    folder.unlink()
    mark.add(digest)
    assert mark.holds(digest) and not mark.holds(other)
    (folder / other).write_text("[" * 4096)
    assert not mark.holds(other)                            # not taken, no RecursionError
    (folder / digest).unlink()
    later = time.time() + 10 * 365 * 86400
    for i in range(SharedMark.KEEP + 5):
        junk = folder / f"{i + 1:064x}"
        junk.write_text("{}")
        os.utime(junk, (later, later))
    (folder / "notes.txt").write_text("not a mark")
    mark.add(digest)
    assert mark.holds(digest)                               # this run's mark is kept first
    assert len([p for p in folder.iterdir() if p.name != "notes.txt"]) == SharedMark.KEEP
    assert (folder / "notes.txt").is_file()
    assert oct((folder / digest).stat().st_mode & 0o777) == oct(cachekey.shared_mode(0o644))


def test_a_recipe_loaded_on_a_stack_s_marker_equals_the_validated_one(tmp_path: Path) -> None:
    """What a load validated (``validated_digest`` and ``validated_here``, for remember_checked) is not part of
    what the recipe says: the load that trusted the stack's marker gives an equal recipe, and every field but
    those two."""
    import dataclasses

    from october.installer.recipe import load_recipe, remember_checked

    path = write(tmp_path, GOOD)
    checked = tmp_path / "stack" / ".state" / "recipe-checked"
    checked.parent.mkdir(parents=True)
    validated = load_recipe(str(path), checked=checked)
    remember_checked(validated, checked)
    trusted = load_recipe(str(path), checked=checked)
    assert validated.validated_digest is not None and trusted.validated_digest is None     # the marker was used
    assert validated == trusted and repr(validated) == repr(trusted)
    assert {f.name for f in dataclasses.fields(validated) if getattr(validated, f.name) != getattr(trusted, f.name)} \
        == {"validated_digest", "validated_here"}


def test_a_forks_file_that_is_not_there_names_the_recipe_key(tmp_path: Path) -> None:
    """The new-user hunt: a recipe whose forks_file names a missing file said "check the path or the recipe name
    (see recipes/)", naming neither the key nor the recipe.  It names forks_file, the path it resolved to, and
    the recipe to edit."""
    path = write(tmp_path, GOOD.replace('forks_file = "forks.toml"', 'forks_file = "../elsewhere/forks.toml"'))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path))
    msg = info.value.message
    assert f"{path}: key 'forks_file' is invalid" in msg and "no such file" in msg, msg
    assert str((tmp_path / "../elsewhere/forks.toml").resolve()) in msg and f"set forks_file in {path}" in msg, msg
