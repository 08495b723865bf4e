"""A fork's build outputs: the files its editable install leaves in the checkout that git does not track.

vLLM's precompiled ``setup.py`` copies ``vllm/_C.abi3.so`` (the kernel that writes the KV cache) and the other
extension modules into the checkout, FlashInfer's editable install leaves ``flashinfer/data/*`` links and
``_build_meta.py``: git ignores them (the clone's exclude, :mod:`.exclude`), yet they are imported at run time.
The install step records each one's digest (``sha256:<hex>``; a link: ``link:<target>``, not followed), the
no-op re-run and ``current verify`` hold the checkout to that record.  ``__pycache__`` bytecode is left out
(Python checks it against its source), and so are the folders ``skip`` names (FlashInfer's AOT directory:
the jit step's, checked by ``verify/jit.py``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.filetrust import FileTrust
from ..core.hashing import sha256_file
from ..core.listing import first
from .clonecheck import ignored_files

KIND = "sha256"                 # the file-trust kind of a file's digest (the JIT libraries' too)
MISSING = "missing"


def listed(checkout: Path, skip: Iterable[Path] = ()) -> list[str]:
    """The checkout's build outputs (paths relative to it), bytecode caches and ``skip`` folders left out."""
    base = checkout.resolve()
    dirs = [d.resolve() for d in skip]
    return [rel for rel in ignored_files(checkout)
            if "__pycache__" not in Path(rel).parts and not any((base / rel).is_relative_to(d) for d in dirs)]


def signatures(checkout: Path, rels: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Each path's ``lstat`` signature (inode, size, mtime, ctime): a file a build writes again changes it."""
    out: dict[str, tuple[int, ...]] = {}
    for rel in rels:
        try:
            st = os.lstat(checkout / rel)
        except OSError:
            continue
        out[rel] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return out


@dataclass(frozen=True)
class Watch:
    """A checkout's build outputs before an install, to tell what the install made from what it found."""

    checkout: Path
    skip: tuple[Path, ...]
    before: Mapping[str, tuple[int, ...]]

    @classmethod
    def start(cls, checkout: Path, skip: Iterable[Path] = ()) -> "Watch":
        dirs = tuple(skip)
        return cls(checkout, dirs, signatures(checkout, listed(checkout, dirs)))

    def made(self, kept: Collection[str] = ()) -> tuple[list[str], list[str]]:
        """(the outputs the install made: new, written again, or in ``kept`` (checked by other means); those
        that were there before and that it left untouched: not its making, so never recorded as its own)."""
        after = signatures(self.checkout, listed(self.checkout, self.skip))
        made = [rel for rel, sig in after.items() if self.before.get(rel) != sig or rel in kept]
        return sorted(made), sorted(set(after) - set(made))


def digest(path: Path, file_sha256: Callable[[Path], str] = sha256_file) -> str:
    """``link:<target>`` for a link (not followed), ``dir`` for a folder, else ``sha256:<hex>``."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"link:{os.readlink(path)}"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return f"sha256:{file_sha256(path)}"


def trusted_digest(path: Path, trust: FileTrust) -> str:
    """:func:`digest`, a regular file's sha256 through ``trust`` (a re-run re-reads only what moved)."""
    return digest(path, lambda p: trust.digest(p, KIND, sha256_file))


def record(checkout: Path, rels: Iterable[str], trust: FileTrust) -> dict[str, str]:
    """relpath -> digest of each of ``rels`` still there."""
    out: dict[str, str] = {}
    for rel in sorted(rels):
        try:
            out[rel] = trusted_digest(checkout / rel, trust)
        except FileNotFoundError:
            continue
    return out


@dataclass(frozen=True)
class Changed:
    rel: str
    expected: str
    found: str          # a digest, "missing", or the error


def _found(path: Path, want: str, trust: FileTrust | None) -> str:
    try:
        if trust is None:
            return digest(path)
        if want.startswith("sha256:") and f"sha256:{trust.known(path, KIND)}" == want:
            return want                             # its stat signature unchanged since hashed: one stat
        return trusted_digest(path, trust)
    except FileNotFoundError:
        return MISSING
    except OSError as exc:
        return f"unreadable ({exc.__class__.__name__})"


def changed(checkout: Path, recorded: Mapping[str, str], trust: FileTrust | None = None) -> list[Changed]:
    """The recorded outputs that are gone or differ; ``trust``: a regular file whose stat signature is
    unchanged since it was hashed is not read again (``None``: every byte is read, as ``current verify`` does)."""
    out: list[Changed] = []
    for rel, want in sorted(recorded.items()):
        got = _found(checkout / rel, want, trust)
        if got != want:
            out.append(Changed(rel, want, got))
    return out


def describe(found: list[Changed], most: int = 5) -> str:
    return first([f"{c.rel} ({'missing' if c.found == MISSING else 'changed'})" for c in found], most)
