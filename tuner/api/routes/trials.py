"""``/api/jobs/{id}/trials``: each trial with its metrics at every concurrency level."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from tuner.api._deps import MAX_OFFSET, Authorized, JobId, SettingsDep, StoreDep
from tuner.api._openapi import AUTH, responses
from tuner.api.schemas import TrialDetail, TrialPage
from tuner.api.services import trials

router = APIRouter(
    prefix="/api/jobs/{job_id}/trials",
    tags=["trials"],
    dependencies=[Authorized],
    responses=responses(*AUTH, 404, 422),
)


@router.get("")
def list_trials(
    job_id: JobId,
    store: StoreDep,
    settings: SettingsDep,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TrialPage:
    """In trial order; failed trials carry their reason and the engine log tail (secrets
    scrubbed)."""
    return trials.trials_page(store, settings, job_id, offset, limit)


@router.get("/{number}")
def get_trial(
    job_id: JobId,
    number: Annotated[int, Path(ge=0, le=MAX_OFFSET)],
    store: StoreDep,
    settings: SettingsDep,
) -> TrialDetail:
    return trials.trial_detail(store, settings, job_id, number)
