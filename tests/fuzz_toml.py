"""Fuzz the TOML loaders in-process: generated and mutated recipes, forks.toml files and lock files.

Each case starts from a real file of the project (``recipes/*.toml``, ``forks.toml``, a lock from
``locks/``) and changes it, either as bytes (flipped bits, cut, lines dropped or repeated, a value
or key replaced by a hostile one: NaN, inf, huge numbers, 300 KB strings and URLs, 5,000-deep
arrays and tables, control characters, wrong types, unknown keys) or as data (the parsed document
changed at a random place and written back with ``tomli_w``).  Then the loader the tool uses runs
on it: :func:`load_recipe` (with the forks file beside it) or :func:`locked_state` plus the kit's
reading of the lock (:func:`wants_in`).

A case passes when the loader returns, or raises an :class:`OctoberError` of the expected exit
code whose message is one line of bounded length (plus the optional ``  -> fix`` line), within the
time limit.  Anything else (another exception, a longer or multi-line message, a slow case) is a
finding.  Used by ``tests/test_recipe_fuzz.py`` (a fixed seed, ~2,000 cases) and
``bench/recipe_fuzz.py`` (any seed, any count).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import shutil
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import tomli_w

from october.installer.core.errors import OctoberError
from october.installer.kit.wheels import wants_in
from october.installer.lock.pylock import locked_state, read_lock
from october.installer.recipe import load_recipe
from tests.fixtures.root import PROJECT_ROOT

MAX_LINE = 1200          # characters of an error's first line
MAX_FIX = 600            # characters of its fix line
MAX_VALUE = 4096         # characters of any string in a loaded recipe
TIME_LIMIT_S = 1.0       # CPU seconds of one case
HUGE = 200_000           # characters of a huge string (a recipe of one fits under the size cap)
DEEP = 5_000             # levels of a deep array / table
EXIT_CODES = {"recipe": {3}, "forks": {3}, "lock": {13, 20}}


def _hostile_texts() -> list[str]:
    """Values written into a TOML file as they are (each is valid or invalid TOML on purpose)."""
    return ["nan", "+nan", "-nan", "inf", "-inf", "1e309", "-1", "0", "9" * 40, str(2**63), str(-(2**63) - 1),
            "0x7fffffffffffffff", "1.5", "true", "[]", "{}", "[1, \"a\", [2]]", "{ x = 1 }", "1979-05-27T07:32:00Z",
            '""', '"\\u0000\\n\\r\\t\\u001b[31m"', '"' + "a" * HUGE + '"', '"https://' + "a" * HUGE + '"',
            '"https://u:p@' + "h" * HUGE + '"', '"' + "https://" * (HUGE // 8) + '"', "[" * DEEP + "]" * DEEP,
            "{ a = " * 3000 + "1" + " }" * 3000, "[" + ", ".join(['"x"'] * 3000) + "]",
            '"\u202e\u2028\u00e9\U0001f600"', "'''\nmulti\nline\n'''", '"' + "\\\\" * 1000 + '"']


def _hostile_values(rng: random.Random) -> Any:
    """Values put into a parsed document (written back with tomli_w)."""
    pool: list[Callable[[], Any]] = [
        lambda: math.nan, lambda: math.inf, lambda: -math.inf, lambda: 2**63 - 1, lambda: -(2**63), lambda: -1,
        lambda: 0, lambda: 1e308, lambda: True, lambda: "", lambda: "x" * rng.choice([81, 1025, 2049, HUGE]),
        lambda: "https://" + "a" * rng.choice([100, 3000, HUGE]), lambda: "line\nbreak\r\x1b[2J",
        lambda: [], lambda: {}, lambda: [1, "a", {"b": 2}], lambda: _nested(rng.choice([25, 60, 200])),
        lambda: {f"k{i}": i for i in range(rng.choice([10, 300]))}, lambda: list(range(rng.choice([10, 300]))),
        lambda: ["s"] * 3, lambda: {"unknown_key": 1}, lambda: "a" * 40, lambda: "0" * 64,
    ]
    return rng.choice(pool)()


def _nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"n": value}
    return value


# ---------------------------------------------------------------------------- byte-level mutations

def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    op = rng.randrange(9)
    lines = data.split(b"\n")
    if op == 0:                                                  # flip bits
        buf = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        return bytes(buf)
    if op == 1:                                                  # cut
        return data[:rng.randrange(len(data))]
    if op == 2:                                                  # drop or repeat lines
        i = rng.randrange(len(lines))
        lines[i:i + 1] = [] if rng.random() < 0.5 else [lines[i]] * rng.randint(2, 3)
        return b"\n".join(lines)
    if op in (3, 4, 5):                                          # a value replaced
        assigns = [i for i, ln in enumerate(lines) if b" = " in ln and not ln.lstrip().startswith(b"#")]
        if assigns:
            i = rng.choice(assigns)
            key = lines[i].split(b" = ", 1)[0]
            lines[i] = key + b" = " + rng.choice(_hostile_texts()).encode()
        return b"\n".join(lines)
    if op == 6:                                                  # a key added, replaced or made hostile
        tables = [i for i, ln in enumerate(lines) if ln.startswith(b"[")] or [0]
        i = rng.choice(tables) + 1
        key = rng.choice([b"zz_unknown", b"k" * 200_000, b'"a\\nb"', b'"\\u0000"', b".".join([b"a"] * DEEP),
                          b'"' + b"\xc3\xa9" * 50 + b'"'])
        lines.insert(i, key + b" = " + rng.choice([b"1", b'"x"', b"nan", b"[]"]))
        return b"\n".join(lines)
    if op == 7:                                                  # a table header made hostile
        header = rng.choice([b"[" + b"a." * 3000 + b"b]", b"[[" + b"x" * 200_000 + b"]]", b"[forks.\"\\n\"]",
                             b"[[forks]]", b"[models.awq.config]", b"[preflight]\nmin_disk_gb = nan"])
        lines.insert(rng.randrange(len(lines) + 1), header)
        return b"\n".join(lines)
    return data + rng.choice([b"\n\xff\xfe\x00", b"\n# \xe9\n", "\n# \u00e9\n".encode("utf-16")])


# ---------------------------------------------------------------------------- data-level mutations

def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


# keys whose values become paths, URLs or names (where a NUL, a huge value or a wrong type would bite
# outside the parser), set by the data mutations in any table, whether or not it had them
READ_KEYS = ["forks_file", "name", "description", "find_links", "index_url", "extra_index_urls", "index", "url",
             "filename", "builder", "version", "min_disk_gb", "min_ram_gb", "seed", "supply", "requirements", "path",
             "commit-id", "sha256", "hashes", "wheels", "sdist", "fork", "prefix", "branch", "submodules"]


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _mutate_data(rng: random.Random, doc: dict[str, Any]) -> bytes | None:
    """The document changed in one to three places, as TOML (None when tomli_w cannot write it)."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(doc)[1:]
        if not paths:                                            # everything deleted: start again
            doc["zz_unknown"] = _hostile_values(rng)
            continue
        path = rng.choice(paths)
        parent: Any = doc
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        op = rng.randrange(6)
        if op == 5:                                              # a key the loaders read, set to anything
            tables = [p for p in _paths(doc) if isinstance(_at(doc, p), dict)]
            target = _at(doc, rng.choice(tables))
            target[rng.choice(READ_KEYS)] = rng.choice([_hostile_values(rng), [_hostile_values(rng)], "a\x00b",
                                                        ["a\x00b"]])
        elif op == 0 and isinstance(parent, dict):
            parent.pop(last, None)
        elif op == 1 and isinstance(parent, dict):
            parent[rng.choice(["zz_unknown", "k" * rng.choice([129, 200_000]), "a\nb", "\x00", "é" * 60])] = \
                parent.pop(last)
        elif op == 2:
            parent[last] = [parent[last]] if rng.random() < 0.5 else {"v": parent[last]}
        else:
            parent[last] = _hostile_values(rng)
    try:
        return tomli_w.dumps(doc).encode()
    except (ValueError, TypeError, RecursionError):
        return None


