"""Issue 22 (7): every recipe, forks.toml and lock value is bounded and typed when read, and every
refusal is one short line.  Each case plants the input the issue measured (NaN, a 300 KB URL, a
5,000-deep array, a 200 KB name, a non-UTF-8 lock) and watches it refused fast, with exit 3 (recipe)
or 13 (lock)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from october.installer.core.errors import LockError, RecipeError, one_line
from october.installer.core.redact import redact, redact_url
from october.installer.core.tomlgate import LOCK_MAX_BYTES, RECIPE_MAX_BYTES, TomlRefused, parse_toml_bytes
from october.installer.lock.pylock import locked_state, read_lock
from october.installer.recipe import load_forks, load_recipe
from tests.fixtures.root import PROJECT_ROOT
from tests.test_recipe import FORKS, FULL, GOOD, write

MAX_LINE = 1000


def refused(path: Path, *, forks: bool = False) -> RecipeError:
    """Load ``path`` (a recipe, or a forks.toml); it must be refused fast with one short line."""
    start = time.thread_time()
    with pytest.raises(RecipeError) as info:
        load_forks(path) if forks else load_recipe(str(path))
    assert time.thread_time() - start < 1.0
    return one_short_line(info.value)


def one_short_line(exc: RecipeError | LockError) -> RecipeError | LockError:
    lines = str(exc).split("\n")
    assert len(lines) <= 2 and all(line.startswith("  -> ") for line in lines[1:]), lines
    assert max(len(line) for line in lines) <= MAX_LINE, [len(line) for line in lines]
    return exc


@pytest.mark.parametrize(("value", "found"), [("nan", "found nan"), ("inf", "found inf"), ("-inf", "found -inf"),
                                               ("-1", "found -1.0"), ("1e9", "found 1000000000.0")])
def test_min_disk_gb_must_be_a_finite_number_in_range(tmp_path: Path, value: str, found: str) -> None:
    exc = refused(write(tmp_path, GOOD + f"\n[preflight]\nmin_disk_gb = {value}\n"))
    assert "key 'preflight.min_disk_gb' is invalid. Expected a finite number from 0 to 1e+06" in str(exc)
    assert found in str(exc) and exc.exit_code == 3
    assert load_recipe(str(write(tmp_path, GOOD + "\n[preflight]\nmin_disk_gb = 100\n"))).preflight.min_disk_gb == 100.0


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("prompt_tokens", str(2**40), "at most 1048576 tokens"), ("seed", "-1", "an integer from 0 to 4294967295"),
    ("max_new_tokens", str(2**64), "an integer within the TOML range (64 bits)")])
def test_integers_are_bounded(tmp_path: Path, key: str, value: str, expected: str) -> None:
    exc = refused(write(tmp_path, GOOD + f"\n[smoke]\n{key} = {value}\n"))
    assert f"key 'smoke.{key}' is invalid. Expected {expected}, found {value}" in str(exc)


def test_a_huge_url_in_forks_toml_is_refused_fast_in_one_line(tmp_path: Path) -> None:
    # the 300 KB URL: past the size cap of a recipe file, refused before it is parsed
    write(tmp_path, GOOD, FORKS.replace('url = "file:///tmp/alpha.git"', f'url = "https://h/{"a" * 300_000}"'))
    exc = refused(tmp_path / "forks.toml", forks=True)
    assert f"Expected a TOML file of at most {RECIPE_MAX_BYTES:,} bytes" in str(exc)
    # a 100 KB URL fits in the file: refused by the URL bound, the value shown cut to 80 characters
    write(tmp_path, GOOD, FORKS.replace('url = "file:///tmp/alpha.git"', f'url = "https://u:pw@h/{"a" * 100_000}"'))
    exc = refused(tmp_path / "forks.toml", forks=True)
    assert "key 'forks.alpha.url' is invalid. Expected at most 2048 characters, found 100," in str(exc)
    assert "'https://u:pw@h/aaaa" in str(exc) and "..." in str(exc)


def test_credentials_are_masked_in_linear_time() -> None:
    """redact_url was a backtracking regular expression: 40,000 characters took 3.2 s, 300 KB minutes."""
    for n in (40_000, 300_000):            # the 40,000 first: the old code fails there in seconds
        for text in ("a" * n, "https://" + "a" * n, "a://" * (n // 4), "https://u@h/" * (n // 12),
                     "https://" + "x:" * (n // 2) + "@h"):
            start = time.thread_time()
            redact(redact_url(text))
            assert time.thread_time() - start < 0.5, (n, text[:20])
    assert redact_url("see https://user:pw@host/x and git+https://tok@github.com/a.git") == \
        "see https://***@host/x and git+https://***@github.com/a.git"
    assert redact_url("https://:token@h/x") == "https://***@h/x"          # an empty user hides nothing
    assert redact_url("https://u:p@x@h/y") == "https://***@h/y"          # the last @ ends the credentials
    assert redact_url("https://h/p?q=a@b file:///t/x@y git@github.com:a/b") == \
        "https://h/p?q=a@b file:///t/x@y git@github.com:a/b"             # no credentials there


@pytest.mark.parametrize("deep", ["a = " + "[" * 5000 + "]" * 5000, "a = " + "{ b = " * 3000 + "1" + " }" * 3000,
                                  ".".join(["a"] * 5000) + " = 1", "[" + "a." * 3000 + "b]",
                                  "a = " + "[" * 30 + "]" * 30])
def test_deep_nesting_is_refused_before_the_parser_recurses(tmp_path: Path, deep: str) -> None:
    exc = refused(write(tmp_path, GOOD + "\n" + deep + "\n"))
    assert "key '<file>' is invalid. Expected arrays, tables and dotted keys nested at most 24 deep" in str(exc)


def test_nesting_inside_strings_and_comments_does_not_count() -> None:
    text = ('a = "' + "[" * 100 + '"\nb = \'' + "{" * 100 + "'\n# " + "[" * 100 + "\n" + 'c = """' + "a." * 100
            + '\\""" ]]] """\nd = \'\'\'' + "." * 100 + "'''\ne = [" + ", ".join(["1.5"] * 100) + "]\n")
    assert parse_toml_bytes(text.encode())["e"] == [1.5] * 100
    with pytest.raises(TomlRefused, match="more than 24"):   # 25 levels of tables, each a dotted part
        parse_toml_bytes(("[" + ".".join(["t"] * 20) + "]\n" + "x = " + "[" * 5 + "1" + "]" * 5).encode())


