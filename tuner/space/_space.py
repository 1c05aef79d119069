"""The rest of a search space: workloads, measurement protocol, SLO, objectives, and the
``SearchSpace`` that holds them with the engine (``_engine``) and the candidates
(``_methods``).

Why pydantic: every field is validated with its path, so a bad file is refused before any
engine time is spent, with a message like ``methods.ngram.prompt_lookup_max: ...``.
Relative paths (models, drafts, workload files) resolve against the YAML file's folder, so a
preset works from any working directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from tuner.hub import resolve_model
from tuner.space._batch import objective_max_num_seqs
from tuner.space._engine import EngineSpec, HostedEndpoint
from tuner.space._methods import METHOD_NAMES, Methods, StartPoint, StrictModel
from tuner.space._sampling import SamplingSpec
from tuner.space._workload import WorkloadSpec

__all__ = [
    "METRIC_DIRECTIONS",
    "SLO",
    "EngineSpec",
    "HostedEndpoint",
    "LosslessSpec",
    "MeasurementSpec",
    "Objective",
    "SamplingSpec",
    "SearchSpace",
    "WorkloadSpec",
]

# Metrics an objective may name, with the direction that is "better".
METRIC_DIRECTIONS: dict[str, Literal["maximize", "minimize"]] = {
    "output_tok_per_s": "maximize",
    "requests_per_s": "maximize",
    "goodput_req_per_s": "maximize",
    "p50_tpot_ms": "minimize",
    "p90_tpot_ms": "minimize",
    "p99_tpot_ms": "minimize",
    "p50_ttft_ms": "minimize",
    "p90_ttft_ms": "minimize",
    "p99_ttft_ms": "minimize",
    "p50_e2e_ms": "minimize",
    "p90_e2e_ms": "minimize",
    "p99_e2e_ms": "minimize",
    "p99_itl_ms": "minimize",
}


class MeasurementSpec(StrictModel):
    """How each point is measured: repeats, noise rejection, confirmation of the front."""

    repeats: Annotated[int, Field(ge=1, le=50)] = 3
    max_relative_mad: Annotated[float, Field(gt=0, le=10)] = 0.1
    remeasure: Annotated[int, Field(ge=0, le=5)] = Field(
        1, description="How often a too-noisy point is measured again before it is flagged."
    )
    noise_penalty: Annotated[float, Field(ge=0, le=10)] = 1.0
    confirm_top: Annotated[int, Field(ge=0, le=20)] = Field(
        2, description="Front configurations re-launched and re-measured at the end of the job."
    )
    confirm_budget: Annotated[int, Field(ge=0, le=50)] = Field(
        4,
        description="Engine launches the end of the job may spend confirming: the baseline "
        "and the winner launched at least twice, finalists the job cannot tell apart launched "
        "in turn (A, B, A, B), a disturbed launch re-launched. 0: no confirmation.",
    )
    warmup: Literal["steady", "fixed"] = Field(
        "steady",
        description="steady: after the workload's warm-up requests, windows of requests at "
        "the level's concurrency until two in a row agree within warmup_tolerance (at most "
        "max_warmup_windows; the point is flagged when the cap is hit); fixed: only the "
        "warm-up requests.",
    )
    warmup_tolerance: Annotated[float, Field(gt=0, le=1)] = 0.1
    max_warmup_windows: Annotated[int, Field(ge=2, le=100)] = 8
    repeat_s: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        None,
        description="Size each repeat to about this many seconds at the rate the warm-up "
        "reached (never fewer requests than the workload's num_prompts); None: num_prompts "
        "requests per repeat.",
    )
    max_host_load: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None,
        description="Share of the machine's CPU other processes (not the engine, not the "
        "load generator; steal time included) may use while a point's repeats run; above it "
        "the launch is flagged as disturbed (noisy), kept out of the between-launch spread "
        "and launched again by the confirmation. None: measured and stored "
        "(host_other_cpu_share), never judged.",
    )
    reset_prefix_cache: bool = True
    prune: bool = Field(
        True,
        description="Stop a trial after its objective point when a feasible trial already "
        "beats it on every objective beyond both 95% intervals.",
    )


class LosslessSpec(StrictModel):
    """Greedy outputs of every speculative configuration against the baseline's; and, when a
    workload samples, the candidate's output distribution against the baseline's."""

    enabled: bool = True
    num_prompts: Annotated[int, Field(ge=1, le=1000)] = 8
    max_tokens: Annotated[int, Field(ge=1, le=4096)] = 32
    min_match_rate: Annotated[float, Field(ge=0, le=1)] = 0.9
    sampled_prompts: Annotated[int, Field(ge=1, le=64)] = Field(
        4, description="Prompts of the first sampled workload the distribution check samples."
    )
    samples_per_prompt: Annotated[int, Field(ge=8, le=1000)] = Field(
        48, description="Continuations per prompt, from the baseline and from each candidate."
    )
    sampled_tokens: Annotated[int, Field(ge=1, le=1024)] = Field(
        16, description="Tokens per continuation compared, position by position."
    )
    alpha: Annotated[float, Field(gt=0, le=0.5)] = Field(
        0.01,
        description="False-alarm rate of the distribution check: a lossless candidate is "
        "flagged with at most this probability (a permutation test, exact for any vocabulary).",
    )


class SLO(StrictModel):
    """Latency limits a configuration must meet to be feasible (all optional)."""

    p99_tpot_ms: Annotated[float, Field(gt=0, le=600_000)] | None = None
    p99_ttft_ms: Annotated[float, Field(gt=0, le=600_000)] | None = None
    p99_e2e_ms: Annotated[float, Field(gt=0, le=3_600_000)] | None = None

    def limits(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Objective(StrictModel):
    metric: str
    direction: Literal["maximize", "minimize"] | None = None

    @model_validator(mode="after")
    def _known(self) -> Objective:
        if self.metric not in METRIC_DIRECTIONS:
            raise ValueError(
                f"unknown metric {self.metric!r}; choose from {sorted(METRIC_DIRECTIONS)}"
            )
        return self

    @property
    def resolved_direction(self) -> Literal["maximize", "minimize"]:
        return self.direction or METRIC_DIRECTIONS[self.metric]


def _default_objectives() -> list[Objective]:
    return [Objective(metric="output_tok_per_s"), Objective(metric="p99_tpot_ms")]


class SearchSpace(StrictModel):
    """One tuning job: the target, the candidates, the load, the SLO and the budget."""

    name: Annotated[str, Field(min_length=1, max_length=100)]
    engine: EngineSpec
    methods: Methods
    max_num_seqs: Annotated[list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=1)] = (
        Field(
            [8],
            description="The engine's batch sizes to try. A value below a concurrency level is "
            "allowed: the engine then runs min(concurrency, max_num_seqs) requests at once and "
            "queues the rest (their wait adds to TTFT), and each such running batch is measured "
            "against its own baseline; values giving the same running batch at every level are "
            "one class, launched at its smallest.",
        )
    )
    memory_fraction: Annotated[list[Annotated[float, Field(gt=0, le=1)]], Field(min_length=1)] = [
        0.1
    ]
    concurrency: Annotated[list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=1)] = [
        1,
        4,
    ]
    objective_concurrency: Annotated[int, Field(ge=1, le=4096)] | None = Field(
        None, description="Level whose numbers Optuna optimises; default: the highest level."
    )
    workload: WorkloadSpec = WorkloadSpec()
    workloads: Annotated[list[WorkloadSpec], Field(max_length=8)] | None = Field(
        None, description="Several workloads, each measured separately (replaces workload)."
    )
    measurement: MeasurementSpec = MeasurementSpec()
    lossless: LosslessSpec = LosslessSpec()
    slo: SLO = SLO()
    objectives: Annotated[list[Objective], Field(min_length=1, max_length=4)] = Field(
        default_factory=_default_objectives
    )
    start_with: list[StartPoint] = Field(default_factory=list)
    hosted: Annotated[list[HostedEndpoint], Field(max_length=8)] = Field(
        default_factory=list,
        description="OpenAI-compatible endpoints measured once per job as reference rows.",
    )
    warm_start: Annotated[int, Field(ge=0, le=20)] = Field(
        0,
        description="Enqueue the best N configurations of earlier finished jobs on the same "
        "target, engine and hardware (after the baseline and start_with).",
    )
    trials: Annotated[int, Field(ge=1, le=10_000)] = 8
    search: Literal["guided", "sampler"] = Field(
        "guided",
        description="guided: one launch per proposer prices its depths, the best predicted "
        "depth next, batch size and memory collapsed into classes; sampler: Optuna's TPE "
        "alone, every axis launched as proposed.",
    )
    offline_pricing: bool = Field(
        True,
        description="guided search: price every n-gram and draft-model proposer on the "
        "baseline's greedy outputs before launching it (tuner/offline), launch in the order "
        "of the predicted speed, and skip those whose optimistic prediction cannot win.",
    )
    stop_early: bool = Field(
        True,
        description="guided search: close the search as soon as no configuration left can "
        "beat the winner's lower bound (trials is then a cap); false: spend every trial of "
        "the budget, launching the configurations predicted best even when they cannot win "
        "(to measure what the job would otherwise only price).",
    )
    stop_margin: Annotated[float, Field(ge=0, le=0.5)] = Field(
        0.03,
        description="guided search: a configuration not launched must be able to beat the "
        "winner's lower bound by more than this share of the winner's value to be launched "
        "(a smaller gain is practically the winner's); 0: any gain.",
    )
    stop_min_gain: Annotated[float, Field(ge=0, le=0.5)] = Field(
        0.01,
        description="guided search and confirmation: launch a configuration only while its "
        "expected gain beyond stop_margin over the winner (expected improvement, from its "
        "prediction's band or its launches' spread) is at least this share of the winner's "
        "value (Jones et al. 1998 stop at 1 %); 0: whatever can reach the winner's bound.",
    )
    stop_launch_noise: Annotated[float, Field(ge=0, le=1)] = Field(
        0.1,
        description="guided search: what one launch moves the first objective by (log "
        "standard deviation) until the job has launched something twice, when its own "
        "between-launch spread (the machine's history pooled in) replaces it; expected gains "
        "are discounted for what one launch can tell. 0.1: relaunches here moved 3-22 % (up "
        "to 46 %), vLLM users report 10-20 % on GPUs; 0: only the winner's repeats.",
    )
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = Field(
        0, description="Optuna's sampler seed (0 to 2**32-1)"
    )
    base_dir: Path = Field(default=Path("."), exclude=True)

    @field_validator("concurrency", "max_num_seqs", "memory_fraction")
    @classmethod
    def _sorted_unique(cls, v: list[Any]) -> list[Any]:
        if len(set(v)) != len(v):
            raise ValueError("values must not repeat")
        return sorted(v)

    @model_validator(mode="after")
    def _coherent(self) -> SearchSpace:
        if not self.methods.enabled():
            raise ValueError(f"methods: enable at least one of {', '.join(METHOD_NAMES)}")
        if self.objective_concurrency is not None and (
            self.objective_concurrency not in self.concurrency
        ):
            raise ValueError(
                f"objective_concurrency {self.objective_concurrency} is not one of "
                f"concurrency {self.concurrency}"
            )
        for i, sp in enumerate(self.start_with):
            self._check_start(i, sp)
        if self.workloads is not None:
            names = [w.name for w in self.workloads]
            if not names:
                raise ValueError("workloads: give at least one")
            if len(set(names)) != len(names):
                raise ValueError(f"workloads: names must differ, got {names}")
        if self.sampled_workload is None:
            for name in self.methods.enabled():
                if getattr(getattr(self.methods, name), "draft_sample_method", None):
                    raise ValueError(
                        f"methods.{name}.draft_sample_method: every workload here is greedy, "
                        "where drafts are argmax whatever the method; give a workload "
                        "sampling (temperature > 0) or drop draft_sample_method"
                    )
        hosted = [h.name for h in self.hosted]
        if len(set(hosted)) != len(hosted):
            raise ValueError(f"hosted: names must differ, got {hosted}")
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError("objectives: each metric at most once")
        return self

    def _check_start(self, i: int, sp: StartPoint) -> None:
        where = f"start_with.{i}"
        m = getattr(self.methods, sp.method)
        if m is None:
            raise ValueError(f"{where}: method {sp.method} is not enabled in methods")
        rng = m.num_speculative_tokens
        if not rng.min <= sp.num_speculative_tokens <= rng.max:
            raise ValueError(
                f"{where}: num_speculative_tokens {sp.num_speculative_tokens} is "
                f"outside {rng.min}..{rng.max}"
            )
        if sp.method == "draft_model" and sp.draft is not None and sp.draft not in m.drafts:
            raise ValueError(
                f"{where}: draft {sp.draft!r} is not one of methods.draft_model.drafts"
            )
        if sp.head is not None and sp.head not in (getattr(m, "heads", None) or ()):
            raise ValueError(f"{where}: head {sp.head!r} is not one of methods.{sp.method}.heads")
        if sp.max_num_seqs is not None and sp.max_num_seqs not in self.max_num_seqs:
            raise ValueError(
                f"{where}: max_num_seqs {sp.max_num_seqs} is not one of {self.max_num_seqs}"
            )
        if sp.memory_fraction is not None and sp.memory_fraction not in self.memory_fraction:
            raise ValueError(
                f"{where}: memory_fraction {sp.memory_fraction} is not one of "
                f"{self.memory_fraction}"
            )

    @property
    def all_workloads(self) -> list[WorkloadSpec]:
        return list(self.workloads) if self.workloads else [self.workload]

    @property
    def sampled_workload(self) -> WorkloadSpec | None:
        """The workload whose sampling the distribution check uses: the first that samples."""
        return next((w for w in self.all_workloads if not w.sampling.greedy), None)

    @property
    def primary_workload(self) -> str:
        """The workload whose numbers Optuna optimises: the first one."""
        return self.all_workloads[0].name

    @property
    def primary_concurrency(self) -> int:
        return self.objective_concurrency or max(self.concurrency)

    @property
    def objective_max_num_seqs(self) -> int:
        """The batch size the search launches at by default (``tuner.space._batch``)."""
        return objective_max_num_seqs(
            self.max_num_seqs, self.concurrency, self.primary_concurrency
        )

    def resolve(self, path: str) -> str:
        """Absolute form of a path written relative to the YAML file."""
        p = Path(path).expanduser()
        return str(p if p.is_absolute() else (self.base_dir / p).resolve())

    def resolve_model(self, name: str) -> str:
        """A model, draft, head or MTP checkpoint as the engine gets it: a path resolved
        as ``resolve`` does, a Hugging Face hub id as written (``tuner.hub``)."""
        return resolve_model(name, self.base_dir)
