"""Keep secrets (HF tokens, credentials in URLs) out of logs, receipts and locks."""

from __future__ import annotations

import os
import re
from typing import Iterable

_AUTHORITY_END = re.compile(r"[/\s]")      # what ends the user:password@host part of a URL
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{8,}\b")
_BEARER = re.compile(r"(?i)(authorization:\s*bearer\s+)\S+")
SECRET_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN", "GITHUB_TOKEN", "GH_TOKEN")
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
    """Mask the credentials of every URL in ``url`` (or any text): what lies between a ``://`` and the
    last ``@`` before the host part ends (``/`` or whitespace).  One linear pass: a regex backtracks."""
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
