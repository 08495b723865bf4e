"""The install plan: which ``uv pip install`` runs, in which order, with which environment (nothing run).

Forks installed *with* dependencies go first, ``--no-deps`` ones after them, a ``flashinfer``-mode fork last:
a dependency resolution (vLLM pulls ``flashinfer-python``) can then never overwrite a fork installed before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import InstallError
from ..core.pyproject import project_name
from ..recipe import ForkUse

if TYPE_CHECKING:
    from ..recipe import Recipe


@dataclass(frozen=True)
class ForkSource:
    """A fork as the install step sees it: where its checkout is, at which commit, which distribution."""

    use: ForkUse
    path: Path
    commit: str
    dist: str                 # the distribution name its pyproject declares (e.g. flashinfer-python)


@dataclass(frozen=True)
class UvInstall:
    """One ``uv pip install`` (the common ``--python``/sources/constraints part is added by uvcmd)."""

    fork: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    why: str

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class InstallPlan:
    installs: tuple[UvInstall, ...]
    base_commit: str | None
    wheel: Path | None

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(i.fork for i in self.installs)


def installs_deps(use: ForkUse) -> bool:
    """A fork whose mode brings no dependencies (``flashinfer``) is always ``--no-deps``; others as the recipe says."""
    return use.deps and use.traits.own_deps


def make_plan(forks: Sequence[ForkSource], *, wheel: Path | None = None,
              base_commit: str | None = None) -> InstallPlan:
    installs: list[UvInstall] = []
    # stable: recipe order within a group
    for src in sorted(forks, key=lambda f: (not f.use.traits.own_deps, not installs_deps(f.use))):
        use = src.use
        args: list[str] = ["--reinstall-package", src.dist]
        env: list[tuple[str, str]] = []
        if not installs_deps(use):
            args.append("--no-deps")
        if not use.build_isolation:
            args.append("--no-build-isolation")
        if use.traits.base_wheel:
            if wheel is None:
                raise InstallError(f"fork '{use.name}' is installed in mode '{use.mode}' but no base wheel "
                                   "was verified", expected="a [wheel] section in the recipe (the wheel step "
                                   "verifies it)", found="no wheel", fix="add the base wheel to the recipe's "
                                   "[wheel] section, or install the fork in mode 'editable' (compiles CUDA)")
            # always absolute: setup.py resolves a relative location against the fork, not the caller; and
            # always set: without it setup.py asks GitHub and wheels.vllm.ai for a nightly wheel
            env += [("VLLM_USE_PRECOMPILED", "1"), ("VLLM_PRECOMPILED_WHEEL_LOCATION", str(Path(wheel).resolve()))]
            if base_commit is not None:
                env.append(("VLLM_PRECOMPILED_WHEEL_COMMIT", base_commit))
        env += sorted(use.build_env.items())      # the recipe's knobs for this fork's build backend
        args += ["--editable", str(src.path)]
        if not use.traits.own_deps:
            why = "last, --no-deps: nothing installed after it can replace the fork"
        elif installs_deps(use):
            why = "first: its dependencies resolve before any --no-deps fork is laid over them"
        else:
            why = "after the forks with dependencies, --no-deps"
        installs.append(UvInstall(fork=use.name, args=tuple(args), env=tuple(env), why=why))
    return InstallPlan(installs=tuple(installs), base_commit=base_commit, wheel=wheel)


def dist_name(path: Path, fallback: str) -> str:
    """The ``[project] name`` a checkout declares (FlashInfer's is ``flashinfer-python``), else ``fallback``."""
    return project_name(path) or fallback


def fork_sources(forks: Sequence[ForkUse], paths: Mapping[str, Path], commits: Mapping[str, str]) -> list[ForkSource]:
    return [ForkSource(use=f, path=paths[f.name], commit=commits[f.name], dist=dist_name(paths[f.name], f.name))
            for f in forks]


def require_installable(name: str, path: Path) -> None:
    """The checkout of fork ``name`` at ``path`` is an installable project (a pyproject.toml or setup.py)."""
    if not (path / "pyproject.toml").exists() and not (path / "setup.py").exists():
        raise InstallError(f"the checkout of fork '{name}' is not an installable project",
                           expected=f"{path} with a pyproject.toml or setup.py",
                           found="neither" if path.exists() else "no such directory",
                           fix="re-run october_setup so the fetch step checks the fork out again")


def verified_wheel(path: Path, want: str) -> str:
    """The base wheel at ``path`` hashed again just before use; -> its sha256, which must be ``want``."""
    from ..core.hashing import sha256_file

    if not path.is_file():
        raise InstallError("the verified base wheel is gone", expected=f"the file {path}",
                           found="no such file", fix="re-run october_setup (the wheel step fetches it again)")
    got = sha256_file(path)
    if got != want:
        raise InstallError(f"the base wheel {path.name} changed after it was verified",
                           expected=f"sha256 {want}", found=f"sha256 {got}",
                           fix="re-run october_setup (the wheel step verifies it again)")
    return got


def install_settings(recipe: "Recipe") -> str:
    """A digest of what decides which distributions the forks' install puts into the env: each fork's install
    fields (:func:`fork_inputs`) and the recipe's ``[install]`` policy.  The env step makes the env again when it
    differs from the one its last install recorded: an install over an env another install filled keeps what
    that one put there (``deps = true`` turned false kept the old dependencies, where a new stack is refused)."""
    from ..core.hashing import fingerprint
    from ..recipe.install import as_json

    return fingerprint({"forks": fork_inputs(recipe.forks), "policy": as_json(recipe.install)})


def fork_inputs(forks: Sequence[ForkUse]) -> list[dict[str, object]]:
    """What of each fork decides its install (URLs without credentials): part of the step's fingerprint."""
    from ..core.redact import redact_url

    return [{"name": f.name, "url": redact_url(f.url), "upstream": redact_url(f.upstream or ""),
             "commit": f.pin.commit, "mode": f.mode, "deps": f.deps,
             "build_isolation": f.build_isolation, "build_env": dict(f.build_env),
             "nested_installs": dict(f.nested_installs)} for f in forks]
