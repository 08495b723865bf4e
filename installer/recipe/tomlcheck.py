"""Reading a recipe or forks.toml and validating it against the models of :mod:`.spec`, imported only when
needed: content that passed before in a stack, with this code, is remembered there by its digest
(:func:`validated`), so that stack's no-op re-run never imports pydantic; and in the shared cache under the
per-user key (:class:`SharedMark`), so a second stack set up with the same recipe does not import it either."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from ..core import jsonread
from ..core.errors import SHOWN_MAX, RecipeError, one_line
from ..core.ids import SHA256
from ..core.tomlgate import RECIPE_MAX_BYTES, TomlRefused, read_toml_file

FORMAT_VERSION = 1
# Bounds every value of a recipe or forks.toml meets (a key may set a tighter one): see .spec
MAX_STR = 1024          # characters of a string value (descriptions, reasons, patterns, paths)
MAX_URL = 2048          # characters of a URL
MAX_KEY = 128           # characters of a key (names of forks, pins, files, variables)
MAX_KEYS = 256          # keys in one table
MAX_ITEMS = 256         # items in one array
MAX_INT = 2**63 - 1     # |integer|, the TOML range, whatever the parser gives


def describe(value: Any) -> str:
    """A value as an error shows it, on one line (a string is cut to SHOWN_MAX before it is quoted)."""
    if isinstance(value, str):
        return one_line(repr(value[:SHOWN_MAX + 1]))
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return one_line(repr(value))
    if isinstance(value, list):
        return f"a list ({len(value)} items)"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def read_toml(path: Path) -> dict[str, Any]:
    """A recipe or forks.toml, through the one TOML read gate (size, UTF-8, syntax, depth)."""
    try:
        return read_toml_file(path, max_bytes=RECIPE_MAX_BYTES)
    except TomlRefused as exc:
        raise RecipeError(path, "<file>", expected=exc.expected, found=exc.found,
                          fix=_READ_FIX[exc.kind].format(path=path)) from None


_READ_FIX = {
    "missing": "check the path or the recipe name (see recipes/)",
    "directory": "pass a recipe name (see recipes/) or the path of a .toml file",
    "unreadable": "check the permissions of {path}",
    "size": "check that {path} is the recipe (or forks.toml) you meant",
    "encoding": "save {path} as UTF-8",
    "syntax": "fix the TOML syntax in {path}",
    "depth": "flatten the nested arrays or tables in {path}",
    "nul": "remove the NUL character (written \\u0000) from {path}",
}


@dataclass(frozen=True)
class SharedMark:
    """Content that passed the models, remembered across stacks in a shared cache (``CACHE/recipe-checked/<key
    id>/<digest>``), each mark signed with the per-user key of :mod:`october.installer.core.cachekey`: a mark
    planted by whoever can write the cache without that key (unsigned, forged, signed for other content or by
    another key, not JSON, a FIFO) is not taken, and the models run.  The digest covers the documents and the
    code that checked them (:func:`content_digest`), so a mark speaks for this content and this tool only.  A
    mark is written through the cache's own folders, never through a link planted there, and only names
    shaped like a mark are ever pruned."""

    folder: Path
    key: bytes

    KEEP = 64                   # marks kept (the newest): one per recipe content a user sets stacks up with
    MAX_BYTES = 4096

    @classmethod
    def in_cache(cls, cache: Path) -> SharedMark | None:
        """The cache's marks under this user's key; None without a usable key (nothing is then taken or kept,
        and the models run: the built-stack cache, which needs the key too, says why)."""
        from ..core import cachekey

        key = cachekey.load_key(cache=cache)
        return None if key is None else cls(cache / "recipe-checked" / cachekey.key_id(key), key)

    def _doc(self, digest: str) -> dict[str, Any]:
        return {"format": FORMAT_VERSION, "what": "recipe and forks.toml passed the models", "digest": digest}

    def holds(self, digest: str) -> bool:
        """Whether a mark signed with this key vouches for ``digest``; anything unreadable or unsigned is not (a
        link is followed: only a signed mark for this digest counts, wherever it lies)."""
        from ..core import cachekey

        try:
            doc = jsonread.loads(cachekey.read_regular(self.folder / digest, self.MAX_BYTES))
        except (OSError, ValueError):       # a planted '[[[[...' too (jsonread: a JSONDecodeError)
            return False
        return isinstance(doc, dict) and cachekey.signed(doc, self.key) and \
            {k: v for k, v in doc.items() if k != "mac"} == self._doc(digest)

    def add(self, digest: str) -> None:
        """Mark ``digest`` (replacing whatever is at its name) and keep the newest :attr:`KEEP` marks, this one
        first; a failure only loses the shortcut."""
        from ..core import cachekey

        doc = self._doc(digest)
        data = json.dumps({**doc, "mac": cachekey.sign(doc, self.key)}).encode()
        try:
            dfd = self._open_folder()
        except OSError:
            return
        tmp = f".{digest}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), cachekey.shared_mode(0o644))      # before anyone can swap the name
                fh.write(data)
            os.replace(tmp, digest, src_dir_fd=dfd, dst_dir_fd=dfd)
            marks = []
            for name in os.listdir(dfd):
                if SHA256.fullmatch(name):
                    with contextlib.suppress(FileNotFoundError):
                        marks.append((name != digest, -os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mtime_ns,
                                      name))
            for *_, old in sorted(marks)[self.KEEP:]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(old, dir_fd=dfd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
        finally:
            os.close(dfd)

    def _open_folder(self) -> int:
        """The mark folder's descriptor, each folder below the cache made if missing and opened without
        following a link (one planted there would send the writes and the pruning elsewhere)."""
        self.folder.parent.parent.mkdir(parents=True, exist_ok=True)        # the cache itself
        fd = os.open(self.folder.parent.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in (self.folder.parent.name, self.folder.name):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)      # the umask's, as the cache's other folders
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = sub
            return fd
        except BaseException:
            os.close(fd)
            raise


Source = Literal["stack", "shared", "models"]


def validated(checks: list[tuple[Path, dict[str, Any] | None, str]], checked: Path | None,
              shared: SharedMark | Callable[[], SharedMark | None] | None = None) -> tuple[str | None, Source]:
    """Validate each ``(file, data, model name in .spec)`` in order, unless a marker named by this content's
    digest is in ``checked`` (the stack's ``.state/recipe-checked``; None: always validate) or ``shared`` holds
    a mark signed for it (``shared`` may be a function making it, called only when the stack's marker does
    not vouch: the no-op loads no key then).  The stack's marker lives in the stack it speaks for: a planted
    one skips the models for that stack only; a shared mark is taken only signed with the user's key.
    -> (the digest, None when a file could not be read; what vouched for it: the stack's marker, a shared mark,
    or the models run here)."""
    digest = content_digest([data for _, data, _ in checks])
    if digest is not None and checked is not None and (checked / digest).is_file():
        return digest, "stack"
    mark = shared() if callable(shared) else shared
    if digest is not None and mark is not None and mark.holds(digest):
        return digest, "shared"
    from . import explain, spec

    for file, data, model in checks:
        if data is not None:
            explain.validate(file, data, getattr(spec, model))
    return digest, "models"


def remember(checked: Path | None, digest: str | None) -> None:
    """Mark content as validated in ``checked`` (where the stack's ``.state`` exists), replacing any earlier mark."""
    if checked is None or digest is None or not checked.parent.is_dir():
        return
    try:
        checked.mkdir(exist_ok=True)
        for old in checked.iterdir():
            if old.name != digest:
                old.unlink()
        (checked / digest).touch()
    except OSError:
        pass            # only a shortcut: the next run validates again


def content_digest(docs: list[dict[str, Any] | None]) -> str | None:
    """The digest of parsed documents and of the rules they were checked with (this package's code, the
    constants it reads, pydantic's and packaging's versions).  A TOML date or time is encoded behind a NUL,
    which no recipe string can hold (the read gate refuses NUL), so no two documents share a digest."""
    import packaging

    from ...checks import contract
    from ..core import ids

    if any(doc is None for doc in docs):
        return None
    digest = hashlib.sha256()
    for source in [*sorted(Path(__file__).parent.glob("*.py")), Path(contract.__file__), Path(ids.__file__),
                   _pydantic_version_file()]:
        digest.update(source.name.encode() + b"\0" + (source.read_bytes() if source.is_file() else b"?"))
    digest.update(f"packaging {packaging.__version__}\0".encode())
    digest.update(json.dumps(docs, sort_keys=True, default=_typed).encode())
    return digest.hexdigest()


def _typed(value: Any) -> str:
    return f"\0{type(value).__name__}:{value.isoformat()}"


def _pydantic_version_file() -> Path:
    """pydantic's ``version.py``, found without importing pydantic (the no-op never does)."""
    from importlib.util import find_spec

    spec = find_spec("pydantic")
    return Path(spec.origin).parent / "version.py" if spec is not None and spec.origin else Path("pydantic-missing")
