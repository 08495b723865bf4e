"""What ``current verify`` tells the user to run for each kind of difference: commands that work.

Each line is one that was run against a planted difference and seen to bring the stack back
(tests/test_verify_fix.py); what a re-run of the setup cannot undo today gets its own command:

* a fork with local changes: ``october_setup`` refuses a dirty clone (with or without ``--locked``),
  so the fix is git's own (stash, which keeps the changes), or a re-run with ``--allow-dirty``, which
  keeps them and records them in the receipt;
* a submodule moved or checked out although the recipe does not select it: ``git submodule
  update`` / ``deinit`` (the fetch step refuses a clone whose submodule moved: it shows as a change);
* a file changed in place in the env: installs are reflinked or copied, never hard-linked, so uv's
  cache still holds the distribution's own bytes: the setup command again with ``--locked`` (its
  install step re-installs each distribution whose files differ from their RECORD).  Only a changed
  file with other hard links (``st_nlink`` > 1: linked by hand, or an env made by something else)
  may share its change with uv's cache: then that distribution's cache entry goes first, then the
  env, then the re-run;
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

from ..core import jsonread
from ..core.paths import StackPaths, default_cache_dir
from ..core.resources import recipes_dir
from ..engine import read_marker

MAX_PATHS = 10


def _q(value: str | Path) -> str:
    return shlex.quote(str(value))


def cache_dir(paths: StackPaths, receipt: Mapping[str, Any] | None = None) -> Path | None:
    """The --cache-dir the stack was set up with: the receipt's ``options.cache_dir``, else (a receipt
    written before it was recorded) where a step recorded it (the JIT shared cache)."""
    recorded = _obj(receipt or {}, "options").get("cache_dir")
    if isinstance(recorded, str) and recorded:
        return Path(recorded)
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
    try:
        shipped = bool(path and name) and Path(str(path)).resolve() == (recipes_dir() / f"{name}.toml").resolve()
    except (OSError, ValueError, RuntimeError):    # a hand-edited path git or the OS cannot take (a NUL byte)
        shipped = False
    if shipped:
        return str(name)                           # a shipped recipe: by name
    return str(path) if path else (str(name) if name else None)


def _names(value: Any) -> list[str]:
    """A recorded list of names (skipped preflight checks); anything else (a hand edit) is none."""
    return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []


def same_inputs(receipt: Mapping[str, Any]) -> list[str]:
    """The receipt's options that change the steps' inputs and that no run record keeps: ``--locked`` (with the
    ``--lock-file`` it was held to) and ``--allow-dirty``; a re-run without them would redo the stack, not repair it."""
    lock, options = _obj(receipt, "lock"), _obj(receipt, "options")
    extra = ["--locked"] if options.get("locked") is True else []
    if extra and isinstance(lock.get("locked_from"), str) and lock["locked_from"]:
        extra += ["--lock-file", _q(str(lock["locked_from"]))]
    return extra + (["--allow-dirty"] if options.get("allow_dirty") is True else [])


def setup_command(paths: StackPaths, receipt: Mapping[str, Any], *extra: str) -> str:
    """``october_setup STACK`` with the options the stack was set up with, plus ``extra``: those its last run
    began with (``.state/recipe-used.json``) when that run was of the receipt's recipe, else those the receipt
    recorded (recipe, system torch, skipped preflight checks, cache dir; no --kit)."""
    if (began := _began_as(paths, receipt)) is not None:
        return " ".join(["october_setup", _q(paths.root), *_began_argv(began), *extra])
    argv = ["october_setup", _q(paths.root)]
    if recipe := _recipe_arg(receipt):
        argv += ["--recipe", _q(recipe)]
    torch = _obj(receipt, "torch")
    if torch.get("source") == "system" and torch.get("python"):
        argv += ["--system-python", _q(str(torch["python"]))]
    if skipped := _names(_obj(receipt, "options").get("skip_preflight")):
        argv += ["--skip-preflight", _q(",".join(skipped))]
    if (cache := cache_dir(paths, receipt)) is not None:
        argv += ["--cache-dir", _q(cache)]
    return " ".join([*argv, *extra])


def kit_hint(paths: StackPaths, receipt: Mapping[str, Any]) -> str:
    """" (add --kit KIT ...)" after a setup command when the stack's record cannot say whether it was set up
    from a kit (made before the options were recorded, or its last run was of another recipe); else ""."""
    return "" if _began_as(paths, receipt) is not None else " (add --kit KIT if it was set up from a kit)"


def _began_as(paths: StackPaths, receipt: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The stack's last run begun (:func:`_began`) when it recorded its options and was of the receipt's
    recipe: then its options are the stack's; else None."""
    began = _began(paths)
    if began.get("options") is not None and _recipe_arg({"recipe": began}) == _recipe_arg(receipt):
        return began
    return None


def _began(paths: StackPaths) -> Mapping[str, Any]:
    """``.state/recipe-used.json``: the recipe and options of the stack's last run begun ({} if unread)."""
    try:
        rec = jsonread.loads(paths.recipe_record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, Mapping) else {}


