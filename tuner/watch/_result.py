"""What one watch window answers: frozen models with units in their names.

Measured (from the server's own counters and gauges over the window): the acceptance
fields, ``num_drafts``, ``live_concurrency``. Predicted (from job N's model, never
measured): every entry of ``predictions`` and ``predicted_speedup``; each says so in
``kind`` and ``source``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CANNOT_TELL",
    "STILL_PAYS",
    "SWITCH",
    "TURN_OFF",
    "VERDICT_CODES",
    "DepthPrediction",
    "JobAcceptance",
    "WatchResult",
]

CANNOT_TELL = "cannot tell yet"
STILL_PAYS = "still pays"
SWITCH = "switch to k="  # followed by the depth
TURN_OFF = "turn speculation off"
# The verdict as a number for SpecTune's own /metrics (spectune_watch_verdict): an alert
# rule compares it; 0 is also what a watch that could not read its server reports.
VERDICT_CODES = {CANNOT_TELL: 0, STILL_PAYS: 1, SWITCH: 2, TURN_OFF: 3}


class DepthPrediction(BaseModel):
    """Job N's prediction for one depth at the live acceptance and concurrency."""

    model_config = ConfigDict(frozen=True)

    depth: int = Field(description="num_speculative_tokens; 0 is no speculation")
    kind: Literal["predicted"] = "predicted"
    source: str = Field(description="which job's model, at which measured concurrency")
    output_tok_per_s: float | None
    output_tok_per_s_low: float | None
    output_tok_per_s_high: float | None
    mean_tpot_ms: float | None
    mean_tpot_ms_low: float | None
    mean_tpot_ms_high: float | None
    p99_tpot_ms: float | None
    mean_acceptance_length: float = Field(description="expected tokens a step commits, tau(k)")
    band_rel: float = Field(description="relative half-width of the ~95 % band")
    speedup_vs_no_spec: float | None = Field(
        description="the job's objective at this depth over no speculation's (>1: better)"
    )
    notes: list[str] = []


class JobAcceptance(BaseModel):
    """What job N measured for the winner's proposer at the chosen concurrency."""

    model_config = ConfigDict(frozen=True)

    trial: int
    concurrency: int
    per_position_acceptance: list[float]
    mean_acceptance_length: float = Field(description="at the server's depth")


class WatchResult(BaseModel):
    """One window of one server against job N."""

    model_config = ConfigDict(frozen=True)

    job_id: int
    url: str
    window_s: float = Field(description="seconds between the first and last scrape")
    verdict: str
    verdict_code: int = Field(description="0 cannot tell yet, 1 still pays, 2 switch, 3 off")
    reason: str
    recommended_depth: int | None = Field(description="best predicted depth (0: none)")
    server_depth: int = Field(description="per-position counters the server keeps")
    num_drafts: int | None = Field(description="drafts in the window (measured)")
    num_draft_tokens: int | None
    num_accepted_tokens: int | None
    acceptance_rate: float | None
    per_position_acceptance: list[float]
    mean_acceptance_length: float | None
    live_concurrency: float | None = Field(description="mean running requests (measured)")
    live_waiting: float | None = Field(description="mean waiting requests (measured)")
    model_concurrency: int | None = Field(description="the job's nearest measured level")
    job_acceptance: JobAcceptance | None
    predictions: list[DepthPrediction]
    predicted_speedup: float | None = Field(
        description="predicted: the server's depth over no speculation, job N's model"
    )
    objective: str
    config_differences: list[str]
    not_compared: list[str]
    notes: list[str]
    min_drafts: int
