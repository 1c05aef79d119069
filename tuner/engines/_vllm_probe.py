"""What vLLM's server tells us: spec-decode counters and queue time from ``/metrics``, the
prefix-cache reset (dev mode), greedy token ids and the KV capacity in its start log.

Acceptance comes from vLLM's counters, read before and after a measured window (the math is
``tuner.metrics.spec_delta``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, ClassVar

from prometheus_client.parser import text_string_to_metric_families

from tuner.engines._probe import EngineProbe, fetch_metrics_text
from tuner.metrics import SpecCounters, WindowReading, histogram_mean_ms, spec_delta

__all__ = [
    "PER_POSITION",
    "VLLMProbe",
    "parse_kv_cache_tokens",
    "parse_prefill_time",
    "parse_queue_time",
    "parse_spec_counters",
]

_PREFIX = "vllm:spec_decode_"
# Accepted tokens at each draft position (label ``position``): also read by ``_vllm_watch``.
PER_POSITION = _PREFIX + "num_accepted_tokens_per_pos"
_QUEUE_TIME = "vllm:request_queue_time_seconds"
# The engine core's own prefill time (first token minus scheduled, engine timestamps): what a
# request spends before decoding, read apart from the stream, whose first chunk can arrive
# late when the server's front end is starved of CPU (then TTFT holds decode time too).
_PREFILL_TIME = "vllm:request_prefill_time_seconds"
_KV_RE = re.compile(r"(?:CPU|GPU) KV cache size: ([\d,]+) tokens")


def parse_spec_counters(text: str) -> SpecCounters:
    """Sum vLLM's spec-decode counters over all label sets (one per engine) in /metrics text."""
    drafts = draft_tokens = accepted = 0.0
    per_pos: dict[int, float] = {}
    present = False
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(_PREFIX):
            continue
        for s in fam.samples:
            if not s.name.endswith("_total"):
                continue  # skip *_created timestamps
            present = True
            base = s.name.removesuffix("_total")
            if base == _PREFIX + "num_drafts":
                drafts += s.value
            elif base == _PREFIX + "num_draft_tokens":
                draft_tokens += s.value
            elif base == _PREFIX + "num_accepted_tokens":
                accepted += s.value
            elif base == PER_POSITION:
                pos = int(s.labels.get("position", "0"))
                per_pos[pos] = per_pos.get(pos, 0.0) + s.value
    ordered = tuple(per_pos[i] for i in sorted(per_pos))
    return SpecCounters(drafts, draft_tokens, accepted, ordered, present)


def _histogram(text: str, name: str) -> tuple[float, float] | None:
    """(sum, count) of one histogram over all label sets, if exposed."""
    total = count = 0.0
    seen = False
    for fam in text_string_to_metric_families(text):
        if fam.name != name:
            continue
        for s in fam.samples:
            if s.name.endswith("_sum"):
                total += s.value
                seen = True
            elif s.name.endswith("_count"):
                count += s.value
    return (total, count) if seen else None


def parse_queue_time(text: str) -> tuple[float, float] | None:
    """(sum seconds, count) of vLLM's ``request_queue_time_seconds`` histogram, if exposed."""
    return _histogram(text, _QUEUE_TIME)


def parse_prefill_time(text: str) -> tuple[float, float] | None:
    """(sum seconds, count) of vLLM's ``request_prefill_time_seconds``, if exposed."""
    return _histogram(text, _PREFILL_TIME)


def parse_kv_cache_tokens(log_text: str) -> int | None:
    """The KV-cache capacity vLLM reported at start (the last such line)."""
    m = _KV_RE.findall(log_text)
    return int(m[-1].replace(",", "")) if m else None


class VLLMProbe(EngineProbe):
    """vLLM's OpenAI server. The prefix-cache reset needs ``VLLM_SERVER_DEV_MODE=1``
    (``build_env`` sets it)."""

    kind: ClassVar[str] = "vllm"
    reset_path: ClassVar[str | None] = "/reset_prefix_cache"
    greedy_path: ClassVar[str | None] = "/v1/completions"
    chat_path: ClassVar[str | None] = "/v1/chat/completions"

    @asynccontextmanager
    async def window(self, base_url: str) -> AsyncIterator[WindowReading]:
        """Counters read before and after the window; their deltas are its acceptance,
        mean queue time and mean prefill time. An unreadable ``/metrics`` raises LoadError."""
        reading = WindowReading()
        text = await fetch_metrics_text(base_url)
        before, q0, p0 = (
            parse_spec_counters(text),
            parse_queue_time(text),
            parse_prefill_time(text),
        )
        yield reading
        text = await fetch_metrics_text(base_url)
        after, q1, p1 = parse_spec_counters(text), parse_queue_time(text), parse_prefill_time(text)
        reading.spec = spec_delta(before, after)
        reading.mean_queue_ms = histogram_mean_ms(q0, q1)
        reading.mean_prefill_ms = histogram_mean_ms(p0, p1)

    def _ids_body(
        self,
        model: str,
        prompt: str | list[int],
        max_tokens: int,
        sampling: dict[str, Any],
        n: int,
        seed: int,
    ) -> dict[str, Any]:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens}
        return body | self._sampled(sampling, n, seed)

    def _chat_body(
        self,
        model: str,
        messages: list[dict[str, str]],
        max_tokens: int,
        sampling: dict[str, Any],
        n: int,
        seed: int,
    ) -> dict[str, Any]:
        body = {"model": model, "messages": messages, "max_completion_tokens": max_tokens}
        return body | self._sampled(sampling, n, seed)

    @staticmethod
    def _sampled(sampling: dict[str, Any], n: int, seed: int) -> dict[str, Any]:
        out = {**sampling, "ignore_eos": True, "return_token_ids": True}
        if n > 1 or sampling.get("temperature"):
            out |= {"n": n, "seed": seed}  # vLLM seeds sample i with seed + i
        return out

    def _ids_of(self, answer: Any) -> list[Any]:
        choices = sorted(answer["choices"], key=lambda c: c.get("index", 0))
        return [c["token_ids"] for c in choices]

    def _prompt_ids_of(self, answer: Any) -> list[int] | None:
        """Completions answer them in the choice; chat at the top (the templated prompt)."""
        choices = answer.get("choices") or []
        ids = answer.get("prompt_token_ids")
        if ids is None and len(choices) == 1:
            ids = choices[0].get("prompt_token_ids")
        return list(ids) if ids else None

    def _text_of(self, answer: Any) -> str | None:
        choices = answer.get("choices") or []
        message = choices[0].get("message") if len(choices) == 1 else None
        return message.get("content") if isinstance(message, dict) else None

    def kv_cache_tokens(self, log_text: str) -> int | None:
        return parse_kv_cache_tokens(log_text)
