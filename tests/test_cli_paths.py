"""Option and path checks of ``october_setup`` and ``current`` (the audit's cases): each is refused before
anything is written, with the README's exit code and expected / found / what to do; the plain fast path
(installer/cli/noop.py) and the typer command line say the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.root import PROJECT_ROOT
from tests.fixtures.world import make_world, snapshot

TYPER = "import sys; from october.installer.cli.main import setup_main; sys.exit(setup_main(sys.argv[1:]))"


def both(*args: str, cwd: Path = PROJECT_ROOT) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """``october_setup ARGS`` as the console script runs it (the plain fast path first) and through typer."""
    plain = subprocess.run([sys.executable, "-m", "october.installer.october_setup", *args], cwd=cwd,
                           capture_output=True, text=True, timeout=300)
    typer_run = subprocess.run([sys.executable, "-c", TYPER, *args], cwd=cwd, capture_output=True, text=True,
                               timeout=300)
    return plain, typer_run


def current(*args: str, cwd: Path = PROJECT_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "october", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def refused(procs: tuple[subprocess.CompletedProcess[str], ...], code: int, *texts: str) -> str:
    for proc in procs:
        assert proc.returncode == code, (proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
        assert "Expected" in proc.stderr and "->" in proc.stderr, proc.stderr
        for text in texts:
            assert text in proc.stderr, (text, proc.stderr)
    assert len({p.stderr for p in procs}) == 1, [p.stderr for p in procs]
    return procs[0].stderr


@pytest.mark.parametrize("name, char, why", [
    ("st#1", "#", "URL fragment"),
    ("st:1", ":", "PATH"),
    ("st $HOME", "$", "GitPython expands environment variables"),
    ("st$x", "$", "GitPython expands environment variables"),
])
def test_a_stack_path_no_later_step_can_use_is_refused_first(tmp_path: Path, name: str, char: str, why: str) -> None:
    """``#`` and ``:`` passed preflight, fetch and env and failed install with uv's message (exit 11); ``$``
    made GitPython warn, and ``st $HOME`` broke fetch naming no path."""
    stack = tmp_path / name
    err = refused(both(str(stack), "--recipe", "current", "--cache-dir", str(tmp_path / "cache")), 19,
                  f"contains '{char}'", why, str(stack))
    assert "choose a path for STACK" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []     # neither the stack nor the cache was made


@pytest.mark.parametrize("char", ["\n", "\r"])
def test_a_stack_path_with_a_line_break_is_refused_first(tmp_path: Path, char: str) -> None:
    """The scenario hunt: a STACK with a newline ran fetch and made the env, then ended in a traceback (exit 70)
    writing stack-env.json, on every re-run too.  It is refused before anything is written (exit 19)."""
    stack = tmp_path / f"new{char}line"
    refused(both(str(stack), "--recipe", "current", "--cache-dir", str(tmp_path / "cache")), 19,
            f"contains {char!r}", "line break ends the value", "choose a path for STACK")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, char", [("c:1", ":"), ("c$HOME", "$")])
def test_a_cache_dir_no_later_step_can_use_is_refused_first(tmp_path: Path, name: str, char: str) -> None:
    """--cache-dir with ':' broke install (the cache's build tools on PATH), with '$' fetch (GitPython); a '#'
    there builds (the fixture world), so it is not refused."""
    refused(both(str(tmp_path / "stack"), "--recipe", "current", "--cache-dir", str(tmp_path / name)), 19,
            f"--cache-dir {tmp_path / name} cannot be used", f"contains '{char}'")
    assert list(tmp_path.iterdir()) == []


def test_system_python_that_cannot_run_is_exit_19_before_the_stack_is_made(tmp_path: Path) -> None:
    """Missing was exit 2; a directory was said not to exist; a file without x was `tool missing` (exit 7)
    from preflight, inside a STACK already made."""
    (tmp_path / "emptydir").mkdir()
    noexec = tmp_path / "python"
    noexec.write_text("#!/bin/sh\n")
    noexec.chmod(0o644)
    for python, found in ((tmp_path / "missing", "does not exist"), (tmp_path / "emptydir", "is a directory"),
                          (noexec, "cannot execute")):
        stack = tmp_path / "fi"
        refused(both(str(stack), "--recipe", "flashinfer-pr3812", "--system-python", str(python), "--cache-dir",
                     str(tmp_path / "cache")), 19, f"--system-python {python}", found, "pass the interpreter")
        assert not stack.exists() and not (tmp_path / "cache").exists()


def test_smoke_checks_install_as_verify_does(tmp_path: Path) -> None:
    """``current smoke --install afile`` said `has no Python environment` (17) and told to run october_setup on
    the file; a missing path too.  Both are exit 19, as ``current verify`` says."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    for install, said in ((afile, "is a file"), (tmp_path / "missing", "does not exist")):
        smoked = current("smoke", "--install", str(install), "--output", str(tmp_path / "o"))
        verified = current("verify", "--install", str(install))
        for proc in (smoked, verified):
            assert proc.returncode == 19, proc.stderr
            assert f"--install {install} {said}" in proc.stderr and "october_setup STACK" in proc.stderr
        assert not (tmp_path / "o").exists()


def test_locked_without_any_lock_is_a_missing_file_and_a_recipe_is_not_a_lock(tmp_path: Path) -> None:
    """No lock anywhere was `lock mismatch` (13): nothing was compared.  A recipe given as --lock-file was 13
    with `restore ... or re-create it without --locked`."""
    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    err = refused(both(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "--locked"), 19,
                  "--locked has no lock", "fixture.pylock.toml", str(stack / "pylock.toml"), "--lock-file PATH")
    assert "mismatch" not in err
    refused(both(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "--locked", "--lock-file",
                 str(world.recipe)), 19, "is not a PEP 751 lock", "lock-version", "pass a lock to --lock-file")
    assert not stack.exists()


def test_an_empty_recipe_is_a_usage_error(tmp_path: Path) -> None:
    """``current doctor --recipe ""`` looked for recipes/.toml (exit 3)."""
    from october.installer.cli.noop import parse

    for argv in (("doctor", "--recipe", ""), ("env", "--recipe", " "), ("download", "--format", "awq", "--recipe", "")):
        proc = current(*argv, cwd=tmp_path)
        assert proc.returncode == 2 and "--recipe is given an empty value" in proc.stderr, proc.stderr
    refused(both(str(tmp_path / "s"), "--recipe", ""), 2, "--recipe is given an empty value")
    assert parse(["s", "--recipe", ""]) is None and parse(["s", "-r", " "]) is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_re_run_without_recipe_keeps_to_the_stacks_recipe(tmp_path: Path) -> None:
    """Without --recipe a finished stack of another recipe was re-run as `current` (`preflight: running
    again: its inputs changed`), rebuilding it under another recipe on a networked machine."""
    from october.installer.cli.noop import parse
    from october.installer.cli.provision import recipe_for

    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    plain, _ = both(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "-q")
    assert plain.returncode == 0, plain.stderr
    before = snapshot(stack)
    err = refused(both(str(stack), "--cache-dir", str(cache)), 2, "no --recipe given", "recipe fixture",
                  f"--recipe {world.recipe}", "--recipe current")
    assert "running again" not in err and snapshot(stack) == before
    # named, it is the no-op it always was; a new stack, or one of the default recipe, still means `current`
    again, _ = both(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache))
    assert again.returncode == 0 and "(0 step(s) ran" in again.stdout, again.stderr
    assert recipe_for(tmp_path / "new", None) == "current" and recipe_for(stack, "x") == "x"
    assert parse([str(stack)]).recipe is None


