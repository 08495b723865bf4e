"""The committed index locks ``locks/<recipe>.pylock.toml``: each recipe's *index part* (torch, the
build requirements, ``[install] supply``, the base wheel by ``name==version``) resolved by ``uv pip
compile`` for :data:`PLATFORM`, less what the forks replace, with ``[tool.october]`` (scope ``index``:
the recipe pins the fork commits).  ``october_setup --locked`` installs exactly these files.

Regenerate: ``uv run python -m october.installer.lock.indexlock`` (all recipes) or ``... current 20260702``.
"""

from __future__ import annotations

import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from packaging.pylock import Pylock, PylockValidationError
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..core.errors import LockError
from ..core.redact import redact_url
from ..core.resources import DATA_ROOT, recipes_dir
from ..core.runner import Runner
from .pylock import TOOL, dumps, shown_package
from ..pyenv.uvcmd import recipe_source_args
from ..recipe import Recipe, load_recipe
from ..recipe.install import as_json as policy_json

# glibc 2.31, the oldest the stacks run on (vLLM's wheel's); on 2_28 some packages have only an sdist.
PLATFORM = "x86_64-manylinux_2_31"
SCOPE = "index"
# How far before the resolution the cutoff lies: an index can list a file days after its upload time, so a
# cutoff at the resolution time re-resolves to a newer file once the index catches up.  SETTLE narrows that
# window but cannot close it (a file uploaded 9 days before a lock was still unlisted), so a lock is checked
# against the index with its own pins (``compile_recipe(pins=...)``).
SETTLE = timedelta(days=3)


@dataclass(frozen=True)
class IndexRequest:
    recipe: str
    python: str
    requirements: tuple[str, ...]
    replaced: tuple[str, ...]          # canonical names the forks replace, dropped from the lock
    sources: tuple[str, ...]           # uv source arguments

    def argv(self, uv: str, requirements_file: Path, output: Path, exclude_newer: str,
             constraints: Path | None = None) -> list[str]:
        """``exclude_newer`` (RFC 3339): files uploaded later are ignored.  ``constraints``: a file of a
        committed lock's ``name==version`` pins (:func:`lock_pins`)."""
        return [uv, "pip", "compile", str(requirements_file), "--python-version", self.python,
                "--python-platform", PLATFORM, "--exclude-newer", exclude_newer, "--no-header", "--quiet",
                *self.sources, *(["--constraint", str(constraints)] if constraints else []), "-o", str(output)]


def index_request(recipe: Recipe) -> IndexRequest:
    """The recipe's real index requirement set (pure)."""
    reqs = [recipe.torch.requirement, *recipe.build_requirements, *recipe.install.supply]
    replaced: list[str] = []
    if recipe.wheel is not None:
        reqs.append(f"{recipe.wheel.name}=={recipe.wheel.version}")
        replaced.append(str(canonicalize_name(recipe.wheel.name)))
    replaced += [f.traits.replaces_dist for f in recipe.forks if f.traits.replaces_dist]
    return IndexRequest(recipe.name, recipe.python, tuple(reqs), tuple(dict.fromkeys(replaced)),
                        tuple(recipe_source_args(recipe)))


def tool_section(recipe: Recipe, exclude_newer: str, resolved_at: str) -> dict[str, Any]:
    tool: dict[str, Any] = {"format-version": 2, "scope": SCOPE, "platform": PLATFORM,
                            "exclude-newer": exclude_newer, "resolved-at": resolved_at,
                            "recipe": {"name": recipe.name},
                            "torch": recipe.torch.version,
                            "install": dict(policy_json(recipe.install)),
                            "replaced-by-forks": list(index_request(recipe).replaced)}
    if recipe.wheel is not None and recipe.wheel.sha256:
        tool["wheel"] = {"filename": recipe.wheel.filename, "url": redact_url(recipe.wheel.url),
                         "sha256": recipe.wheel.sha256}
    return tool


def build_index_lock(recipe: Recipe, compiled: Mapping[str, Any], exclude_newer: str,
                     resolved_at: str) -> dict[str, Any]:
    """``uv pip compile``'s pylock, less what the forks replace, with our ``[tool.october]``."""
    req = index_request(recipe)
    packages = [shown_package(p) for p in compiled.get("packages", [])
                if str(canonicalize_name(p["name"])) not in req.replaced]
    lock = {"lock-version": "1.0", "created-by": TOOL, "requires-python": f"=={recipe.python}",
            "packages": sorted(packages, key=lambda p: str(p["name"])), "tool": {TOOL: tool_section(recipe, exclude_newer, resolved_at)}}
    try:
        Pylock.from_dict(lock)
    except PylockValidationError as exc:
        raise LockError(f"the index lock of recipe {recipe.name} is not valid PEP 751", expected="a valid pylock",
                        found=str(exc), fix="report this as a bug") from None
    return lock


