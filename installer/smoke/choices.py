"""What `current smoke` runs when an option is left out: the stack already knows.  The recipe is the one
its setup receipt names, the level the promised one, the format the recipe's only selection (or the one
whose download manifest is here).  An option overrides; ``choices`` in the stack info records every value,
where it came from and, for an override, what the stack said."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from ..core import jsonread
from ..core.errors import RecipeError, SmokeError, UsageError
from ..core.resources import recipes_dir


@dataclass(frozen=True)
class Choice:
    value: str | None
    source: str                       # option | setup receipt | recipe | download manifest
    stack_says: str | None = None     # for an override: what the stack would have chosen

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "source": self.source}
        if self.source == "option" and self.stack_says != self.value:
            out["stack_says"] = self.stack_says
        return out


def receipt_recipe(install: Path) -> tuple[str | None, str | None]:
    """(name, path) of the recipe the setup receipt names; (None, None) when it names none."""
    try:
        rec = jsonread.loads((install / "receipts" / "setup.json").read_text(encoding="utf-8")).get("recipe")
    except (OSError, ValueError, AttributeError):
        return None, None
    if not isinstance(rec, Mapping):
        return None, None
    name, path = rec.get("name"), rec.get("path")
    return (name if isinstance(name, str) else None,
            path if isinstance(path, str) and Path(path).is_file() else None)


def recipe_choice(install: Path, given: str | None) -> Choice:
    """--recipe, else the setup receipt's; an option naming the file the stack was set up from (by its content:
    a name or a path) is the stack's own choice, any other an override the checks give no stack verdict for."""
    name, _ = receipt_recipe(install)
    if given is not None:
        return Choice(given, "option", given if _recipe_of_stack(install, given) else name)
    if name is None:
        raise UsageError("the stack's setup receipt names no recipe", expected=f"recipe.name in "
                         f"{install / 'receipts' / 'setup.json'}", found="none", fix="pass --recipe NAME")
    return Choice(name, "setup receipt")


def _recipe_of_stack(install: Path, given: str) -> bool:
    """Whether ``given`` (a recipe name or path) is, byte for byte, the recipe the setup receipt records."""
    from ..core.hashing import sha256_file
    from ..recipe import resolve_recipe_path

    try:
        rec = jsonread.loads((install / "receipts" / "setup.json").read_text(encoding="utf-8")).get("recipe")
        return isinstance(rec, Mapping) and sha256_file(resolve_recipe_path(given)) == rec.get("sha256")
    except (OSError, ValueError, AttributeError):
        return False


def download_command(install: Path, recipe: str | None, fmt: str, output: Path | str) -> str:
    """The ``current download`` that writes the manifest this smoke reads: with the stack's recipe (left out,
    download takes the recipe ``current``) as the setup receipt records it, by name when it is a shipped
    recipe, else by its path; ``recipe`` (a --recipe given to smoke, or the receipt's name) wins."""
    name, path = receipt_recipe(install)
    arg = recipe or name or "NAME"
    if arg == name and path is not None and Path(path).resolve() != (recipes_dir() / f"{name}.toml").resolve():
        arg = path                                    # a recipe file of one's own: download finds it by path
    return shlex.join(["current", "download", "--format", fmt, "--recipe", arg, "--output", str(output)])


def recipe_selections(install: Path, recipe: Choice) -> tuple[str, ...] | None:
    """The recipe's model selections, in file order (from the file the receipt records, for its recipe); None
    when the receipt's recipe file cannot be read (not known)."""
    from ..recipe import load_recipe

    name, path = receipt_recipe(install)
    arg = path if path is not None and recipe.value == name else recipe.value
    try:
        return tuple(load_recipe(str(arg)).models)
    except RecipeError:
        if recipe.source == "option":
            raise                 # a --recipe that names nothing is refused (exit 3)
        return None               # the receipt's recipe file is gone or changed: no selection, said in the receipt


def _manifest_selection(path: Path) -> str | None:
    try:
        sel = jsonread.loads(path.read_text(encoding="utf-8")).get("selection")
    except (OSError, ValueError, AttributeError):
        return None
    return sel if isinstance(sel, str) else None


def format_choice(given: str | None, known: tuple[str, ...] | None, manifest: Path | None, cwd: Path,
                  level: str | None, *, install: Path = Path("."), recipe: str | None = None) -> Choice:
    """--format, else the recipe's only selection, else the one whose manifest is here, else (a level that
    needs no model) the recipe's first selection.  ``known``: the recipe's selections, None when its file
    could not be read."""
    selections = known or ()
    if given is not None and known == () and recipe is not None:
        raise UsageError(f"--format {given}: the recipe {recipe} names no model",
                         expected="--format only for a recipe with [models] (current download refuses it too)",
                         found=f"no [models] in {recipe}",
                         fix="leave out --format: a recipe without models is smoked at the kernel level")
    if given is not None:
        return Choice(given, "option", selections[0] if len(selections) == 1 else None)
    if not selections:
        if level == "engine" and known is not None:
            raise SmokeError("the engine level loads a model, and the stack's recipe names none",
                             expected="a recipe with [models] for --level engine",
                             found=f"no [models] in {recipe or 'the recipe'}",
                             fix=f"run `current smoke --install {install} --level kernel` (what a stack of a recipe "
                                 "without models can prove), or set up a stack of a recipe with models")
        return Choice(None, "recipe")             # no model: the kernel level needs none
    if len(selections) == 1:
        return Choice(selections[0], "recipe")
    if manifest is not None and _manifest_selection(manifest) in selections:
        return Choice(_manifest_selection(manifest), "download manifest")
    present = [s for s in selections if (cwd / f"{s}-download.json").is_file()]
    if len(present) == 1:
        return Choice(present[0], "download manifest")
    if len(present) > 1:
        raise UsageError("several download manifests here, so the model to check is ambiguous",
                         expected="one <format>-download.json in the working directory, or --format",
                         found=", ".join(f"{s}-download.json" for s in present),
                         fix=f"pass --format {' or --format '.join(present)}")
    if level in ("kernel", "reference"):
        return Choice(selections[0], "recipe")    # no model is read: the first selection's dtypes
    raise SmokeError("no download manifest for the smoke run", expected=" or ".join(
        f"{cwd / (s + '-download.json')}" for s in selections), found="nothing",
        fix=f"run `{download_command(install, recipe, selections[0], '.')}` first, pass --manifest, "
            "or use --level kernel")


def level_choice(given: str | None, promised: str | None) -> Choice:
    return Choice(given, "option", promised) if given is not None else Choice(promised, "setup receipt")


def resolve(opts: Any, promised: str | None, cwd: Path) -> tuple[Any, dict[str, Any]]:
    """``opts`` (a SmokeOptions) with recipe and format filled in from the stack, and the choices' record."""
    recipe = recipe_choice(opts.install, opts.recipe)
    level = level_choice(opts.level, promised)
    fmt = format_choice(opts.format, recipe_selections(opts.install, recipe), opts.manifest, cwd, level.value,
                        install=opts.install, recipe=recipe.value)
    return (replace(opts, recipe=recipe.value, format=fmt.value),
            {"recipe": recipe.as_json(), "format": fmt.as_json(), "level": level.as_json()})
