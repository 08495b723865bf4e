"""A fork made from a released source distribution (``source = "sdist"`` in forks.toml), materialised
once per cache: the sdist (sha256-checked) is extracted in Python (``filter="data"``, no owner taken from
the archive: git refuses "dubious ownership"), committed as upstream's git tracks it (its ``.gitignore``)
with a fixed identity and date, so the commit id depends on the sdist's bytes alone and forks.toml pins
it, and tagged ``v<version>`` for setuptools-scm.  The bare repository then serves as the fork's remote.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock

from ..core import jsonread
from ..core.atomic import write_json_atomic
from ..core.errors import FetchError, WheelError
from ..core.redact import redact_url
from ..core.runner import Runner
from . import git_env
from ..recipe import SdistSource
from ..wheels.download import download_wheel

RECORD = "october-sdist.json"
FORMAT = 2   # in the repository name: a repository made by another format is never reused
# Fixed identity and date: the commit id is a function of the sdist's files only.
_IDENTITY = {"GIT_AUTHOR_NAME": "october", "GIT_AUTHOR_EMAIL": "october@localhost",
             "GIT_COMMITTER_NAME": "october", "GIT_COMMITTER_EMAIL": "october@localhost",
             "GIT_AUTHOR_DATE": "1970-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "1970-01-01T00:00:00+0000"}
# No user or system configuration may change what is tracked or how (excludes, autocrlf, hooks).
_CONFIG = ["-c", "core.excludesFile=/dev/null", "-c", "core.autocrlf=false", "-c", "core.fileMode=true",
           "-c", "core.symlinks=true", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgSign=false",
           "-c", "tag.gpgSign=false", "-c", "init.defaultBranch=main"]


@dataclass(frozen=True)
class SdistRepo:
    path: Path            # a bare repository holding the one commit, tagged v<version>
    commit: str
    tag: str
    recorded_commit_id: str | None   # what the sdist's vllm/_version.py says (abbreviated), if it says


def repo_path(cache_dir: Path, sdist: SdistSource, name: str) -> Path:
    return cache_dir / "sdist" / "repos" / f"{sdist.sha256[:16]}-{name}-f{FORMAT}.git"


def message(sdist: SdistSource, name: str, commit_id: str | None) -> str:
    """The commit message: what the commit was made from, as trailers the wheel step reads back."""
    return (f"{name} {sdist.version} from its source distribution {sdist.filename}\n\n"
            f"sdist-sha256: {sdist.sha256}\n" + (f"sdist-commit-id: {commit_id}\n" if commit_id else ""))


def trailers(text: str) -> dict[str, str]:
    """``sdist-sha256`` / ``sdist-commit-id`` from a commit message made by :func:`message`."""
    pairs = (line.partition(": ") for line in text.splitlines())
    return {key: value.strip() for key, sep, value in pairs if sep and key in ("sdist-sha256", "sdist-commit-id")}


def materialise(runner: Runner, step: str, cache_dir: Path, sdist: SdistSource, name: str,
                expected_commit: str) -> SdistRepo:
    """The bare repository made from ``sdist`` (made now if missing), checked to hold ``expected_commit``."""
    dest = repo_path(cache_dir, sdist, name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):            # stacks sharing a cache take turns making it
        if not (dest / RECORD).is_file():
            _make(runner, step, cache_dir, sdist, name, dest)

    def unreadable(found: str) -> FetchError:
        return FetchError(f"fork '{name}': the record of the materialised sdist repository {dest} is unreadable",
                          expected=f"{dest / RECORD}: the JSON object this tool wrote when it made the repository",
                          found=found[:200], fix=f"remove {dest} and re-run (it is only a cache)")

    try:
        rec = jsonread.loads((dest / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise unreadable(str(exc)) from None
    if not isinstance(rec, dict):
        raise unreadable(f"JSON {type(rec).__name__}")
    made = str(rec.get("commit", ""))
    if made != expected_commit:
        raise FetchError(f"fork '{name}': the sdist {sdist.filename} makes commit {made}, not the pinned one",
                         expected=f"commit {expected_commit} (forks.toml) from sdist sha256 {sdist.sha256}",
                         found=f"commit {made} in {dest}",
                         fix="if forks.toml's commit is stale, set it to the one found; if the cache is "
                             f"damaged, remove {dest} and re-run")
    done = runner.run(["git", "--git-dir", str(dest), "rev-parse", "--verify", "--quiet",
                       f"refs/tags/v{sdist.version}^{{commit}}"], step=step, env=git_env(), check=False)
    if done.returncode != 0 or done.output.strip().splitlines()[-1:] != [made]:
        raise FetchError(f"fork '{name}': the materialised sdist repository {dest} is damaged",
                         expected=f"tag v{sdist.version} at {made}", found=done.output.strip()[-200:] or "no tag",
                         fix=f"remove {dest} and re-run (it is only a cache)")
    return SdistRepo(dest, made, f"v{sdist.version}", rec.get("recorded_commit_id"))


def _download(cache_dir: Path, sdist: SdistSource, name: str) -> Path:
    try:
        return download_wheel(sdist.url, sdist.filename, cache_dir, sha256=sdist.sha256, suffix=".tar.gz").path
    except WheelError as exc:
        raise FetchError(f"fork '{name}': cannot get its source distribution {sdist.filename}",
                         expected=exc.expected, found=exc.found, fix=exc.fix) from None


def _extract(archive: Path, into: Path, sdist: SdistSource, name: str) -> Path:
    """The sdist's single top directory, extracted safely and owned by us."""
    try:
        with tarfile.open(archive, "r:gz") as tf:
            members = tf.getmembers()
            tops = {PurePosixPath(m.name).parts[0] for m in members if m.name not in ("", ".")}
            if len(tops) != 1:
                raise FetchError(f"fork '{name}': {sdist.filename} is not a one-directory source distribution",
                                 expected="every member under one top directory (e.g. vllm-0.24.0/)",
                                 found=f"{len(tops)} top-level entries", fix="check the pin's sdist URL")
            tf.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise FetchError(f"fork '{name}': cannot unpack {sdist.filename}", expected="a readable .tar.gz",
                         found=str(exc), fix=f"remove {archive} from the cache and re-run") from None
    return into / tops.pop()


