"""Keep secrets (HF tokens, credentials in URLs) out of logs, receipts and locks."""

from __future__ import annotations

import os
import re
from typing import Iterable

_URL_CREDS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<creds>[^/@\s:]+(?::[^/@\s]*)?)@")
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
    text = _URL_CREDS.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    text = _HF_TOKEN.sub(MASK, text)
    text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    return text


def redact_url(url: str) -> str:
    return _URL_CREDS.sub(lambda m: f"{m.group('scheme')}{MASK}@", url)
