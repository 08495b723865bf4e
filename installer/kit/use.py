"""``october_setup STACK --recipe R --kit DIR``: install from a kit and from nothing else.

:func:`open_kit` checks the kit before anything runs (manifest, every file's sha256, every recorded
commit, then the recipe and lock); :class:`Kit` maps each git URL to its copy in the kit,
:func:`kit_recipe` points the package sources at ``DIR/wheels`` and :func:`seed_cache` puts the base
wheel into the download cache.  The recipe's name and sha256 are unchanged.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..core.atomic import write_json_atomic
from ..core.errors import KitError
from ..core.redact import redact_url
from ..git import with_config
from ..git.mirror import has_commit
from . import MANIFEST, url_key
from .against import committed_lock, kit_problems
from .manifest import check_files, listed, read_manifest
from .wheels import place
from ..recipe import Recipe, with_kit
from ..wheels.download import cache_path, seen_path


@dataclass(frozen=True)
class Kit:
    root: Path
    manifest: Mapping[str, Any]
    repos: Mapping[str, Path]          # url_key -> bare repository in the kit
    lock: Path | None = None           # the lock its wheels were held to (None: only kit.json names them)

    @property
    def wheels_dir(self) -> Path:
        return self.root / "wheels"

    def source_for(self, url: str) -> str:
        """The kit's copy of ``url`` (a file:// URL); a URL the kit lacks is an error naming it."""
        hit = self.repos.get(url_key(url))
        if hit is None:
            have = ", ".join(sorted(self.repos)) or "none"
            raise KitError(f"the kit {self.root} has no copy of {redact_url(url)}",
                           expected=f"a repository for {redact_url(url)} in the kit",
                           found=f"copies of: {have}",
                           fix="make the kit again from this recipe (`october_setup kit --recipe R DIR` on a "
                               "machine with network access): the recipe's forks or submodules changed")
        return hit.as_uri()

    def commits_for(self, url: str) -> list[str]:
        """Every commit the kit's copy of ``url`` carries (the pin first is not implied)."""
        key = url_key(url)
        return [c for repo in self.manifest["repos"] if repo["key"] == key for c in repo["commits"]]

    def git_config(self) -> dict[str, str]:
        """Environment that makes every git process read these URLs from the kit, and only from files."""
        return with_config({"GIT_ALLOW_PROTOCOL": "file"},
                           tuple((f"url.{(self.root / repo['path']).as_uri()}.insteadOf", form)
                                 for repo in self.manifest["repos"]
                                 for form in {repo["key"], repo["key"] + ".git", repo["url"]}))


def open_kit(root: Path, recipe: Recipe, lock: Path | None = None) -> Kit:
    """Read and verify the kit at ``root``: against its own manifest, then ``recipe`` and ``lock`` (default:
    the committed ``locks/<recipe>.pylock.toml``); refuse anything that does not match."""
    root = root.resolve()
    if not root.is_dir():
        raise KitError(f"no kit at {root}", expected="a directory made by `october_setup kit`",
                       found="no such directory", fix="pass the kit's directory to --kit")
    doc = read_manifest(root)
    want = doc["recipe"]
    if want["name"] != recipe.name or want["sha256"] != recipe.sha256:
        raise KitError(f"the kit {root} was made for another recipe",
                       expected=f"recipe '{recipe.name}' sha256 {recipe.sha256}",
                       found=f"recipe '{want['name']}' sha256 {want['sha256']}",
                       fix=f"make a kit from this recipe (`october_setup kit --recipe {shlex.quote(recipe.name)} DIR`), "
                           "or use the recipe the kit was made from")
    problems = check_files(root, doc)
    if problems:
        raise KitError(f"the kit {root} does not match its manifest in {len(problems)} place(s): {listed(problems)}",
                       expected=f"every file as {MANIFEST} records it (sha256 and size)",
                       found="the differences listed (tampered, damaged or incomplete copy)",
                       fix="copy the kit again from where it was made (all parts), or make it again")
    repos: dict[str, Path] = {}
    for repo in doc["repos"]:
        path = root / repo["path"]
        missing = [c for c in repo["commits"] if not has_commit(path, c)]
        if missing:
            raise KitError(f"the kit's copy of {repo['url']} lacks commit(s) {', '.join(missing)}",
                           expected="every recorded commit in its repository", found="not there",
                           fix="make the kit again")
        repos[repo["key"]] = path
    lock = lock if lock is not None else committed_lock(recipe)
    problems = kit_problems(doc, recipe, lock)
    if problems:
        raise KitError(f"the kit {root} does not match the recipe and lock in {len(problems)} place(s): "
                       f"{listed(problems)}",
                       expected=f"the recipe's fork pins and target, and every wheel as "
                                f"{lock.name if lock else 'the manifest'} records it",
                       found="the differences listed (a kit made from another recipe, forks.toml or lock, or changed)",
                       fix=f"make the kit again from this recipe{' and lock' if lock else ''} "
                           f"(`october_setup kit --recipe {shlex.quote(recipe.name)} DIR`), or use the ones it was made from")
    return Kit(root=root, manifest=doc, repos=repos, lock=lock)


def own_word(kit: Kit, recipe: Recipe, locked: bool) -> list[str]:
    """What of the kit only its own ``kit.json`` vouches for (whoever could write the kit could change it and
    ``kit.json`` together), for a warning: its wheels when no lock held them, and each fork pinned by a prefix
    unless ``--locked`` gave the fork's full commit id."""
    said = []
    if kit.lock is None:
        said.append(f"the kit's wheels are held only to its own {MANIFEST}: the recipe {recipe.name!r} has no "
                    f"committed lock (locks/{recipe.name}.pylock.toml) and no --locked was given; to hold them to "
                    "a lock you trust, pass --locked (a lock written where the kit was made)")
    if not locked:
        said += [f"fork {f.name}: pinned by the prefix {f.pin.commit} on {f.pin.branch}; the kit's commit is held "
                 f"to that prefix and to the branch {MANIFEST} records (--locked holds it to a full commit id)"
                 for f in recipe.forks if f.pin.is_prefix]
    return said


def kit_recipe(recipe: Recipe, kit: Kit) -> Recipe:
    """The recipe with its package sources replaced by the kit's wheels (nothing else changes)."""
    return with_kit(recipe, kit.root)


def seed_cache(kit: Kit, recipe: Recipe, cache_dir: Path) -> Path | None:
    """Put the kit's base wheel where the wheel step looks first: the download cache, by sha256."""
    base = kit.manifest.get("base_wheel")
    if recipe.wheel is None:
        return None
    if base is None:
        raise KitError(f"the kit {kit.root} has no base wheel", expected=recipe.wheel.filename,
                       found="none", fix="make the kit again from this recipe")
    if recipe.wheel.sha256 is not None and recipe.wheel.sha256 != base["sha256"]:
        raise KitError("the kit's base wheel is not the recipe's", expected=f"sha256 {recipe.wheel.sha256}",
                       found=f"sha256 {base['sha256']}", fix="make the kit again from this recipe")
    src = kit.wheels_dir / base["filename"]
    dest = cache_path(cache_dir, base["sha256"], base["filename"])
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        place(src, dest)
    if recipe.wheel.sha256 is None:      # trusted on first use when the kit was made: that record travels
        write_json_atomic(seen_path(cache_dir, recipe.wheel.url),
                          {"url": redact_url(recipe.wheel.url), "filename": base["filename"],
                           "sha256": base["sha256"], "tool": kit.manifest["tool"]["version"]})
    return dest