def test_a_huge_name_gives_a_short_line(tmp_path: Path) -> None:
    name = "n" * 200_000
    exc = refused(write(tmp_path, GOOD.replace('name = "t"', f'name = "{name}"')))
    assert "key 'name' is invalid" in str(exc) and len(str(exc)) < MAX_LINE
    fork = name[:100_000]                  # named twice in the file, which stays under the size cap
    exc = refused(write(tmp_path, GOOD, FORKS.replace("[forks.alpha]", f"[forks.{fork}]")
                        .replace("[forks.alpha.pins]", f"[forks.{fork}.pins]")))
    assert "Expected a key of at most 128 characters, found a key of 100,000 characters" in str(exc)
    exc = refused(write(tmp_path, GOOD.replace('pin = "one"', f'pin = "{name}"')))
    assert "key 'forks[0].pin' is invalid. Expected at most 128 characters" in str(exc)


def test_control_characters_in_keys_and_values_stay_on_one_line(tmp_path: Path) -> None:
    exc = refused(write(tmp_path, GOOD + '\n[preflight]\n"evil\\nkey\\u001b[2J" = 1\n'))
    assert "evil\\nkey\\x1b[2J" in str(exc)
    exc = refused(write(tmp_path, GOOD.replace('revision = "', 'revision = "line\\nbreak')))
    assert "'line\\nbreak" in str(exc)
    assert one_line("a\nb\x00c" + "d" * 200) == "a\\nb\\x00c" + "d" * 68 + "..."
    # a NUL would reach the file system (forks_file, find_links, a lock's path) as a ValueError traceback
    exc = refused(write(tmp_path, GOOD.replace('forks_file = "forks.toml"', 'forks_file = "forks\\u0000.toml"')))
    assert "Expected keys and strings without NUL characters, found a NUL character at 'forks_file'" in str(exc)
    exc = refused(write(tmp_path, GOOD + '\n[sources]\nfind_links = ["w\\u0000"]\n'))
    assert "found a NUL character at 'sources.find_links[0]'" in str(exc)
    lock = tmp_path / "nul.pylock.toml"
    lock.write_text('lock-version = "1.0"\ncreated-by = "t"\n[[packages]]\nname = "demo"\nversion = "1.0"\n'
                    'wheels = [{ name = "demo-1.0-py3-none-any.whl", path = "x\\u0000", hashes = { sha256 = "'
                    + "0" * 64 + '" } }]\n')
    with pytest.raises(LockError, match=r"found a NUL character at 'packages\[0\]\.wheels\[0\]\.path'"):
        read_lock(lock)


