"""Request and response bodies of the REST API (separate create and public models).

Frozen, extra fields refused, units in the names. ``tuner.client`` keeps small tolerant
copies of the answers (it must not import this module's server-side dependencies).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.engines import EXPORT_FORMAT_NAMES
from tuner.space import SLO, shape_problem

__all__ = [
    "CurrentTrial",
    "ExportFormat",
    "ExportFormatList",
    "ExportFormatPublic",
    "ExportPublic",
    "FieldError",
    "HostedReference",
    "JobCreate",
    "JobList",
    "JobPublic",
    "JobState",
    "ParetoPoint",
    "ParetoPublic",
    "Problem",
    "RoundCostTrial",
    "RoundCostVerdict",
    "SearchSpacePreset",
    "SpaceValidation",
    "TrialDetail",
    "TrialPage",
    "TrialPublic",
]

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
# The names of tuner.engines.EXPORT_FORMATS, in its order (the one list of export formats).
ExportFormat = Literal[EXPORT_FORMAT_NAMES]  # type: ignore[valid-type]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FieldError(BaseModel):
    """One refused field: where (``["body", "slo", "p99_tpot_ms"]``), why, and a kind."""

    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """Every 4xx/5xx answer, as RFC 9457 ``application/problem+json``."""

    model_config = ConfigDict(extra="allow")

    type: str = Field("about:blank", description="a URI naming the kind of problem")
    title: str = Field(description="short, the same for every problem of this type")
    status: int = Field(ge=100, le=599)
    detail: str = Field(description="what went wrong with this request, for a person")
    instance: str | None = Field(None, description="the request path it happened on")
    errors: list[FieldError] | None = Field(None, description="422: one entry per field")


class JobCreate(_Frozen):
    """Exactly one of ``preset``, ``search_space`` or ``search_space_yaml``."""

    # A request refuses NaN and infinities (answers may carry them: a metric with no value).
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    preset: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
        description="name of a file in search_spaces/ without .yaml, e.g. tiny-cpu",
    )
    search_space: dict[str, Any] | None = Field(None, description="the search space as JSON")
    search_space_yaml: str | None = Field(None, max_length=200_000)
    trials: int | None = Field(None, ge=1, le=10_000, description="overrides the space's")
    slo: SLO | None = Field(None, description="overrides the space's SLO limits it names")
    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=r"^[\x21-\x7e]+$",
        description="for older clients: send the Idempotency-Key header instead (it wins)",
        json_schema_extra={"deprecated": True},
    )

    @field_validator("search_space")
    @classmethod
    def _shape(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        # Before anything walks it recursively (the request digest, the YAML kept with the job).
        if v is not None and (why := shape_problem(v)) is not None:
            raise ValueError(why)
        return v

    @model_validator(mode="after")
    def _one_source(self) -> JobCreate:
        given = [n for n in ("preset", "search_space", "search_space_yaml") if getattr(self, n)]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of preset, search_space, search_space_yaml"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self


class CurrentTrial(_Frozen):
    number: int
    method: str
    params: dict[str, Any]
    started_at: datetime


class JobPublic(_Frozen):
    id: int
    name: str
    state: JobState
    n_trials: int
    trials_done: int
    trials_failed: int
    current_trial: CurrentTrial | None
    eta_s: float | None = Field(description="remaining trials x mean trial time so far")
    cancel_requested: bool
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    engine_launches: int
    engine_startup_s: float
    workload: str = Field(description="the workload the objectives are measured on")
    workloads: list[str] = Field(default_factory=list, description="every workload measured")
    concurrency: list[int]
    objective_concurrency: int
    slo: dict[str, float]
    objectives: list[dict[str, str]]


class JobList(_Frozen):
    items: list[JobPublic]
    total: int
    offset: int
    limit: int


class TrialPublic(_Frozen):
    number: int
    state: str
    method: str | None
    params: dict[str, Any]
    fail_reason: str | None
    fail_detail: str | None
    startup_s: float | None
    reused_from: int | None
    concurrency: int
    lossless_match_rate: float | None = Field(
        None,
        description="share (0..1) of the baseline's greedy output tokens this configuration "
        "reproduced; null for the baseline itself or when not checked",
    )
    kv_cache_tokens: int | None = Field(None, description="KV-cache capacity the engine reported")
    peak_rss_mb: float | None = Field(None, description="peak resident memory of the engine")
    metrics: dict[str, Any] = Field(description="at the job's objective concurrency")
    measurements: list[dict[str, Any]] = Field(description="every concurrency level")
    worker_id: str | None = Field(None, description="the worker that ran it")
    devices: str | None = Field(None, description="the devices it ran on (worker --devices)")
    search: dict[str, Any] | None = Field(
        None,
        description="how the search proposed it: by (start, guide: scan, guide: depth, sampler, "
        "neighbour), why, predicted (made before the launch, never a measurement: objective, "
        "value, rel_sigma, level, metrics, basis, notes) and class (proposed: what was "
        "proposed, why: why its class's member was launched instead); null for older jobs",
    )
    prediction_error_pct: float | None = Field(
        None,
        description="measured minus predicted first objective, % of the predicted value; null "
        "without a prediction or a measurement",
    )


class TrialPage(_Frozen):
    items: list[TrialPublic]
    total: int
    offset: int
    limit: int


class TrialDetail(TrialPublic):
    log_tail: str | None = Field(description="end of the engine log, when it is on this host")


class ParetoPoint(_Frozen):
    trial_number: int
    method: str
    params: dict[str, Any]
    concurrency: int
    output_tok_per_s: float
    p99_tpot_ms: float | None
    p99_ttft_ms: float | None
    p99_e2e_ms: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    feasible: bool
    violations: list[str]
    on_front: bool
    is_baseline: bool
    is_winner: bool
    speedup: float | None = Field(
        description="per-token speedup over the baseline at this concurrency (baseline mean "
        "TPOT / this one's), from the round-cost verdict; 1 for the baseline"
    )
    verdict: Literal["pays", "does not pay", "tied"] | None = Field(
        None, description="the round-cost verdict at this concurrency (null: the baseline)"
    )
    output_tok_per_s_ci95_low: float | None = Field(
        None, description="95% interval of the mean over the repeats (null: one run)"
    )
    output_tok_per_s_ci95_high: float | None = None
    p99_tpot_ms_ci95_low: float | None = None
    p99_tpot_ms_ci95_high: float | None = None
    repeats: int | None = Field(None, description="measurements behind the medians")
    confirmed: bool = Field(
        False, description="re-measured on a second engine launch; these are those numbers"
    )
    search_output_tok_per_s: float | None = Field(
        None, description="what the search measured before confirmation (confirmed points)"
    )
    noisy: bool = Field(False, description="repeats disagreed beyond max_relative_mad")
    multi_token_chunks: bool = Field(
        False,
        description="streamed chunks carried several tokens (speculation commits several per "
        "step): TPOT spreads each request's time over its tokens; ITL is per chunk",
    )
    relative_mad: float | None = None
    lossless_match_rate: float | None = Field(
        None, description="share (0..1) of the baseline's greedy tokens reproduced"
    )
    kv_cache_tokens: int | None = None
    peak_rss_mb: float | None = None


class RoundCostVerdict(_Frozen):
    """Mean time per output token of a speculative configuration against the baseline's at
    the same concurrency and workload."""

    concurrency: int
    spec_ms_per_token: float
    baseline_ms_per_token: float
    pays_off: bool = Field(description="state == 'pays'")
    margin_pct: float = Field(description="how much faster (+) or slower (-) per token")
    state: Literal["pays", "does not pay", "tied"] = Field(
        description="pays / does not pay: the 95% interval of the speedup is above / below 1; "
        "tied: it holds 1"
    )
    speedup: float = Field(description="baseline ms per token / this configuration's")
    speedup_ci95_low: float
    speedup_ci95_high: float | None = Field(
        description="null: unbounded (this point's interval of time per token reaches 0)"
    )


class RoundCostTrial(_Frozen):
    trial_number: int
    method: str
    params: dict[str, Any]
    verdicts: list[RoundCostVerdict] = Field(description="one per measured concurrency")
    crossover_concurrency: int | None = Field(
        description="lowest level from which it pays at no higher level measured; null when "
        "it pays at the highest level (or nothing was compared)"
    )


class HostedReference(_Frozen):
    """A hosted endpoint measured in the job with the same workload and load generator."""

    name: str
    base_url: str
    model: str
    output_tok_per_s: float | None
    p99_tpot_ms: float | None
    p99_ttft_ms: float | None
    speedup_vs_baseline: float | None
    feasible: bool
    violations: list[str]
    error: str | None = None


class WinnerExport(_Frozen):
    name: ExportFormat
    available: bool = Field(description="the winner has a form in this format")
    reason: str | None = Field(None, description="why not, when it has none")


class ParetoPublic(_Frozen):
    job_id: int
    workload: str
    concurrency: int = Field(description="the level the front and the winner are chosen at")
    levels: list[int]
    slo: dict[str, float]
    objectives: list[dict[str, str]]
    points: list[ParetoPoint]
    baseline_trial: int | None
    winner_trial: int | None
    round_cost: list[RoundCostTrial] = Field(
        default_factory=list,
        description="round-cost verdict of every speculative trial at every concurrency",
    )
    why: list[str] = Field(
        default_factory=list,
        description="why the winner won, in sentences: acceptance, time per committed token "
        "against the baseline, where it stops paying",
    )
    replay_surface: str | None = Field(
        None,
        description="set when the job replayed a recorded surface (search benchmarking): "
        "no number here was measured by this job",
    )
    replay_simulated: bool = Field(
        False, description="that surface was written by a simulator: no number was measured"
    )
    target: str = Field("", description="the served checkpoint every point here shares")
    other_targets: list[str] = Field(
        default_factory=list,
        description="other checkpoints this job served (an MTP model): each is reported "
        "apart, against its own baseline (query target=...)",
    )
    references: list[HostedReference] = Field(
        default_factory=list,
        description="hosted endpoints measured as reference rows (never candidates)",
    )
    winner_exports: list[WinnerExport] = Field(
        default_factory=list,
        description="each export format (GET /api/export-formats order) and whether the "
        "winner has a form in it: a page asks only for those it has",
    )


class ExportFormatPublic(_Frozen):
    name: ExportFormat
    label: str = Field(description="what the UI titles it with")
    engine: str = Field(description="the engine that takes it")
    description: str


class ExportFormatList(_Frozen):
    formats: list[ExportFormatPublic] = Field(description="in tuner.engines.EXPORT_FORMATS order")


class ExportPublic(_Frozen):
    format: ExportFormat
    text: str
    trial_number: int
    concurrency: int
    slo: dict[str, float]


class SearchSpacePreset(_Frozen):
    name: str
    file: str
    yaml: str
    trials: int | None
    methods: list[str]
    slo: dict[str, float]
    error: str | None = Field(description="why the preset does not validate, if it does not")


class SpaceValidation(_Frozen):
    name: str
    n_trials: int
    methods: list[str]
    slo: dict[str, float]
    concurrency: list[int]
