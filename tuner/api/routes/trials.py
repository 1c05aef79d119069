"""``/api/jobs/{id}/trials``: each trial with its metrics at every concurrency level."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from tuner.api import _service
from tuner.api._deps import Authorized, DbUrl, JobId, SettingsDep
from tuner.api.schemas import TrialDetail, TrialPage

router = APIRouter(prefix="/api/jobs/{job_id}/trials", tags=["trials"], dependencies=[Authorized])


@router.get("")
def list_trials(
    job_id: JobId,
    url: DbUrl,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TrialPage:
    """In trial order; failed trials carry their reason and the engine log tail."""
    return _service.trials_page(url, job_id, offset, limit)


@router.get("/{number}")
def get_trial(
    job_id: JobId, number: Annotated[int, Path(ge=0)], settings: SettingsDep
) -> TrialDetail:
    return _service.trial_detail(settings.database_url, job_id, number, settings.work_dir)
