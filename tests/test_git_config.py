"""The one reader of a repository's git config (:mod:`october.installer.git.config`), held against git's own
``git config`` on real repositories: what the hidden-bit check and the sparse checks decide (sha256, a
sparse checkout, cone mode, a partial clone) must be what git decides.  The cases that are not plain came
from a review of the first version, each a way it read otherwise than git."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from october.installer.git.config import config_items, truth, value_in
from october.installer.git.sparse import partial_or_sparse


def config_value(gd: Path, name: str) -> str | None:
    return value_in(config_items(gd), name)


def config_true(gd: Path, name: str) -> bool:
    return truth(config_value(gd, name))


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
    config = repo / ".git" / "config"
    if extra.startswith("\ufeff"):         # git skips a byte-order mark only at the start of a file
        config.write_text(extra + config.read_text(), encoding="utf-8")
    else:
        with open(config, "a", encoding="utf-8") as f:
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
    "a byte-order mark first": "\ufeff[core] sparseCheckout = true\n",
    "CRLF lines": "[core]\r\n\tsparseCheckout = true\r\n",
    "a continued line is the value before it": "[core]\n\tfoo = x \\\n\tsparseCheckout = true\n",
    "a continued value": "[core]\n\tsparseCheckout = tr\\\nue\n",
    "an empty subsection is another section": '[core ""]\n\tsparseCheckout = true\n',
    "a lone CR in a comment": "[core]\n# a\rsparseCheckout = true\n",
    "a form feed in a comment": "[core]\n# a\x0csparseCheckout = true\n",
    "a next-line character in a comment": "[core]\n# a\u0085sparseCheckout = true\n",
    "a number other than 0": "[core]\n\tsparseCheckout = 2\n",
    "a negative number": "[core]\n\tsparseCheckout = -1\n",
    "a number with a unit": "[core]\n\tsparseCheckout = 1k\n",
    "zero": "[core]\n\tsparseCheckout = 0\n",
    "an escaped quote in a subsection": '[core "a\\"b"]\n\tsparseCheckout = true\n[core]\n\tsparseCheckout\n',
    "spaces inside a value": "[core]\n\tsparseCheckout =   true   \n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_config_reads_as_git_reads_it(tmp_path: Path, name: str) -> None:
    repo = _repo(tmp_path, CASES[name])
    ours = config_true(repo / ".git", "core.sparsecheckout")
    assert ours == _git_says_true(repo, "core.sparseCheckout"), repr(CASES[name])


@pytest.mark.parametrize("enabled", [True, False])
def test_config_worktree_counts_only_when_git_reads_it(tmp_path: Path, enabled: bool) -> None:
    """``config.worktree`` outranks ``config`` when ``extensions.worktreeConfig`` is on, and is ignored when not."""
    repo = _repo(tmp_path, "[core]\n\tsparseCheckout = false\n", worktree="[core]\n\tsparseCheckout = true\n")
    if not enabled:
        assert _git(repo, "config", "extensions.worktreeConfig", "false").returncode == 0
    ours = config_true(repo / ".git", "core.sparsecheckout")
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
    assert config_true(gd, "core.sparsecheckout")
    assert _git_says_true(tmp_path / "w", "core.sparseCheckout")


@pytest.mark.parametrize("commondir", [b"\xff\xfe/../x\n", b"a\0b\n", b"loop\n", b""])
def test_a_damaged_commondir_reads_as_no_config_and_raises_nothing(tmp_path: Path, commondir: bytes) -> None:
    """Git refuses such a repository (its commands fail, and the clone checks say so); the reader, on the
    no-op path, must not raise (planted: not UTF-8, a NUL, a symlink loop, empty)."""
    gd = tmp_path / "gd"
    gd.mkdir()
    (gd / "config").write_text("[core]\n\tsparseCheckout = true\n")
    (gd / "commondir").write_bytes(commondir)
    (gd / "loop").symlink_to(gd / "loop")
    assert config_true(gd, "core.sparsecheckout") is (commondir == b"")   # empty: the directory itself


def test_a_partial_clone_is_read_from_its_remote(tmp_path: Path) -> None:
    """``remote.<name>.promisor`` in the remote's own section, as git writes it for a ``--filter`` clone."""
    repo = _repo(tmp_path, '[remote "origin"]\n\turl = x\n\tpromisor = yes\n')
    assert partial_or_sparse(repo)
    other = _repo(tmp_path / "o", "[other]\n\tpromisor = true\n")
    assert not partial_or_sparse(other)
