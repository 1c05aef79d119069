"""Request and response bodies of the REST API (separate create and public models): every
model the API answers is reachable from here (the report's are defined in ``tuner.report``,
which the CLI prints too, and re-exported).

Frozen, extra fields refused, units in the names. ``tuner.client`` keeps small tolerant
copies of the answers (it must not import this module's server-side dependencies).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner import states
from tuner.explain import MIN_CONFIGS_FOR_IMPORTANCE
from tuner.report import (
    ExportFormat,
    FrozenModel,
    HostedReference,
    ParetoPoint,
    ParetoPublic,
    RoundCostTrial,
    RoundCostVerdict,
    WinnerExport,
)
from tuner.space import SLO, shape_problem

__all__ = [
    "PREDICTIONS_NOTE",
    "CurrentTrial",
    "ExportFormat",
    "ExportFormatList",
    "ExportFormatPublic",
    "ExportPublic",
    "FieldError",
    "HostedReference",
    "ImportancePublic",
    "JobCreate",
    "JobList",
    "JobPublic",
    "JobState",
    "LogTail",
    "ParamImportance",
    "ParetoPoint",
    "ParetoPublic",
    "PredictedPoint",
    "PredictionsPublic",
    "Problem",
    "RoundCostTrial",
    "RoundCostVerdict",
    "SearchSpacePreset",
    "SpaceValidation",
    "TrialDetail",
    "TrialPage",
    "TrialPublic",
    "WatchCreate",
    "WatchList",
    "WatchPublic",
    "WinnerExport",
]

# The values of tuner.states.JobState, as an inline enum in the OpenAPI document.
JobState = Literal[tuple(s.value for s in states.JobState)]  # type: ignore[valid-type]
PREDICTIONS_NOTE = "predictions of the depth model, never measurements"


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


class JobCreate(FrozenModel):
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


class CurrentTrial(FrozenModel):
    number: int
    method: str
    params: dict[str, Any]
    started_at: datetime


class JobPublic(FrozenModel):
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
    engine_launches: int = Field(description="search launches (each distinct configuration once)")
    confirm_launches: int = Field(0, description="launches made again to confirm the front")
    engine_startup_s: float
    stop_reason: str | None = Field(
        None,
        description="why the search stopped, with numbers (nothing left can win, or the trial "
        "budget), and how confirmation ended; None while the search runs",
    )
    workload: str = Field(description="the workload the objectives are measured on")
    workloads: list[str] = Field(default_factory=list, description="every workload measured")
    concurrency: list[int]
    objective_concurrency: int
    slo: dict[str, float]
    objectives: list[dict[str, str]]


class JobList(FrozenModel):
    items: list[JobPublic]
    total: int
    offset: int
    limit: int


class TrialPublic(FrozenModel):
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
        "neighbour, guide: offline, guide: batch: the baseline or the incumbent in another "
        "batch class), why, predicted (made before the launch, never a measurement: objective, "
        "value, rel_sigma, workload, concurrency, level (workload@concurrency), metrics, "
        "basis, notes), offline (acceptance priced on the baseline's outputs before the "
        "launch, or why not: unpriced), skipped (proposers the guide did not launch, and why), "
        "preflight (what pre-flight could not check before the launch and why, e.g. a hub "
        "model not in the local Hugging Face cache) and class (proposed: what was "
        "proposed, why: why its class's member was launched instead); null for older jobs",
    )
    prediction_error_pct: float | None = Field(
        None,
        description="measured minus predicted first objective, % of the predicted value; null "
        "without a prediction or a measurement",
    )
    offline_acceptance_rate: float | None = Field(
        None,
        description="acceptance rate priced before the launch on the baseline's outputs, greedy "
        "or sampled as the workload samples (offline pricing: a prediction, never a "
        "measurement); compare metrics.acceptance_rate",
    )
    offline_acceptance_rate_se: float | None = Field(
        None,
        description="standard error of offline_acceptance_rate over the baseline's sampled "
        "outputs; null for greedy traffic (a greedy price is exact on its prompts); compare "
        "metrics.acceptance_rate_se",
    )
    offline_per_position_acceptance: list[float] | None = Field(
        None, description="per-position acceptance priced before the launch (a prediction)"
    )


class TrialPage(FrozenModel):
    items: list[TrialPublic]
    total: int
    offset: int
    limit: int


class TrialDetail(TrialPublic):
    log_tail: str | None = Field(description="end of the engine log, when it is on this host")


class ExportFormatPublic(FrozenModel):
    name: ExportFormat
    label: str = Field(description="what the UI titles it with")
    engine: str = Field(description="the engine that takes it")
    description: str


class ExportFormatList(FrozenModel):
    formats: list[ExportFormatPublic] = Field(description="in tuner.engines.EXPORT_FORMATS order")


class ExportPublic(FrozenModel):
    format: ExportFormat
    text: str
    trial_number: int
    concurrency: int
    slo: dict[str, float]


class SearchSpacePreset(FrozenModel):
    name: str
    file: str
    yaml: str
    trials: int | None
    methods: list[str]
    slo: dict[str, float]
    error: str | None = Field(description="why the preset does not validate, if it does not")


class SpaceValidation(FrozenModel):
    name: str
    n_trials: int
    methods: list[str]
    slo: dict[str, float]
    concurrency: list[int]


class LogTail(BaseModel):
    job_id: int
    job_state: str
    running: bool = Field(description="a trial (or the end-of-job confirmation) runs now")
    trial_number: int | None = Field(None, description="the running trial, when one runs")
    file: str | None = Field(None, description="the log's name within the job's log folder")
    text: str = Field("", description="the end of that log, secrets redacted")
    truncated: bool = Field(False, description="the log is longer than the text answered")


class ParamImportance(BaseModel):
    param: str
    share: float = Field(description="share of the evaluator's total importance (0..1)")
    p_value: float = Field(description="one-sided permutation test against shuffled values")


class ImportancePublic(BaseModel):
    job_id: int
    metric: str = Field(description="the job's first objective")
    n_configs: int = Field(description="distinct configurations measured on the main target")
    min_configs: int = MIN_CONFIGS_FOR_IMPORTANCE
    supported: list[ParamImportance] = Field(
        description="parameters whose importance passed the permutation test, largest first"
    )
    sentence: str = Field(description="what the data says, or that it cannot tell and why")


class PredictedPoint(FrozenModel):
    """One unlaunched configuration at the job's objective point, as the model predicts it."""

    method: str
    params: dict[str, Any] = Field(description="the configuration, as a trial's params")
    level: str = Field(description="workload@concurrency the prediction is for")
    workload: str
    concurrency: int
    output_tok_per_s: float | None = Field(None, description="predicted, not measured")
    p99_tpot_ms: float | None = Field(None, description="predicted, not measured")
    mean_tpot_ms: float | None = Field(None, description="predicted, not measured")
    mean_acceptance_length: float | None = Field(None, description="predicted, not measured")
    metrics: dict[str, Any] = Field(description="every predicted metric, by name")
    rel_sigma: float = Field(
        description="relative half-width of the prediction's band (0.05: +/-5%)"
    )
    basis: list[int] = Field(description="the measured trials it was computed from")
    notes: list[str] = Field(description="how it was computed, in sentences")


