"""The project's own install story: what a fresh clone's run command pulls in, what the README
and CI say, and the tool's wheel (built by real uv, installed into a real tool environment)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _lock_packages() -> dict[str, dict]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    return {p["name"]: p for p in lock["package"]}


def _closure(packages: dict[str, dict], roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [d["name"] for d in packages[name].get("dependencies", [])]
    return seen


def test_the_run_command_installs_no_torch() -> None:
    """`uv run october_setup` syncs the project's dependencies plus the default groups; none of
    that may pull torch, CUDA or triton (the tool never imports them)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = _lock_packages()
    default_groups = pyproject.get("tool", {}).get("uv", {}).get("default-groups", ["dev"])
    roots = [d["name"] for d in packages["october"].get("dependencies", [])]
    for group in default_groups:
        roots += [d["name"] for d in packages["october"].get("dev-dependencies", {}).get(group, [])]
    needed = _closure(packages, roots)
    heavy = sorted(n for n in needed if n in ("torch", "triton") or n.startswith("nvidia-"))
    assert heavy == [], f"the run command would install {heavy}"
    tests = _closure(packages, [d["name"] for d in packages["october"]["dev-dependencies"]["test"]])
    assert {"torch", "pytest"} <= tests


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Tests", 1)[1]
    command = re.search(r"```\n(.+?)\n```", section, re.S)
    assert command is not None
    ci_lines = [ln for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if ln.strip()]
    assert ci_lines[-1] == command.group(1).strip()
    assert "--group test" in ci_lines[-1]