@pytest.mark.slow
def test_a_stack_stopped_before_its_receipt_keeps_to_its_recipe_too(tmp_path: Path) -> None:
    """The setup receipt is written last: a run stopped before it (Ctrl-C in install, a failed step) left no
    receipt, and a re-run without --recipe was taken as `current`.  The recipe a run begins with is recorded
    (``STACK/.state/recipe-used.json``, under the stack lock) before any step."""
    world = make_world(tmp_path / "world")
    stack, cache = tmp_path / "stack", tmp_path / "cache"
    plain, _ = both(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "-q")
    assert plain.returncode == 0, plain.stderr
    from october.installer.core.hashing import sha256_file
    assert json.loads((stack / ".state" / "recipe-used.json").read_text()) == {
        "name": "fixture", "path": str(world.recipe.resolve()), "sha256": sha256_file(world.recipe),
        "options": {"cache_dir": str(cache.resolve()), "kit": None, "skip_preflight": [], "system_python": None}}
    (stack / "receipts" / "setup.json").unlink()            # as a run stopped before its last step leaves it
    (stack / ".state" / "receipt.json").unlink()
    refused(both(str(stack), "--cache-dir", str(cache)), 2, "no --recipe given", "recipe fixture",
            f"--recipe {world.recipe}")
    again, _ = both(str(stack), "--recipe", str(world.recipe), "--cache-dir", str(cache), "-q")
    assert again.returncode == 0, again.stderr
    assert (stack / "receipts" / "setup.json").is_file()