def _began_argv(began: Mapping[str, Any]) -> list[str]:
    """The last run's --recipe and the options it recorded, as october_setup takes them."""
    argv = ["--recipe", _q(recipe)] if (recipe := _recipe_arg({"recipe": began})) else []
    options = _obj(began, "options")
    if isinstance(python := options.get("system_python"), str) and python:
        argv += ["--system-python", _q(python)]
    if skipped := _names(options.get("skip_preflight")):
        argv += ["--skip-preflight", _q(",".join(skipped))]
    for option, key in (("--cache-dir", "cache_dir"), ("--kit", "kit")):
        if isinstance(value := options.get(key), str) and value:
            argv += [option, _q(value)]
    return argv


def rerun_locked(paths: StackPaths, receipt: Mapping[str, Any]) -> str:
    return f"re-run `{setup_command(paths, receipt, '--locked')}` to put it back as locked{kit_hint(paths, receipt)}"


def rewrite_lock(paths: StackPaths, receipt: Mapping[str, Any]) -> str:
    # not --locked: that would install from the changed lock (the stack's own, when the project ships none)
    return (f"re-run `{setup_command(paths, receipt)}`: the lock step writes the lock again from the stack"
            f"{kit_hint(paths, receipt)}")


def unreadable_lock(paths: StackPaths, receipt: Mapping[str, Any]) -> str:
    """STACK/pylock.toml cannot be read: no version control holds it, the lock step writes it again."""
    return (f"{paths.pylock} is the stack's own lock (no version control holds it), written by october_setup: "
            + rewrite_lock(paths, receipt))


def rewrite_receipt(paths: StackPaths, lock: Mapping[str, Any]) -> str:
    """An unreadable receipt: the receipt step writes it again on a re-run with the recipe the lock names."""
    name = str(((lock.get("tool") or {}).get("october") or {}).get("recipe", {}).get("name") or "")
    began = _began(paths)
    if name and began.get("name") == name and began.get("options") is not None:    # the last run's own command
        return (f"re-run `october_setup {_q(paths.root)} {' '.join(_began_argv(began))}`: the receipt step writes "
                "the receipt again")
    shipped = recipes_dir() / f"{name}.toml"
    if name and shipped.is_file():
        command = setup_command(paths, {"recipe": {"name": name, "path": str(shipped)}})
        return (f"re-run `{command}` (with the --system-python, --skip-preflight, --cache-dir or --kit it was set up "
                "with): the receipt step writes the receipt again")
    return (f"re-run `october_setup {_q(paths.root)} --recipe RECIPE` with RECIPE the path of the recipe "
            f"'{name or 'it was set up with'}' (and the options it was set up with): the receipt step writes the "
            "receipt again")


