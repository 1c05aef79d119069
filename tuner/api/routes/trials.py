"""``/api/jobs/{id}/trials``: each trial with its metrics at every concurrency level."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from tuner.api._deps import MAX_OFFSET, Authorized, JobId, SettingsDep, StoreDep
from tuner.api.schemas import TrialDetail, TrialPage
from tuner.api.services import trials

router = APIRouter(prefix="/api/jobs/{job_id}/trials", tags=["trials"], dependencies=[Authorized])


@router.get("")
def list_trials(
    job_id: JobId,
    store: StoreDep,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TrialPage:
    """In trial order; failed trials carry their reason and the engine log tail."""
    return trials.trials_page(store, job_id, offset, limit)


@router.get("/{number}")
def get_trial(
    job_id: JobId,
    number: Annotated[int, Path(ge=0, le=MAX_OFFSET)],
    store: StoreDep,
    settings: SettingsDep,
) -> TrialDetail:
    return trials.trial_detail(store, job_id, number, settings.work_dir)
