"""Exports: the formats (``/api/export-formats``) and the winning configuration in an
engine's own form (``/api/jobs/{id}/export``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tuner.api._deps import Authorized, JobId, ReportQueryDep, StoreDep
from tuner.api._openapi import AUTH, responses
from tuner.api.schemas import ExportFormat, ExportFormatList, ExportPublic
from tuner.api.services import exports

router = APIRouter(tags=["export"], dependencies=[Authorized], responses=responses(*AUTH))


@router.get("/api/export-formats")
def export_formats() -> ExportFormatList:
    """Every export format, in the order the UI shows them (``tuner.engines.EXPORT_FORMATS``)."""
    return exports.export_formats()


@router.get(
    "/api/jobs/{job_id}/export",
    responses=responses(
        404,
        409,
        422,
        c409="nothing is feasible under the SLO, the engine has no form for the winner, or "
        "today's rules refuse the job's stored search space: nothing to export",
        c422="unknown format (see /api/export-formats) or a bad query; names the field",
    ),
)
def export_winner(
    job_id: JobId,
    store: StoreDep,
    q: ReportQueryDep,
    format: Annotated[ExportFormat, Query()] = "vllm-json",
) -> ExportPublic:
    """``vllm-json``: only the object after ``--speculative-config`` (``null`` when the
    baseline wins); ``vllm-cli``: the measured ``ENV=… vllm serve …`` line, after a ``#``
    line naming paths of the measuring machine; the rest as /api/export-formats describes
    them."""
    return exports.export_winner(store, job_id, format, q)
