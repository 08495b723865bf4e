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
the stack out of the built-stack cache, said in its log.  A distribution with a ``direct_url.json`` that neither a
fork checkout built nor a requirement asks for by URL (the recipe's lines, the forks' and the index distributions'
``Requires-Dist``: :func:`october.installer.lock.held.asked_by_url`) fails the step (:func:`unasked_error`): no
command of the install put it there, so uv's cache did (a ``direct_url.json`` planted beside an edited file takes a
distribution out of the index listing and out of the hold), or the user installed it into the env by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence
from urllib.parse import unquote, urlsplit

from ..core.errors import InstallError
from ..core.listing import first
from ..engine import StepContext


def hold_to_index(ctx: StepContext, step: str, forks: Sequence[Path]) -> str | None:
    """-> why this env may not be stored (None: every index distribution was held to its wheel); raises the lock
    step's :func:`~october.installer.steps.lock.stale_env` error for one unlike its wheel.  ``forks``: the fork
    checkouts (what the install built from them is not an index distribution)."""
    from ..install import records
    from ..kit.wheels import with_credentials
    from ..lock.held import HOLD_BUDGET_S, held_to_index, remote_rows
    from ..wheels.rangefile import client
    from .env import stack_uv
    from .lock import stale_env
    from .lockearly import EarlyLock

    early = ctx.early.get("lock")
    listing = early.current(ctx) if isinstance(early, EarlyLock) else None
    if listing is None:     # not listed again here: that asks the index during the install (the lock step will)
        why = early.why_not if isinstance(early, EarlyLock) and early.why_not else "no lock step listed it"
        ctx.runner.note(step, f"# not held to the sources' wheels: the env's listing is not there ({why})")
        return f"the env was not held to the sources' wheels (its listing during the install is not there: {why})"
    dists = records.installed(ctx.paths.env)
    checkouts = [Path(p).resolve() for p in forks]
    sources = stack_uv(ctx).sources(torch_index=True)       # whose user:password@ a URL of their host takes
    with client() as http:
        held = held_to_index(listing.index_packages, ctx.paths.env,
                             remote_rows(http, lambda url: with_credentials(url, sources)), dists,
                             own=lambda dist: built_from(dist, checkouts), wait_s=HOLD_BUDGET_S + 15,
                             requirements=recipe_lines(ctx))
    if held.unlike:
        raise stale_env(ctx, step, held.unlike)
    if held.unasked:
        raise unasked_error(ctx, held.unasked)
    if not held.unjudged:
        return None
    ctx.runner.note(step, "# not held to an index wheel: " + "; ".join(held.unjudged))
    return (f"{len(held.unjudged)} index distribution(s) could not be held to the wheel they came from "
            f"({first(list(held.unjudged), 3, '; ')})")


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
                        expected="each distribution from the sources' listing, a fork checkout, or a URL that the "
                                 "recipe or a fork's requirements name (name @ URL)",
                        found="; ".join(unasked),
                        fix=f"find out who wrote uv's cache or the env (nothing was removed; nothing was stored).  "
                            f"Then run `{remove}` and `{clean}`, and re-run october_setup")


def built_from(dist: Any, checkouts: Sequence[Path]) -> bool:
    """Whether ``dist`` was built from one of the fork ``checkouts`` (a ``direct_url.json`` of a directory inside
    one): the forks' own installs, not what uv's cache served from an index wheel."""
    info = dist.direct_url or {}
    url = str(info.get("url") or "")
    if "dir_info" not in info or not url.startswith("file://"):
        return False
    where = Path(unquote(urlsplit(url).path)).resolve()
    return any(where == c or where.is_relative_to(c) for c in checkouts)
