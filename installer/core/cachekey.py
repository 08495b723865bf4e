"""The per-user key that signs what a stack takes from a shared cache on trust (a built-stack entry's manifest).

Whoever can write the cache directory could otherwise rewrite a file and its manifest row together (a
``bin/python`` link pointed at their program, the recorded facts), and every later stack would take it.  The key
lives outside the cache (``$OCTOBER_KEY_FILE``, else platformdirs' per-user data dir: ``~/.local/share/october/
cache.key``), made once (32 random bytes, mode 0600); a manifest is signed with HMAC-SHA256 of its canonical JSON.
A cache shared by several users or machines keeps each one's entries apart (set ``$OCTOBER_KEY_FILE`` to one
key file to share them; ``fleet`` hands its own key to the nodes of a shared ``--cache-dir`` in
``$OCTOBER_CACHE_KEY``, a secret the logs mask); a user without a writable data dir signs nothing and takes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any, Mapping

KEY_BYTES = 32
KEY_ENV = "OCTOBER_CACHE_KEY"      # the key itself (hex), as the fleet hands it to each node of a shared cache


def key_file(environ: Mapping[str, str] | None = None) -> Path:
    from platformdirs import user_data_path

    env = os.environ if environ is None else environ
    value = env.get("OCTOBER_KEY_FILE")
    return Path(value).expanduser() if value else user_data_path("october") / "cache.key"


def load_key(path: Path | None = None) -> bytes | None:
    """The key, made on first use (written whole beside it, then linked into place: a run beside this one reads
    all of it or none); None when it can be neither read nor made (nothing is signed or taken then)."""
    given = os.environ.get(KEY_ENV) if path is None else None
    if given:
        try:
            key = bytes.fromhex(given)
        except ValueError:
            return None
        return key if len(key) == KEY_BYTES else None
    path = key_file() if path is None else path
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        new = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
        finally:
            os.close(fd)
        try:
            os.link(new, path)
        except FileExistsError:
            pass                    # made by a run beside this one: theirs is the key
        finally:
            os.unlink(new)
        return _read(path)
    except OSError:
        return None


def _read(path: Path) -> bytes | None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    return data if len(data) == KEY_BYTES else None


def sign(doc: Mapping[str, Any], key: bytes) -> str:
    """HMAC-SHA256 of ``doc``'s canonical JSON, its ``mac`` left out."""
    body = json.dumps({k: v for k, v in doc.items() if k != "mac"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def signed(doc: Mapping[str, Any], key: bytes | None) -> bool:
    mac = doc.get("mac")
    return key is not None and isinstance(mac, str) and hmac.compare_digest(mac, sign(doc, key))
