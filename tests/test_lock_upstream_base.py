"""The lock records the upstream base commit under the fork the base wheel serves, found by its mode's traits
(:func:`october.installer.steps.lock.upstream_base_fork`), not under the name ``vllm``: a vLLM fork named
otherwise got a second, made-up ``[tool.october.forks.vllm]`` holding only ``upstream-base``."""

from __future__ import annotations

from october.installer.steps.lock import upstream_base_fork
from october.installer.steps.results import InstalledFork, InstallResult

COMMIT = "a" * 40
BASE = "b" * 40


def _install(*forks: tuple[str, str], base: str | None = BASE) -> InstallResult:
    return InstallResult(forks=tuple(InstalledFork(name=n, path=f"/s/src/{n}", commit=COMMIT, mode=m, args=(), env={})
                                     for n, m in forks),
                         order=tuple(n for n, _ in forks), torch="2.11.0", checks={}, vllm_base_commit=base)


def test_the_base_wheel_fork_by_its_mode_whatever_its_name() -> None:
    assert upstream_base_fork(_install(("engine", "vllm-precompiled"), ("flashinfer", "flashinfer"))) == "engine"
    assert upstream_base_fork(_install(("vllm", "vllm-precompiled"))) == "vllm"


def test_none_without_a_base_commit_or_a_base_wheel_fork() -> None:
    assert upstream_base_fork(None) is None
    assert upstream_base_fork(_install(("engine", "vllm-precompiled"), base=None)) is None
    # a fork named vllm that does not take the base wheel is not where a base commit belongs
    assert upstream_base_fork(_install(("vllm", "editable"))) is None
