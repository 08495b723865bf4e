"""Credentials in a URL's query string never reach what a setup run writes or prints.

The audit's case: ``[wheel].url = "http://127.0.0.1:PORT/vllm-X.whl?token=...&sig=..."`` wrote the token
in clear to pylock.toml, receipts/setup.json, logs/wheel.log and .state/wheel.json.  Here the base wheel's
URL and the find-links URL both carry a planted secret, on the K16/V8 stand-in world (its forks, wheels and
recipe are made with tests/fixtures/world.py's helpers) through the real command line; every file the run
wrote is searched for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from october.installer.core.redact import MASK
from october.installer.lock.pylock import read_lock
from tests.fixtures.findlinks_server import serve_find_links
from tests.fixtures.root import PROJECT_ROOT
from tests.test_setup_k16v8_e2e import make_k16v8_world, write_recipe

pytestmark = pytest.mark.slow

WHEEL_SECRET = "qWHEELs3cr3tq"
LINKS_SECRET = "qLINKSs1gn4tureq"


def test_query_string_secrets_reach_no_file_and_no_output(tmp_path: Path) -> None:
    w = make_k16v8_world(tmp_path)
    wheel = w["wheel"]
    assert isinstance(wheel, Path)
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    with serve_find_links(wheel.parent) as served, serve_find_links(tmp_path / "links") as links:
        recipe = write_recipe(tmp_path, w, f"{served.url}{wheel.name}?token={WHEEL_SECRET}&sig=zz{WHEEL_SECRET}")
        text = recipe.read_text()
        assert 'find_links = ["links"]' in text
        recipe.write_text(text.replace('find_links = ["links"]',
                                       f'find_links = ["{links.url}?X-Amz-Signature={LINKS_SECRET}&page=1"]'))
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
        proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe",
                               str(recipe), "--cache-dir", str(cache), "--skip-preflight", "nvcc", "-v"],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert links.hits and served.hits          # both URLs were used, secrets and all

    # uv's own cache keeps the find-links page under its full URL (uv's format, not written by the tool)
    uv_cache = cache / "uv"
    written = [p for root in (stack, cache) for p in root.rglob("*")
               if p.is_file() and not p.is_symlink() and not p.is_relative_to(uv_cache)]
    assert any(p.name == "wheel.log" for p in written) and (stack / "pylock.toml") in written
    leaks = sorted(str(p) for p in written for secret in (WHEEL_SECRET, LINKS_SECRET)
                   if secret.encode() in p.read_bytes())
    assert leaks == [], f"a query-string secret leaked into {leaks}"
    for secret in (WHEEL_SECRET, LINKS_SECRET):
        assert secret not in proc.stdout + proc.stderr

    # the rest of the URL stays readable where it is recorded
    shown = f"{served.url}{wheel.name}?token={MASK}&sig={MASK}"
    receipt = json.loads((stack / "receipts" / "setup.json").read_text())
    assert receipt["wheel"]["url"] == shown
    assert read_lock(stack / "pylock.toml")["tool"]["october"]["wheel"]["url"] == shown
    assert f"?X-Amz-Signature={MASK}&page=1" in (stack / "logs" / "env.log").read_text()


def test_the_lock_writers_mask_signed_file_urls() -> None:
    """An index or find-links page may hand out signed links: uv's pylock carries them as the files' URLs.
    Both lock writers (a stack's pylock.toml, a committed locks/*.pylock.toml) mask them; nothing reads a
    file's URL back from a lock (``--locked`` installs by name, version and sha256)."""
    import dataclasses

    from october.installer.lock.indexlock import build_index_lock, check_index_lock
    from october.installer.lock.pylock import build_lock
    from october.installer.recipe import load_recipe

    sha = "a" * 64
    signed = "https://cdn.example/t/tinydep-1.0-py3-none-any.whl?X-Amz-Credential=AKIA0q&X-Amz-Signature=5ig0q"
    package = {"name": "tinydep", "version": "1.0", "wheels": [{"url": signed, "hashes": {"sha256": sha}}],
               "sdist": {"url": "https://cdn.example/t/tinydep-1.0.tar.gz?token=t0kq", "hashes": {"sha256": sha}}}
    stack_lock = build_lock(python_version="3.12.0", index_packages=[package], forks={}, other=[], tool={})
    recipe = load_recipe("current")
    assert recipe.wheel is not None
    recipe = dataclasses.replace(recipe, wheel=dataclasses.replace(recipe.wheel, url=recipe.wheel.url + "?sig=w5igq"))
    index_lock = build_index_lock(recipe, {"packages": [package]}, "2025-01-01T00:00:00Z", "2025-02-01T00:00:00Z")
    for lock in (stack_lock, index_lock):
        text = json.dumps(lock)
        for secret in ("AKIA0q", "5ig0q", "t0kq", "w5igq"):
            assert secret not in text
        tinydep = next(p for p in lock["packages"] if p["name"] == "tinydep")
        assert tinydep["wheels"][0]["url"] == ("https://cdn.example/t/tinydep-1.0-py3-none-any.whl"
                                               f"?X-Amz-Credential={MASK}&X-Amz-Signature={MASK}")
        assert tinydep["sdist"]["url"] == f"https://cdn.example/t/tinydep-1.0.tar.gz?token={MASK}"
    assert index_lock["tool"]["october"]["wheel"]["url"] == recipe.wheel.url.replace("w5igq", MASK)
    assert not [p for p in check_index_lock(recipe, index_lock) if p.startswith("[tool.october] wheel")]
