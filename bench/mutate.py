"""Mutation bench of the trust modules (issue 22, item 9): do their tests notice when the code lies?

    uv run --group test python bench/mutate.py [--module redact ...] [--jobs N] [--list] [--json OUT]
    uv run --group test python bench/mutate.py --survivors-of OUT.json --json OUT2.json   # after new tests

All nine modules are about 700 mutants: roughly 25 minutes on two free cores (each mutant is one
pytest run, forked from a process that has pytest imported; the slow tests/test_jit_integrity.py runs
only for mutants the fast file lets through).  Exit status 1 when a module kills fewer than ``--min``
(90) percent.

A small ``ast`` mutator of our own (no network, no plugin).  For each module in :data:`TARGETS` it
makes one mutant per site and operator:

``cmp``     a flipped comparison (``==``/``!=``, ``<``/``>=``, ``in``/``not in``, ``is``/``is not``)
            and the off-by-one of each ordering (``<``/``<=``, ``>``/``>=``)
``bool``    ``and`` <-> ``or``
``not``     a negated condition (``if``, ``while``, ``x if c else y``, comprehension ``if``), or a
            removed ``not``
``raise``   a deleted ``raise``
``del``     a deleted ``return``, ``continue``, call statement (``bad.append(...)``,
            ``shutil.rmtree(...)``), augmented assignment (``diffs += ...``) or self-update
            (``text = _HF_TOKEN.sub(MASK, text)``: a mask)
``const``   an integer in a comparison +-1, a module-level integer +1, ``True``/``False`` swapped,
            one element dropped from a module-level tuple/set of strings (e.g. ``SECRET_ENV_VARS``)

Each mutant is written into a private copy of the tree (the worktree is never changed) and the
module's own tests (:data:`TARGETS`, fast files first) run against it with
``pytest -x -q -p no:cacheprovider`` under a timeout.  A failing run or a timeout kills the
mutant.  The output is, per module, killed/total and the surviving mutants (file:line, the
mutation, the code).
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent

# module -> its own tests, fastest first (-x stops at the first failure, so most mutants never reach the
# slower files).
TARGETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "redact": ("installer/core/redact.py", ("tests/test_mutation_kills_redact.py",)),
    "wheel-record": ("installer/wheels/record.py",
                     ("tests/test_mutation_kills_wheel.py", "tests/test_wheel_verify.py")),
    "wheel-verify": ("installer/wheels/verify.py",
                     ("tests/test_mutation_kills_wheel.py", "tests/test_wheel_verify.py")),
    "jit-integrity": ("installer/jit/integrity.py",
                      ("tests/test_mutation_kills_jit.py", "tests/test_jit_integrity.py")),
    "verify": ("installer/verify/stack.py", ("tests/test_mutation_kills_verify.py",)),
    "verify-env": ("installer/verify/env.py", ("tests/test_mutation_kills_verify.py",)),
    "verify-forks": ("installer/verify/forks.py", ("tests/test_mutation_kills_verify.py",)),
    # the forks' build outputs: recorded by install, held by the no-op and by verify
    "verify-outputs": ("installer/verify/outputs.py", ("tests/test_mutation_kills_verify.py",)),
    "git-buildoutputs": ("installer/git/buildoutputs.py",
                         ("tests/test_mutation_kills_verify.py", "tests/test_install_step.py")),
    "kit-check": ("installer/kit/manifest.py", ("tests/test_mutation_kills_kit.py",)),
    "kit-against": ("installer/kit/against.py", ("tests/test_kit_units.py",)),
    # issue 21 moved the install step's domain code here (guards.spec_for and the static torch-ABI verdict,
    # consistency.require_consistent and the site-provided distributions): their tests came with it
    "install-guards": ("installer/install/guards.py",
                       ("tests/test_mutation_kills_install.py", "tests/test_install_plan.py",
                        "tests/test_wheel_guard.py", "tests/test_sdist_fork.py", "tests/test_install_step.py")),
    "install-consistency": ("installer/install/consistency.py",
                            ("tests/test_mutation_kills_install.py", "tests/test_install_plan.py",
                             "tests/test_system_torch.py", "tests/test_install_nested.py",
                             "tests/test_consistency_vs_uv.py")),
    "install-nested": ("installer/install/nested.py", ("tests/test_mutation_kills_install.py",)),
    # the clone's read-only looks: submodule states from the index (issue 20), cleanliness, the no-op's verdict
    "git-clonecheck": ("installer/git/clonecheck.py",
                       ("tests/test_submodule_heads.py", "tests/test_fetch_worktree.py", "tests/test_noop_fast.py",
                        "tests/test_fetch_step.py", "tests/test_fetch_sparse.py")),
}

PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not gpu and not real")
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache", "captures")

_FLIP: dict[type, type] = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
                           ast.LtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
                           ast.IsNot: ast.Is}
_EDGE: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_SYM = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in",
        ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
MAX_DROP = 8        # drop elements only from small constant collections (a 40-option table is data, not logic)


@dataclass(frozen=True)
class Mutant:
    index: int
    line: int
    kind: str
    what: str
    code: str


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Mutator(ast.NodeTransformer):
    """Counts the mutation sites in a fixed order; with ``target`` set, applies that one."""

    def __init__(self, source: str, target: int | None = None) -> None:
        self.source = source
        self.target = target
        self.lines = source.splitlines()
        self.sites: list[Mutant] = []
        self.depth = 0                     # 0: module level

    def _site(self, node: ast.AST, kind: str, what: str, apply: Callable[[], ast.AST | None]) -> ast.AST | None:
        index = len(self.sites)
        line = getattr(node, "lineno", 0)
        code = self.lines[line - 1].strip()[:90] if 0 < line <= len(self.lines) else ""
        self.sites.append(Mutant(index, line, kind, what, code))
        if index == self.target:
            return apply()
        return None

    # ------------------------------------------------------------------ expressions
    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(list(node.ops)):
            for table, label in ((_FLIP, "flip"), (_EDGE, "edge")):
                new = table.get(type(op))
                if new is None:
                    continue

                def apply(i: int = i, new: type = new) -> ast.AST:
                    node.ops[i] = new()
                    return node
                self._site(node, "cmp", f"`{_SYM[type(op)]}` -> `{_SYM[new]}`", apply)
        for i, comp in enumerate([node.left, *node.comparators]):
            if isinstance(comp, ast.Constant) and type(comp.value) is int:
                for delta in (1, -1):
                    def apply_c(c: ast.Constant = comp, d: int = delta) -> ast.AST:
                        c.value = c.value + d
                        return node
                    self._site(node, "const", f"{comp.value} -> {comp.value + delta}", apply_c)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        def apply() -> ast.AST:
            node.op = new()
            return node
        self._site(node, "bool", f"`{'and' if new is ast.Or else 'or'}` -> `{'or' if new is ast.Or else 'and'}`", apply)
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            out = self._site(node, "not", "`not` removed", lambda: node.operand)
            if out is not None:
                return out
        return node

    def _negate(self, holder: ast.AST, attr: str, label: str) -> None:
        test = getattr(holder, attr)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return                          # the removed `not` is that mutant already
        def apply() -> ast.AST:
            setattr(holder, attr, ast.UnaryOp(op=ast.Not(), operand=test))
            return holder
        self._site(test, "not", f"{label} condition negated", apply)

    def visit_If(self, node: ast.If) -> ast.AST:
        self._negate(node, "test", "if")
        self.generic_visit(node)
        return node

    def visit_While(self, node: ast.While) -> ast.AST:
        self._negate(node, "test", "while")
        self.generic_visit(node)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self._negate(node, "test", "`x if c else y`")
        self.generic_visit(node)
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        for i, cond in enumerate(list(node.ifs)):
            if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Not):
                continue
            def apply(i: int = i, cond: ast.expr = cond) -> ast.AST:
                node.ifs[i] = ast.UnaryOp(op=ast.Not(), operand=cond)
                return node
            self._site(cond, "not", "comprehension filter negated", apply)
        self.generic_visit(node)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, bool):
            out = self._site(node, "const", f"{node.value} -> {not node.value}",
                             lambda: ast.Constant(value=not node.value))
            if out is not None:
                return out
        return node

    # ------------------------------------------------------------------ statements
    def _delete(self, node: ast.stmt, what: str) -> ast.AST | None:
        return self._site(node, "raise" if isinstance(node, ast.Raise) else "del", what, lambda: ast.Pass())

    def visit_Raise(self, node: ast.Raise) -> ast.AST:
        self.generic_visit(node)
        return self._delete(node, "`raise` deleted") or node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        self.generic_visit(node)
        return self._delete(node, "`return` deleted") or node

    def visit_Continue(self, node: ast.Continue) -> ast.AST:
        return self._delete(node, "`continue` deleted") or node

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Call) and self.depth:
            return self._delete(node, "call statement deleted") or node
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        return self._delete(node, "augmented assignment deleted") or node

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        targets = set().union(*(_names(t) for t in node.targets))
        if self.depth and targets & _names(node.value):
            return self._delete(node, "self-update deleted (e.g. a mask)") or node
        if not self.depth and len(node.targets) == 1 and isinstance(node.value, ast.Constant) \
                and type(node.value.value) is int:
            def apply() -> ast.AST:
                node.value = ast.Constant(value=node.value.value + 1)
                return node
            self._site(node, "const", f"module constant {node.value.value} -> {node.value.value + 1}", apply)
        if not self.depth and isinstance(node.value, (ast.Tuple, ast.Set)) and 1 < len(node.value.elts) <= MAX_DROP \
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts):
            for i, e in enumerate(list(node.value.elts)):
                def apply_drop(i: int = i) -> ast.AST:
                    del node.value.elts[i]
                    return node
                self._site(node, "const", f"element {e.value!r} dropped", apply_drop)  # type: ignore[union-attr]
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.depth += 1
        node.body = [self.visit(s) for s in node.body]    # decorators, arguments and annotations are not mutated
        self.depth -= 1
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.body = [self.visit(s) if not isinstance(s, ast.AnnAssign) else s for s in node.body]
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        return node


def mutants(source: str) -> list[tuple[Mutant, str]]:
    """Every distinct mutant of ``source``: (what, the mutated module's text)."""
    tree = ast.parse(source)
    counter = _Mutator(source)
    counter.visit(copy.deepcopy(tree))
    base = ast.unparse(tree)
    seen = {base}
    out: list[tuple[Mutant, str]] = []
    for site in counter.sites:
        m = _Mutator(source, site.index)
        mutated = ast.fix_missing_locations(m.visit(copy.deepcopy(tree)))
        text = ast.unparse(mutated)
        if text in seen:
            continue
        seen.add(text)
        out.append((site, text))
    return out


# ------------------------------------------------------------------------------------- running


@dataclass
class Outcome:
    module: str
    path: str
    line: int
    kind: str
    what: str
    code: str
    result: str            # killed | survived | timeout
    seconds: float


def _pytest(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, *PYTEST, *tests], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        return "timeout", time.monotonic() - start
    return ("survived" if rc == 0 else "killed"), time.monotonic() - start


def _pytest_forked(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float]:
    """The same run in a child forked from this process, which has pytest and the third-party
    libraries imported already (never ``october`` or ``tests``: those come fresh from ``tree``)."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:                                     # child
        rc = 3
        try:
            os.setsid()
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(tree)
            os.environ.pop("VIRTUAL_ENV", None)
            os.environ.update(PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
            sys.dont_write_bytecode = True
            sys.path.insert(0, str(tree))
            import pytest
            rc = int(pytest.main([*PYTEST[2:], *tests]))
        finally:
            os._exit(rc)
    deadline = start + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            return ("survived" if rc == 0 else "killed"), time.monotonic() - start
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, 9)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - start
        time.sleep(0.02)


def _preload() -> None:
    """Import what every run needs except our own code, once, before forking."""
    import importlib

    for mod in ("pytest", "_pytest.python", "_pytest.fixtures", "_pytest.tmpdir", "_pytest.monkeypatch",
                "packaging.requirements", "packaging.tags", "packaging.utils", "packaging.version",
                "packaging.markers", "jsonschema", "tomllib", "email.parser", "csv", "zipfile", "hashlib",
                "json", "urllib.parse", "subprocess", "socket", "ipaddress"):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    assert not any(m == "october" or m.startswith(("october.", "tests.")) for m in sys.modules)


def _copy_tree(dest: Path) -> Path:
    shutil.copytree(REPO, dest, symlinks=True, ignore=COPY_IGNORE)
    return dest


Runner = Callable[[Path, "tuple[str, ...]", float], "tuple[str, float]"]


def run_module(name: str, trees: list[Path], jobs: int, log: Callable[[str], None], run: Runner = _pytest,
               earlier: dict[str, object] | None = None) -> dict[str, object]:
    rel, tests = TARGETS[name]
    tests = tuple(t for t in tests if (trees[0] / t).is_file())     # a file not written yet is left out
    source = (REPO / rel).read_text(encoding="utf-8")
    cases = mutants(source)
    total = len(cases)
    if earlier is not None:
        # re-run the earlier survivors, and any mutant that shares a survivor's line, kind and mutation (every
        # other mutant was killed then; the module's source must be unchanged)
        assert earlier["total"] == total, f"{name}: the module changed since the earlier run; run it whole"
        left = {(s["line"], s["kind"], s["what"]) for s in earlier["survivors"]}  # type: ignore[attr-defined]
        cases = [c for c in cases if (c[0].line, c[0].kind, c[0].what) in left]
    killed_before = total - len(cases)
    base_state, base_s = run(trees[0], tests, 900)
    if base_state != "survived":
        raise SystemExit(f"{name}: the unmutated tests fail ({' '.join(tests)}); fix them first")
    timeout = max(30.0, 4 * base_s)
    log(f"{name}: {len(cases)} mutants of {rel}, tests {' '.join(tests)} (baseline {base_s:.1f}s, "
        f"timeout {timeout:.0f}s)")
    free = list(trees[:jobs])

    def one(case: tuple[Mutant, str]) -> Outcome:
        site, text = case
        tree = free.pop()
        target = tree / rel
        try:
            target.write_text(text, encoding="utf-8")
            result, secs = run(tree, tests, timeout)
        finally:
            target.write_text(source, encoding="utf-8")
            free.append(tree)
        mark = {"killed": ".", "timeout": "T", "survived": "S"}[result]
        log(f"  {mark} {rel}:{site.line} [{site.kind}] {site.what} ({secs:.1f}s)")
        return Outcome(name, rel, site.line, site.kind, site.what, site.code, result, round(secs, 2))

    if jobs == 1:
        outcomes = [one(c) for c in cases]
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(one, cases))
    killed = killed_before + sum(o.result != "survived" for o in outcomes)
    return {"module": name, "path": rel, "tests": list(tests), "total": total, "killed": killed,
            "percent": round(100.0 * killed / total, 1) if total else 100.0,
            "survivors": [asdict(o) for o in outcomes if o.result == "survived"],
            "timeouts": sum(o.result == "timeout" for o in outcomes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", action="append", choices=sorted(TARGETS), help="only these (repeatable)")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    ap.add_argument("--subprocess", action="store_true",
                    help="start a fresh interpreter per mutant (default: fork this one, with pytest preloaded; "
                         "always so with --jobs > 1)")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--json", type=Path, help="write the results here as JSON")
    ap.add_argument("--survivors-of", type=Path, metavar="JSON",
                    help="re-run only the survivors recorded in an earlier --json (after new tests)")
    ap.add_argument("--min", type=float, default=90.0, help="exit 1 when a module kills fewer (default 90)")
    args = ap.parse_args(argv)
    names = args.module or list(TARGETS)
    if args.list:
        for name in names:
            rel = TARGETS[name][0]
            for site, _ in mutants((REPO / rel).read_text(encoding="utf-8")):
                print(f"{rel}:{site.line} [{site.kind}] {site.what}    {site.code}")
        return 0
    results = []
    earlier = ({r["module"]: r for r in json.loads(args.survivors_of.read_text(encoding="utf-8"))}
               if args.survivors_of else {})
    if earlier and not args.module:
        names = [n for n in names if n in earlier]
    forked = not args.subprocess and max(1, args.jobs) == 1
    if forked:
        _preload()
    with tempfile.TemporaryDirectory(prefix="october-mutate-") as tmp:
        trees = [_copy_tree(Path(tmp) / f"tree{i}") for i in range(max(1, args.jobs))]
        for name in names:
            results.append(run_module(name, trees, max(1, args.jobs), lambda s: print(s, flush=True),
                                      _pytest_forked if forked else _pytest, earlier.get(name)))
    print(f"\n{'module':<22} {'killed':>7} {'total':>6} {'%':>6}")
    for r in results:
        print(f"{r['module']:<22} {r['killed']:>7} {r['total']:>6} {r['percent']:>6}")
    for r in results:
        for s in r["survivors"]:
            print(f"SURVIVED {s['path']}:{s['line']} [{s['kind']}] {s['what']}    {s['code']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0 if all(r["percent"] >= args.min for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
