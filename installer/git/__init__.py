"""git: shared bare mirrors, prefix pins, working clones (the fetch step, kit and verify use them).

Everything that *writes* runs as ``git ...`` through :meth:`october.installer.core.runner.Runner.run`, so it
is logged (``STACK/logs/<step>.log``, secrets masked); read-only look-ups go through GitPython, except the
clone checks every re-run makes (:mod:`.clonecheck`), which start git directly so a no-op re-run does not
import GitPython.  The one unlogged write is ``git init --bare`` of an empty mirror
(with :func:`git_env`).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

from ..core.cachekey import without_key
from ..core.cpus import available_cpus
from ..core.idle import while_child

# GitPython looks for git as it is imported and raises ImportError ("Bad git executable") without one: the
# preflight says git is missing (its punch list, exit 4), so the import must not fail first
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

HEX = re.compile(r"^[0-9a-f]+$")
_HTTP_USERINFO = re.compile(r"^((?i:https?)://)[^/@\s]*@")

# Variables that would point git at some other repository than the one we mean.
_GIT_LOCATION_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                      "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE")


def git_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for our git commands: never prompt, never follow a stray GIT_DIR, never a replace ref."""
    env = without_key(base)
    for key in _GIT_LOCATION_VARS:
        env.pop(key, None)
    env["GIT_TERMINAL_PROMPT"] = "0"      # a private repo fails at once instead of hanging
    env["GCM_INTERACTIVE"] = "never"
    env["LC_ALL"] = "C"                   # stable messages in logs
    # the objects themselves, never a clone's refs/replace/ substitutes: `git replace <pin> <other>` made a
    # checkout of the pin hold other code while HEAD and `git status` showed the pin, clean
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    env.setdefault("GIT_HTTP_LOW_SPEED_LIMIT", "1000")   # a remote or proxy that accepts and stalls ends the
    env.setdefault("GIT_HTTP_LOW_SPEED_TIME", "60")      # fetch (< 1 kB/s for 60 s) instead of hanging for ever
    return with_config(env, parallel_checkout() + NO_REPO_CODE)


# For a look that must never fetch: in a partial repository git lazily fetches a missing object from its
# promisor remote.  GIT_NO_LAZY_FETCH refuses that on git with the CVE-2024-32004 fix (backported without a
# version change, so no version check); older git ignores it, and an empty GIT_ALLOW_PROTOCOL (git >= 2.12)
# then refuses every transport, so the fetch fails at once.  A look needs no transport.
NO_FETCH = {"GIT_NO_LAZY_FETCH": "1", "GIT_ALLOW_PROTOCOL": ""}


@functools.cache
def parallel_checkout() -> tuple[tuple[str, str], ...]:
    """A checkout writes thousands of files: one worker per CPU this process may use (git >= 2.32; older git
    ignores the keys).  Not ``checkout.workers=0``: git counts the host's CPUs, not the affinity or the quota.
    Counted once per process (the cgroup files are not read again for each of a run's git commands)."""
    return (("checkout.workers", str(available_cpus())), ("checkout.thresholdForParallelism", "100"))


# A clone's own .git/config and hooks are the stack's files, not ours: our git commands run no program they
# name (an fsmonitor hook ran on every `git status` of a re-run; a post-checkout hook on every checkout).
# Command-scope config (GIT_CONFIG_KEY_n) outranks the repository's.
NO_REPO_CODE = (("core.fsmonitor", "false"), ("core.hooksPath", os.devnull),
                # git status re-reads a file whose stat data changed: with ctime not compared (the user's
                # core.trustctime=false) an edit put back to its size and mtime (`touch -r`) passed as clean
                ("core.trustctime", "true"), ("core.checkStat", "default"), ("core.ignoreStat", "false"),
                # the user's attributes are not the fork's (a filter there runs on every status)
                ("core.attributesFile", os.devnull),
                # a submodule's git drops GIT_NO_REPLACE_OBJECTS (a local-repo variable); command-scope config stays
                ("core.useReplaceRefs", "false"))


def with_config(env: dict[str, str], pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """``env`` with git config ``pairs`` appended through GIT_CONFIG_COUNT/KEY_n/VALUE_n after the caller's
    own (git applies them in order); submodule commands inherit them."""
    raw = env.get("GIT_CONFIG_COUNT", "0")
    if not raw.isdigit():
        return env              # not a count git accepts: left for git to refuse with its own message
    for n, (key, value) in enumerate(pairs, int(raw)):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    env["GIT_CONFIG_COUNT"] = str(int(raw) + len(pairs))
    return env


def look(path: Path, *args: str, ceiling: Path | None = None,
         config: tuple[tuple[str, str], ...] = (), refresh: bool = False,
         index: Path | None = None) -> tuple[bytes, str | None]:
    """A read-only ``git -C path ARGS`` started directly (no GitPython, no log): (its stdout, None), or (b"",
    its last line of stderr) when it fails.  ``GIT_OPTIONAL_LOCKS=0``: a look never rewrites the index, unless
    ``refresh`` (a clone this run made); ``ceiling``: git does not look for the repository in it or above;
    ``config``: command-scope config besides :func:`git_env`'s; ``index``: the index file git reads instead of
    the repository's (``GIT_INDEX_FILE``; a submodule's git does not inherit it).  OSError (no git) is the caller's."""
    env = with_config(git_env(), config)
    if not refresh:
        env["GIT_OPTIONAL_LOCKS"] = "0"
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    if ceiling is not None:
        env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    with subprocess.Popen(["git", "-C", str(path), *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            while_child(proc, proc.stdout, proc.stderr)     # imports a later step makes (core.idle)
            out, err = proc.communicate()
        except BaseException:
            proc.kill()
            raise
    if proc.returncode == 0:
        return out, None
    lines = [ln.strip() for ln in err.decode(errors="replace").splitlines() if ln.strip()]
    return b"", lines[-1] if lines else f"git exit {proc.returncode}"


def strip_credentials(url: str) -> str:
    """``https://user:token@host/x`` -> ``https://host/x``; ``ssh://git@host`` keeps its user."""
    return _HTTP_USERINFO.sub(lambda m: m.group(1), url)


def parse_ls_tree(output: str) -> dict[str, tuple[str, str]]:
    """``git ls-tree -z`` output as path -> (type, id)."""
    found: dict[str, tuple[str, str]] = {}
    for record in output.split("\0"):
        meta, tab, path = record.partition("\t")
        fields = meta.split()
        if tab and len(fields) == 3:
            found[path] = (fields[1], fields[2])
    return found


def indented(items: list[str], most: int = 12) -> str:
    """The first ``most`` items, one an indented line, and how many more."""
    shown = items[:most] + ([f"... and {len(items) - most} more"] if len(items) > most else [])
    return "\n".join(f"    {i}" for i in shown)
