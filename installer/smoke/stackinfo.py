"""What the stack says of itself, checked before the smoke believes it: its setup receipt unchanged since written,
the recipe the same file, each fork's checkout at the receipt's commit and clean, and the level it promises (the
highest any evidence gives: the receipt's forks and promises, the env's distributions)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Mapping

from ..core import jsonread
from ..core.errors import SmokeError
from ..core.hashing import sha256_file
from ..core.paths import StackPaths
from ..recipe.forks import highest, promise_of


def _forks(data: Any) -> dict[str, str]:
    if isinstance(data, Mapping):
        items = [(k, v.get("commit") if isinstance(v, Mapping) else v) for k, v in data.items()]
    elif isinstance(data, list):
        items = [(d.get("name"), d.get("commit")) for d in data if isinstance(d, Mapping)]
    else:
        items = []
    return {str(k): str(v) for k, v in items if k and isinstance(v, str)}


def forks_as_set_up(install: Path, forks: Any) -> None:
    """Each fork the setup receipt names whose checkout is in the stack (``STACK/src/NAME``) at the commit the
    receipt names, with no local change git sees (its selected submodules included; a fork set up with
    ``--allow-dirty`` is said to be dirty and is not held to that): the receipt's commits are then what the stack
    runs, for an editable install takes the checkout's files as they are.  Else :class:`SmokeError`: a receipt
    must not name commits the engine did not run (``git status``: tens of milliseconds on FlashInfer)."""
    from ..core.version import head_commit
    from ..git.clonecheck import GitInspectError, dirty_entries, listed

    for fork in forks if isinstance(forks, list) else []:
        name, commit = (fork.get("name"), fork.get("commit")) if isinstance(fork, Mapping) else (None, None)
        checkout = install / "src" / str(name)
        if not isinstance(name, str) or not isinstance(commit, str) or not (checkout / ".git").exists():
            continue
        fix = (f"run `current verify --install {shlex.quote(str(install))}` to see what changed, then re-run "
               f"october_setup for the stack (it puts the checkout back at its commit, or says why not)")
        head = head_commit(checkout)
        if head != commit:
            raise SmokeError(f"fork {name}'s checkout is not at the commit the setup receipt names",
                             expected=f"{checkout} at {commit}", found=f"{head or 'a HEAD that cannot be read'}",
                             fix=fix)
        if fork.get("dirty"):
            continue
        # a receipt leaves the selection out when every submodule is selected (as current verify reads it)
        subs = fork.get("submodules_selected", list(fork.get("submodules") or {}))
        try:
            dirty = dirty_entries(checkout, [str(s) for s in subs] if isinstance(subs, list) else ())
        except GitInspectError as exc:
            raise SmokeError(f"fork {name}'s checkout cannot be looked at", expected=f"{checkout} clean at {commit}",
                             found=f"git: {exc}", fix=fix) from None
        if dirty:
            raise SmokeError(f"fork {name}'s checkout has local changes the setup receipt does not say",
                             expected=f"{checkout} clean at {commit}", found=listed(dirty), fix=fix)


def receipt_promise(data: Mapping[str, Any]) -> str | None:
    """What the setup receipt promises: the highest of :func:`promise_of` over every fork it names (fetched
    and installed) and its own ``promises``, so nothing in it can lower the level the smoke must reach."""
    installed = ((data.get("install") or {}).get("forks") if isinstance(data.get("install"), Mapping) else None)
    evidence = [f for f in (data.get("forks") or []) if isinstance(f, Mapping)] \
        + [f for f in (installed or []) if isinstance(f, Mapping)]
    return highest({promise_of(evidence), data.get("promises")})


def env_promise(install: Path) -> str | None:
    """What the stack's env promises by the distributions installed in it: evidence no edit of setup.json
    changes, for a receipt whose marker is gone (an older or copied stack)."""
    names = [d.name.split("-", 1)[0] for site in sorted((install / "env").glob("lib/python*/site-packages"))
             for d in site.glob("*.dist-info")]
    return promise_of([{"dist": n} for n in names])


def unchanged_receipt(install: Path, setup: Path) -> None:
    """setup.json as the receipt step wrote it (the sha256 its marker records): an edited one is refused."""
    from ..core.paths import StackPaths
    from ..engine import written_sha256

    want = written_sha256(StackPaths(install).marker("receipt"))
    got = sha256_file(setup)
    if want is not None and want != got:
        raise SmokeError("the stack's setup receipt was changed since october_setup wrote it",
                         expected=f"sha256 {want} (as the receipt step recorded it)", found=f"sha256 {got}",
                         fix=f"run `current verify --install {shlex.quote(str(install))}`; it names the re-run that writes it again")


def _same_recipe(rec: Mapping[str, Any], install: Path) -> None:
    """The recipe file the smoke reads again (the recorded one, or where it is gone the shipped one of that
    name) must be the one the stack was set up from, byte for byte."""
    path, sha, name = rec.get("path"), rec.get("sha256"), rec.get("name")
    if not isinstance(sha, str):
        return
    where = Path(path) if isinstance(path, str) and Path(path).is_file() else None
    if where is None and isinstance(name, str):
        from ..recipe import resolve_recipe_path
        shipped = resolve_recipe_path(name)
        where = shipped if shipped.is_file() else None
    if where is None:
        return                      # no file to read: nothing is taken from one
    now = sha256_file(where)
    if now != sha:
        raise SmokeError(f"the stack's recipe {where} changed since the stack was set up from it",
                         expected=f"sha256 {sha} (the setup receipt's)", found=f"sha256 {now}",
                         fix=f"re-run `october_setup {shlex.quote(str(install))} --recipe {shlex.quote(str(where))}` so the stack follows the recipe, "
                             "or put the recipe back as it was")


def _recipe_smoke(rec: Any) -> dict[str, int] | None:
    """The recipe's [smoke] token counts, read from the recipe file the setup receipt names."""
    path = rec.get("path") if isinstance(rec, Mapping) else None
    if not isinstance(path, str) or not Path(path).is_file():
        return None
    from ..core.errors import RecipeError
    from ..recipe import load_recipe
    try:
        smoke = load_recipe(path).smoke
    except RecipeError:
        return None
    return {"prompt_tokens": smoke.prompt_tokens, "max_new_tokens": smoke.max_new_tokens}


