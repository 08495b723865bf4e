"""The one package mechanism (links, issue 21) where the code is not a plain checkout: a copy that kept
its links but not ``.git`` (a tarball), a copy whose links became folders (the working dir Ray uploads
for a fleet), a checkout under a folder named ``_data``.  Real copies of this checkout, each asked in a
fresh interpreter; the installed wheel is tests/test_project_install.py's."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.fixtures.root import PROJECT_ROOT

LAYOUT = ("october", "installer", "checks", "recipes", "forks.toml", "receipts", "locks")
ASK = ("import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
       "from october.installer.core import resources as r; from october.installer.pyenv.builtkey import code_digest; "
       "import october; print(json.dumps({'installed': r.INSTALLED, 'data': str(r.DATA_ROOT), "
       "'code_root': str(r.stack_code_root(Path(sys.argv[2]))), 'recipes': len(r.shipped_recipes()), "
       "'digest': code_digest(Path(october.__file__).resolve().parent), 'package': october.__file__}))")


def copy_layout(dest: Path, *, follow_links: bool) -> Path:
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__")
    for name in LAYOUT:
        src = PROJECT_ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, symlinks=not follow_links, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def ask(root: Path, cache: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-I", "-c", ASK, str(root), str(cache)], capture_output=True, text=True,
                          timeout=120, cwd=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_copy_that_kept_its_links_runs_the_stack_code_from_itself(tmp_path: Path) -> None:
    root = copy_layout(tmp_path / "tarball", follow_links=False)
    facts = ask(root, tmp_path / "cache")
    assert facts["package"] == str(root / "october" / "__init__.py")
    assert (facts["installed"], facts["data"], facts["code_root"]) == (False, str(root), str(root)), facts
    assert facts["recipes"] == len(list((PROJECT_ROOT / "recipes").glob("*.toml")))


def test_a_copy_whose_links_became_folders_is_still_not_an_installed_tool(tmp_path: Path) -> None:
    root = copy_layout(tmp_path / "ray-working-dir", follow_links=True)
    assert not (root / "october" / "installer").is_symlink()
    facts = ask(root, tmp_path / "cache")
    assert (facts["installed"], facts["code_root"]) == (False, str(root)), facts
    assert facts["data"] == str(root / "october" / "_data") and facts["recipes"] > 0


def test_the_code_digest_ignores_the_folders_above_the_package(tmp_path: Path) -> None:
    """A folder named ``_data`` (or ``__pycache__``) above the package is not part of it: the digest of
    the code is the same wherever the copy lies, and never the digest of nothing."""
    plain = ask(copy_layout(tmp_path / "a" / "repo", follow_links=False), tmp_path / "cache")
    under = ask(copy_layout(tmp_path / "_data" / "repo", follow_links=False), tmp_path / "cache")
    assert plain["digest"] == under["digest"] != hashlib.sha256(b"").hexdigest()
    edited = copy_layout(tmp_path / "b" / "repo", follow_links=False)
    (edited / "installer" / "cli" / "noop.py").write_text((edited / "installer" / "cli" / "noop.py").read_text() + "\n# edited\n")
    assert ask(edited, tmp_path / "cache")["digest"] != plain["digest"]


def test_every_module_a_shell_script_runs_exists() -> None:
    """``python -m october....`` in locks/ and bench/ scripts (``locks/regenerate.sh`` is what the lock
    check tells users to run): each module must be one the package has."""
    import importlib.util

    targets = {(path.name, m) for path in [*PROJECT_ROOT.glob("locks/*.sh"), *PROJECT_ROOT.glob("bench/*.sh")]
               for m in re.findall(r"-m (october(?:\.\w+)+)", path.read_text(encoding="utf-8"))}
    assert ("regenerate.sh", "october.installer.lock.indexlock") in targets
    def found(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:           # a parent that is a module, not a package
            return False

    assert not found("october.installer.steps.lock.indexlock")      # the name the script had before issue 21
    assert sorted((name, m) for name, m in targets if not found(m)) == []
