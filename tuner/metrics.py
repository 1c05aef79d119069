"""Measurement math: latency percentiles, goodput, and speculative-decoding acceptance.

Engine-neutral: each engine's probe (``tuner.engines``) reads its own counters; the math on
them is here. Acceptance from counters read before and after a measurement: acceptance rate
= d(accepted) / d(draft tokens); mean acceptance length = 1 + d(accepted) / d(drafts) (the
bonus token counts); per-position rate = d(accepted at i) / d(drafts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, computed_field

__all__ = [
    "GREEDY",
    "LoadError",
    "Measurement",
    "RequestResult",
    "SpecCounters",
    "SpecStats",
    "WindowReading",
    "acceptance_rate_se",
    "histogram_mean_ms",
    "spec_delta",
    "summarize",
]


# How a request states greedy decoding, and how a measurement stores greedy sampling (points
# stored before sampling existed were all greedy and read as this). Copy before changing.
GREEDY: dict[str, Any] = {"temperature": 0.0}


class LoadError(RuntimeError):
    """The measurement could not be made (server unreachable, metrics unreadable)."""


@dataclass
class RequestResult:
    """One streamed request as the client saw it (seconds)."""

    ok: bool
    output_tokens: int = 0
    prompt_tokens: int = 0
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    error: str = ""
    text: str = ""
    chunks: int = 0  # streamed chunks that carried a choice (vLLM's benchmark counts these)
    empty_chunks: int = 0  # of those, chunks whose text was empty

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first; None for a single-token answer."""
        if self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: tuple[float, ...] = ()
    present: bool = False


@dataclass(frozen=True)
class SpecStats:
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position_acceptance: list[float]


@dataclass
class WindowReading:
    """What the engine itself reported about one measured window, filled by its probe when
    the window closes: acceptance (None without speculation or counters) and the mean time
    requests waited in its queue and spent in prefill (ms; None when not exposed)."""

    spec: SpecStats | None = None
    mean_queue_ms: float | None = None
    mean_prefill_ms: float | None = None


def histogram_mean_ms(
    before: tuple[float, float] | None, after: tuple[float, float] | None
) -> float | None:
    """Mean of an engine's time histogram (queue wait, prefill) over a window, in ms, from
    its (sum seconds, count) before and after."""
    if before is None or after is None:
        return None
    n = after[1] - before[1]
    return (after[0] - before[0]) / n * 1000.0 if n > 0 else None


def spec_delta(before: SpecCounters, after: SpecCounters) -> SpecStats | None:
    """Acceptance over the window between two scrapes; None when speculation is off."""
    if not after.present:
        return None
    d_drafts = after.drafts - before.drafts
    d_tokens = after.draft_tokens - before.draft_tokens
    d_acc = after.accepted - before.accepted
    if d_drafts < 0 or d_tokens < 0 or d_acc < 0:
        raise ValueError("spec-decode counters went backwards: engine restarted mid-measurement")
    n = max(len(before.per_pos), len(after.per_pos))
    b = list(before.per_pos) + [0.0] * (n - len(before.per_pos))
    a = list(after.per_pos) + [0.0] * (n - len(after.per_pos))
    per_pos = [(a[i] - b[i]) / d_drafts if d_drafts > 0 else 0.0 for i in range(n)]
    return SpecStats(
        num_drafts=int(d_drafts),
        num_draft_tokens=int(d_tokens),
        num_accepted_tokens=int(d_acc),
        acceptance_rate=(d_acc / d_tokens) if d_tokens > 0 else None,
        mean_acceptance_length=(1.0 + d_acc / d_drafts) if d_drafts > 0 else None,
        per_position_acceptance=per_pos,
    )


class Measurement(BaseModel):
    """One measured point: an engine configuration under one load level and workload.

    Units are in the names; latency fields are over successful requests only.
    """

    model_config = ConfigDict(frozen=True)

    workload: str
    concurrency: int
    endpoint: Literal["completions", "chat"] = Field(
        "completions",
        description="completions: raw text to /v1/completions; chat: /v1/chat/completions "
        "through the model's chat template (points stored before it existed were raw)",
    )
    num_requests: int
    num_ok: int
    num_failed: int
    duration_s: float
    output_tokens: int
    output_tok_per_s: float
    requests_per_s: float
    goodput_req_per_s: float
    mean_ttft_ms: float | None
    p50_ttft_ms: float | None
    p90_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    p50_tpot_ms: float | None
    p90_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_itl_ms: float | None
    p50_itl_ms: float | None
    p90_itl_ms: float | None
    p99_itl_ms: float | None
    mean_e2e_ms: float | None
    p50_e2e_ms: float | None
    p90_e2e_ms: float | None
    p99_e2e_ms: float | None
    mean_queue_ms: float | None = None
    mean_prefill_ms: float | None = Field(
        None,
        description="Mean prefill time by the engine's own clock (scheduled to first token), "
        "ms: the part of a request speculation does not shorten, read apart from TTFT",
    )
    prompt_tokens_mean: float | None = Field(
        None,
        description="Mean prompt tokens per successful request as the engine counted them "
        "(its usage): with chat, the template's tokens and earlier turns included",
    )
    request_rate_per_s: float | None = None
    stream_chunks: int = 0  # streamed chunks with a choice, over every request
    empty_text_chunks: int = 0  # of those, chunks with empty text (tokens that print nothing)
    tokens_per_chunk: float | None = None
    multi_token_chunks: bool = False  # some chunk carried several tokens: ITL is per chunk
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position_acceptance: list[float] = []
    num_drafts: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    errors: list[str] = []
    # Per-request values of the successful requests, so distributions can be drawn later.
    ttft_ms_values: list[float] = []
    tpot_ms_values: list[float] = []
    e2e_ms_values: list[float] = []

    @computed_field(
        description="Standard error of acceptance_rate from the engine's own counters, as if "
        "its drafted rounds were independent (rounds of one request are not: a lower bound); "
        "null without speculation"
    )
    def acceptance_rate_se(self) -> float | None:
        return acceptance_rate_se(
            self.per_position_acceptance, self.num_drafts, self.num_draft_tokens
        )