def stack_info(install: Path, recipe: str | None) -> dict[str, Any]:
    """Recipe, lock hash, fork commits, the promised level and the jit step's modules, from the stack."""
    lock = install / "pylock.toml"
    setup = install / "receipts" / "setup.json"
    info: dict[str, Any] = {"recipe": {"name": recipe, "sha256": None} if recipe else None,
                            "lock_sha256": sha256_file(lock) if lock.is_file() else None,
                            "forks": {}, "setup_receipt": str(setup) if setup.is_file() else None}
    if not setup.is_file():
        from ..verify.fix import not_a_stack

        raise SmokeError("the stack has no setup receipt, so what it promises is unknown",
                         expected=f"{setup} (written by october_setup)", found="nothing",
                         fix=not_a_stack(StackPaths(install)))     # its last run's command, if recorded
    try:
        data = jsonread.loads(setup.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SmokeError("the stack's setup receipt is unreadable", expected=f"JSON in {setup}",
                         found=f"{exc}", fix="re-run october_setup to rewrite it") from None
    unchanged_receipt(install, setup)
    data = data if isinstance(data, Mapping) else {}    # not an object: no recipe and no fork, refused below
    rec = data.get("recipe")
    if isinstance(rec, Mapping) and isinstance(rec.get("name"), str):
        sha = rec.get("sha256")
        info["recipe"] = {"name": rec["name"], "sha256": sha if isinstance(sha, str) else None}
        _same_recipe(rec, install)
    info["forks"] = _forks(data.get("forks"))
    forks_as_set_up(install, data.get("forks"))
    info["promised_level"] = highest({receipt_promise(data), env_promise(install)})
    if info["promised_level"] is None:
        raise SmokeError("the stack's setup receipt names no fork, so it promises nothing to check",
                         expected=f"a flashinfer or vllm fork in {setup}",
                         found=f"forks {sorted(info['forks']) or 'none'}",
                         fix="re-run october_setup with a K16/V8 recipe")
    info["jit"] = [{"uri": str(m["uri"]), "sha256": str(m["sha256"])} for m in data.get("jit") or []
                   if isinstance(m, Mapping) and m.get("uri") and m.get("sha256")]
    # the code that judged the stack: a receipt re-read later (a resumed fleet node) is believed only by it
    from ..pyenv.builtkey import tool_code

    info["tool_code"] = tool_code()
    # an asymmetric paged prefill is declared when the jit step built one (K != V prefill module)
    info["asym_prefill"] = any(m["uri"].startswith("batch_prefill_") and "_dtype_k_" in m["uri"] for m in info["jit"])
    smoke = _recipe_smoke(rec)
    if smoke is not None:
        info["smoke"] = smoke
    return info
