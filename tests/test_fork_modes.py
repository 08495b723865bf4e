"""Fork modes are one typed table (issue 21): ``ForkMode`` and its ``FORK_MODES`` row in
installer/recipe/forks.py say what a mode means to every step, and nothing else in the tool compares a
fork's ``.mode`` with a literal or a name (the scan reads comparisons on a ``.mode`` attribute: a bare
``mode`` variable or ``d["mode"]`` is outside it).  Read from the source with ``ast``; the behaviour each trait drives is
tested where it acts (tests/test_install_plan.py, test_wheel_step.py, test_indexlock.py, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

from october.installer.install.plan import installs_deps, make_plan
from october.installer.recipe import FORK_MODES, ForkMode, ModeTraits, load_recipe
from october.installer.recipe.forks import INSTALL_MODES, PROMISE_LEVELS, promise_of, traits_of

INSTALLER = Path(__file__).resolve().parent.parent / "installer"
TABLE = INSTALLER / "recipe" / "forks.py"


def mode_literals(root: Path) -> list[str]:
    """``x.mode == "..."`` / ``!=`` / ``in (...)`` with a literal, anywhere under ``root`` but the table."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if path.resolve() == TABLE.resolve() or "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "mode" for s in sides) and any(
                    isinstance(s, ast.Constant) and isinstance(s.value, str)
                    or isinstance(s, (ast.Tuple, ast.List, ast.Set, ast.Name)) for s in sides):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_every_mode_has_one_row_and_the_recipe_reads_the_same_names() -> None:
    assert set(FORK_MODES) == set(ForkMode) and INSTALL_MODES == tuple(m.value for m in ForkMode)
    assert all(isinstance(t, ModeTraits) for t in FORK_MODES.values())
    assert {t.promise for t in FORK_MODES.values()} - {None} <= set(PROMISE_LEVELS)
    assert traits_of("no-such-mode") == ModeTraits() and traits_of("flashinfer") is FORK_MODES[ForkMode.FLASHINFER]


def test_nothing_outside_the_table_compares_a_mode_with_a_literal(tmp_path: Path) -> None:
    assert mode_literals(INSTALLER) == []
    planted = tmp_path / "installer"
    planted.mkdir()
    (planted / "x.py").write_text('def f(use):\n    a = use.mode == "flashinfer"\n    return a or use.mode in MODES\n')
    assert mode_literals(planted) == ["x.py:2", "x.py:3"]          # the planted faults are seen


def test_the_shipped_recipes_take_their_behaviour_from_the_traits() -> None:
    """The FlashInfer-only recipe's fork: kernel promise, --no-deps, last; the vLLM pair's vLLM fork:
    engine promise, the base wheel's environment."""
    fi = load_recipe("flashinfer-pr3812")
    [fork] = [f for f in fi.forks if f.mode == ForkMode.FLASHINFER]
    assert fork.traits.jit_checkout and not installs_deps(fork)
    assert promise_of([{"mode": f.mode} for f in fi.forks]) == "kernel"
    pair = load_recipe("current")
    assert promise_of([{"mode": f.mode} for f in pair.forks]) == "engine"
    assert any(f.traits.base_wheel for f in pair.forks)


def test_make_plan_orders_by_own_deps(tmp_path: Path) -> None:
    from october.installer.install.plan import ForkSource

    pair = load_recipe("current")
    sources = [ForkSource(use=f, path=tmp_path / f.name, commit="0" * 40, dist=f.name) for f in pair.forks]
    plan = make_plan(sources, wheel=tmp_path / "base.whl")
    order = [next(f for f in pair.forks if f.name == name) for name in plan.order]
    assert [f.traits.own_deps for f in order] == sorted((f.traits.own_deps for f in order), reverse=True)
    env = dict(next(i for i in plan.installs if next(f for f in pair.forks if f.name == i.fork).traits.base_wheel).env)
    assert env["VLLM_USE_PRECOMPILED"] == "1"
