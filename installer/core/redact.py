"""Keep secrets (HF tokens, credentials in URLs) out of logs, receipts and locks."""

from __future__ import annotations

import os
import re
from typing import Iterable

_AUTHORITY_END = re.compile(r"[/\s]")      # what ends the user:password@host part of a URL
_URL_END = re.compile(r"[\s\"'<>`]")       # what ends a URL in text: whitespace, a quote, an angle bracket
_PARAM_START = re.compile(r"[?&#]")        # what begins a query (or fragment) parameter's name
_SECRET_VALUE_END = re.compile(r"[&#]")    # what ends a secret parameter's value ('?' may be inside it)
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{8,}\b")
_BEARER = re.compile(r"(?i)(authorization:\s*bearer\s+)\S+")
SECRET_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN", "GITHUB_TOKEN", "GH_TOKEN",
                   "OCTOBER_CACHE_KEY")
# a query parameter whose name holds one of these (any case) carries a credential: its value is masked
# ("sig" covers "signature").  They cover presigned URLs too: S3's X-Amz-Signature / -Credential /
# -Security-Token (and -SignedHeaders), GCS's X-Goog-Signature / -Credential, an Azure SAS's sig.
SECRET_PARAM_WORDS = ("token", "sig", "secret", "password", "passwd", "key", "credential", "auth", "session")
# names too short to look for inside other names, masked when the name is exactly one of them: an Azure
# SAS's signed version, expiry and permissions (with its sig, they are what the signature signs)
SECRET_PARAM_NAMES = frozenset({"sv", "se", "sp"})
MASK = "***"


def env_secrets(environ: dict[str, str] | None = None) -> list[str]:
    """Secret values present in the environment (so they can be masked wherever they appear)."""
    env = os.environ if environ is None else environ
    return [env[k] for k in SECRET_ENV_VARS if env.get(k) and len(env[k]) >= 4]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Mask URL credentials, hf_ tokens, bearer headers and any explicitly named secret."""
    for s in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(s, MASK)
    return _BEARER.sub(lambda m: m.group(1) + MASK, _HF_TOKEN.sub(MASK, redact_url(text)))


def redact_url(url: str) -> str:
    """Mask the credentials of every URL in ``url`` (or any text): the ``user:password@`` part
    (:func:`_mask_userinfo`) and the values of query or fragment parameters named as credentials
    (:func:`_mask_params`); the rest of each URL stays readable.  Each is one linear pass: a regex
    backtracks."""
    return _mask_params(_mask_userinfo(url))


def secret_param(name: str) -> bool:
    """Does a query parameter of this name carry a credential?"""
    low = name.lower()
    return low in SECRET_PARAM_NAMES or any(word in low for word in SECRET_PARAM_WORDS)


def _mask_userinfo(url: str) -> str:
    """What lies between a ``://`` and the last ``@`` before the host part ends (``/`` or whitespace)."""
    if "@" not in url:
        return url
    out: list[str] = []
    done = 0
    at = url.find("://")
    while at >= 0:
        start = at + 3
        end_match = _AUTHORITY_END.search(url, start)
        end = end_match.start() if end_match else len(url)
        cut = url.rfind("@", start, end)
        if cut > start:
            out += [url[done:start], MASK]
            done = cut
        at = url.find("://", max(end - 1, start))
    out.append(url[done:])
    return "".join(out)


def _mask_params(text: str) -> str:
    """The value of every ``name=value`` parameter of a URL's query or fragment whose name
    :func:`secret_param` names, up to the next ``&`` or ``#`` (or the URL's end: whitespace, a quote, an
    angle bracket).  A parameter begins after ``?``, ``&`` or ``#``, so one of a URL nested in another's
    query (``?next=https://h/p?token=...``) is found too.  Every search starts where the last ended."""
    out: list[str] = []
    done = 0
    at = text.find("://")
    while at >= 0:
        end_match = _URL_END.search(text, at + 3)
        end = end_match.start() if end_match else len(text)
        mark = _PARAM_START.search(text, at + 3, end)
        pos = mark.start() if mark else end
        while pos < end:                                    # text[pos] is '?', '&' or '#'
            nxt = _PARAM_START.search(text, pos + 1, end)
            stop = nxt.start() if nxt else end              # where this parameter's name=value ends
            eq = text.find("=", pos + 1, stop)
            if eq == -1 or not secret_param(text[pos + 1:eq]):
                pos = stop
                continue
            value_end = _SECRET_VALUE_END.search(text, eq + 1, end)
            pos = value_end.start() if value_end else end
            if pos > eq + 1:                                # an empty value hides nothing
                out += [text[done:eq + 1], MASK]
                done = pos
        at = text.find("://", end)
    out.append(text[done:])
    return "".join(out)
