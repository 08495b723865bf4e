"""The stack-env probes read distribution metadata the quick way (issue 20): the distributions probe takes Name and
Version from the METADATA header block only, the install-facts probe scans RECORD as text for the package's
``__init__.py``.  Each must agree with what ``importlib.metadata`` itself says, on real distributions
laid out as installers write them (dist-info, a single-file legacy egg-info, quoted and ``./`` RECORD
rows), and the real probes are run as the tool runs them (a subprocess, ``-I``)."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"october_{name}", ROOT / "checks" / "probes" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _site(tmp: Path) -> Path:
    site = tmp / "site"
    (site / "alpha-1.0.dist-info").mkdir(parents=True)
    (site / "alpha-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\r\nName: alpha\r\nVersion: 1.0\r\nSummary: a\r\n\tfolded\r\n\r\nName: not-this\r\n")
    (site / "alpha-1.0.dist-info" / "RECORD").write_text(
        '"./alpha/__init__.py",sha256=x,1\nalpha-1.0.dist-info/METADATA,,\n')
    (site / "beta-2.0.dist-info").mkdir()
    (site / "beta-2.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: beta\nVersion: 2.0\n")
    (site / "beta-2.0.dist-info" / "RECORD").write_text("xalpha/__init__.py,,\nbeta/__init__.py,,\n")
    (site / "legacy_pkg-1.2.egg-info").write_text("Metadata-Version: 1.0\nName: legacy-pkg\nVersion: 1.2\n")
    return site


def test_headers_agree_with_importlib_metadata(tmp_path: Path) -> None:
    distributions = _load("distributions")
    dists = list(md.distributions(path=[str(_site(tmp_path))]))
    assert len(dists) == 3
    for d in dists:
        assert distributions.headers(d) == (d.metadata["Name"], d.version)


def test_ships_finds_quoted_and_dot_slash_rows_and_nothing_else(tmp_path: Path) -> None:
    install_facts = _load("install_facts")
    dists = {d.metadata["Name"]: d for d in md.distributions(path=[str(_site(tmp_path))])}
    assert install_facts._ships(dists["alpha"], "alpha") is True
    assert install_facts._ships(dists["beta"], "alpha") is False          # xalpha/ is another package
    assert install_facts._ships(dists["beta"], "beta") is True
    assert install_facts._ships(dists["legacy-pkg"], "alpha") is False     # no RECORD: importlib's listing
    for name, d in dists.items():                                          # the same verdict as dist.files
        for package in ("alpha", "beta"):
            want = any(str(f).replace("\\", "/") == f"{package}/__init__.py" for f in d.files or ())
            assert install_facts._ships(d, package) is want, (name, package)


def test_the_real_distributions_probe_lists_the_legacy_egg_info(tmp_path: Path) -> None:
    site = _site(tmp_path)
    code = (f"import sys, runpy; sys.path.insert(0, {str(site)!r}); "
            f"runpy.run_path({str(ROOT / 'checks' / 'probes' / 'distributions.py')!r}, run_name='__main__')")
    out = json.loads(subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                                    check=True).stdout)
    names = {(d["name"], d["version"]) for d in out["distributions"]}
    assert {("alpha", "1.0"), ("beta", "2.0"), ("legacy-pkg", "1.2")} <= names
