"""``/api/jobs/{id}/export``: the winning configuration in an engine's own form."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tuner.api import _service
from tuner.api._deps import Authorized, DbUrl, JobId, ReportQueryDep
from tuner.api.schemas import ExportFormat, ExportPublic

router = APIRouter(prefix="/api/jobs/{job_id}/export", tags=["export"], dependencies=[Authorized])


@router.get(
    "",
    responses={
        409: {"description": "nothing is feasible under the SLO: nothing to export"},
        422: {"description": "unknown format, or one not supported yet (sglang, trtllm-yaml)"},
    },
)
def export(
    job_id: JobId,
    url: DbUrl,
    q: ReportQueryDep,
    format: Annotated[ExportFormat, Query()] = "vllm-json",
) -> ExportPublic:
    """``vllm-json``: only the object after ``--speculative-config`` (``null`` when the
    baseline wins); ``vllm-cli``: one ``vllm serve`` line."""
    return _service.export_winner(url, job_id, format, q)