def _records(stack: Path, receipt: dict | None, used: dict | None) -> None:
    if receipt is not None:
        (stack / "receipts").mkdir(parents=True, exist_ok=True)
        (stack / "receipts" / "setup.json").write_text(json.dumps({"recipe": receipt}))
    if used is not None:
        (stack / ".state").mkdir(parents=True, exist_ok=True)
        (stack / ".state" / "recipe-used.json").write_text(json.dumps(used))


def test_the_default_recipe_is_known_by_its_file_not_only_its_name(tmp_path: Path) -> None:
    """Review findings: a user's edited copy of current.toml keeps ``name = "current"``: a re-run without
    --recipe loaded the shipped one instead (refused now, naming the copy); the shipped current of another
    install of the tool (another path, the same bytes) is still the default; a stale receipt of current
    with a later run of another recipe begun (stopped before its receipt) is refused, naming both."""
    from october.installer.core.errors import UsageError
    from october.installer.core.hashing import sha256_file
    from october.installer.cli.provision import recipe_for
    from october.installer.recipe import resolve_recipe_path

    shipped = resolve_recipe_path("current")
    mine = tmp_path / "mine.toml"
    mine.write_text(shipped.read_text() + "\n# my torch pin\n")
    stack = tmp_path / "a"
    _records(stack, {"name": "current", "path": str(mine), "sha256": sha256_file(mine)}, None)
    with pytest.raises(UsageError) as err:
        recipe_for(stack, None)
    assert f"--recipe {mine}" in err.value.fix and "receipts/setup.json" in str(err.value.found)

    other_install = tmp_path / "other" / "recipes" / "current.toml"
    other_install.parent.mkdir(parents=True)
    other_install.write_bytes(shipped.read_bytes())
    stack = tmp_path / "b"
    _records(stack, {"name": "current", "path": str(other_install), "sha256": sha256_file(other_install)},
             {"name": "current", "path": str(shipped), "sha256": sha256_file(shipped)})
    assert recipe_for(stack, None) == "current"

    stack = tmp_path / "c"
    fi = resolve_recipe_path("flashinfer-pr3812")
    _records(stack, {"name": "current", "path": str(shipped), "sha256": sha256_file(shipped)},
             {"name": "flashinfer-pr3812", "path": str(fi), "sha256": sha256_file(fi)})
    with pytest.raises(UsageError) as err:
        recipe_for(stack, None)
    assert "current and then flashinfer-pr3812" in str(err.value)
    assert "--recipe flashinfer-pr3812" in err.value.fix and ".state/recipe-used.json" in str(err.value.found)

    # the scenario hunt: a stack of a recipe of the user's, then a run of current that failed at its preflight:
    # the fix offered `--recipe current` twice ("re-run with its recipe" and "switch it on purpose") and never
    # the receipt's recipe; now each recorded recipe once, the receipt's first
    stack = tmp_path / "e"
    _records(stack, {"name": "fixture", "path": str(mine), "sha256": sha256_file(mine)},
             {"name": "current", "path": str(shipped), "sha256": sha256_file(shipped)})
    with pytest.raises(UsageError) as err:
        recipe_for(stack, None)
    fix = err.value.fix or ""
    assert fix.count("--recipe current") == 1 and fix.index(f"--recipe {mine}") < fix.index("--recipe current"), fix
    assert "receipt names" in fix and f"--recipe {mine} or --recipe current" in str(err.value.expected)

    stack = tmp_path / "d"                               # an older stack: a receipt only, its checkout gone
    _records(stack, {"name": "current", "path": "/gone/recipes/current.toml"}, None)
    assert recipe_for(stack, None) == "current"
    assert recipe_for(tmp_path / "new", None) == "current"


