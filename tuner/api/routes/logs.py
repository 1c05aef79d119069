"""``/api/jobs/{id}/log``: the tail of the running trial's engine log, secrets redacted."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tuner.api._deps import Authorized, JobId, SettingsDep, StoreDep
from tuner.api._openapi import AUTH, responses
from tuner.api.schemas import LogTail
from tuner.api.services import logs

router = APIRouter(
    prefix="/api/jobs/{job_id}/log",
    tags=["logs"],
    dependencies=[Authorized],
    responses=responses(*AUTH, 404, 422),
)


@router.get("")
def get_running_log(
    job_id: JobId,
    store: StoreDep,
    settings: SettingsDep,
    max_bytes: Annotated[int, Query(ge=256, le=262_144)] = 16_384,
) -> LogTail:
    """While the job runs: the end of the log its engine writes now (only files in the job's
    own log folder; bearer tokens, ``Authorization:`` values and API keys redacted). When it
    does not run: ``running`` false and no text."""
    return logs.running_log(store, settings, job_id, max_bytes)
