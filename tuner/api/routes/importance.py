"""``/api/jobs/{id}/importance``: which parameters moved the first objective, with evidence."""

from __future__ import annotations

from fastapi import APIRouter

from tuner.api._deps import Authorized, JobId, StoreDep
from tuner.api._openapi import AUTH, responses
from tuner.api.schemas import ImportancePublic
from tuner.api.services import importance

router = APIRouter(
    prefix="/api/jobs/{job_id}/importance",
    tags=["pareto"],
    dependencies=[Authorized],
    responses=responses(*AUTH, 404, 422),
)


@router.get("")
def get_importance(job_id: JobId, store: StoreDep) -> ImportancePublic:
    """Only parameters whose importance beats the same values shuffled (Bonferroni over the
    parameters), and only from ten distinct configurations on; otherwise ``supported`` is
    empty and ``sentence`` says why the data cannot tell."""
    return importance.importance(store, job_id)