def test_a_kit_path_with_a_hash_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    """The audit's '#' case for kits: `october_setup kit` made one at /tmp/kk#1/kit, and installing from it
    failed in the env step (exit 6, `Failed to read --find-links directory: /tmp/kk`).  Both are refused first
    (exit 19, the character and why), by both command lines; nothing is written."""
    kit = tmp_path / "kk#1" / "kit"
    err = refused(both(str(tmp_path / "stack"), "--recipe", "current", "--kit", str(kit)), 19,
                  f"--kit {kit} cannot be used: it contains '#'", "--find-links")
    assert "Traceback" not in err
    made = make_kit(kit)
    assert made.returncode == 19 and "it contains '#'" in made.stderr, made.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("option", "value", "char"), [
    ("STACK", "/data/st#{name}", "#"), ("STACK", "/data/a:b/{name}", ":"), ("STACK", "/data/$USER/{name}", "$"),
    ("--cache-dir", "/data/c:{host}", ":"), ("--kit", "kit#1", "#"), ("--ship-dir", "/tmp/k#{name}", "#")])
def test_fleet_refuses_a_path_each_node_would_refuse_before_any_cluster(tmp_path: Path, option: str, value: str,
                                                                         char: str) -> None:
    """The audit: fleet passed its paths on and each node's own october_setup refused them, after the cluster
    was reached and the kit shipped.  Now the same check (exit 19) comes first: the address is a closed
    loopback port, so a run that reached for the cluster would say exit 8 instead."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
        kit = tmp_path / "kit"
        kit.mkdir()
        args = {"STACK": "/data/st-{name}", "--kit": str(kit), "--cache-dir": None, "--ship-dir": None}
        args[option] = str(tmp_path / value) if option == "--kit" else value
        argv = ["fleet", args["STACK"], "--address", address, "--recipe", "current", "--kit", args["--kit"],
                "--receipt", str(tmp_path / "fleet.json"), "--no-smoke"]
        argv += [f"{o}={args[o]}" for o in ("--cache-dir", "--ship-dir") if args[o] is not None]
        argv += ["--ship-kit"] if option == "--ship-dir" else []
        procs = both(*argv)
    refused(procs, 19, f"contains '{char}'", option)
    assert not (tmp_path / "fleet.json").exists()


@pytest.mark.parametrize("passed, texts", [
    ("--setup-arg=--bogus", ("october_setup on each node would refuse --setup-arg=--bogus", "No such option")),
    ("--smoke-arg=--fixtures", ("current smoke on each node would refuse", "requires an argument")),
    ("--setup-arg=--kit=/elsewhere", ("fleet sets --kit on each node itself",)),
    ("--setup-arg=-rcurrent", ("fleet sets -r on each node itself",)),
    ("--smoke-arg=--level=engine", ("fleet sets --level on each node itself",)),
    ("--setup-arg=--version", ("--version makes october_setup print and end",)),
    # the review: bundled short options got past a check by name (-qh ended the fleet with exit 0, unrun)
    ("--setup-arg=-qh", ("it makes october_setup print and end",)),
    ("--smoke-arg=-qh", ("it makes current smoke print and end",)),
    ("--setup-arg=-qrcurrent", ("it sets --recipe, which fleet sets on each node itself",)),
    ("--smoke-arg=-qo/elsewhere", ("it sets --output, which fleet sets on each node itself",)),
])
def test_fleet_refuses_what_each_node_would_refuse_or_ignore_before_any_cluster(tmp_path: Path, passed: str,
                                                                                texts: tuple[str, ...]) -> None:
    """--setup-arg / --smoke-arg went to every node unread: a typo failed each node after the kit shipped, and
    an option fleet sets itself (--kit, --level) silently replaced fleet's on the node.  Now parsed first, as
    the node's command parses them (exit 2); valid ones go on (here to the kit check, exit 20)."""
    kit = tmp_path / "kit"
    kit.mkdir()
    argv = ["fleet", "/data/st-{name}", "--address", "127.0.0.1:9", "--recipe", "current", "--kit", str(kit),
            "--receipt", str(tmp_path / "fleet.json")]
    refused(both(*argv, passed), 2, *texts)
    good = both(*argv, "--setup-arg=--skip-preflight=gpu", "--smoke-arg=--fixtures=/d")
    assert [p.returncode for p in good] == [20, 20] and "not a finished kit" in good[0].stderr, good[0].stderr
    assert not (tmp_path / "fleet.json").exists()