def check_index_lock(recipe: Recipe, lock: Mapping[str, Any]) -> list[str]:
    """Every way a committed index lock disagrees with its recipe (empty: it matches)."""
    problems: list[str] = []
    try:
        Pylock.from_dict(dict(lock))
    except PylockValidationError as exc:
        problems.append(f"not valid PEP 751: {exc}")
    tool = lock.get("tool", {}).get(TOOL, {})
    want = tool_section(recipe, str(tool.get("exclude-newer", "")), str(tool.get("resolved-at", "")))
    for key in sorted(set(want) | set(tool)):
        if tool.get(key) != want.get(key):
            problems.append(f"[tool.{TOOL}] {key}: lock has {tool.get(key)!r}, recipe gives {want.get(key)!r}")
    if not tool.get("exclude-newer"):
        problems.append(f"[tool.{TOOL}] exclude-newer is missing: the resolution cannot be repeated")
    else:
        problems.extend(settled_problems(str(tool.get("exclude-newer")), str(tool.get("resolved-at", ""))))
    if lock.get("requires-python") != f"=={recipe.python}":
        problems.append(f"requires-python {lock.get('requires-python')!r}, recipe Python {recipe.python}")
    versions: dict[str, str] = {}
    for p in lock.get("packages", []):
        name = str(canonicalize_name(p.get("name", "")))
        versions[name] = str(p.get("version"))
        files = [*(p.get("wheels") or []), *([p["sdist"]] if isinstance(p.get("sdist"), dict) else [])]
        if not files or not all(f.get("hashes", {}).get("sha256") for f in files):
            problems.append(f"{name} {p.get('version')}: a file without a sha256 (or no file)")
    for name in index_request(recipe).replaced:
        if name in versions:
            problems.append(f"{name} {versions[name]} is locked, but a fork replaces it")
    for line in (recipe.torch.requirement, *recipe.build_requirements, *recipe.install.supply):
        req = Requirement(line)
        got = versions.get(str(canonicalize_name(req.name)))
        if got is None:
            problems.append(f"the recipe requires {line}, the lock has no {req.name}")
        elif not req.specifier.contains(Version(got), prereleases=True):
            problems.append(f"the recipe requires {line}, the lock has {req.name} {got}")
    return problems


def lock_pins(lock: Mapping[str, Any]) -> dict[str, str]:
    """canonical name -> version of every package a (committed) lock holds."""
    return {str(canonicalize_name(p["name"])): str(p["version"]) for p in lock.get("packages", [])}


def compile_recipe(recipe: Recipe, runner: Runner, uv: str, exclude_newer: str,
                   pins: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``uv pip compile`` of the recipe's index part; ``pins`` (name -> version) constrain it."""
    req = index_request(recipe)
    with tempfile.TemporaryDirectory(prefix="october-indexlock-") as tmp:
        work = Path(tmp)
        (work / "requirements.in").write_text("\n".join(req.requirements) + "\n", encoding="utf-8")
        constraints = work / "pins.txt" if pins else None
        if constraints is not None:
            constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())), encoding="utf-8")
        out = work / "pylock.toml"
        runner.run(req.argv(uv, work / "requirements.in", out, exclude_newer, constraints),
                   step=f"indexlock-{recipe.name}")
        with open(out, "rb") as fh:
            return tomllib.load(fh)


def lock_path(name: str, root: Path = DATA_ROOT) -> Path:
    return root / "locks" / f"{name}.pylock.toml"


def _rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _parse_rfc3339(text: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def now_rfc3339() -> str:
    return _rfc3339(datetime.now(timezone.utc))


def settled_cutoff(resolved_at: str) -> str:
    """The cutoff for a resolution made at ``resolved_at``: SETTLE earlier, on the hour."""
    when = _parse_rfc3339(resolved_at)
    if when is None:
        raise ValueError(f"not an RFC 3339 time with a zone: {resolved_at!r}")
    return _rfc3339((when - SETTLE).replace(minute=0, second=0))


def settled_problems(exclude_newer: str, resolved_at: str) -> list[str]:
    """Why a lock's cutoff cannot be repeated against an index that lists files late (empty: it can)."""
    cutoff, made = _parse_rfc3339(exclude_newer), _parse_rfc3339(resolved_at)
    if cutoff is None or made is None:
        return [f"[tool.{TOOL}] exclude-newer {exclude_newer!r} and resolved-at {resolved_at!r} must be RFC 3339 "
                "times with a zone"]
    if made - cutoff < SETTLE:
        return [f"[tool.{TOOL}] exclude-newer {exclude_newer} is less than {SETTLE.days} days before resolved-at "
                f"{resolved_at}: an index that lists files late resolves it differently; regenerate with "
                "locks/regenerate.sh"]
    return []


def regenerate(names: Sequence[str], logs: Path, uv: str, exclude_newer: str | None = None) -> list[Path]:
    from ..core.atomic import write_text_atomic

    written: list[Path] = []
    runner = Runner(logs)
    resolved_at = now_rfc3339()
    date = exclude_newer or settled_cutoff(resolved_at)
    problems = settled_problems(date, resolved_at)
    if problems:
        raise LockError("the index lock's cutoff is too recent to repeat", expected=f"a cutoff {SETTLE.days} days "
                        "or more before now", found=problems[0], fix="leave --exclude-newer out (the default is "
                        "settled) or give an earlier date")
    for name in names:
        recipe = load_recipe(name)
        lock = build_index_lock(recipe, compile_recipe(recipe, runner, uv, date), date, resolved_at)
        path = lock_path(name)
        write_text_atomic(path, dumps(lock))
        written.append(path)
        print(f"{path}: {len(lock['packages'])} packages")
    return written


def main(argv: Sequence[str]) -> int:
    from ..pyenv.uvcmd import uv_exe

    names = list(argv) or sorted(p.stem for p in recipes_dir().glob("*.toml"))
    with tempfile.TemporaryDirectory(prefix="october-indexlock-logs-") as logs:
        regenerate(names, Path(logs), uv_exe())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
