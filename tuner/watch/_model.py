"""Job N's model, read once for a watch: at every concurrency the job measured, its
baseline and the step cost of the winner's proposer per depth; and the acceptance the job
measured for that proposer.

Why these pieces: a prediction at an arbitrary acceptance is the product's own rule
(``tuner.search``): tau(k) = 1 + the sum of the first k per-position acceptance rates
(expected tokens one step commits), times the step cost s(k) = s0 * (1 + fixed +
per_token * k) that the job learned from its launches (``step_costs``), moved from the
baseline's measured metrics (``predict_from_baseline``). Nothing here measures the
server: every number it gives is a prediction from job N's model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tuner.pareto import Point, job_report
from tuner.search import PREDICTED_METRICS, DepthPoint, StepCost, step_costs, tau
from tuner.space import SearchSpace, running_batch
from tuner.storage import Store, space_of_job

__all__ = ["WatchedJob", "LevelModel", "family_of", "load_job_model"]

# Everything but depth names a proposer: a launch of the winner's family at another depth
# prices the same drafts.
_FAMILY = ("method", "draft", "head", "target", "prompt_lookup_min", "prompt_lookup_max")


def family_of(params: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(params.get(k) for k in _FAMILY)


@dataclass(frozen=True)
class LevelModel:
    """One measured concurrency: the baseline there and the winner's step-cost model."""

    concurrency: int
    baseline: DepthPoint
    cost: StepCost | None  # None: the job launched no speculation at this level


@dataclass(frozen=True)
class WatchedJob:
    """What a watch compares a server with."""

    job_id: int
    space: SearchSpace
    workload: str
    objective: str  # a predicted metric: the job's first objective where it is one
    maximize: bool
    winner: dict[str, Any]  # params of the job's winner
    winner_engine: dict[str, Any]  # its engine configuration
    winner_trial: int
    levels: dict[int, LevelModel]
    measured: tuple[tuple[int, int, tuple[float, ...]], ...]  # (trial, concurrency, per-pos)

    def level(self, live: float | None) -> LevelModel:
        """The measured concurrency nearest the live one (the lower on a tie; the lowest
        when the server is idle)."""
        want = max(1.0, live or 1.0)
        return self.levels[min(self.levels, key=lambda c: (abs(c - want), c))]

    def measured_at(self, concurrency: int) -> tuple[int, tuple[float, ...]] | None:
        """(trial, per-position acceptance) of the winner's proposer at ``concurrency``:
        the winner's own trial where it was measured there, else the deepest launch."""
        here = [(t, pp) for t, c, pp in self.measured if c == concurrency]
        if not here:
            return None
        own = [x for x in here if x[0] == self.winner_trial]
        return own[0] if own else max(here, key=lambda x: (len(x[1]), x[0]))

    def tau_range(self, depth: int) -> tuple[float, float] | None:
        """The lowest and highest mean acceptance length at ``depth`` the job measured for
        the winner's proposer at any level (None: it never measured that deep)."""
        taus = [tau(pp, depth) for _, _, pp in self.measured if len(pp) >= depth]
        return (min(taus), max(taus)) if taus and depth > 0 else None


def _objective(space: SearchSpace) -> tuple[str, bool]:
    for o in space.objectives:
        if o.metric in PREDICTED_METRICS:
            return o.metric, o.resolved_direction == "maximize"
    return "output_tok_per_s", True


def _dp(p: Point, depth: int) -> DepthPoint:
    return DepthPoint(p.trial_number, depth, dict(p.metrics))


def _level(space: SearchSpace, points: Sequence[Point], base: Point, winner: dict) -> LevelModel:
    """The winner's model at ``base``'s level, from launches of the winner's running batch
    there only (min(concurrency, max_num_seqs)): one that queued at another batch measured
    another load."""
    c, seqs = base.concurrency, winner.get("max_num_seqs")
    spec = [
        (dict(p.params), _dp(p, int(p.params["num_speculative_tokens"])))
        for p in points
        if p.method != "none"
        and p.params.get("num_speculative_tokens")
        and (not seqs or running_batch(p.params["max_num_seqs"], c) == running_batch(seqs, c))
    ]
    bdp = _dp(base, 0)
    cost = step_costs(space, spec, bdp, winner) if winner.get("method") != "none" else None
    return LevelModel(base.concurrency, bdp, cost)


def load_job_model(store: Store, job_id: int) -> WatchedJob:
    """Job ``job_id``'s model; JobNotFound for an unknown job, ValueError (naming ``job``)
    when it has no winner or no measured baseline to predict from."""
    space = space_of_job(store.job(job_id), for_reading=True)
    rep = job_report(store, job_id)
    if rep.winner is None:
        raise ValueError(
            f"job: job {job_id} has no winner at concurrency {rep.concurrency} under its SLO, "
            "so there is no deployed configuration to watch"
        )
    winner = dict(rep.winner.params)
    fam = family_of(winner)
    levels: dict[int, LevelModel] = {}
    measured: list[tuple[int, int, tuple[float, ...]]] = []
    for c in sorted(space.concurrency):
        r = rep if c == rep.concurrency else job_report(store, job_id, concurrency=c)
        base = r.baseline_of(rep.winner) or r.baseline  # the winner's batch class's
        if base is None:
            continue
        pts = list(r.points) + list(r.pruned)
        levels[c] = _level(space, pts, base, winner)
        measured += [
            (p.trial_number, c, tuple(float(x) for x in p.metrics["per_position_acceptance"]))
            for p in pts
            if p.method != "none"
            and family_of(dict(p.params)) == fam
            and p.metrics.get("per_position_acceptance")
        ]
    if not levels:
        raise ValueError(f"job: job {job_id} measured no baseline to predict from")
    metric, maximize = _objective(space)
    return WatchedJob(
        job_id=job_id,
        space=space,
        workload=rep.workload,
        objective=metric,
        maximize=maximize,
        winner=winner,
        winner_engine=dict(rep.winner.engine_config),
        winner_trial=rep.winner.trial_number,
        levels=levels,
        measured=tuple(measured),
    )
