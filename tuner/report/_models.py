"""The answer models of a job's report (``GET /api/jobs/{id}/pareto``, ``spectune report
--json``): frozen, extra fields refused, units in the names. ``tuner.api.schemas`` re-exports
them with the API's other models; the OpenAPI document names them as here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tuner.engines import EXPORT_FORMAT_NAMES
from tuner.metrics import GREEDY

__all__ = [
    "ExportFormat",
    "FrozenModel",
    "HostedReference",
    "LaunchSpreadPublic",
    "ParetoPoint",
    "ParetoPublic",
    "RoundCostTrial",
    "RoundCostVerdict",
    "WinnerExport",
]

# The names of tuner.engines.EXPORT_FORMATS, in its order (the one list of export formats).
ExportFormat = Literal[EXPORT_FORMAT_NAMES]  # type: ignore[valid-type]


class FrozenModel(BaseModel):
    """An answer: immutable once built, and a field it does not declare is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ParetoPoint(FrozenModel):
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
        None,
        description="95% interval (interval_kind says over what; null: one run and no "
        "between-launch spread)",
    )
    output_tok_per_s_ci95_high: float | None = None
    p99_tpot_ms_ci95_low: float | None = None
    p99_tpot_ms_ci95_high: float | None = None
    interval_kind: Literal["between launches", "within one launch"] | None = Field(
        None,
        description="between launches: the geometric mean of this point's launches with the "
        "job's pooled between-launch spread (a point launched once carries that spread); "
        "within one launch: the job launched nothing twice, so only repeats are covered",
    )
    launches: int = Field(1, description="undisturbed engine launches behind the numbers")
    repeats: int | None = Field(None, description="measurements behind the latest launch")
    confirmed: bool = Field(
        False,
        description="launched again at the end of the job; the numbers combine its launches",
    )
    search_output_tok_per_s: float | None = Field(
        None, description="what the search measured before confirmation (confirmed points)"
    )
    noisy: bool = Field(
        False, description="repeats disagreed beyond max_relative_mad in every launch"
    )
    warmup_capped: bool = Field(
        False, description="the steady-state warm-up hit its cap before numbers settled"
    )
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
    mean_ttft_ms: float | None = None
    mean_e2e_ms: float | None = None
    mean_queue_ms: float | None = Field(
        None,
        description="mean time requests waited in the engine's queue before running, over "
        "the measured windows (vLLM's request_queue_time histogram; null: not exposed)",
    )
    running_batch: int | None = Field(
        None,
        description="min(concurrency, max_num_seqs): requests the engine ran at once; below "
        "the concurrency the rest queued",
    )
    queued: bool = Field(
        False,
        description="requests queued in the engine: max_num_seqs below the concurrency, or "
        "a mean queue wait of 1 ms or more (vLLM reports ~0.03 ms when nothing queues)",
    )
    baseline_trial: int | None = Field(
        None,
        description="the baseline this point's speedup and verdict are against: the same "
        "target without speculation at the same batch class when one was measured",
    )


class RoundCostVerdict(FrozenModel):
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
    interval_kind: Literal["between launches", "within one launch"] = Field(
        "within one launch",
        description="whether the speedup interval covers the spread between launches",
    )
    same_running_batch: bool | None = Field(
        None,
        description="the configuration and its baseline ran the same batch at this level "
        "(min(concurrency, max_num_seqs)); false only when its batch class has no baseline "
        "of its own and the job's main one was used",
    )


