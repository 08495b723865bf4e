"""The per-user key that signs what a stack takes from a shared cache on trust: a built-stack entry's manifest
(:mod:`october.installer.pyenv.builtstack`) and a JIT entry's ``entry.json`` (:mod:`october.installer.jit.cache`).

Whoever can write the cache directory could otherwise rewrite a file and its record together (a ``bin/python``
link pointed at their program, the recorded facts, a JIT library), and every later stack would take it.  The key
is ``$OCTOBER_CACHE_KEY`` (hex; ``fleet`` hands its own to the nodes of a shared ``--cache-dir``, a secret the logs
mask), else the file ``$OCTOBER_KEY_FILE`` (absolute), else platformdirs' per-user data dir
(``~/.local/share/october/cache.key``), made once (32 random bytes, mode 0600); never a file inside the cache it
signs for.  A manifest is signed with HMAC-SHA256 of its canonical JSON.  Each key's entries are kept apart
(:func:`key_id` is part of an entry's key or path): several users or machines on one cache share entries only
through one key file.  Without a usable key nothing is signed or taken, and the run says why.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Mapping

KEY_BYTES = 32
KEY_ENV = "OCTOBER_CACHE_KEY"      # the key itself (hex), as the fleet hands it to each node of a shared cache


def without_key(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default this process's) without :data:`KEY_ENV`: what every command the tool starts gets (a fork's
    build backend, uv, nvcc, vLLM, a stack Python whose ``.pth`` runs code could read it and sign a forged entry);
    a caller that means to hand the key on (the fleet's node command) adds it back itself."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k != KEY_ENV}


def key_file(environ: Mapping[str, str] | None = None) -> Path:
    from platformdirs import user_data_path

    env = os.environ if environ is None else environ
    value = env.get("OCTOBER_KEY_FILE")
    return Path(value).expanduser() if value else user_data_path("october") / "cache.key"


def load_key(path: Path | None = None, *, cache: Path | None = None) -> bytes | None:
    """The key, made on first use (written whole beside it, then linked into place: a run beside this one reads
    all of it or none); None when it can be neither read nor made, or (``cache``: the cache it signs for) its file
    lies inside that cache, where whoever can write the cache could read it and sign (nothing is signed or taken
    then: :func:`key_problem` says why)."""
    return _load(path, cache)[0]


def key_problem(path: Path | None = None, *, cache: Path | None = None) -> str | None:
    """Why there is no key (for a message: what was expected, what was found), or None."""
    return _load(path, cache)[1]


def _load(path: Path | None, cache: Path | None) -> tuple[bytes | None, str | None]:
    given = os.environ.get(KEY_ENV) if path is None else None
    if given:
        try:
            key = bytes.fromhex(given)
        except ValueError:
            key = b""
        return (key, None) if len(key) == KEY_BYTES else (None, f"${KEY_ENV} is not {KEY_BYTES} bytes in hex")
    try:
        path = key_file() if path is None else path
    except (RuntimeError, KeyError) as exc:      # platformdirs: no home directory (no $HOME, no passwd entry)
        return None, f"there is no home directory to keep the key in ({exc}): set $OCTOBER_KEY_FILE"
    if not path.is_absolute():
        return None, f"$OCTOBER_KEY_FILE {path} is a relative path (each directory would have its own key): make it absolute"
    try:
        inside = cache is not None and path.resolve().is_relative_to(cache.resolve())
    except (OSError, RuntimeError) as exc:      # RuntimeError: a link loop (Python 3.11's resolve)
        return None, f"the key file {path} cannot be resolved ({exc}): point $OCTOBER_KEY_FILE at a plain file"
    if inside:
        return None, (f"the key file {path} is inside the cache {cache}: whoever can write the cache could read it "
                      "and sign entries; keep it outside ($OCTOBER_KEY_FILE)")
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        return None, f"the key file {path} cannot be read ({exc.strerror or exc}): set $OCTOBER_KEY_FILE to one you can"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        new = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            try:
                os.write(fd, secrets.token_bytes(KEY_BYTES))
            finally:
                os.close(fd)
            try:
                os.link(new, path)
            except FileExistsError:
                pass                # made by a run beside this one: theirs is the key
        finally:
            os.unlink(new)          # whatever failed (a full disk while writing): no half key left beside it
        return _read(path)
    except OSError as exc:
        return None, (f"the key file {path} cannot be made ({exc.strerror or exc}): set $OCTOBER_KEY_FILE to a path "
                      "you can write, outside the cache")


def _read(path: Path) -> tuple[bytes | None, str | None]:
    data = read_regular(path, KEY_BYTES + 1)    # a link is followed (one key file shared by a dotfile manager's link)
    mode = os.stat(path).st_mode
    if mode & 0o027:    # others may read or write it, or its group write it: they could sign entries as this user
        return None, (f"the key file {path} can be read or written by other users (mode {stat.S_IMODE(mode):04o}): "
                      "`chmod 600` it (640 to share it with your group only)")
    if len(data) != KEY_BYTES:
        return None, (f"the key file {path} is not a key ({len(data) if len(data) <= KEY_BYTES else 'more than 32'} "
                      f"byte(s), not {KEY_BYTES} random bytes): remove it if it is yours (a new one is made), or "
                      "point $OCTOBER_KEY_FILE at the key file you share")
    return data, None


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """A plain file's bytes (``limit``: at most that many), opened without waiting (a FIFO planted by whoever can
    write the cache is an OSError here, never a hang); anything but a plain file is an OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a plain file", str(path))
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read() if limit is None else fh.read(limit)
    finally:
        os.close(fd)


def shared_mode(mode: int) -> int:
    """``mode`` less what this process's umask takes away (read from /proc, never set: other threads create files):
    what a cache entry's record is made readable with, so that the users one key file is shared with can read it
    (a temporary file is made 0600, a temporary folder 0700)."""
    umask = 0o022
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            umask = next((int(ln.split()[1], 8) for ln in fh if ln.startswith("Umask:")), umask)
    except (OSError, ValueError):
        pass
    return mode & ~umask


def key_id(key: bytes) -> str:
    """A name for the key that tells nothing of it: what keeps each key's cache entries apart (another user's are
    never seen, so never taken, replaced or removed)."""
    return hashlib.sha256(b"october cache key id\0" + key).hexdigest()[:16]


def sign(doc: Mapping[str, Any], key: bytes) -> str:
    """HMAC-SHA256 of ``doc``'s canonical JSON, its ``mac`` left out."""
    body = json.dumps({k: v for k, v in doc.items() if k != "mac"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def signed(doc: Mapping[str, Any], key: bytes | None) -> bool:
    mac = doc.get("mac")
    return key is not None and isinstance(mac, str) and hmac.compare_digest(mac, sign(doc, key))
