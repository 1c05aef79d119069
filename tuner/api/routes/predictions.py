"""``/api/jobs/{id}/predictions``: the depth model's predictions of a guided job, apart from
every measurement."""

from __future__ import annotations

from fastapi import APIRouter

from tuner.api._deps import Authorized, JobId, StoreDep
from tuner.api._openapi import AUTH, responses
from tuner.api.schemas import PredictionsPublic
from tuner.api.services import predictions

router = APIRouter(
    prefix="/api/jobs/{job_id}/predictions",
    tags=["pareto"],
    dependencies=[Authorized],
    responses=responses(
        *AUTH, 404, 409, 422, c409="the job's stored search space or workload cannot be read"
    ),
)


@router.get("")
def get_predictions(job_id: JobId, store: StoreDep) -> PredictionsPublic:
    """What the depth model predicts for every unlaunched depth of the proposers the job
    launched, at its objective point: ``kind`` is always ``predicted``, never a measurement.
    Empty for a job whose search is not guided or that launched no proposer yet."""
    return predictions.predictions(store, job_id)