class LaunchSpreadPublic(FrozenModel):
    """The job's between-launch spread of one metric at one level, with the machine's
    history pooled in (``tuner.launch_history``)."""

    concurrency: int
    metric: str
    cv: float = Field(description="between-launch coefficient of variation (log-normal)")
    log_sd: float = Field(description="pooled standard deviation of log values")
    df: int = Field(
        description="degrees of freedom every interval reads: own_df + history_df (own_df: "
        "sum of (launches - 1) over this job's configurations launched at least twice)"
    )
    configurations: int = Field(description="this job's configurations launched at least twice")
    own_df: int | None = Field(None, description="this job's own degrees of freedom")
    own_cv: float | None = Field(
        None, description="this job's own spread (null: it launched nothing twice)"
    )
    history_jobs: int = Field(
        0, description="earlier succeeded jobs on this hardware, engine kind and target pooled in"
    )
    history_df: int = Field(
        0, description="degrees of freedom the history adds: min(its own, the cap of 20)"
    )
    history_available_df: int | None = Field(
        None, description="degrees of freedom the history held, uncapped (null: no history)"
    )
    history_cv: float | None = Field(None, description="the history's own spread")
    history_pooled: bool = Field(
        False,
        description="the history is pooled in; false with history_cv set: this job's spread "
        "is larger (F-test at 0.05), so the host is in another state and it is not",
    )
    history_p_value: float | None = Field(
        None, description="the F-test's p-value of this job's spread against the history's"
    )
    source: str | None = Field(
        None,
        description='where df comes from, e.g. "df 22: this job 2 + 20 from 3 earlier '
        'jobs on this machine" (null: this job alone, no history)',
    )


class RoundCostTrial(FrozenModel):
    trial_number: int
    method: str
    params: dict[str, Any]
    verdicts: list[RoundCostVerdict] = Field(description="one per measured concurrency")
    crossover_concurrency: int | None = Field(
        description="lowest level from which it pays at no higher level measured; null when "
        "it pays at the highest level (or nothing was compared)"
    )
    baseline_trial: int | None = Field(
        None,
        description="the baseline every verdict here is against: its batch class's, else the "
        "job's main baseline",
    )


class HostedReference(FrozenModel):
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


class WinnerExport(FrozenModel):
    name: ExportFormat
    available: bool = Field(description="the winner has a form in this format")
    reason: str | None = Field(None, description="why not, when it has none")


class ParetoPublic(FrozenModel):
    job_id: int
    workload: str
    sampling: dict[str, Any] = Field(
        default_factory=lambda: dict(GREEDY),
        description="the workload's sampling settings, sent on every request it measured "
        '({"temperature": 0.0}: greedy)',
    )
    endpoint: Literal["completions", "chat"] = Field(
        "completions",
        description="where the workload's requests went: completions (raw text) or chat "
        "(through the model's chat template)",
    )
    prompt_tokens_mean: float | None = Field(
        None,
        description="prompt tokens a request as the engine counted them (template and earlier "
        "turns included), at the baseline's point",
    )
    concurrency: int = Field(description="the level the front and the winner are chosen at")
    levels: list[int]
    slo: dict[str, float]
    objectives: list[dict[str, str]]
    points: list[ParetoPoint]
    baseline_trial: int | None
    baseline_trials: list[int] = Field(
        default_factory=list,
        description="every batch class's baseline (baseline_trial first): speculation at a "
        "max_num_seqs is compared with the baseline at the same running batch",
    )
    latency_decides: bool = Field(
        False,
        description="TTFT and end-to-end decide here: the SLO limits p99 TTFT or p99 "
        "end-to-end, or some point queued; front ends then show them per level",
    )
    winner_trial: int | None
    winner_confirmed: bool = Field(
        False,
        description="the winner was launched at least twice; false: unconfirmed (the "
        "confirmation budget ran out, or the job re-launches nothing)",
    )
    stop_reason: str | None = Field(
        None,
        description="why the job stopped searching, one sentence with numbers (e.g. "
        "'nothing left can win: 31 configurations priced, best optimistic output_tok_per_s "
        "88 < the winner's lower bound 95'), and how confirmation ended; None while running",
    )
    equivalent_to_winner: list[dict[str, Any]] = Field(
        default_factory=list,
        description="params of the feasible configurations the job cannot tell apart from "
        "the winner on its first objective under its launch-aware intervals",
    )
    equivalent_trials: list[int] = Field(
        default_factory=list, description="their trial numbers, in the same order"
    )
    launch_spread: list[LaunchSpreadPublic] = Field(
        default_factory=list,
        description="the job's between-launch spread per level and metric, the machine's "
        "history pooled in (empty: nothing was launched twice, here or in an earlier job on "
        "this machine; intervals are then within one launch)",
    )
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