def setup_receipt(paths: StackPaths) -> Mapping[str, Any]:
    """The stack's setup receipt as read, or {} where it cannot be (missing, unreadable, not an object): a fix line
    is then said from what else the stack records."""
    try:
        read = jsonread.loads(paths.setup_receipt.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return read if isinstance(read, Mapping) else {}


def rebuild_jit(paths: StackPaths) -> str:
    """JIT libraries unlike the jit step's record: the same setup command runs the jit step again, which puts back
    what changed (from the shared cache where it holds them, its hash checked; else built again).  The command is
    the one the stack was set up with (its receipt, or its last run's record); ``--recipe NAME`` where neither says."""
    receipt = setup_receipt(paths)
    began = _began(paths)
    if not receipt and began.get("options") is not None:       # no receipt yet: the run that built the JIT
        command, hint = " ".join(["october_setup", _q(paths.root), *_began_argv(began)]), ""
    else:
        command, hint = setup_command(paths, receipt, *same_inputs(receipt)), kit_hint(paths, receipt)
        if _began_as(paths, receipt) is None and not _recipe_arg(receipt):
            command += " --recipe NAME"
    return (f"re-run `{command}`{hint}: its jit step puts back what changed (from the shared cache, hash checked, "
            "or built again)")


def rewrite_stack_env(paths: StackPaths, receipt: Mapping[str, Any]) -> str:
    """A changed or missing stack-env.json or activate: the env step's check of them fails on a re-run with the
    options the stack was set up with (--locked and --allow-dirty too, so the steps' inputs stay the same), and it writes both
    again (the env made anew, the forks installed again)."""
    return (f"re-run `{setup_command(paths, receipt, *same_inputs(receipt))}`: its env step writes stack-env.json and "
            f"activate again{kit_hint(paths, receipt)}")


def not_a_stack(paths: StackPaths) -> str:
    """``--install`` names no finished stack: finish it (a stack's directory, an empty one or none), or, where
    october_setup would refuse the directory (other files and no ``.state/``), set one up elsewhere."""
    others = paths.foreign()
    began = _began(paths)
    if not others and began.get("options") is not None:           # a run began here: its command is recorded
        return (f"run `october_setup {_q(paths.root)} {' '.join(_began_argv(began))}` to finish it (what its last run "
                "began with), or point --install at the stack directory")
    if not others and _recipe_arg({"recipe": began}):             # recorded by a version that kept only the recipe
        return (f"run `october_setup {_q(paths.root)} {' '.join(_began_argv(began))}` to finish it (the recipe its "
                "last run began with; add the other options it was set up with, e.g. --cache-dir, --kit, "
                "--system-python, --skip-preflight), or point --install at the stack directory")
    if not others:
        return (f"run `october_setup {_q(paths.root)} --recipe NAME` to set it up (or finish it), or point --install "
                "at the stack directory")
    shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
    return (f"point --install at the stack directory; {paths.root} holds other files ({shown}) and no stack, so "
            "october_setup will not set one up there: to make a stack, run `october_setup NEW_DIR --recipe NAME` "
            "with NEW_DIR a new or empty directory")


def dirty_fork(paths: StackPaths, receipt: Mapping[str, Any], fork: Path, submodules: Sequence[str] = (),
               *, hidden: bool = False) -> str:
    """``submodules``: checked-out submodules with changes of their own (the fork's stash does not take them);
    ``hidden``: a file git status is told not to look at (no stash takes it): the clone is moved aside."""
    record = f"or keep them on record with `{setup_command(paths, receipt, '--allow-dirty')}`"
    if hidden:
        keep = Path(f"{fork}.local-changes")
        return (f"move the clone aside with your changes (`mv {_q(fork)} {_q(keep)}`) and run "
                f"`{setup_command(paths, receipt)}` (it clones the fork again), {record}")
    stash = " && ".join(f"git -C {_q(where)} stash push --include-untracked"
                        for where in [*(fork / s for s in submodules), fork])
    return f"put the changes aside with `{stash}` (they stay in each repository's stash), {record}"


def unreadable_clone(paths: StackPaths, receipt: Mapping[str, Any], fork: Path, owned: Path | None = None) -> str:
    """``owned``: the folder git will not read as this user, another user's (git: "dubious ownership": the clone, a
    submodule or its git directory); nothing is broken, so its owner runs verify (setting it up again would not
    help)."""
    if owned is not None:
        try:
            import pwd

            owner = pwd.getpwuid(owned.stat().st_uid).pw_name
        except (ImportError, KeyError, OSError):
            owner = "its owner"
        return (f"{owned} belongs to another user: run current verify as {owner}, or, if you trust that user, "
                f"let git read it as you (`git config --global --add safe.directory {_q(owned)}`) and verify again")
    return (f"move the clone aside (`mv {_q(fork)} {_q(str(fork) + '.broken')}`) and run "
            f"`{setup_command(paths, receipt)}`")


def moved_submodule(fork: Path, sub: str) -> str:
    return f"run `git -C {_q(fork)} submodule update --init --checkout --recursive -- {_q(sub)}`"


def unselected_submodule(fork: Path, sub: str) -> str:
    return (f"run `git -C {_q(fork)} submodule deinit --force -- {_q(sub)}` (the recipe does not select it, "
            "so setup never checks it out)")


def uv_cache(paths: StackPaths, receipt: Mapping[str, Any] | None = None) -> Path:
    """Where the env's packages were installed from: STACK/.uv-cache, else CACHE/uv (the recorded cache dir,
    else the default one, as setup chose it)."""
    own = paths.root / ".uv-cache"
    return own if own.is_dir() else (cache_dir(paths, receipt) or default_cache_dir()) / "uv"


def _hard_linked(files: Sequence[Path]) -> list[Path]:
    """The files that have another hard link somewhere (``st_nlink`` > 1)."""
    linked = []
    for f in files:
        try:
            if f.stat().st_nlink > 1:
                linked.append(f)
        except OSError:
            continue
    return linked


def changed_files(paths: StackPaths, receipt: Mapping[str, Any], dists: Sequence[str],
                  files: Sequence[Path] = ()) -> str:
    """Installed files that differ from their RECORD (``files``: those still there).  The re-run's install
    step re-installs those distributions from uv's cache, which installs never link into; only a file with
    another hard link may have shared its change with that cache, which is then cleaned first."""
    rerun = f"`{setup_command(paths, receipt, '--locked')}`"
    linked = _hard_linked(files)
    if not linked:
        return (f"re-run {rerun}: its install step re-installs the distributions whose files differ from their "
                f"RECORD{kit_hint(paths, receipt)}")
    names = " ".join(_q(n) for n in sorted(set(dists)))
    return (f"{_q(linked[0])}{f' and {len(linked) - 1} other changed file(s)' if len(linked) > 1 else ''} "
            f"{'has' if len(linked) == 1 else 'have'} other hard links, which may be in uv's cache with the same "
            f"change: run `UV_CACHE_DIR={_q(uv_cache(paths, receipt))} uv cache clean {names} && rm -rf "
            f"{_q(paths.env)}`, then {rerun}{kit_hint(paths, receipt)}")


def remove_files(files: Sequence[Path], lead: str = "nothing set up put them there") -> str:
    shown = " ".join(_q(f) for f in files[:MAX_PATHS])
    more = f" (and the other {len(files) - MAX_PATHS} listed)" if len(files) > MAX_PATHS else ""
    return f"{lead}: remove them with `rm -f -- {shown}`{more}"