def test_a_stack_path_the_locale_cannot_encode_is_refused_first(tmp_path: Path) -> None:
    """The scenario hunt: under ``LC_ALL=C`` a stack at a non-ASCII path failed install with uv's
    UnicodeDecodeError from ``site.addpackage`` (Python up to 3.12 reads ``.pth`` files in the locale's
    encoding), and its Python failed at every start.  Now exit 19 first, naming the character and the fix;
    under a UTF-8 locale the same path is not refused."""
    import os

    stack = tmp_path / "ç stack"
    for lc_all, refused_here in (("C", True), ("C.UTF-8", False)):
        env = {**os.environ, "LC_ALL": lc_all}
        done = subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(stack), "--recipe",
                               "current", "--cache-dir", str(tmp_path / "cache")], cwd=PROJECT_ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        if refused_here:
            assert done.returncode == 19, done.stderr
            assert "cannot be used under this locale: it contains 'ç'" in done.stderr
            assert "LC_ALL=C.UTF-8" in done.stderr and "Traceback" not in done.stderr
            assert list(tmp_path.iterdir()) == []
        else:
            assert "under this locale" not in done.stderr and done.returncode != 19, done.stderr


@pytest.mark.parametrize("part", ["env", "src/alpha", "jit", ".state/pycache", "wheels/x"])
def test_a_cache_inside_a_part_the_stack_replaces_is_refused_first(tmp_path: Path, part: str) -> None:
    """``--cache-dir STACK/env`` failed late with uv's "will not clear a directory that is not a virtual
    environment" (exit 6); ``STACK/.state/pycache`` was wiped as every run began, the cache with it."""
    stack = tmp_path / "stack"
    err = refused(both(str(stack), "--recipe", "current", "--cache-dir", str(stack / part)), 2,
                  f"inside the stack's own {part.split('/')[0]}/", "pass another --cache-dir")
    assert str(tmp_path / "october-cache") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []     # neither the stack nor the cache was made


def test_a_cache_in_a_folder_of_the_stack_that_is_not_its_own_is_taken(tmp_path: Path) -> None:
    """``STACK/cache``, or the stack's directory itself, is no part october_setup replaces: not refused."""
    from october.installer.core.cliargs import cache_apart

    for cache in (tmp_path / "stack" / "cache", tmp_path / "stack", tmp_path / "stack" / "envs", tmp_path / "other"):
        cache_apart(cache, tmp_path / "stack")


def test_a_kit_that_is_a_file_is_not_said_to_be_made_if_missing(tmp_path: Path) -> None:
    """The new-user hunt: ``--kit afile`` said "Expected a directory (made if missing)", but a kit is read, never
    made by setup; ``october_setup kit DIR`` does make DIR, and says so."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    err = refused(both(str(tmp_path / "stack"), "--recipe", "current", "--kit", str(afile)), 19,
                  f"--kit {afile} is a file", "Expected a directory,")
    assert "made if missing" not in err
    made = make_kit(afile)
    assert made.returncode == 19 and "a directory (made if missing)" in made.stderr, made.stderr


def make_kit(out: Path) -> subprocess.CompletedProcess[str]:
    """``october_setup kit --recipe current OUT`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "october.installer.october_setup", "kit", "--recipe", "current",
                           str(out)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
