"""What the depth model predicts for the depths a guided job has not launched
(``tuner.search.SearchStrategy.predictions``): for people to see next to the measurements,
drawn apart from them, never stored or served as a measurement."""

from __future__ import annotations

from tuner import search
from tuner.api.schemas import PredictedPoint, PredictionsPublic
from tuner.context import JobContext
from tuner.errors import Conflict
from tuner.search import SearchStrategy
from tuner.space import SpaceError
from tuner.storage import Store
from tuner.workloads import WorkloadError

__all__ = ["predictions"]


def _point(p: search.PredictedPoint) -> PredictedPoint:
    m = dict(p.metrics)
    params = dict(p.params)
    return PredictedPoint(
        method=str(params.get("method", "")),
        params=params,
        level=f"{p.workload}@{p.concurrency}",  # the field earlier clients read
        workload=p.workload,
        concurrency=p.concurrency,
        output_tok_per_s=m.get("output_tok_per_s"),
        p99_tpot_ms=m.get("p99_tpot_ms"),
        mean_tpot_ms=m.get("mean_tpot_ms"),
        mean_acceptance_length=m.get("mean_acceptance_length"),
        metrics=m,
        rel_sigma=float(p.rel_sigma),
        basis=[int(n) for n in p.basis],
        notes=[str(n) for n in p.notes],
    )


def predictions(store: Store, job_id: int) -> PredictionsPublic:
    """JobNotFound for an unknown job; Conflict when its space or workload cannot be read."""
    try:
        ctx = JobContext.reading(store, job_id)  # JobNotFound passes through
        if ctx.space.search != "guided":
            return PredictionsPublic(job_id=job_id, points=[])
        found = SearchStrategy(ctx).predictions()
    except (SpaceError, WorkloadError, OSError, ValueError) as e:
        raise Conflict(
            f"job {job_id}: no predictions, its search space or workload cannot be read here ({e})"
        ) from None
    return PredictionsPublic(job_id=job_id, points=[_point(d) for d in found])
