"""The one reader of a repository's git config (``october.installer.git.config_value``), held against git's
own ``git config`` on real repositories: what the hidden-bit check and the sparse checks decide (sha256, a
sparse checkout, cone mode) must be what git decides."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from october.installer.git import TRUE, config_value

ORACLE_ENV = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=ORACLE_ENV,
                          check=False)


def _repo(tmp: Path, extra: str, worktree: str | None = None) -> Path:
    repo = tmp / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=ORACLE_ENV)
    if worktree is not None:
        assert _git(repo, "config", "core.repositoryformatversion", "1").returncode == 0
        assert _git(repo, "config", "extensions.worktreeConfig", "true").returncode == 0
        (repo / ".git" / "config.worktree").write_text(worktree)
    with open(repo / ".git" / "config", "a") as f:
        f.write(extra)
    return repo


def _git_says_true(repo: Path, name: str) -> bool:
    done = _git(repo, "config", "--type=bool", "--get", name)
    assert done.returncode in (0, 1), done.stderr       # 1: unset
    return done.stdout.strip() == "true"


CASES = {
    "plain": "[core]\n\tsparseCheckout = true\n",
    "bare key after the header": "[core] sparseCheckout\n",
    "last one wins, a trailing comment": "[core]\n sparsecheckout = true\n[core]\n sparsecheckout = no # was yes\n",
    "another section": "[other]\n\tsparseCheckout = true\n",
    "a subsection of core": '[core "x"]\n\tsparseCheckout = true\n',
    "quoted, a comment after it": '[core]\n\tsparseCheckout = "true" ; set by hand\n',
    "case and on": "[Core]\n\tSPARSECHECKOUT = On\n",
    "commented out": "[core]\n#\tsparseCheckout = true\n;\tsparseCheckout = true\n",
    "the old dotted subsection": "[core.x]\n\tsparseCheckout = true\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_config_reads_as_git_reads_it(tmp_path: Path, name: str) -> None:
    repo = _repo(tmp_path, CASES[name])
    ours = config_value(repo / ".git", "core.sparsecheckout") in TRUE
    assert ours == _git_says_true(repo, "core.sparseCheckout"), CASES[name]


@pytest.mark.parametrize("enabled", [True, False])
def test_config_worktree_counts_only_when_git_reads_it(tmp_path: Path, enabled: bool) -> None:
    """``config.worktree`` outranks ``config`` when ``extensions.worktreeConfig`` is on, and is ignored when not."""
    repo = _repo(tmp_path, "[core]\n\tsparseCheckout = false\n", worktree="[core]\n\tsparseCheckout = true\n")
    if not enabled:
        assert _git(repo, "config", "extensions.worktreeConfig", "false").returncode == 0
    ours = config_value(repo / ".git", "core.sparsecheckout") in TRUE
    assert ours is enabled
    assert ours == _git_says_true(repo, "core.sparseCheckout")


def test_the_object_format_of_a_sha256_repository(tmp_path: Path) -> None:
    sha256 = tmp_path / "s"
    if subprocess.run(["git", "init", "-q", "--object-format=sha256", str(sha256)], env=ORACLE_ENV,
                      capture_output=True, check=False).returncode != 0:
        pytest.skip("this git cannot make a sha256 repository")
    assert config_value(sha256 / ".git", "extensions.objectformat") == "sha256"
    assert _git(sha256, "config", "--get", "extensions.objectformat").stdout.strip() == "sha256"
    plain = _repo(tmp_path, "")
    assert config_value(plain / ".git", "extensions.objectformat") is None


def test_a_linked_worktree_reads_the_common_config(tmp_path: Path) -> None:
    """A linked worktree's git directory holds ``commondir``; its config is the main repository's."""
    repo = _repo(tmp_path, "[core]\n\tsparseCheckout = true\n")
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "c"], check=True, env=ORACLE_ENV)
    assert _git(repo, "worktree", "add", "-q", str(tmp_path / "w")).returncode == 0
    gd = Path(_git(tmp_path / "w", "rev-parse", "--absolute-git-dir").stdout.strip())
    assert (gd / "commondir").is_file()
    assert config_value(gd, "core.sparsecheckout") in TRUE
    assert _git_says_true(tmp_path / "w", "core.sparseCheckout")