# ---------------------------------------------------------------------------- running one case

@dataclass(frozen=True)
class Finding:
    case: int
    target: str
    how: str
    problem: str
    sample: Path | None = None


@dataclass
class Stats:
    cases: int = 0
    loaded: int = 0
    refused: int = 0
    slowest_s: float = 0.0
    slowest_case: int = -1
    slowest_wall_s: float = 0.0       # wall clock: on a shared machine it also measures the neighbours
    longest_line: int = 0


def trimmed_lock(source: Path, packages: int = 12) -> bytes:
    """A real lock with only its first ``packages`` packages (same structure, parses in milliseconds)."""
    doc = tomllib.loads(source.read_text(encoding="utf-8"))
    doc["packages"] = doc["packages"][:packages]
    return tomli_w.dumps(doc).encode()


class Fuzzer:
    def __init__(self, work: Path, seed: int, *, keep: Path | None = None) -> None:
        self.rng = random.Random(seed)
        self.work = work
        self.keep = keep
        self.stats = Stats()
        self.findings: list[Finding] = []
        (work / "recipes").mkdir(parents=True, exist_ok=True)
        self.forks_bytes = (PROJECT_ROOT / "forks.toml").read_bytes()
        self.recipes = {p.stem: p.read_bytes() for p in sorted((PROJECT_ROOT / "recipes").glob("*.toml"))}
        self.locks = {p.name: trimmed_lock(p) for p in sorted((PROJECT_ROOT / "locks").glob("*.pylock.toml"))}
        self.parsed = {k: tomllib.loads(v.decode()) for k, v in
                       [("forks.toml", self.forks_bytes), *self.recipes.items(), *self.locks.items()]}
        self.lock_recipe = load_recipe("current")

    def mutate(self, name: str, data: bytes) -> tuple[bytes, str]:
        if self.rng.random() < 0.5:
            mutated = _mutate_data(self.rng, self.parsed[name])
            if mutated is not None:
                return mutated, "data"
        return _mutate_bytes(self.rng, data), "bytes"

    def case(self, i: int, target: str) -> None:
        forks, recipe_name = self.forks_bytes, self.rng.choice(sorted(self.recipes))
        recipe = self.recipes[recipe_name]
        if target == "recipe":
            recipe, how = self.mutate(recipe_name, recipe)
        elif target == "forks":
            forks, how = self.mutate("forks.toml", forks)
        else:
            lock_name = self.rng.choice(sorted(self.locks))
            lock_bytes, how = self.mutate(lock_name, self.locks[lock_name])
            (self.work / "pylock.toml").write_bytes(lock_bytes)
        (self.work / "forks.toml").write_bytes(forks)
        (self.work / "recipes" / "r.toml").write_bytes(recipe)
        self.run(i, target, how)

    def run(self, i: int, target: str, how: str) -> None:
        self.stats.cases += 1
        start, wall = time.thread_time(), time.perf_counter()
        problem: str | None = None
        try:
            if target == "lock":
                lock = self.work / "pylock.toml"
                locked_state(lock)
                wants_in(read_lock(lock), self.work, self.lock_recipe)
            else:
                problem = loaded_problem(load_recipe(str(self.work / "recipes" / "r.toml"), root=self.work))
            self.stats.loaded += 1
        except OctoberError as exc:
            self.stats.refused += 1
            problem = _message_problem(exc, EXIT_CODES[target], self.stats)
        except BaseException as exc:  # noqa: BLE001 -- every other exception is what the fuzz looks for
            if isinstance(exc, KeyboardInterrupt):
                raise
            problem = f"{type(exc).__name__}: {str(exc)[:200]}"
        took = time.thread_time() - start
        self.stats.slowest_wall_s = max(self.stats.slowest_wall_s, time.perf_counter() - wall)
        if took > self.stats.slowest_s:
            self.stats.slowest_s, self.stats.slowest_case = took, i
        if took > TIME_LIMIT_S:
            problem = (problem + "; " if problem else "") + f"took {took:.2f} s of CPU"
        if problem:
            self.findings.append(Finding(i, target, how, problem, self._keep(i, target)))

    def _keep(self, i: int, target: str) -> Path | None:
        if self.keep is None:
            return None
        self.keep.mkdir(parents=True, exist_ok=True)
        src = self.work / {"lock": "pylock.toml", "forks": "forks.toml", "recipe": "recipes/r.toml"}[target]
        dest = self.keep / f"case-{i}-{target}.toml"
        shutil.copyfile(src, dest)
        return dest


