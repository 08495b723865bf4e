"""What a stack's install took from uv's cache, held to the sources' own wheels before the built-stack cache may
keep it.

uv installs an index wheel from its cache's unpacked copy; a copy edited there together with its RECORD row passes
the install's RECORD check, and a stack storing that env would hand it, signed, to every later stack with its key.
So the install step, for an env uv installed in this run (not one copied from a built-stack entry), holds each
index distribution to the RECORD of the wheel it came from
(:mod:`october.installer.lock.held`: every hashed row installed with its hash where it installs to, no installed
row the wheel does not name; the lock's listing names the files: a kit's wheel is read here, an index's by
Range requests, :mod:`october.installer.wheels.rangefile`, with the credentials the recipe's sources give its host).  One unlike its wheel fails the step with the lock step's own error for
it (:func:`october.installer.steps.lock.stale_env`: uv's cache edited, or a wheel republished under its name;
nothing removed, which bytes are right is the user's to say); nothing is stored.  One that cannot be held (a wheel
built from its sdist, a host that would not answer, a distribution the listing does not name that no fork checkout
built: one installed from a URL of its own included), or an env with no listing made during the install (a run whose
lock step is done, or one whose early listing failed: listing it here would ask the index during the install), keeps
the stack out of the built-stack cache, said in its log.  A distribution with a ``direct_url.json`` that is not a
fork's own install (:func:`october.installer.lock.asked.fork_dists`: its name, editable from the checkout's root) and that nothing the install
trusts asks for by URL (the recipe's lines; the ``Requires-Dist`` and ``[tool.uv.sources]`` of the forks uv
installs with their dependencies, markers evaluated in the env's Python:
:func:`october.installer.lock.asked.asked_by_url`) fails the step (:func:`unasked_error`), listing or not: no
command of the install put it there, so uv's cache did (a ``direct_url.json`` planted beside an edited file takes a
distribution out of the index listing and out of the hold), or the user installed it into the env by hand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core.errors import InstallError
from ..core.listing import first
from ..engine import StepContext


def hold_to_index(ctx: StepContext, step: str, forks: Sequence[tuple[Path, str, bool]],
                  markers: Mapping[str, str] | None = None) -> str | None:
    """-> why this env may not be stored (None: every index distribution was held to its wheel); raises the lock
    step's :func:`~october.installer.steps.lock.stale_env` error for one unlike its wheel, and :func:`unasked_error`
    for one from a URL nothing asks for.  ``forks``: each fork's checkout, distribution name (what the install
    built from them is not an index distribution) and whether uv installed it with its dependencies (only then do
    its ``Requires-Dist`` and ``[tool.uv.sources]`` ask for anything: the first review of session 38 planted a
    ``direct_url.json`` on a distribution a ``--no-deps`` fork's ``Requires-Dist`` names by URL, exit 0);
    ``markers``: the env's Python's PEP 508 environment (the install facts' ``markers``), for the markers of
    requirements and uv sources that ask by URL."""
    from ..install import records
    from .lockearly import EarlyLock

    dists = records.installed(ctx.paths.env)
    # needs no listing: before the listing is looked for
    by_url, built = _by_url(ctx, dists, dists, forks, markers if isinstance(markers, Mapping) else None)

    def own(dist: Any) -> bool:
        return dist.name in built
    early = ctx.early.get("lock")
    listing = early.current(ctx) if isinstance(early, EarlyLock) else None

    def hold(packages: Sequence[Mapping[str, Any]]) -> Any:
        return _hold(ctx, step, packages, dists, own)

    if listing is None:     # not listed again here: that asks the index during the install (the lock step will)
        why = early.why_not if isinstance(early, EarlyLock) and early.why_not else "no lock step listed it"
        ctx.runner.note(step, f"# not held to the sources' wheels: the env's listing is not there ({why}); held to "
                              "the wheels of the stack's lock where it has one")
        from ..lock.held import locked_wheels

        hold([*locked_wheels(ctx.paths.pylock), *by_url])    # the third review: an env made again after its lock
        return f"the env was not held to the sources' wheels (its listing during the install is not there: {why})"
    held = hold([*listing.index_packages, *by_url])
    if not held.unjudged:
        return None
    ctx.runner.note(step, "# not held to an index wheel: " + "; ".join(held.unjudged))
    return (f"{len(held.unjudged)} index distribution(s) could not be held to the wheel they came from "
            f"({first(list(held.unjudged), 3, '; ')})")


def _hold(ctx: StepContext, step: str, packages: Sequence[Mapping[str, Any]], dists: Mapping[str, Any],
          own: Any = lambda dist: False) -> Any:
    """:func:`october.installer.lock.held.held_to_index` with the recipe's sources' credentials; one distribution
    unlike its wheel raises the lock step's stale-env error."""
    from ..kit.wheels import with_credentials
    from ..lock.held import HOLD_BUDGET_S, held_to_index, remote_rows
    from ..wheels.rangefile import client
    from .env import stack_uv
    from .lock import stale_env

    indexes = stack_uv(ctx).sources(torch_index=True)       # whose user:password@ a URL of their host takes
    with client() as http:
        held = held_to_index(packages, ctx.paths.env, remote_rows(http, lambda url: with_credentials(url, indexes)),
                             dists, own=own, wait_s=HOLD_BUDGET_S + 15)
    if held.unlike:
        raise stale_env(ctx, step, held.unlike)
    return held


_STARTED: dict[str, tuple[Any, ...]] = {}     # "env name version" -> its RECORD's stat signature, once held


def hold_started(ctx: StepContext, step: str, recorded: set[str]) -> None:
    """After a uv install into the env, before anything starts its Python, what a ``.pth`` runs at every start
    (:func:`october.installer.lock.asked.started_by_pth`: setuptools' ``distutils-precedence.pth`` imports
    ``_distutils_hack``): no top-level ``.pth`` that no RECORD owns (uv's and the env step's own aside, which the
    install step checks), every file of those distributions as its RECORD hashes it, none from a URL nothing asks
    for (:func:`unasked_error`), and, in the env step (which asks the sources anyway; the install step asks no index
    while it installs), each index one held to its wheel, listed for it alone (``uv pip compile`` of its pin, as the
    lock step lists the env): one unlike its wheel raises the lock step's stale-env error.  Each before its code
    runs (the reviews of session 38: an edit of such a module in uv's cache, with its RECORD row or without, a
    planted ``.pth``, a planted ``direct_url.json``, each ran 2-8 times before the install step named it).  One that
    cannot be held here (no wheel listed, a host that does not answer) is said in the log and left to the install
    step's hold; what those modules import from other distributions is too.  A distribution held once is not held
    again while its RECORD is unchanged.  ``recorded``: the env's RECORD rows (``records.owned``)."""
    from ..core.filetrust import signature
    from ..install import records
    from ..lock.asked import started_by_pth
    from .env import stack_uv

    env = ctx.paths.env
    cache_dir = lambda: stack_uv(ctx).env()["UV_CACHE_DIR"]       # noqa: E731
    records.require_owned_pth(env, recorded, cache_dir)
    dists = records.installed(env)

    def stamp(dist: Any) -> tuple[Any, ...] | None:
        try:
            return tuple(signature(os.stat(dist.info / "RECORD")))
        except OSError:
            return None

    todo = [d for d in started_by_pth(dists) if _STARTED.get(f"{env} {d.name} {d.version}") != stamp(d)]
    if not todo:
        return
    bad = records.tampered(env, ctx.trust, {d.name: d for d in todo})
    if bad:
        raise records.tampered_error(env, bad, cache_dir)
    packages = _started_by_url(ctx, dists, [d for d in todo if d.direct_url is not None])
    index = [d for d in todo if d.direct_url is None]
    if step == "env" and index:
        packages += _listed(ctx, step, index)
    elif index:
        ctx.runner.note(step, "# a .pth starts their code, not held to their wheels before it runs (the install asks "
                              f"no index): {', '.join(d.name for d in index)}; the install step's hold judges them")
        index = []
    held = _hold(ctx, step, packages, {d.name: d for d in todo if d.direct_url is not None or d in index})
    for line in held.unjudged:
        ctx.runner.note(step, f"# a .pth starts its code, not held before it runs: {line}")
    unjudged = {line.split(" ", 1)[0] for line in held.unjudged}
    _STARTED.update((f"{env} {d.name} {d.version}", stamp(d)) for d in todo if d.name not in unjudged
                    and (d.direct_url is not None or d in index))


def _by_url(ctx: StepContext, dists: Mapping[str, Any], judged: Mapping[str, Any],
            forks: Sequence[tuple[Path, str, bool]], environment: Mapping[str, str] | None
            ) -> tuple[list[Mapping[str, Any]], frozenset[str]]:
    """The URL rule for ``judged`` (of the env's ``dists``): :func:`unasked_error` for one from a URL nothing asks
    for (the recipe's lines; the ``Requires-Dist`` and ``[tool.uv.sources]`` of the ``forks``, (checkout, name,
    installed with its dependencies), that uv installed with their dependencies; markers evaluated in
    ``environment``, None: not evaluated) -> (the packages that hold the others to the wheels their requirements
    name, the names of the forks' own installs)."""
    from ..lock.asked import asked_by_url, fork_dists, marker_holds, unasked, url_packages, uv_sources

    built = fork_dists(dists, [(path, name) for path, name, _ in forks])
    with_deps = fork_dists(dists, [(path, name) for path, name, deps in forks if deps])
    sources = [(name, url) for name, url, marker in uv_sources([path for path, _, deps in forks if deps])
               if marker_holds(marker, environment)]
    asked = asked_by_url(dists, recipe_lines(ctx), lambda dist: dist.name in with_deps, sources, environment)
    named = unasked(judged, asked, lambda dist: dist.name in built)
    if named:
        raise unasked_error(ctx, named)
    return url_packages(judged, asked), built


def _started_by_url(ctx: StepContext, dists: Mapping[str, Any], started: Sequence[Any]) -> list[Mapping[str, Any]]:
    """:func:`_by_url` for the distributions a ``.pth`` starts that came from a URL, with the recipe's forks as
    installed so far (markers not evaluated here: the install facts come later)."""
    from ..install.plan import dist_name, installs_deps

    if not started:
        return []
    forks = [(ctx.paths.fork(f.name), dist_name(ctx.paths.fork(f.name), f.name), installs_deps(f))
             for f in ctx.recipe.forks]
    return _by_url(ctx, dists, {d.name: d for d in started}, forks, None)[0]


def _listed(ctx: StepContext, step: str, index: Sequence[Any]) -> list[Mapping[str, Any]]:
    """The listing of these index distributions' pins (none, said in the log, where listing failed)."""
    from ..core.errors import CommandFailed
    from ..lock.pylock import Installed
    from .lock import _resolve_index_packages

    try:
        return _resolve_index_packages(ctx, [Installed(d.name, d.version, None) for d in index], ctx.runner,
                                       "pth-compile")
    except CommandFailed as exc:        # the lock step lists them again and says why; the install step holds them
        ctx.runner.note(step, f"# what a .pth starts is not held before it runs: listing it failed ({exc})")
        return []


def recipe_lines(ctx: StepContext) -> list[str]:
    """The requirements the recipe itself gives the install (torch, the build requirements, ``[install] supply``)."""
    r = ctx.recipe
    return [r.torch.requirement, *r.build_requirements, *r.install.supply]


def unasked_error(ctx: StepContext, unasked: Sequence[str]) -> InstallError:
    """The error for distributions installed from a URL no requirement asks for (``name version: from URL``)."""
    import shlex

    from ..pyenv.uvcmd import uv_exe
    from .env import stack_uv

    names = [u.split(" ", 1)[0] for u in unasked]
    uv = stack_uv(ctx)
    clean = shlex.join(["env", f"UV_CACHE_DIR={uv.env()['UV_CACHE_DIR']}", uv_exe(), "cache", "clean", *names])
    remove = shlex.join(["rm", "-rf", str(ctx.paths.env)])     # the env step makes it again (an uninstall would not)
    return InstallError(f"{len(unasked)} distribution(s) in the stack env came from a URL that no requirement asks "
                        f"for: {', '.join(names)} (uv's cache edited where it keeps the wheel unpacked, with a "
                        "direct_url.json planted there, or installed into the env by hand)",
                        expected="each distribution from the sources' listing, a fork's own editable install, or a URL "
                                 "that the recipe or a fork asks for (name @ URL in a requirement, a fork's "
                                 "[tool.uv.sources])",
                        found="; ".join(unasked),
                        fix=f"find out who wrote uv's cache or the env (nothing was removed; nothing was stored).  "
                            f"Then run `{remove}` and `{clean}`, and re-run october_setup.  If the stack needs it "
                            "from that URL (a dependency that asks for it so), name it in the recipe's [install] "
                            "supply as \"NAME @ URL\"")


