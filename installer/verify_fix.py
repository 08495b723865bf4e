"""What ``current verify`` tells the user to run for each kind of difference: commands that work.

Each line is one that was run against a planted difference and seen to bring the stack back
(tests/test_verify_fix.py); what a re-run of the setup cannot undo today gets its own command:

* a fork with local changes: ``october_setup`` refuses a dirty clone (with or without ``--locked``),
  so the fix is git's own (stash, which keeps the changes), or a re-run with ``--allow-dirty``, which
  keeps them and records them in the receipt;
* a submodule moved or checked out although the recipe does not select it: ``git submodule
  update`` / ``deinit`` (the fetch step refuses a clone whose submodule moved: it shows as a change);
* a file changed in place in the env: uv hard-links installed files to its cache, so the cache
  holds the same bytes; the distribution's cache entry goes first, then the env, then the re-run;
* a file no RECORD owns, a JIT library no record names: the re-run leaves them, so they are removed;
* a changed lock file: the setup command again *without* ``--locked`` (which would install from the
  changed lock): the lock step sees the file changed and writes it again from the stack;
* a changed or missing ``stack-env.json`` or ``activate``: the setup command again with the options the
  stack was set up with: the env step sees the file changed and writes both again;
* everything else (an extra, missing or other-version distribution, a moved fork HEAD, another torch,
  a changed base wheel or JIT library): the setup command again with ``--locked``.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from .core.paths import StackPaths, default_cache_dir
from .core.resources import recipes_dir
from .engine import read_marker

MAX_PATHS = 10


def _q(value: str | Path) -> str:
    return shlex.quote(str(value))


def cache_dir(paths: StackPaths) -> Path | None:
    """The --cache-dir the stack was set up with, where a step recorded it (the JIT shared cache)."""
    jit = (read_marker(paths.marker("jit")) or {}).get("outputs") or {}
    shared = (jit.get("shared_cache") or {}).get("dir") if isinstance(jit.get("shared_cache"), dict) else None
    return Path(str(shared)).parent if shared else None


def _obj(receipt: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``receipt[key]`` when it is an object, else {} (a hand-edited receipt must not crash the fix line)."""
    value = receipt.get(key) if isinstance(receipt, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _recipe_arg(receipt: Mapping[str, Any]) -> str | None:
    rec = _obj(receipt, "recipe")
    path, name = rec.get("path"), rec.get("name")
    if path and name and Path(str(path)).resolve() == (recipes_dir() / f"{name}.toml").resolve():
        return str(name)                           # a shipped recipe: by name
    return str(path) if path else (str(name) if name else None)


def setup_command(paths: StackPaths, receipt: Mapping[str, Any], *extra: str) -> str:
    """``october_setup STACK`` with the options the receipt recorded (recipe, system torch, skipped
    preflight checks, cache dir), plus ``extra``."""
    argv = ["october_setup", _q(paths.root)]
    if recipe := _recipe_arg(receipt):
        argv += ["--recipe", _q(recipe)]
    torch = _obj(receipt, "torch")
    if torch.get("source") == "system" and torch.get("python"):
        argv += ["--system-python", _q(str(torch["python"]))]
    if skipped := [str(s) for s in _obj(receipt, "options").get("skip_preflight") or []]:
        argv += ["--skip-preflight", _q(",".join(skipped))]
    if (cache := cache_dir(paths)) is not None:
        argv += ["--cache-dir", _q(cache)]
    return " ".join([*argv, *extra])


def rerun_locked(paths: StackPaths, receipt: Mapping[str, Any]) -> str:
    return (f"re-run `{setup_command(paths, receipt, '--locked')}` to put it back as locked "
            "(add --kit KIT if it was set up from a kit)")


def rewrite_lock(paths: StackPaths, receipt: Mapping[str, Any]) -> str:
    # not --locked: that would install from the changed lock (the stack's own, when the project ships none)
    return (f"re-run `{setup_command(paths, receipt)}`: the lock step writes the lock again from the stack "
            "(add --kit KIT if it was set up from a kit)")


def rewrite_receipt(paths: StackPaths, lock: Mapping[str, Any]) -> str:
    """An unreadable receipt: the receipt step writes it again on a re-run with the recipe the lock names."""
    name = str(((lock.get("tool") or {}).get("october") or {}).get("recipe", {}).get("name") or "")
    shipped = recipes_dir() / f"{name}.toml"
    if name and shipped.is_file():
        command = setup_command(paths, {"recipe": {"name": name, "path": str(shipped)}})
        return (f"re-run `{command}` (with the --system-python, --skip-preflight, --cache-dir or --kit it was set up "
                "with): the receipt step writes the receipt again")
    return (f"re-run `october_setup {_q(paths.root)} --recipe RECIPE` with RECIPE the path of the recipe "
            f"'{name or 'it was set up with'}' (and the options it was set up with): the receipt step writes the "
            "receipt again")


def rewrite_stack_env(paths: StackPaths, receipt: Mapping[str, Any]) -> str:
    """A changed or missing stack-env.json or activate: the env step's check of them fails on a re-run with the
    options the stack was set up with (--locked too, so the env step's inputs stay the same), and it writes both
    again (the env made anew, the forks installed again)."""
    lock, options = _obj(receipt, "lock"), _obj(receipt, "options")
    locked = ["--locked"] if options.get("locked") else []
    if locked and isinstance(lock.get("locked_from"), str):
        locked += ["--lock-file", _q(str(lock["locked_from"]))]
    return (f"re-run `{setup_command(paths, receipt, *locked)}`: its env step writes stack-env.json and activate "
            "again (add --kit KIT if it was set up from a kit)")


def dirty_fork(paths: StackPaths, receipt: Mapping[str, Any], fork: Path) -> str:
    return (f"put the changes aside with `git -C {_q(fork)} stash push --include-untracked` (they stay in the "
            f"fork's stash), or keep them on record with `{setup_command(paths, receipt, '--allow-dirty')}`")


def moved_submodule(fork: Path, sub: str) -> str:
    return f"run `git -C {_q(fork)} submodule update --init --checkout --recursive -- {_q(sub)}`"


def unselected_submodule(fork: Path, sub: str) -> str:
    return (f"run `git -C {_q(fork)} submodule deinit --force -- {_q(sub)}` (the recipe does not select it, "
            "so setup never checks it out)")


def uv_cache(paths: StackPaths) -> Path:
    """Where the env's packages were linked from: STACK/.uv-cache, else CACHE/uv (the recorded cache dir, else
    the default one, as setup chose it)."""
    own = paths.root / ".uv-cache"
    return own if own.is_dir() else (cache_dir(paths) or default_cache_dir()) / "uv"


def changed_files(paths: StackPaths, receipt: Mapping[str, Any], dists: Sequence[str]) -> str:
    names = " ".join(_q(n) for n in sorted(set(dists)))
    return (f"the env's files are hard links into uv's cache, which holds the same change: run "
            f"`UV_CACHE_DIR={_q(uv_cache(paths))} uv cache clean {names} && rm -rf {_q(paths.env)}`, then "
            f"`{setup_command(paths, receipt, '--locked')}` (add --kit KIT if it was set up from a kit)")


def remove_files(files: Sequence[Path]) -> str:
    shown = " ".join(_q(f) for f in files[:MAX_PATHS])
    more = f" (and the other {len(files) - MAX_PATHS} listed)" if len(files) > MAX_PATHS else ""
    return f"nothing set up put them there: remove them with `rm -f -- {shown}`{more}"