class PredictionsPublic(FrozenModel):
    job_id: int
    kind: Literal["predicted"] = Field("predicted", description="always: nothing here measured")
    note: str = PREDICTIONS_NOTE
    points: list[PredictedPoint] = Field(
        description="every unlaunched depth of each proposer launched at least once; empty "
        "when the job's search is not guided or no proposer was launched yet"
    )


class WatchCreate(FrozenModel):
    """A deployed vLLM server to watch against the job that chose its configuration."""

    url: str = Field(max_length=2000, description="the server's base URL, http(s)://HOST:PORT")
    job_id: int = Field(ge=1, description="the job whose winner the server should run")
    interval_s: float = Field(
        60.0, ge=5, le=86_400, allow_inf_nan=False, description="window length in seconds"
    )


class WatchPublic(FrozenModel):
    """A watch and its latest window (``last``: the same document as ``spectune watch
    --json``; its ``predictions`` are job N's predictions, never measurements)."""

    id: int
    job_id: int
    url: str
    interval_s: float
    created_at: datetime
    checked_at: datetime | None = Field(description="when its latest window closed")
    verdict: str | None = Field(description="latest verdict; null before the first window")
    error: str | None = Field(description="why the latest window could not be read")
    last: dict[str, Any] | None = Field(description="the latest window's answer")


class WatchList(FrozenModel):
    watches: list[WatchPublic]
