"""git: shared bare mirrors, prefix pins, working clones (the fetch step, kit and verify use them).

How git is called (one rule, so every byte that changes disk is logged):

- Everything that *writes* -- network fetches, clones, checkouts, submodule
  updates, config and ref updates -- runs as ``git ...`` through
  :meth:`october.installer.core.runner.Runner.run`, so its full output lands in
  ``STACK/logs/<step>.log`` with secrets masked, and a failure carries the
  command, exit code and last lines.
- Everything that only *reads* -- ``rev-parse``, ``cat-file -e``, ``status``,
  ``rev-list``, submodule listings -- goes through GitPython (``git.Repo``),
  which keeps these quick look-ups out of the log; the clone checks every re-run
  makes (:mod:`.clonecheck`: HEAD from the clone's files, one ``git status``) start
  git directly, so a no-op re-run does not import GitPython.  The one exception is
  creating an empty bare mirror with ``Repo.init(bare=True)``: no network,
  nothing worth logging.

Modules: :mod:`.mirror` (one bare mirror per URL in the cache dir, file-locked),
:mod:`.resolve` (a pin -> a full 40-hex commit), :mod:`.worktree` (the clone
in ``STACK/src/<fork>`` and its submodules), :mod:`.clonecheck` (its checks), :mod:`.sdist` (a fork
pinned to a released sdist), :mod:`.equivalence` and :mod:`.sdistmatch` (a wheel's source commit against
the fork: git trees, or an sdist's files).
"""

from __future__ import annotations

import os
import re

HEX = re.compile(r"^[0-9a-f]+$")
_HTTP_USERINFO = re.compile(r"^((?i:https?)://)[^/@\s]*@")

# Variables that would point git at some other repository than the one we mean.
_GIT_LOCATION_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                      "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE")


def git_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for our git commands: never prompt, never follow a stray GIT_DIR."""
    env = dict(os.environ if base is None else base)
    for key in _GIT_LOCATION_VARS:
        env.pop(key, None)
    env["GIT_TERMINAL_PROMPT"] = "0"      # a private repo fails at once instead of hanging
    env["GCM_INTERACTIVE"] = "never"
    env["LC_ALL"] = "C"                   # stable messages in logs
    env.setdefault("GIT_HTTP_LOW_SPEED_LIMIT", "1000")   # a remote or proxy that accepts and stalls ends the
    env.setdefault("GIT_HTTP_LOW_SPEED_TIME", "60")      # fetch (< 1 kB/s for 60 s) instead of hanging for ever
    return with_config(env, PARALLEL_CHECKOUT)


# For a look that must never fetch: in a partial repository git lazily fetches a missing object from its
# promisor remote (a kit's copy names github.com).  GIT_NO_LAZY_FETCH refuses that on git with the
# CVE-2024-32004 fix (2.39.4, 2.40.2, 2.41.1, 2.42.2, 2.43.4, 2.44.1, 2.45.1 and later; distributions
# backport it without changing the number, so a version check would refuse patched gits); any older git
# ignores it, and an empty GIT_ALLOW_PROTOCOL then refuses every transport (git >= 2.12), so the fetch
# fails at once, offline.  A look is local: nothing it does needs a transport.
NO_FETCH = {"GIT_NO_LAZY_FETCH": "1", "GIT_ALLOW_PROTOCOL": ""}


# A checkout writes thousands of files (CCCL alone 8,173): one worker per core (git >= 2.32; older git
# ignores the keys).  Measured on the H200: see bench/h200_trust_speed.sh.
PARALLEL_CHECKOUT = (("checkout.workers", "0"), ("checkout.thresholdForParallelism", "100"))


def with_config(env: dict[str, str], pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """``env`` with git config ``pairs`` added through GIT_CONFIG_COUNT/KEY_n/VALUE_n, after any the
    caller already set there (theirs are kept and read first; git applies them in order, so a later
    key of ours wins only for the keys we set).  Submodule commands inherit them.  A malformed count
    is left alone: git then refuses it with its own message ("bogus count in GIT_CONFIG_COUNT")."""
    raw = env.get("GIT_CONFIG_COUNT", "0")
    if not raw.isdigit():
        return env              # not a count git accepts: left as it is, for git to name
    for n, (key, value) in enumerate(pairs, int(raw)):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    env["GIT_CONFIG_COUNT"] = str(int(raw) + len(pairs))
    return env


def strip_credentials(url: str) -> str:
    """``https://user:token@host/x`` -> ``https://host/x``: what a clone's ``origin`` may keep on disk.

    Only http(s) userinfo is dropped (that is where tokens live); ``ssh://git@host`` keeps its user.
    """
    return _HTTP_USERINFO.sub(lambda m: m.group(1), url)
