"""Secrets taken out of engine logs before the API serves them.

An engine log can carry what the engine or a hosted client printed: an ``Authorization``
header, an API key on a command line, a provider's ``sk-...`` key, one of our own ``spt_``
tokens. The log on disk belongs to the operator; what the API serves goes to any token holder,
so every log text it answers (``fail_detail``, ``log_tail``) goes through ``scrub`` first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from tuner.api.settings import ServiceSettings
from tuner.storage import TOKEN_PREFIX

__all__ = ["REDACTED", "scrub", "scrub_for"]

REDACTED = "[REDACTED]"
_KEEP_PREFIX = [
    # "Authorization: Bearer x", "authorization=x", "'Authorization': 'x'"
    re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?(?:bearer\s+|basic\s+)?)[^\s'\",]+"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{6,}"),
    # --api-key x, --api-key=x, api_key: x, "api_key": "x", x-api-key: x
    re.compile(r"(?i)((?:--|\b)(?:x-)?api[_-]?key['\"]?(?:\s*[:=]\s*|\s+)['\"]?)[^\s'\",]+"),
    re.compile(r"(?i)(\b(?:hf|hugging_?face)_?token['\"]?\s*[:=]\s*['\"]?)[^\s'\",]+"),
]
_WHOLE = [
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),  # OpenAI-style keys (sk-..., sk-proj-...)
    re.compile(rf"\b{TOKEN_PREFIX}[A-Za-z0-9_-]{{16,}}"),  # SpecTune's own tokens
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),  # Hugging Face tokens
]
# A configured key shorter than this is not looked for (it would redact ordinary words).
MIN_SECRET_CHARS = 8


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret value and every secret-shaped string redacted."""
    for value in sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    for rx in _KEEP_PREFIX:
        text = rx.sub(lambda m: m.group(1) + REDACTED, text)
    for rx in _WHOLE:
        text = rx.sub(REDACTED, text)
    return text


def scrub_for(settings: ServiceSettings, text: str | None) -> str | None:
    """Scrub with the values of the service's configured hosted key variables as well."""
    if text is None:
        return None
    values = [os.environ.get(name, "") for name in settings.hosted_api_key_envs]
    return scrub(text, values)
