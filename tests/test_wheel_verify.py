"""october.installer.wheels.verify / tags / elf on real wheels built by the fixtures (no mocks).

The stack Python's tags come from a real probe of this interpreter through a Runner (packaging's
``sys_tags()`` run there); planted faults live in real interpreters (a venv whose ``.pth`` changes them).
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import packaging.markers
import packaging.tags
import pytest
from packaging.specifiers import SpecifierSet

from october.installer.core.errors import CommandFailed, EnvError, WheelError
from october.installer.core.runner import Runner
from october.installer.wheels.elf import (
    DynamicScanner,
    ElfFormatError,
    exports_symbol,
    needed_libraries,
    read_dynamic,
)
from october.installer.wheels.extensions import module_of
from october.installer.wheels.retag import match_tags
from october.installer.wheels.scan import scan_members
from october.installer.wheels.tags import PythonFacts, packaging_dir, probe_python, supported_tags
from october.installer.wheels.verify import CHECKS, WheelExpectation, verify_wheel
from tests.fixtures.base_wheels import elf_so, host_tag, real_facts, vllm_wheel


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> PythonFacts:
    runner = Runner(tmp_path_factory.mktemp("logs"))
    return probe_python(runner, Path(sys.executable), step="wheel")


@pytest.fixture(scope="module")
def tags(facts: PythonFacts) -> frozenset[str]:
    return frozenset(supported_tags(facts))


def expect_for(path: Path, tags: frozenset[str], facts: PythonFacts, **over: object) -> WheelExpectation:
    base: dict[str, object] = dict(filename=path.name, name="vllm", version="0.18.0", supported_tags=tags,
                                   marker_env=dict(facts.markers), torch="2.10.0+cu128", cuda_variant="cu129",
                                   cudart_major="12")
    base.update(over)
    return WheelExpectation(**base)  # type: ignore[arg-type]


def failure(path: Path, expect: WheelExpectation) -> str:
    with pytest.raises(WheelError) as err:
        verify_wheel(path, expect)
    return str(err.value)


# ------------------------------------------------------------------- tags / probe


def test_probe_and_tags_of_the_real_interpreter(facts: PythonFacts, tags: frozenset[str]) -> None:
    assert facts.implementation == "cpython" and facts.version == sys.version_info[:2]
    assert host_tag() in tags                           # like vLLM's cp38-abi3-manylinux_2_31_<arch>
    assert f"cp{sys.version_info[0]}{sys.version_info[1]}-none-any" in tags and "py3-none-any" in tags
    assert not any("win_amd64" in t or "macosx" in t for t in tags)


def test_probe_is_packaging_in_the_interpreter_itself(facts: PythonFacts) -> None:
    """For this interpreter the probe's answer is packaging's own, computed in this process."""
    assert list(facts.tags) == supported_tags(facts) == [str(t) for t in packaging.tags.sys_tags()]
    assert dict(facts.markers) == packaging.markers.default_environment()


def _other_pythons() -> list[Path]:
    """Other CPythons on this machine that the tool's packaging supports: uv's 3.12 / 3.13 / 3.10,
    ``python3.1x`` on PATH, the system's python3 (none of them needs packaging installed)."""
    cands: list[str] = []
    uv = shutil.which("uv")
    for minor in ("3.12", "3.13", "3.10"):
        if uv is not None:
            done = subprocess.run([uv, "python", "find", "--no-project", minor], capture_output=True, text=True)
            cands += [done.stdout.strip()] if done.returncode == 0 and done.stdout.strip() else []
        cands += [p for p in [shutil.which(f"python{minor}")] if p is not None]
    cands.append("/usr/bin/python3")
    need = SpecifierSet(importlib.metadata.metadata("packaging")["Requires-Python"] or "")
    found: dict[Path, Path] = {Path(sys.executable).resolve(): Path(sys.executable)}
    for cand in cands:
        try:
            done = subprocess.run([cand, "-I", "-c", "import platform, sys; print(sys.executable); "
                                   "print(sys.implementation.name, platform.python_version())"],
                                  capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        lines = done.stdout.split("\n")
        if done.returncode != 0 or len(lines) < 2 or lines[1].split()[0] != "cpython":
            continue
        real = Path(lines[0]).resolve()
        if real not in found and need.contains(lines[1].split()[1]):
            found[real] = Path(cand)
    return list(found.values())[1:]


SYS_TAGS = ("import json, sys; sys.path.insert(0, sys.argv[1]); from packaging import markers, tags; "
            "print(json.dumps({'tags': [str(t) for t in tags.sys_tags()], 'markers': markers.default_environment()}))")


def test_probe_is_packaging_in_another_interpreter(tmp_path: Path) -> None:
    """Another Python (which need not have packaging): the probe's tags and markers are what
    ``packaging`` says when that interpreter imports it the ordinary way."""
    others = _other_pythons()
    if not others:
        pytest.skip("no second CPython on this machine (uv python find 3.12, python3.12 on PATH, /usr/bin/python3)")
    site = tmp_path / "site"
    site.mkdir()
    (site / "packaging").symlink_to(packaging_dir(), target_is_directory=True)
    for other in others:
        done = subprocess.run([str(other), "-I", "-B", "-c", SYS_TAGS, str(site)], capture_output=True, text=True,
                              check=True)
        want = json.loads(done.stdout.strip().splitlines()[-1])
        got = probe_python(Runner(tmp_path / "logs"), other, step="wheel")
        assert list(got.tags) == want["tags"] and dict(got.markers) == want["markers"], other
        assert got.version == tuple(int(x) for x in want["markers"]["python_version"].split("."))


def test_probe_answer_stays_out_of_the_progress_display(tmp_path: Path) -> None:
    """The probe's JSON goes to the step's log (with its command), never to the runner's echo."""
    seen: list[str] = []
    runner = Runner(tmp_path / "logs", echo=seen.append)
    runner.run([sys.executable, "-c", "print('progress 1 of 2')"], step="wheel")
    assert seen == ["progress 1 of 2"]                  # the same runner echoes an ordinary command
    facts = probe_python(runner, Path(sys.executable), step="wheel")
    assert seen == ["progress 1 of 2"]
    log = runner.log_path("wheel").read_text()
    assert f"$ {sys.executable} -I -B -c " in log and json.dumps(list(facts.tags))[:200] in log


def _venv_with_pth(root: Path, pth: str) -> Path:
    """A venv of this CPython whose site-packages runs ``pth`` at start-up (a fault planted in the interpreter)."""
    venv.create(root, with_pip=False, symlinks=True)
    site = next(root.glob("lib/python*/site-packages"))
    (site / "planted.pth").write_text(pth + "\n")
    return root / "bin" / "python"


def test_stack_env_packaging_is_not_the_one_asked(tmp_path: Path, facts: PythonFacts) -> None:
    """A stack env with a packaging of its own, already imported at start-up: the probe still loads the
    tool's packaging by path and answers as this interpreter (the same base CPython) does."""
    python = _venv_with_pth(tmp_path / "env", "import packaging.tags")
    own = next((tmp_path / "env").glob("lib/python*/site-packages")) / "packaging"
    own.mkdir()
    (own / "__init__.py").write_text("")
    (own / "tags.py").write_text("def sys_tags():\n    return ['py3-none-stack_own']\n")
    got = probe_python(Runner(tmp_path / "logs"), python, step="wheel")
    assert got.tags == facts.tags and "py3-none-stack_own" not in got.tags


def test_old_glibc_interpreter_refuses_a_newer_manylinux_wheel(tmp_path: Path, facts: PythonFacts) -> None:
    """A stack Python that sees glibc 2.28: packaging there offers manylinux_2_28 and older, so a wheel
    needing glibc 2.31 (like vLLM 0.18's) is refused, naming the glibc it would need."""
    arch = platform.machine()
    python = _venv_with_pth(tmp_path / "env", "import os; _c = os.confstr; "
                            "os.confstr = lambda n: 'glibc 2.28' if n == 'CS_GNU_LIBC_VERSION' else _c(n)")
    old = probe_python(Runner(tmp_path / "logs"), python, step="wheel")
    got = set(supported_tags(old))
    assert f"cp38-abi3-manylinux_2_28_{arch}" in got and f"cp38-abi3-manylinux_2_31_{arch}" not in got
    if arch in ("x86_64", "aarch64"):
        assert f"cp38-abi3-manylinux2014_{arch}" in got
    whl = vllm_wheel(tmp_path, tag=f"cp38-abi3-manylinux_2_31_{arch}")
    msg = failure(whl, expect_for(whl, frozenset(got), old))
    assert "[tags] expected a tag the stack Python supports (platforms up to " \
           f"manylinux_2_28_{arch}, i.e. glibc 2.28 on {arch})" in msg
    if f"cp38-abi3-manylinux_2_31_{arch}" in facts.tags:           # this machine's own Python takes it
        assert "tags" in verify_wheel(whl, expect_for(whl, frozenset(supported_tags(facts)), facts)).checks


# the .pth sends the interpreter's stdout to /dev/null and writes its own line: the probe exits 0
_JUNK = "import os, sys; sys.stdout = open(os.devnull, 'w'); os.write(1, {line!r})"


@pytest.mark.parametrize("line", [b"{not json}\n", b"{}\n", b"Python 3.11 says hello\n"],
                         ids=["junk_json", "no_tags", "no_json"])
def test_interpreter_that_answers_junk_is_an_env_error(tmp_path: Path, line: bytes) -> None:
    python = _venv_with_pth(tmp_path / "env", _JUNK.format(line=line))
    with pytest.raises(EnvError) as err:
        probe_python(Runner(tmp_path / "logs"), python, step="wheel")
    assert err.value.expected == "one JSON line from the tag probe (packaging.tags.sys_tags() run there)"
    assert line.decode().strip() in str(err.value.found) and "did not describe itself" in str(err.value)


def test_interpreter_that_fails_is_a_command_failure(tmp_path: Path) -> None:
    python = _venv_with_pth(tmp_path / "env", "import os; os._exit(3)")
    with pytest.raises(CommandFailed) as err:
        probe_python(Runner(tmp_path / "logs"), python, step="wheel")
    assert err.value.returncode == 3


def test_non_cpython_stack_python_is_refused(facts: PythonFacts) -> None:
    with pytest.raises(EnvError):
        supported_tags(PythonFacts(**{**facts.__dict__, "implementation": "pypy"}))


# ------------------------------------------------------------------------- ELF


def test_elf_needed_of_fixture_so() -> None:
    import io
    assert needed_libraries(io.BytesIO(elf_so(["libtorch.so", "libcudart.so.12"]))) == \
        ["libtorch.so", "libcudart.so.12"]
    with pytest.raises(ElfFormatError):
        needed_libraries(io.BytesIO(b"MZ not an elf file at all"))
    with pytest.raises(ElfFormatError):
        needed_libraries(io.BytesIO(elf_so(["libcudart.so.12"])[:100]))   # truncated


def test_elf_needed_of_a_real_cuda_library_matches_readelf() -> None:
    """A real CUDA-linked ELF (torch's libc10_cuda.so), compared with binutils' readelf."""
    import importlib.util
    spec = importlib.util.find_spec("torch")          # located, not imported (slow, noisy)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed")
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib" / "libc10_cuda.so"
    readelf = shutil.which("readelf")
    if not lib.exists() or readelf is None:
        pytest.skip("needs a CUDA build of torch and readelf")
    import subprocess
    out = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    want = [ln.split("[", 1)[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln]
    with open(lib, "rb") as fh:
        assert needed_libraries(fh) == want
    assert any(n.startswith("libcudart.so.") for n in want)


# ---------------------------------------------------------------------- wheels


def test_good_wheel_passes_every_check(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path)
    report = verify_wheel(whl, expect_for(whl, tags, facts))
    assert report.checks == CHECKS
    assert (report.name, report.version, report.torch_requirement) == ("vllm", "0.18.0", "torch==2.10.0")
    assert report.cuda is not None and report.cuda.cudart_majors == {"12"}
    assert report.files == 13                          # 3 Python files, 7 shared objects, 3 dist-info files
    # like the real 0.18.0 wheel: WHEEL says linux_<arch>, the file name manylinux; accepted and recorded
    arch = platform.machine()
    assert report.wheel_tags == (f"cp38-abi3-linux_{arch}",)
    assert [r.as_json() for r in report.retag] == [{"wheel": f"cp38-abi3-linux_{arch}", "filename": host_tag()}]
    assert [e.module for e in report.extensions] == real_facts()["0.18.0"]["extensions"]
    assert report.version_info is not None and report.version_info.commit == "bcf2be961"
    assert report.rereads == 0


def test_one_record_hash_wrong(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path, tamper={"vllm/__init__.py": b"import os; os.system('evil')\n"})
    msg = failure(whl, expect_for(whl, tags, facts))
    assert "[record] vllm/__init__.py: hash mismatch" in msg and "(record)" in msg
    assert "[record]" in msg and msg.count("  - [") == 2          # hash and size, nothing else


def test_file_missing_from_record_and_record_entry_missing(tmp_path: Path, tags: frozenset[str],
                                                           facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path)
    with zipfile.ZipFile(whl, "a") as zf:
        zf.writestr("vllm/smuggled.py", "print('hi')\n")
    msg = failure(whl, expect_for(whl, tags, facts))
    assert "vllm/smuggled.py is in the wheel but not in RECORD" in msg


def test_dotdot_path(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path, extra_record=[("../escape.py", b"x = 1\n")])
    msg = failure(whl, expect_for(whl, tags, facts))
    assert "[paths] ../escape.py has a '..' component" in msg


def test_absolute_path(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path, extra_record=[("/etc/cron.d/evil", b"* * * * * root true\n")])
    msg = failure(whl, expect_for(whl, tags, facts))
    assert "[paths] /etc/cron.d/evil is an absolute path" in msg


def test_symlink_entry(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path)
    with zipfile.ZipFile(whl, "a") as zf:
        info = zipfile.ZipInfo("vllm/link.py")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "../../../etc/passwd")
    msg = failure(whl, expect_for(whl, tags, facts))
    assert "[paths] vllm/link.py is a symbolic link entry" in msg


# one fault planted in an otherwise good wheel -> the message names the check, what was expected and found
ONE_FAULT = [
    pytest.param({"tag": "cp38-abi3-macosx_11_0_arm64"}, ["[tags] expected a tag the stack Python supports",
                                                         "cp38-abi3-macosx_11_0_arm64"], id="wrong_platform_tag"),
    pytest.param({"metadata_name": "vllm-nightly"}, ["[metadata] METADATA Name: expected vllm, found vllm-nightly"],
                 id="wrong_name"),
    pytest.param({"metadata_version": "0.18.1"}, ["[metadata] METADATA Version: expected 0.18.0, found 0.18.1"],
                 id="wrong_version"),
    pytest.param({"torch": "2.11.0"}, ["[torch-pin] expected Requires-Dist: torch==2.10.0 (the recipe's torch), "
                                       "found torch==2.11.0"], id="wrong_torch_pin"),
    pytest.param({"cudart": "13"}, ["[cuda-variant] expected libcudart.so.12 (cu129), found: vllm/_C.abi3.so needs "
                                    "libcudart.so.13"], id="wrong_cuda_runtime"),
]


@pytest.mark.parametrize("fault,fragments", ONE_FAULT)
def test_one_planted_fault_is_named(tmp_path: Path, tags: frozenset[str], facts: PythonFacts,
                                    fault: dict[str, str], fragments: list[str]) -> None:
    whl = vllm_wheel(tmp_path, **fault)
    msg = failure(whl, expect_for(whl, tags, facts))
    for fragment in fragments:
        assert fragment in msg


def test_wheel_file_tags_disagree_with_file_name(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    built = vllm_wheel(tmp_path, tag="cp38-abi3-win_amd64")
    renamed = built.with_name(f"vllm-0.18.0-{host_tag()}.whl")
    built.rename(renamed)
    msg = failure(renamed, expect_for(renamed, tags, facts))
    assert "[tags] WHEEL declares tags cp38-abi3-win_amd64" in msg


def test_recipe_names_another_file(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path, version="0.19.0")
    msg = failure(whl, expect_for(whl, tags, facts, filename="vllm-0.18.0-x.whl"))
    assert "[filename] expected the file vllm-0.18.0-x.whl" in msg
    assert "[filename] expected version 0.18.0 in the file name, found 0.19.0" in msg


def test_loose_or_missing_torch_pin(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    loose = vllm_wheel(tmp_path / "a", requires=["torch>=2.10.0"])
    assert "[torch-pin] expected Requires-Dist: torch==2.10.0" in failure(loose, expect_for(loose, tags, facts))
    none = vllm_wheel(tmp_path / "b", requires=["transformers"])
    assert "found no torch requirement" in failure(none, expect_for(none, tags, facts))


def test_torch_pin_markers_use_the_stack_environment(tmp_path: Path, tags: frozenset[str],
                                                     facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path, requires=["torch==2.10.0; sys_platform == 'linux'",
                                         "torch==2.9.0; sys_platform == 'win32'"])
    assert "torch-pin" in verify_wheel(whl, expect_for(whl, tags, facts)).checks
    on_windows = {**facts.markers, "sys_platform": "win32"}
    msg = failure(whl, expect_for(whl, tags, facts, marker_env=on_windows))
    assert "found torch==2.9.0" in msg


def test_wrong_cuda_local_variant(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path, version="0.18.0+cu130", cudart=None)
    msg = failure(whl, expect_for(whl, tags, facts, version="0.18.0+cu130", cudart_major=None))
    assert "[cuda-variant] the wheel's version says CUDA variant cu130: expected cu129, found cu130" in msg


def test_cuda_build_that_cannot_be_told_fails_closed(tmp_path: Path, tags: frozenset[str],
                                                     facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path, cudart=None)
    assert "[cuda-variant] cannot tell the wheel's CUDA build" in failure(whl, expect_for(whl, tags, facts))
    junk = vllm_wheel(tmp_path / "j", so=b"\x7fELF garbage")
    assert "vllm/_C.abi3.so is not a readable ELF" in failure(junk, expect_for(junk, tags, facts))


def test_truncated_file(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path)
    whl.write_bytes(whl.read_bytes()[: whl.stat().st_size // 2])
    msg = failure(whl, expect_for(whl, tags, facts))
    assert "[zip] expected a zip archive" in msg and "truncated" in msg


def test_every_problem_is_listed_at_once(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path, torch="2.9.0", cudart="13", metadata_version="0.17.0",
                     tamper={"vllm/_version.py": b"__version__ = '0.0.0'\n"})
    msg = failure(whl, expect_for(whl, tags, facts))
    assert "failed 4 check(s) (metadata, torch-pin, record, cuda-variant)" in msg
    for check in ("[metadata]", "[torch-pin]", "[record]", "[cuda-variant]"):
        assert check in msg
    assert "nothing was installed" in msg


def rewrite(whl: Path, *, drop: tuple[str, ...] = (), replace: dict[str, bytes] | None = None,
            add: dict[str, bytes] | None = None) -> Path:
    """Rewrite the wheel's zip: drop / replace / add members (RECORD is left as it was)."""
    items: list[tuple[zipfile.ZipInfo, bytes]] = []
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            if info.filename in drop:
                continue
            items.append((info, (replace or {}).get(info.filename, zf.read(info))))
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, data in items:
            zf.writestr(info, data)
        for name, data in (add or {}).items():
            zf.writestr(name, data)
    return whl


def test_invalid_wheel_file_name(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path, filename="vllm.whl")
    assert "[filename] vllm.whl is not a valid wheel file name" in failure(whl, expect_for(whl, tags, facts))


def test_dist_info_must_be_exactly_one(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = rewrite(vllm_wheel(tmp_path), add={"other-1.0.dist-info/METADATA": b"Name: other\n"})
    msg = failure(whl, expect_for(whl, tags, facts))
    assert "[metadata] expected exactly one .dist-info directory, found 2" in msg


def test_missing_record(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = rewrite(vllm_wheel(tmp_path), drop=("vllm-0.18.0.dist-info/RECORD",))
    assert "[record] expected vllm-0.18.0.dist-info/RECORD, found no such file" in \
        failure(whl, expect_for(whl, tags, facts))


def test_record_lists_a_file_the_wheel_lacks(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = rewrite(vllm_wheel(tmp_path), drop=("vllm/vllm_flash_attn/__init__.py",))
    assert "[record] RECORD lists vllm/vllm_flash_attn/__init__.py, which is not in the wheel" in \
        failure(whl, expect_for(whl, tags, facts))


def test_weak_record_hash(tmp_path: Path, tags: frozenset[str], facts: PythonFacts) -> None:
    whl = vllm_wheel(tmp_path)
    record = "vllm-0.18.0.dist-info/RECORD"
    with zipfile.ZipFile(whl) as zf:
        text = zf.read(record).decode()
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm/__init__.py,"))
    weak = text.replace(line, "vllm/__init__.py,md5=AAAA,38")
    rewrite(whl, replace={record: weak.encode()})
    assert "[record] vllm/__init__.py: expected a sha256 (or stronger) hash in RECORD, found 'md5=AAAA'" in \
        failure(whl, expect_for(whl, tags, facts))


# ---------------------------------------------------------------------- retag


def test_retag_rules() -> None:
    """Only linux_<arch> -> manylinux/musllinux of the same interpreter, ABI and arch is accepted."""
    def check(declared: set[str], names: set[str]) -> tuple[list[tuple[str, str]], bool]:
        retags, problem = match_tags(frozenset(declared), frozenset(names))
        return [(r.wheel, r.filename) for r in retags], problem is None

    plain = "cp38-abi3-linux_x86_64"
    assert check({plain}, {"cp38-abi3-manylinux_2_31_x86_64"}) == ([(plain, "cp38-abi3-manylinux_2_31_x86_64")], True)
    assert check({plain}, {"cp38-abi3-manylinux2014_x86_64"})[1]
    assert check({plain}, {"cp38-abi3-musllinux_1_2_x86_64"})[1]
    assert check({"a-b-c"}, {"a-b-c"}) == ([], True)
    for declared, names in (
            ({plain}, {"cp38-abi3-manylinux_2_31_aarch64"}),                    # another arch
            ({"cp312-cp312-linux_x86_64"}, {"cp38-abi3-manylinux_2_31_x86_64"}),  # another interpreter/ABI
            ({"cp38-abi3-manylinux_2_17_x86_64"}, {"cp38-abi3-manylinux_2_31_x86_64"}),  # manylinux -> manylinux
            ({"cp38-abi3-manylinux_2_31_x86_64"}, {plain}),                     # the wrong direction
            ({plain}, {"cp38-abi3-win_amd64"}), ({plain}, {"cp38-abi3-macosx_11_0_x86_64"}),
            ({plain, "cp38-abi3-linux_aarch64"}, {"cp38-abi3-manylinux_2_31_x86_64"}),  # one declared unmatched
            (set(), {"cp38-abi3-manylinux_2_31_x86_64"})):
        assert check(declared, names) == ([], False), (declared, names)


@pytest.mark.parametrize("wheel_tag", ["cp38-abi3-manylinux2014_{arch}", "cp312-cp312-linux_{arch}",
                                       "cp38-abi3-linux_riscv64", "cp38-abi3-win_amd64"])
def test_any_other_wheel_tag_still_fails(tmp_path: Path, tags: frozenset[str], facts: PythonFacts,
                                         wheel_tag: str) -> None:
    declared = wheel_tag.format(arch=platform.machine())
    whl = vllm_wheel(tmp_path, wheel_tag=declared)
    msg = failure(whl, expect_for(whl, tags, facts))
    assert f"[tags] WHEEL declares tags {declared}, expected the file name's {host_tag()}" in msg


# -------------------------------------------------------------- extension modules


def test_module_names_follow_cpython_suffixes() -> None:
    assert module_of("vllm/_C.abi3.so", (3, 12)) == "vllm._C"
    assert module_of("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", (3, 12)) == "vllm.vllm_flash_attn._vllm_fa2_C"
    deep = "vllm/third_party/deep_gemm/_C.cpython-{}-x86_64-linux-gnu.so"
    assert module_of(deep.format(312), (3, 12)) == "vllm.third_party.deep_gemm._C"
    assert module_of(deep.format(310), (3, 12)) is None and module_of(deep.format("313t"), (3, 13)) is not None
    assert module_of("vllm.libs/libcudart-1a2b3c4d.so.12", (3, 12)) is None
    assert module_of("vllm/lib-foo.so", (3, 12)) is None


def test_extensions_follow_the_real_wheel_of_each_version(tmp_path: Path, tags: frozenset[str],
                                                          facts: PythonFacts) -> None:
    """0.24.0 ships no vllm._C: the list comes from the wheel, and only this Python's deep_gemm build counts."""
    whl = vllm_wheel(tmp_path, version="0.24.0")
    report = verify_wheel(whl, expect_for(whl, tags, facts, version="0.24.0", torch="2.11.0", cuda_variant="cu130",
                                          cudart_major="13", python_version=(3, 12)))
    modules = [e.module for e in report.extensions]
    assert "vllm._C" not in modules and "vllm._C_stable_libtorch" in modules
    assert modules == real_facts()["0.24.0"]["extensions"]
    deep = [e.path for e in report.extensions if e.module == "vllm.third_party.deep_gemm._C"]
    assert deep == ["vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so"]
    other = verify_wheel(whl, expect_for(whl, tags, facts, version="0.24.0", torch="2.11.0", cuda_variant="cu130",
                                         cudart_major="13", python_version=(3, 11)))
    assert [e.path for e in other.extensions if "deep_gemm" in e.path] == \
        ["vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so"]


def test_a_shared_library_without_pyinit_is_not_an_extension(tmp_path: Path, tags: frozenset[str],
                                                            facts: PythonFacts) -> None:
    lib = elf_so(["libcudart.so.12", "libc.so.6"])                       # exports no PyInit_helper
    whl = vllm_wheel(tmp_path, extra_record=[("vllm/helper.so", lib)])
    report = verify_wheel(whl, expect_for(whl, tags, facts))
    assert "vllm.helper" not in [e.module for e in report.extensions] and "vllm._C" in \
        [e.module for e in report.extensions]


# ------------------------------------------------------------------ one pass


def test_forward_scanner_matches_the_seeking_reader() -> None:
    data = elf_so(["libtorch.so", "libcudart.so.13", "libc.so.6"], exports=["PyInit__C"])
    for chunk in (1, 7, 64, len(data)):
        sc = DynamicScanner()
        for i in range(0, len(data), chunk):
            sc.feed(data[i:i + chunk])
        assert sc.finish() == needed_libraries(io.BytesIO(data)) == ["libtorch.so", "libcudart.so.13", "libc.so.6"]
        assert exports_symbol(sc.strtab, "PyInit__C") and not exports_symbol(sc.strtab, "PyInit__")
    assert read_dynamic(io.BytesIO(data))[1] == sc.strtab
    bad = DynamicScanner()
    bad.feed(b"MZ not an elf file at all")
    with pytest.raises(ElfFormatError):
        bad.finish()
    short = DynamicScanner()
    short.feed(data[:100])
    with pytest.raises(ElfFormatError):
        short.finish()


def test_string_table_outside_the_window_is_read_again(tmp_path: Path) -> None:
    """A string table the scanner did not hold (a 16-byte window) is read again with seeks: same facts."""
    data = elf_so(["libcudart.so.12"], exports=["PyInit__C"])
    sc = DynamicScanner(keep=16)
    sc.feed(data)
    assert sc.lost
    whl = vllm_wheel(tmp_path)
    with zipfile.ZipFile(whl) as zf:
        normal = scan_members(zf, {})
        small = scan_members(zf, {}, elf_window=16)
    assert (normal.rereads, small.rereads) == (0, 7)
    assert {n: m.elf for n, m in small.members.items()} == {n: m.elf for n, m in normal.members.items()}
