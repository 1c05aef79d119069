"""What the depth model predicts for the depths a guided job has not launched
(``tuner.search.SearchStrategy.predictions``): for people to see next to the measurements,
drawn apart from them, never stored or served as a measurement."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import HTTPException, status
from pydantic import BaseModel, ConfigDict, Field

from tuner.search import SearchStrategy
from tuner.space import SpaceError
from tuner.storage import Store
from tuner.workloads import WorkloadError

__all__ = ["NOTE", "PredictedPoint", "PredictionsPublic", "predictions"]

NOTE = "predictions of the depth model, never measurements"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PredictedPoint(_Frozen):
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


class PredictionsPublic(_Frozen):
    job_id: int
    kind: Literal["predicted"] = Field("predicted", description="always: nothing here measured")
    note: str = NOTE
    points: list[PredictedPoint] = Field(
        description="every unlaunched depth of each proposer launched at least once; empty "
        "when the job's search is not guided or no proposer was launched yet"
    )


def _point(d: dict[str, Any]) -> PredictedPoint:
    m = dict(d.get("metrics") or {})
    wl, _, conc = str(d["level"]).rpartition("@")
    params = dict(d["params"])
    return PredictedPoint(
        method=str(params.get("method", "")),
        params=params,
        level=d["level"],
        workload=wl,
        concurrency=int(conc),
        output_tok_per_s=m.get("output_tok_per_s"),
        p99_tpot_ms=m.get("p99_tpot_ms"),
        mean_tpot_ms=m.get("mean_tpot_ms"),
        mean_acceptance_length=m.get("mean_acceptance_length"),
        metrics=m,
        rel_sigma=float(d["rel_sigma"]),
        basis=[int(n) for n in d.get("basis") or []],
        notes=[str(n) for n in d.get("notes") or []],
    )


def predictions(store: Store, job_id: int) -> PredictionsPublic:
    """JobNotFound (404) for an unknown job; 409 when its space or workload cannot be read."""
    job = store.job(job_id)
    try:
        space = store.space(job_id)
        if space.search != "guided":
            return PredictionsPublic(job_id=job_id, points=[])
        found = SearchStrategy(store, job_id, space, job.n_trials).predictions()
    except (SpaceError, WorkloadError, OSError, ValueError) as e:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"job {job_id}: no predictions, its search space or workload cannot be read "
            f"here ({e})",
        ) from None
    return PredictionsPublic(job_id=job_id, points=[_point(d) for d in found])