_COMMIT_ID = re.compile(r"^__commit_id__\s*=\s*(?:commit_id\s*=\s*)?['\"](g?[0-9a-f]{7,40})['\"]", re.M)


def _version_commit(tree: Path) -> str | None:
    """The commit id setuptools-scm wrote into the sdist's ``vllm/_version.py`` (abbreviated), if any."""
    f = tree / "vllm" / "_version.py"
    m = _COMMIT_ID.search(f.read_text(encoding="utf-8")) if f.is_file() else None
    return m.group(1) if m else None


def _make(runner: Runner, step: str, cache_dir: Path, sdist: SdistSource, name: str, dest: Path) -> None:
    archive = _download(cache_dir, sdist, name)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    env = {**git_env(), **_IDENTITY}
    with tempfile.TemporaryDirectory(prefix="october-sdist-", dir=dest.parent) as tmp:
        tree = _extract(archive, Path(tmp), sdist, name)
        git = ["git", *_CONFIG, "--git-dir", str(partial), "--work-tree", str(tree)]
        runner.run(["git", *_CONFIG, "init", "--quiet", "--bare", "--template=", str(partial)], step=step, env=env)
        runner.run([*git, "add", "--all", "."], step=step, env=env, cwd=tree)
        recorded = _version_commit(tree)
        runner.run([*git, "commit", "--quiet", "--no-verify", "-m", message(sdist, name, recorded)], step=step,
                   env=env, cwd=tree)
        runner.run([*git, "tag", f"v{sdist.version}"], step=step, env=env, cwd=tree)
        commit = runner.run([*git, "rev-parse", "HEAD"], step=step, env=env).output.strip().splitlines()[-1]
        untracked = runner.run([*git, "ls-files", "--others", "--ignored", "--exclude-standard"],
                               step=step, env=env, cwd=tree).output.split()
        write_json_atomic(partial / RECORD, {
            "format": FORMAT, "fork": name, "sdist": {"url": redact_url(sdist.url), "sha256": sdist.sha256,
                                                      "version": sdist.version},
            "commit": commit, "tag": f"v{sdist.version}", "recorded_commit_id": recorded,
            "left_untracked": sorted(untracked)})
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