def test_every_imported_third_party_module_is_declared() -> None:
    """A module the tool imports must come from a declared dependency (not by luck, through
    another package's dependencies)."""
    import ast
    import sys

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower().replace("_", "-")
                for d in pyproject["project"]["dependencies"]}
    import_names = {"git": "gitpython", "yaml": "pyyaml", "tomli_w": "tomli-w", "huggingface_hub": "huggingface-hub",
                    "elftools": "pyelftools"}
    ours = {"installer", "checks", "october", "tests"}
    # an extra's modules may import what that extra declares (the fleet command: ray)
    extras = {f"installer/{name}/": {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower().replace("_", "-")
                                     for d in deps}
              for name, deps in pyproject["project"].get("optional-dependencies", {}).items()}
    found: set[str] = set()
    for path in (ROOT / "installer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top in ours or top in sys.stdlib_module_names or top == "__future__":
                    continue
                dist = import_names.get(top, top).lower().replace("_", "-")
                rel = path.relative_to(ROOT).as_posix()
                if any(rel.startswith(where) and dist in deps for where, deps in extras.items()):
                    continue
                found.add(dist)
    assert sorted(found - declared) == []


# ------------------------------------------------------------------ the tool as an installed wheel

def _tool_env(tmp_path: Path) -> dict[str, str]:
    import os

    from tests.conftest import real_cache_dir

    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH")}
    env.update(UV_TOOL_DIR=str(tmp_path / "tools"), UV_TOOL_BIN_DIR=str(tmp_path / "bin"),
               UV_CACHE_DIR=str(real_cache_dir() / "uv-cache"), PIPX_HOME=str(tmp_path / "pipx"),
               PIPX_BIN_DIR=str(tmp_path / "pipx-bin"), OCTOBER_CACHE_DIR=str(tmp_path / "october-cache"),
               PATH=f"{tmp_path / 'bin'}:{env.get('PATH', '')}")
    return env


def _check_installed_tool(bin_dir: Path, env: dict[str, str], cwd: Path) -> None:
    """The installed commands work from anywhere, with every shipped recipe, and no checkout."""
    import subprocess

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(bin_dir / argv[0]), *argv[1:]], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=300)

    help_ = run("october_setup", "--help")
    assert help_.returncode == 0 and "--recipe" in help_.stdout, help_.stderr
    version = run("october_setup", "--version")
    assert version.returncode == 0 and version.stdout.strip() == "october_setup 0.1.0", version.stdout
    listed = run("current", "recipes")
    assert listed.returncode == 0, listed.stderr
    names = {ln.split()[0] for ln in listed.stdout.splitlines() if ln.strip()}
    assert names == {p.stem for p in (ROOT / "recipes").glob("*.toml")}
    assert "INVALID" not in listed.stdout
    doctor = run("current", "doctor", "--recipe", "current")
    assert doctor.returncode in (0, 1), doctor.stderr          # 1: this machine lacks the GPU / CUDA
    assert "there is no recipe" not in doctor.stderr and re.search(r"^os\s+passed", doctor.stdout, re.M)
    # the schemas, forks.toml and the stack-env code root come from the installed copy, not a checkout
    tool_python = (bin_dir / "current").read_text().splitlines()[0].removeprefix("#!").split()[0]
    probe = subprocess.run([tool_python, "-c", (
        "import json, os, sys; from october.installer.core import resources as r; "
        "code = r.stack_code_root(__import__('pathlib').Path(os.environ['OCTOBER_CACHE_DIR'])); "
        "print(json.dumps({'data': str(r.DATA_ROOT), 'checkout': r.checkout_root(), "
        "'schemas': [r.schema_path(n).is_file() for n in ('setup', 'smoke', 'download')], "
        "'forks': r.forks_file().is_file(), 'code': sorted(os.listdir(code)), "
        "'checks': os.path.isfile(os.path.join(code, 'october', 'checks', 'smoke.py'))}))")],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    import json

    facts = json.loads(probe.stdout)
    assert facts["checkout"] is None and str(ROOT) not in facts["data"], facts
    assert facts["schemas"] == [True, True, True] and facts["forks"] and facts["checks"], facts
    assert facts["code"] == ["october"], facts


def _uv(env: dict[str, str], cwd: Path, *args: str) -> None:
    """Real uv (the one on PATH) with ``args``; it must succeed."""
    import shutil
    import subprocess

    uv = shutil.which("uv")
    assert uv is not None
    done = subprocess.run([uv, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.real
@pytest.mark.slow
def test_uv_tool_install_gives_working_commands(tmp_path: Path) -> None:
    """Real uv builds the project and installs it as a tool (dependencies from PyPI)."""
    env = _tool_env(tmp_path)
    _uv(env, tmp_path, "tool", "install", str(ROOT))
    _check_installed_tool(tmp_path / "bin", env, tmp_path)
    # PyPA's `installer` distribution owns the top-level name `installer`: installing it into the
    # tool's env and removing it again must not touch a file of ours (issue 11: it once deleted
    # the project's installer/__init__.py)
    tool_python = (tmp_path / "bin" / "current").read_text().splitlines()[0].removeprefix("#!").split()[0]
    for verb in ("install", "uninstall"):
        _uv(env, tmp_path, "pip", verb, "--python", tool_python, "installer")
    _check_installed_tool(tmp_path / "bin", env, tmp_path)


@pytest.mark.real
@pytest.mark.slow
def test_editable_uv_tool_install_gives_working_commands(tmp_path: Path) -> None:
    """An editable install (as a developer's ``uv sync`` or ``uv tool install --editable .``) reads the
    checkout through the same links the wheel is built from: the same data paths, the same commands."""
    env = _tool_env(tmp_path)
    _uv(env, tmp_path, "tool", "install", "--editable", str(ROOT))
    bin_dir = tmp_path / "bin"
    import json
    import subprocess

    tool_python = (bin_dir / "current").read_text().splitlines()[0].removeprefix("#!").split()[0]
    probe = subprocess.run([tool_python, "-c", (
        "import json; from october.installer.core import resources as r; "
        "print(json.dumps({'data': str(r.DATA_ROOT), 'checkout': str(r.checkout_root()), "
        "'forks': r.forks_file().resolve() == r.checkout_root() / 'forks.toml'}))")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    facts = json.loads(probe.stdout)
    assert facts == {"data": str(ROOT), "checkout": str(ROOT), "forks": True}, probe.stderr
    listed = subprocess.run([str(bin_dir / "current"), "recipes"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert {ln.split()[0] for ln in listed.stdout.splitlines() if ln.strip()} == \
        {p.stem for p in (ROOT / "recipes").glob("*.toml")}, listed.stderr


def test_the_package_reaches_the_layout_through_links_only() -> None:
    """One mechanism for the package name and the data: ``october/installer``, ``october/checks`` and
    ``october/_data/<name>`` are links to the layout's folders and files (hatch follows them into the
    wheel); pyproject.toml rewrites no path (no ``force-include``, no ``sources``)."""
    import tomllib

    from october.installer.core import resources

    links = {"installer": "installer", "checks": "checks", **{f"_data/{n}": n for n in resources.SHIPPED_NAMES}}
    for inside, target in links.items():
        path = ROOT / "october" / inside
        assert path.is_symlink() and path.resolve() == (ROOT / target).resolve(), inside
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel == {"packages": ["october"]}, wheel
    assert resources.DATA_ROOT == ROOT and resources.forks_file() == ROOT / "forks.toml"


@pytest.mark.real
def test_the_wheel_holds_one_import_package_of_ours(tmp_path: Path) -> None:
    """Every file of the built wheel is under ``october/`` or its dist-info: no top-level name
    another distribution could claim (``installer`` is PyPA's).  Real uv builds the wheel."""
    import shutil
    import subprocess
    import zipfile

    uv = shutil.which("uv")
    assert uv is not None
    built = subprocess.run([uv, "build", "--wheel", "-o", str(tmp_path / "dist"), str(ROOT)], env=_tool_env(tmp_path),
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    wheel = next((tmp_path / "dist").glob("october-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"october", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}, tops
    for must in ("october/__init__.py", "october/installer/cli/main.py", "october/checks/smoke.py",
                 "october/_data/forks.toml", "october/_data/recipes/current.toml",
                 "october/_data/receipts/setup.schema.json", "october/_data/locks/current.pylock.toml"):
        assert must in names, must
    record = next(n for n in names if n.endswith(".dist-info/RECORD"))
    listed = {row.split(",", 1)[0] for row in zipfile.ZipFile(wheel).read(record).decode().splitlines() if row}
    assert {p.split("/", 1)[0] for p in listed} == tops
    assert len(names) == len(set(names)), "a file is in the wheel twice"


@pytest.mark.real
@pytest.mark.slow
def test_pipx_install_of_the_wheel_gives_working_commands(tmp_path: Path) -> None:
    """Real pipx (run by uvx) installs the wheel real uv builds."""
    env = _tool_env(tmp_path)
    _uv(env, tmp_path, "build", "--wheel", "-o", str(tmp_path / "dist"), str(ROOT))
    wheel = next((tmp_path / "dist").glob("october-*.whl"))
    _uv(env, tmp_path, "tool", "run", "pipx", "install", str(wheel))
    _check_installed_tool(tmp_path / "pipx-bin", env, tmp_path)