def test_tables_and_arrays_are_bounded_in_size(tmp_path: Path) -> None:
    many = "".join(f'"k{i}" = "{FULL}"\n' for i in range(300))
    exc = refused(write(tmp_path, GOOD, FORKS.replace(f'one = "{FULL}"\n', f'one = "{FULL}"\n{many}')), forks=False)
    assert "key 'forks.alpha.pins' is invalid. Expected a table of at most 256 keys, found 302 keys" in str(exc)
    items = ", ".join(['"*.json"'] * 300)
    exc = refused(write(tmp_path, GOOD.replace('patterns = ["*.json"]', f"patterns = [{items}]")))
    assert "key 'models.awq.patterns' is invalid. Expected at most 256 items, found 300 items" in str(exc)


def test_a_lock_file_that_is_not_utf8_deep_or_huge_is_a_lock_error(tmp_path: Path) -> None:
    good = (PROJECT_ROOT / "locks" / "current.pylock.toml").read_bytes()
    cases = {"utf8": (good.replace(b'created-by = "october"', b'created-by = "\xff\xfe"'), "Expected a UTF-8 TOML file"),
             "deep": (good + b"\nzz = " + b"[" * 5000 + b"]" * 5000, "nested at most 24 deep"),
             "huge": (good + b"\n# " + b"x" * LOCK_MAX_BYTES, f"of at most {LOCK_MAX_BYTES:,} bytes"),
             "tool": (good.replace(b"[tool.october.wheel]", b"[tool.october.wheelx]") + b'\n[tool.october]\nwheel = 1\n',
                      "syntax error"),
             "shape": (good.replace(b"[tool.october.wheel]\n", b"[tool.october.wheelx]\n").replace(
                 b"[tool.october]\n", b"[tool.october]\nwheel = 3\n"),
                 "the lock file's [tool.october] is malformed. Expected [tool.october.wheel] as a table")}
    for name, (data, text) in cases.items():
        lock = tmp_path / f"{name}.pylock.toml"
        lock.write_bytes(data)
        with pytest.raises(LockError) as info:
            locked_state(lock)
        assert text in str(one_short_line(info.value)), (name, str(info.value))
        assert info.value.exit_code == 13
    assert read_lock(PROJECT_ROOT / "locks" / "current.pylock.toml")["lock-version"] == "1.0"


def test_a_non_utf8_lock_file_on_the_command_line_exits_13_without_a_traceback(tmp_path: Path) -> None:
    lock = tmp_path / "bad.pylock.toml"
    lock.write_bytes(b'lock-version = "1.0"\ncreated-by = "\xff"\n')
    proc = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(tmp_path / "s"), "--recipe",
                           "current", "--locked", "--lock-file", str(lock)], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 13, proc.stderr
    assert "Traceback" not in proc.stderr and "Expected a UTF-8 TOML file, found bytes that are not UTF-8" in proc.stderr
    assert not (tmp_path / "s").exists()
    assert re.search(r"-> restore .*bad\.pylock\.toml", proc.stderr)


def test_a_byte_order_mark_is_named_not_a_syntax_error_at_line_1() -> None:
    """The scenario hunt: a recipe saved "UTF-8 with BOM" (Windows editors) was "Invalid statement (at line 1,
    column 1)", which names nothing the user can see."""
    with pytest.raises(TomlRefused) as info:
        parse_toml_bytes("\ufeffname = 'x'\n".encode())
    assert "byte-order mark" in info.value.found and "without one" in info.value.found
    assert parse_toml_bytes(b"name = 'x'\n") == {"name": "x"}