def loaded_problem(value: Any, where: str = "recipe") -> str | None:
    """A recipe that loaded holds only bounded values: finite numbers, strings of at most
    :data:`MAX_VALUE` characters (the file's own path aside), at most 256 items in a collection."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} = {value} was accepted"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
        return f"{where} = an integer of {value.bit_length()} bits was accepted"
    if isinstance(value, str) and len(value) > MAX_VALUE:
        return f"{where}: a string of {len(value):,} characters was accepted"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value) if f.name != "path"]
    elif isinstance(value, Mapping):
        children = [(str(k)[:40], v) for k, v in value.items()] + [(f"<key {str(k)[:40]}>", k) for k in value]
    elif isinstance(value, (list, tuple)):
        children = list(enumerate(value))
    else:
        return None
    if len(children) > 2 * 256:
        return f"{where}: {len(children)} items were accepted"
    for name, child in children:
        found = loaded_problem(child, f"{where}.{name}")
        if found:
            return found
    return None


def _message_problem(exc: OctoberError, codes: set[int], stats: Stats) -> str | None:
    lines = str(exc).split("\n")
    stats.longest_line = max(stats.longest_line, len(lines[0]))
    if exc.exit_code not in codes:
        return f"{type(exc).__name__} exit {exc.exit_code}, expected {sorted(codes)}: {lines[0][:200]}"
    if len(lines) > 2 or (len(lines) == 2 and not lines[1].startswith("  -> ")):
        return f"a message of {len(lines)} lines: {str(exc)[:200]!r}"
    if len(lines[0]) > MAX_LINE or (len(lines) == 2 and len(lines[1]) > MAX_FIX):
        return f"a message line of {max(len(x) for x in lines)} characters: {lines[0][:120]!r}"
    return None


def fuzz(work: Path, seed: int, cases: int, *, keep: Path | None = None) -> Fuzzer:
    """Run ``cases`` cases (recipes, forks.toml files and locks in the ratio 2:1:1) with ``seed``."""
    f = Fuzzer(work, seed, keep=keep)
    targets = ["recipe", "recipe", "forks", "lock"]
    for i in range(cases):
        f.case(i, targets[i % len(targets)])
    return f
