"""Is the base wheel right for an sdist-made fork?  The fork must *be* the wheel's release source.

An sdist-made fork has no history and the wheel names its source commit only abbreviated, so instead of
git trees (:mod:`.equivalence`) the files prove it: the fork commit's trailers name the pinned sdist, whose
commit id and version are the wheel's, and every Python file the fork tracks under the wheel's packages is
in the wheel byte for byte.  Compiled sources cannot be compared with a wheel: they are the pinned sdist's.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections import Counter
from pathlib import Path

from ..core.errors import WheelError
from ..core.runner import Runner
from . import git_env, indented, parse_ls_tree
from .sdist import trailers
from ..recipe import SdistSource

METHOD = "sdist-files"
GENERATED = ("/_version.py",)     # written by setuptools-scm at build time: in no source tree


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tracked(runner: Runner, clone: Path, commit: str, step: str) -> dict[str, str]:
    done = runner.run(["git", "-C", str(clone), "ls-tree", "-r", "-z", "--full-tree", commit], step=step,
                      env=git_env(), check=False)
    if done.returncode != 0:
        raise WheelError(f"git could not list the fork commit {commit[:12]} in {clone}",
                         expected="`git ls-tree` to succeed", found=done.output.strip()[-300:],
                         fix="re-run october_setup (the fetch step re-creates the clone)")
    return {path: oid for path, (kind, oid) in parse_ls_tree(done.output).items() if kind == "blob"}


def _short(commit_id: str | None) -> str | None:
    """``gee0da84ab`` / ``ee0da84ab`` -> ``ee0da84ab``."""
    return commit_id.removeprefix("g") if commit_id else None


def check_sdist_equivalence(runner: Runner, clone: Path, fork_commit: str, wheel: Path, *, wheel_commit: str,
                            wheel_version: str, sdist: SdistSource, fork_name: str = "vllm",
                            step: str = "wheel") -> dict[str, object]:
    """The record of the proof (``method: sdist-files``); raise :class:`WheelError` where it fails."""
    done = runner.run(["git", "-C", str(clone), "log", "-1", "--format=%B", fork_commit], step=step, env=git_env(),
                      check=False)
    said = trailers(done.output) if done.returncode == 0 else {}
    if said.get("sdist-sha256") != sdist.sha256:
        raise WheelError(f"cannot prove the base wheel fits the sdist-made fork '{fork_name}': its commit does not "
                         "say it was made from the pinned sdist",
                         expected=f"commit {fork_commit} with the trailer sdist-sha256: {sdist.sha256}",
                         found=f"sdist-sha256 {said.get('sdist-sha256') or 'absent'}",
                         fix="re-run october_setup (the fetch step materialises the sdist again)")
    recorded = said.get("sdist-commit-id")
    sdist_id, wheel_id = _short(recorded), _short(wheel_commit)
    if sdist_id is None or sdist_id != wheel_id or sdist.version != wheel_version:
        raise WheelError(f"the base wheel is not the release the sdist-made fork '{fork_name}' was made from",
                         expected=f"the wheel's commit {wheel_commit} and version {wheel_version} equal to the "
                                  f"sdist's, and fork commit {fork_commit}",
                         found=f"the sdist {sdist.filename} (fork commit {fork_commit[:12]}) says commit "
                               f"{recorded or 'none'} and version {sdist.version}",
                         fix="pin the sdist and the wheel of the same vLLM release (forks.toml and [wheel])")
    tracked = _tracked(runner, clone, fork_commit, step)
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {n: zf.read(n) for n in zf.namelist() if n.endswith(".py") and ".dist-info/" not in n}
    packages = {n.split("/", 1)[0] for n in in_wheel if "/" in n}
    fork_py = {p: i for p, i in tracked.items() if p.endswith(".py") and p.split("/", 1)[0] in packages}
    differ = sorted(p for p, i in fork_py.items() if p in in_wheel and blob_id(in_wheel[p]) != i)
    missing = sorted(p for p in fork_py if p not in in_wheel)
    if differ or missing or not fork_py:
        lines = [f"{p} (differs)" for p in differ] + [f"{p} (not in the wheel)" for p in missing]
        raise WheelError(f"the sdist-made fork '{fork_name}' is not the base wheel's source: "
                         f"{len(lines) or 'no'} Python file(s) disagree\n" + indented(lines),
                         expected=f"every Python file the fork tracks under {', '.join(sorted(packages))} "
                                  f"in {wheel.name}, byte for byte",
                         found=f"{len(fork_py)} tracked, {len(differ)} differ, {len(missing)} missing from the wheel",
                         fix="pin the sdist and the wheel of the same vLLM release (forks.toml and [wheel])")
    groups = Counter(n if n.endswith(GENERATED) else "/".join(n.split("/")[:3]) + "/"
                     for n in in_wheel if n not in fork_py)
    return {"method": METHOD, "fork_commit": fork_commit, "sdist_sha256": sdist.sha256,
            "sdist_commit_id": recorded, "wheel_commit_id": wheel_commit,
            "version": wheel_version, "python_files_identical": len(fork_py),
            "wheel_only": dict(sorted(groups.items())),
            "compiled_sources": "not comparable with a wheel: the fork's are the pinned sdist's"}