def acceptance_rate_se(
    per_position: Sequence[float], num_drafts: int | None, num_draft_tokens: int | None
) -> float | None:
    """The sampling error of a measured acceptance rate. A round accepts L tokens, and
    position j counts only when positions 1..j did, so E[L] = sum p_j and
    E[L^2] = sum (2j - 1) p_j (j from 1): the per-position counters give Var(L) exactly;
    the rate's error is sqrt(Var(L) / rounds) over the mean tokens drafted a round."""
    if not per_position or not num_drafts or not num_draft_tokens:
        return None
    mean = sum(per_position)
    second = sum((2 * j + 1) * p for j, p in enumerate(per_position))
    var = max(0.0, second - mean * mean)
    return (var / num_drafts) ** 0.5 / (num_draft_tokens / num_drafts)


def _pct(values_s: Sequence[float]) -> dict[str, float | None]:
    if len(values_s) == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    ms = np.asarray(values_s, dtype=float) * 1000.0
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"mean": float(ms.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def _meets(r: RequestResult, slo: dict[str, float]) -> bool:
    """Per-request SLO check (as vLLM's goodput): each limit applies to this request's value."""
    checks = {
        "p99_ttft_ms": r.ttft_s * 1000.0,
        "p99_e2e_ms": r.e2e_s * 1000.0,
        "p99_tpot_ms": (r.tpot_s or 0.0) * 1000.0,
    }
    return all(checks[k] <= v for k, v in slo.items() if k in checks)


def summarize(
    results: Sequence[RequestResult],
    *,
    duration_s: float,
    workload: str,
    concurrency: int,
    slo: dict[str, float] | None = None,
    spec: SpecStats | None = None,
    mean_queue_ms: float | None = None,
    request_rate_per_s: float | None = None,
    mean_prefill_ms: float | None = None,
    endpoint: Literal["completions", "chat"] = "completions",
) -> Measurement:
    if duration_s <= 0:
        raise ValueError("duration_s must be positive")
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    tpots = [t for r in ok if (t := r.tpot_s) is not None]
    itls = [x for r in ok for x in r.itl_s]
    good = sum(1 for r in ok if _meets(r, slo or {}))
    fields: dict = {}
    for name, vals in (
        ("ttft", [r.ttft_s for r in ok]),
        ("tpot", tpots),
        ("itl", itls),
        ("e2e", [r.e2e_s for r in ok]),
    ):
        for stat, v in _pct(vals).items():
            fields[f"{stat}_{name}_ms"] = v
    errors = sorted({r.error for r in failed})[:5]
    chunks = sum(r.chunks for r in ok)
    extra: dict = {
        "stream_chunks": chunks,
        "empty_text_chunks": sum(r.empty_chunks for r in ok),
        "tokens_per_chunk": round(out_tokens / chunks, 3) if chunks else None,
        # ITL is per chunk, as vLLM's benchmark counts it: when chunks carry several tokens
        # (speculation commits several per step; some servers batch), ITL is not per token.
        "multi_token_chunks": bool(chunks) and out_tokens > chunks,
    }
    if spec is not None:
        extra |= {
            "acceptance_rate": spec.acceptance_rate,
            "mean_acceptance_length": spec.mean_acceptance_length,
            "per_position_acceptance": spec.per_position_acceptance,
            "num_drafts": spec.num_drafts,
            "num_draft_tokens": spec.num_draft_tokens,
            "num_accepted_tokens": spec.num_accepted_tokens,
        }
    return Measurement(
        workload=workload,
        concurrency=concurrency,
        num_requests=len(results),
        num_ok=len(ok),
        num_failed=len(failed),
        duration_s=duration_s,
        output_tokens=out_tokens,
        output_tok_per_s=out_tokens / duration_s,
        requests_per_s=len(ok) / duration_s,
        goodput_req_per_s=good / duration_s,
        errors=errors,
        mean_queue_ms=mean_queue_ms,
        mean_prefill_ms=mean_prefill_ms,
        request_rate_per_s=request_rate_per_s,
        endpoint=endpoint,
        prompt_tokens_mean=(sum(r.prompt_tokens for r in ok) / len(ok)) if ok else None,
        ttft_ms_values=[round(r.ttft_s * 1000.0, 3) for r in ok],
        tpot_ms_values=[round(t * 1000.0, 3) for t in tpots],
        e2e_ms_values=[round(r.e2e_s * 1000.0, 3) for r in ok],
        **fields,
        **extra,
    )
