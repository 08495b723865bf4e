"""Why a ``git fetch`` failed, from its own words, and what to do about it.

Three causes need different fixes, so they are told apart:

- ``remote-damaged``: the remote answered but cannot serve a complete object set (a missing
  blob, "did not send all necessary objects", "not our ref", corruption on the remote side).
  Retrying or checking the network does not help; another copy of the repository does.
- ``network``: the remote was never reached (DNS, refused or timed-out connection, TLS,
  authentication).  The repository may be fine.
- ``not-found``: the host answered that there is no such repository.

Anything else is ``unknown`` and keeps the generic advice.  Markers are git's own messages
(git 2.39 to 2.47, curl transport, file and ssh transports).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core.paths import remove

_DAMAGED = [
    r"did not send all necessary objects",
    r"possible repository corruption",
    r"unable to read [0-9a-f]{7,}",
    r"missing (?:blob|tree|commit|object)",
    r"bad object",
    r"not our ref",                 # also "upload-pack: not our ref"
    r"could not find remote ref",
    r"couldn't find remote ref",
    r"no such remote ref",
    r"invalid index-pack output",
    r"pack has \d+ unresolved delta",
    r"fatal: protocol error: bad pack header",
    r"object file .* is empty",
    r"loose object .* is corrupt",
]
_NETWORK = [
    r"could not resolve host",      # also "could not resolve hostname"
    r"temporary failure in name resolution",
    r"name or service not known",
    r"failed to connect",
    r"couldn't connect to server",
    r"connection refused",
    r"connection timed out",
    r"operation timed out",
    r"timed out",
    r"network is unreachable",
    r"no route to host",
    r"connection reset",
    r"ssl[ _]",
    r"gnutls",
    r"authentication failed",
    r"could not read username",
    r"could not read password",
    r"permission denied \(publickey",
    r"host key verification failed",
    r"the requested url returned error: 40[13]",
    r"proxy",
]
_NOT_FOUND = [
    r"does not appear to be a git repository",
    r"repository .*not found",
    r"the requested url returned error: 404",
    r"no such file or directory",
]


@dataclass(frozen=True)
class Diagnosis:
    cause: str        # ownership | remote-damaged | network | not-found | unknown
    found: str        # the line of git's output that decided it
    fix: str


_DUBIOUS = re.compile(r"dubious ownership in repository at '([^']+)'")


def ownership_fix(output: str) -> str | None:
    """git's "detected dubious ownership" (a repository another user owns: git reads none as this user) ->
    what to do, naming the folder and its owner; None for any other output."""
    m = _DUBIOUS.search(output)
    if m is None:
        return None
    path = m.group(1)
    try:
        import pwd

        owner = pwd.getpwuid(Path(path).stat().st_uid).pw_name
    except (ImportError, KeyError, OSError):
        owner = "its owner"
    return (f"{path} belongs to another user ({owner}), and git reads no repository of another user's: run "
            f"october_setup as {owner} (or with a --cache-dir of your own), or, if you trust that user, "
            f"`git config --global --add safe.directory '{path}'` and re-run")


def diagnose(output: str, *, what: str, url: str) -> Diagnosis:
    """Classify a failed fetch's output; ``what`` names the repository (fork or submodule)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    owned = ownership_fix(output)
    if owned is not None:
        return Diagnosis("ownership", next(ln for ln in lines if "dubious ownership" in ln), owned)
    for cause, patterns, fix in (
            ("remote-damaged", _DAMAGED,
             f"the remote {url} was reached but cannot serve a complete copy of {what} "
             "(a missing or corrupt object there): retrying will not help; fetch from another "
             "copy (a mirror via git's url.<copy>.insteadOf, or an october kit with --kit), "
             "or ask its owner to repair the repository"),
            ("network", _NETWORK,
             f"{url} could not be reached (network, DNS, proxy or credentials): check the "
             "connection and any credentials, then re-run; on an offline machine use a kit "
             "(october_setup kit ... on a connected machine, then --kit)"),
            ("not-found", _NOT_FOUND,
             f"no repository at {url}: check the URL (forks.toml, or the fork's .gitmodules "
             "for a submodule) or point it at a copy that exists (url.<copy>.insteadOf)")):
        # patterns in order, each tried on every line: the first pattern that matches decides
        hit = next((ln for pat in patterns for ln in lines if re.search(pat, ln, re.IGNORECASE)), None)
        if hit is not None:
            return Diagnosis(cause, hit, fix)
    last = lines[-1] if lines else "no output"
    return Diagnosis("unknown", last, "check the URL and your network/credentials")


def remove_partial_objects(repo: Path) -> list[str]:
    """Remove what an interrupted or failed fetch leaves in a bare repository (temporary objects and
    packs, a pack without its index or the reverse, stale ``*.lock`` files) while the caller holds its
    file lock; return the removed paths (relative), for the log."""
    removed: list[str] = []
    objects = repo / "objects"

    def drop(p: Path) -> None:
        try:
            remove(p)
            removed.append(str(p.relative_to(repo)))
        except FileNotFoundError:
            pass

    pack = objects / "pack"
    if pack.is_dir():
        for p in pack.iterdir():
            if p.name.startswith(("tmp_pack_", "tmp_idx_", "tmp_rev_", "tmp_mtimes_", "tmp_bitmap_")):
                drop(p)
        # a pack without its index or the reverse, a .keep of an unfinished index-pack
        for suffix, partner in ((".pack", ".idx"), (".idx", ".pack"), (".keep", ".pack")):
            for p in list(pack.glob(f"pack-*{suffix}")):
                if not p.with_suffix(partner).exists():
                    drop(p)
    for pattern in ("*/tmp_obj_*", "tmp_obj_*", "incoming-*"):       # glob finds nothing in a missing dir
        for p in objects.glob(pattern):
            drop(p)
    for name in ("shallow.lock", "packed-refs.lock", "HEAD.lock", "config.lock", "index.lock"):
        if (repo / name).exists():
            drop(repo / name)
    for p in (repo / "refs").rglob("*.lock"):
        drop(p)
    return removed
