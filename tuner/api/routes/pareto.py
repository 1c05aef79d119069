"""``/api/jobs/{id}/pareto``: the front re-evaluated for any SLO, without re-running (the
core report, ``tuner.report``, which ``spectune report --json`` prints too)."""

from __future__ import annotations

from fastapi import APIRouter

from tuner.api._deps import Authorized, JobId, ReportQueryDep, StoreDep
from tuner.api._openapi import AUTH, responses
from tuner.api.schemas import ParetoPublic
from tuner.report import pareto

router = APIRouter(
    prefix="/api/jobs/{job_id}/pareto",
    tags=["pareto"],
    dependencies=[Authorized],
    responses=responses(*AUTH, 404, 422),
)


@router.get("")
def get_pareto(job_id: JobId, store: StoreDep, q: ReportQueryDep) -> ParetoPublic:
    """One point per (configuration, concurrency); the winner at ``concurrency`` (default:
    the job's objective level). ``slo_*`` replace the job's limits for this answer."""
    return pareto(store, job_id, q)
